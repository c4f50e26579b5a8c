# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: DCGM's diagnostic as the gate before a remediated GPU is released (module
gpu_diag), on the node.

``dcgmi diag -r <level> -i <GPU ids> -j``: DCGM's JSON, as NVVS writes it (DCGM's ``nvvs`` JsonOutput, and its own
test of real output, ``JsonResult: Deserialize real output``)::

    {"DCGM GPU Diagnostic": {"test_categories": [
        {"category": "Deployment", "tests": [{"name": "Denylist", "results": [{"gpu_ids": "0,1", "status": "PASS"}]}, null, ...]},
        {"category": "Hardware", "tests": [{"name": "GPU Memory", "results": [{"gpu_ids": "1", "status": "Fail",
                                             "warnings": [{"warning": "...", "error_id": 83}], "info": ["..."]}]}]}],
     "version": "3.3.5"}}

DCGM 4.x (``dcgmi/Diag.cpp``, ``Diag::HelperJsonBuildOutput`` and ``HelperJsonAddResult``, 4.2 to 4.6; the keys in
``nvvs/include/NvvsJsonStrings.h``; the shape in ``testing/python3/dcgm_diag_schema.json``) names a result's entity, not
its GPU ids, and moves the version into ``metadata``::

    {"DCGM Diagnostic": {"test_categories": [
        {"category": "Hardware", "tests": [{"name": "memory", "results": [{"entity_group": "GPU", "entity_group_id": 1,
             "entity_id": 1, "status": "Fail", "warnings": [{"warning": "...", "error_id": 83, "error_category": 4,
             "error_severity": 2}], "info": ["..."]}], "test_summary": {"status": "Fail"}}]}]},
     "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1, "entities": [{"entity_id": 1, "device_id": "20b0"}]}],
     "metadata": {"version": "4.6.0", "Driver Version Detected": "570.124.06"}}

Both shapes are read: a result's GPUs are its ``gpu_ids`` (3.x), else its ``entity_id`` where its entity is a GPU
(``entity_group`` ``GPU``, ``entity_group_id`` 1: ``DCGM_FE_GPU``); a CPU's or a switch's result names no GPU of ours. A
``test_summary`` is the test's overall status over every entity, never a GPU's own result. Status words: 3.x ``PASS``,
``Pass``, ``Fail``, ``SKIPPED``; 4.x ``Pass``, ``Fail``, ``Skip``, ``Warn`` (``HelperDisplayDiagResult``; ``Not Run``
results are not written).

What the parse tolerates, because real output has it: text before the JSON (a warning line), ``null`` between tests,
``gpu_ids`` as a CSV string (a software test's, for every GPU) or a number, status in any case (``PASS``, ``Fail``,
``SKIPPED``), warnings as objects or strings, a ``runtime_error``. What it never does: take an output with no result for
the asked GPUs for a pass. The exit code is read only where there is no JSON.
"""

from __future__ import annotations

import json

from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import GPU_ID, digits, is_int
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import InventoryError, ParameterError, ResultError
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import node_options
from ansible_collections.gpuops.fleet.plugins.module_utils._node import gpu_inventory, hostroot

LEVELS = tuple(node_options.DIAG_LEVEL["choices"])
STATUSES = {"PASS": "pass", "FAIL": "fail", "WARN": "warn", "WARNING": "warn", "SKIP": "skip", "SKIPPED": "skip", "NOT RUN": "skip"}
MAX_TEXT = 400

ARGUMENT_SPEC = dict(
    gpus=dict(type="list", elements="str", required=True),
    level=dict(type="int", default=2),
    driver_root=dict(type="path"),
)


class DiagError(ResultError):
    """DCGM's diagnostic failed on a remediated GPU, or gave no verdict (``result`` holds what it said)."""


# DCGM's GPU ids are NVML's indices: a node has at most a few dozen; an id past this is no GPU of ours
MAX_GPU_ID = 1023


def _ids(value):
    """The GPU ids of a result's ``gpu_ids`` (a number, or a CSV string): only whole numbers of a GPU's range; anything else
    (5,000 digits, '²', a float, a list) names no GPU."""
    if is_int(value):
        found = [value]
    elif isinstance(value, str) and len(value) <= 4096:
        found = [digits(v) for v in value.split(",")]
    else:
        found = []
    return [v for v in found if v is not None and 0 <= v <= MAX_GPU_ID]


GPU_ENTITY = ("GPU", 1)  # DCGM_FE_GPU: its name (DcgmFieldsGetEntityGroupString) and its number (dcgm_fields.h)


def _gpus(result):
    """The GPU ids a result names: 3.x's ``gpu_ids``; 4.x's ``entity_id`` where the entity is a GPU, by its group's name or
    number (a result that gives both must agree); none for another entity (a CPU, a switch) or a bad id."""
    if "gpu_ids" in result:
        return _ids(result.get("gpu_ids"))
    group, number = result.get("entity_group"), result.get("entity_group_id")
    named = group == GPU_ENTITY[0] if group is not None else None
    numbered = number == GPU_ENTITY[1] and is_int(number) if number is not None else None
    if named is False or numbered is False or (named is None and numbered is None):
        return []
    entity = result.get("entity_id")
    return _ids(entity) if is_int(entity) else []  # a number (dcgm_diag_schema.json), never 3.x's CSV text


def _list(value):
    """A list of the tool's output, or none: a number or a text where a list belongs is no list to walk."""
    return value if isinstance(value, list) else []


def _warnings(result):
    out = []
    for item in _list(result.get("warnings")):
        if isinstance(item, dict):
            text = item.get("warning")
            code = item.get("error_id")
            out.append(("%s (error %s)" % (text, code) if code is not None else str(text))[:MAX_TEXT])
        elif isinstance(item, str):
            out.append(item[:MAX_TEXT])
    return out


def parse(text):
    """``{"version", "runtime_error", "results": [{category, test, gpus, status, warnings}]}`` of dcgmi's JSON; None where the
    text holds no JSON object."""
    text = text or ""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        data = json.loads(text[start:end + 1])
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    root = data.get("DCGM GPU Diagnostic", data.get("DCGM Diagnostic", data))
    root = root if isinstance(root, dict) else {}
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    found = {"version": str(root.get("version") or metadata.get("version") or "")[:32] or None,
             "runtime_error": str(root.get("runtime_error") or data.get("runtime_error") or "")[:MAX_TEXT] or None, "results": []}
    for category in _list(root.get("test_categories")):
        if not isinstance(category, dict):
            continue
        for test in _list(category.get("tests")):
            if not isinstance(test, dict):
                continue
            for result in _list(test.get("results")):
                if not isinstance(result, dict):
                    continue
                status = STATUSES.get(str(result.get("status") or "").strip().upper(), "unknown")
                found["results"].append({"category": str(category.get("category") or "")[:64], "test": str(test.get("name") or "")[:64],
                                         "gpus": _gpus(result), "status": status, "warnings": _warnings(result)})
    return found


def verdict(parsed, indices):
    """``(passed, failed [results], reason)`` for the GPUs ``indices``: a fail (or an unknown status) on any of them fails;
    a GPU with no PASS of its own (no result naming it, or only SKIPPED, WARN or NOT RUN: no test ran on it), or a runtime
    error, is no verdict (reason), never a pass."""
    if parsed is None:
        return False, [], "dcgmi wrote no JSON"
    if parsed["runtime_error"]:
        return False, [], "DCGM's runtime error: %s" % parsed["runtime_error"]
    ours = [r for r in parsed["results"] if set(r["gpus"]) & set(indices)]
    if not ours:
        return False, [], "dcgmi's results name none of GPUs %s" % ",".join(map(str, indices))
    failed = [r for r in ours if r["status"] in ("fail", "unknown")]
    if failed:
        return False, failed, None
    untested = [i for i in indices if not any(r["status"] == "pass" and i in r["gpus"] for r in ours)]
    if untested:
        return False, [], ("no test passed on GPU %s (its results are all skipped, warned or not run): no test proved it, so it is "
                           "no pass" % ",".join(map(str, untested)))
    return True, [], None


def _indices(run, driver_root, uuids):
    """NVML's index of each UUID (DCGM's GPU ids are NVML's indices), from the node's inventory read through NVML
    (``gpu_inventory.gather``); InventoryError where it cannot be read or a GPU is not on the node."""
    facts = gpu_inventory.gather(run, "nvml", driver_root=driver_root)
    if not facts["available"]:
        raise InventoryError(facts["reason"] or "NVML could not be read")
    by_uuid = dict((g["uuid"], g["index"]) for g in facts["gpus"])
    missing = [u for u in uuids if u not in by_uuid]
    if missing:
        raise InventoryError("GPU %s is not on this node (NVML has %s)" % (", ".join(missing), ", ".join(sorted(by_uuid)) or "none"))
    return [by_uuid[u] for u in uuids]


def _named(failure, by_index):
    """``GPU Memory (Hardware) on GPU 1 (GPU-...): <DCGM's warnings>``."""
    gpus = ", ".join("%d (%s)" % (g, by_index[g]) for g in failure["gpus"] if g in by_index)
    warned = ": " + " | ".join(failure["warnings"]) if failure["warnings"] else ""
    return "%s (%s) on GPU %s%s" % (failure["test"], failure["category"], gpus, warned)


def check(params):
    gpus = params.get("gpus") or []
    if not gpus:
        raise ParameterError("gpus", "name the remediated GPUs (UUIDs) the diagnostic must pass")
    for i, uuid in enumerate(gpus):
        if not isinstance(uuid, str) or not GPU_ID.match(uuid):
            raise ParameterError("gpus[%d]" % i, "%r is not a GPU UUID (GPU-...)" % (uuid,))
    if params.get("level") not in LEVELS:
        raise ParameterError("level", "%r is not a dcgmi diag level (1 quick, 2 medium, 3 long, 4 extended)" % (params.get("level"),))
    return gpus


def run_gate(params, run, get_bin_path, check_mode=False):
    """The gate's result: ``gate: no_dcgm`` (with why) where the node has no dcgmi (the verification pod stays the gate),
    ``gate: dcgm`` with ``passed`` and the results; DiagError where it failed or gave no verdict (the message names the
    failing test and GPU)."""
    gpus = check(params)
    base = hostroot.root()
    found, run = hostroot.tools(("dcgmi",), get_bin_path, run, base)
    if not found["dcgmi"]:
        return {"gate": "no_dcgm", "dcgm": False, "reason": "dcgmi is not on the node: the verification pod is the gate", "level": params["level"]}
    driver_root = params.get("driver_root") or None
    if driver_root and base is not None:
        driver_root = hostroot.local(driver_root, base)
    indices = _indices(run, driver_root, gpus)
    argv = [found["dcgmi"], "diag", "-r", str(params["level"]), "-i", ",".join(map(str, indices)), "-j"]
    result = {"gate": "dcgm", "dcgm": True, "level": params["level"], "gpus": dict(zip(gpus, indices)), "command": " ".join(argv[1:])}
    if check_mode:
        return dict(result, skipped=True, passed=None, reason="check mode: the diagnostic loads the GPUs, it does not run")
    rc, out, err = run(argv)
    parsed = parse(out)
    passed, failed, reason = verdict(parsed, indices)
    result.update(passed=passed, rc=rc, version=(parsed or {}).get("version"), failed=failed,
                  results=(parsed or {}).get("results", [])[:200])
    if passed:
        return result
    by_index = dict((i, u) for u, i in zip(gpus, indices))
    if failed:
        named = "; ".join(_named(f, by_index) for f in failed)
        raise DiagError("DCGM diagnostic level %d failed: %s" % (params["level"], named), result)
    raise DiagError("DCGM diagnostic level %d gave no verdict (%s; dcgmi exited %d: %s)" % (
        params["level"], reason, rc, ((err or out) or "").strip()[:MAX_TEXT]), result)
