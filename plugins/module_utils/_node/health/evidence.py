# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the evidence a break-fix (RMA) ticket asks for, read on the node (module
gpu_rma_evidence), size-capped.

* each GPU's serial number and board part number (NVML's ``nvmlDeviceGetSerial``, ``nvmlDeviceGetBoardPartNumber``: the
  InfoROM's, what NVIDIA's RMA form asks for), with its UUID, bus ID, state, recovery action, ECC counts, remapped rows
  and retired pages (the health read's, ``gpu_health.read``);
* the XIDs of this boot from the kernel log (every one, a remediation's mark notwithstanding: the ticket wants the
  history), as the driver printed them, ``NVRM: Xid`` lines only: nothing else of the kernel log leaves the node;
* ``nvidia-smi -q``;
* where allowed (``bug_report``), ``nvidia-bug-report.sh``'s archive, written on the node (it holds the node's whole
  configuration: it is named by path, size and SHA-256, never inlined; the role may fetch it).

Nothing here holds a secret: no environment, no command line but the XID's process name the driver logs. The inline
evidence is at most ``max_bytes`` as JSON: ``nvidia-smi -q`` is cut first, then the oldest XIDs; what was cut is named
in ``truncated``.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._common import settings
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import BackendUnavailable, InventoryError, ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import node_options
from ansible_collections.gpuops.fleet.plugins.module_utils._node import gpu_inventory, hostroot
from ansible_collections.gpuops.fleet.plugins.module_utils._node.health import gpu_health, kernel_log

MAX_BYTES = node_options.EVIDENCE_MAX_BYTES
_OPTIONS = settings.Table(node_options.MAX_BYTES)  # checked as the role checks its variable (_common/health/node_options.py)
BUG_REPORT_DIR = "/var/lib/gpuops/evidence"
BUG_REPORT_TIMEOUT = 900
_GPU_KEYS = ("index", "uuid", "name", "pci_bus_id", "state", "recovery_action", "ecc", "remapped_rows", "retired_pages")
_XID_KEYS = ("code", "mnemonic", "bucket", "bus", "usec", "line")

ARGUMENT_SPEC = dict(
    gpus=dict(type="list", elements="str", default=[]),
    driver_root=dict(type="path"),
    kernel_log=dict(type="str", default="auto", choices=["auto", "journal", "kmsg", "file", "none"]),
    kernel_log_path=dict(type="path"),
    max_bytes=dict(type="int", default=MAX_BYTES),
    bug_report=dict(type="bool", default=False),
    bug_report_dir=dict(type="path", default=BUG_REPORT_DIR),
)


def _text(value):
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value.strip() if isinstance(value, str) else None


def boards(driver_root):
    """``({index: (serial, part number)}, reason)``: None for a value NVML does not give (a GeForce has no serial)."""
    try:
        pynvml = gpu_inventory.open_nvml(driver_root)
    except (BackendUnavailable, InventoryError) as exc:
        return {}, gpu_inventory.explain("nvml: %s" % exc)
    found = {}
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            values = []
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            except pynvml.NVMLError:
                found[index] = (None, None)
                continue
            for reader in (pynvml.nvmlDeviceGetSerial, pynvml.nvmlDeviceGetBoardPartNumber):
                try:
                    values.append(_text(reader(handle)))
                except pynvml.NVMLError:
                    values.append(None)
            found[index] = tuple(values)
    except pynvml.NVMLError as exc:
        return found, gpu_inventory.explain("NVML query failed: %s" % exc)
    finally:
        gpu_inventory.nvml_shutdown(pynvml)
    return found, None


def _smi(smi, run):
    if not smi:
        return None, "nvidia-smi is not on the node (PATH, or driver_root's usr/bin)"
    rc, out, err = run([smi, "-q"])
    if rc != 0:
        return None, "nvidia-smi -q exited %d: %s" % (rc, (err or out).strip()[:400])
    return out, None


def _bug_report(tool, run, directory, boot_id, check_mode):
    """nvidia-bug-report.sh's archive on the node: ``{path, bytes, sha256}``, or ``{skipped: why}``."""
    if not tool:
        return {"skipped": "nvidia-bug-report.sh is not on the node"}
    if check_mode:
        return {"skipped": "check mode: nvidia-bug-report.sh writes a file"}
    local = hostroot.local(directory)
    os.makedirs(local, mode=0o700, exist_ok=True)
    base = os.path.join(local, "nvidia-bug-report-%s.log" % (boot_id or "unknown-boot")[:36])
    rc, out, err = run([tool, "--output-file", hostroot.host(base)])
    path = base + ".gz" if os.path.exists(base + ".gz") else base
    if rc != 0 or not os.path.exists(path):
        return {"skipped": "nvidia-bug-report.sh exited %d: %s" % (rc, (err or out).strip()[:400])}
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"path": hostroot.host(path), "bytes": os.path.getsize(path), "sha256": digest.hexdigest()}


def _size(evidence):
    return len(json.dumps(evidence, sort_keys=True))


def _cap(evidence, limit):
    """Cut ``nvidia_smi_q`` first, then the oldest XIDs, until the JSON is at most ``limit`` bytes."""
    over = _size(evidence) - limit
    if over > 0 and evidence.get("nvidia_smi_q"):
        text = evidence["nvidia_smi_q"]
        keep = max(0, len(text) - over - 64)
        evidence["nvidia_smi_q"] = text[:keep] + "\n[... cut: the evidence is capped at %d bytes]\n" % limit
        evidence["truncated"].append("nvidia_smi_q: %d of %d characters kept" % (keep, len(text)))
    dropped = 0
    while _size(evidence) > limit and evidence["xids"]:
        evidence["xids"].pop(0)
        dropped += 1
    if dropped:
        evidence["truncated"].append("xids: the %d oldest left out" % dropped)
    evidence["bytes"] = _size(evidence)
    return evidence


def collect(params, run, get_bin_path, check_mode=False):
    """The evidence (see the module docstring); ParameterError names a bad option."""
    limit = params.get("max_bytes") or MAX_BYTES
    _OPTIONS.check("max_bytes", limit)
    if params.get("kernel_log") == "file" and not params.get("kernel_log_path"):
        raise ParameterError("kernel_log_path", "is required with kernel_log=file: give the path of the saved kernel log")
    base = hostroot.root()
    found, run = hostroot.tools(("journalctl", "systemctl", "nvidia-smi", "nvidia-bug-report.sh"), get_bin_path, run, base)
    driver_root = params.get("driver_root") or None
    smi = hostroot.driver_tool("nvidia-smi", found["nvidia-smi"], driver_root, base)  # the driver's own, before PATH's
    if driver_root and base is not None:
        driver_root = hostroot.local(driver_root, base)
    health = gpu_health.read(run, driver_root=driver_root, log_source=params.get("kernel_log") or "auto",
                             log_path=params.get("kernel_log_path"), journalctl=found["journalctl"], systemctl=found["systemctl"])
    serials, board_reason = boards(driver_root) if health["available"] else ({}, health["reason"])
    targets = set(params.get("gpus") or ())
    gpus = []
    for gpu in health["gpus"]:
        entry = dict((k, gpu.get(k)) for k in _GPU_KEYS)
        entry["serial"], entry["board_part_number"] = serials.get(gpu.get("index"), (None, None))
        entry["target"] = gpu.get("uuid") in targets
        gpus.append(entry)
    records, source, why = kernel_log.read(params.get("kernel_log") or "auto", run, params.get("kernel_log_path"), found["journalctl"])
    xids = [dict((k, x.get(k)) for k in _XID_KEYS) for x in kernel_log.parse(records)["xids"]]
    smi_text, smi_reason = _smi(smi, run)
    evidence = {"collected_at": int(time.time()), "boot_id": health["boot_id"], "driver_version": health["driver_version"],
                "available": health["available"], "reason": health["reason"], "board_reason": board_reason, "gpus": gpus,
                "kernel_log": {"source": source, "reason": why, "records": len(records)}, "xids": xids,
                "nvidia_smi_q": smi_text, "nvidia_smi_reason": smi_reason, "truncated": [], "max_bytes": limit}
    if params.get("bug_report"):
        evidence["bug_report"] = _bug_report(found["nvidia-bug-report.sh"], run, params.get("bug_report_dir") or BUG_REPORT_DIR,
                                             health["boot_id"], check_mode)
    else:
        evidence["bug_report"] = {"skipped": "not allowed (bug_report: false)"}
    return _cap(evidence, limit)
