# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: compare a kubelet checkpoint with the real GPUs.

``describe()`` backs ``kubelet_checkpoint_info``; ``plan()`` is the pure planner;
``reconcile()`` applies a plan (backup first, atomic writes) and backs
``kubelet_checkpoint`` and the node-side ``gpuops`` command alike.
"""

from __future__ import annotations

import json
import os

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec
from ansible_collections.gpuops.fleet.plugins.module_utils._node import device_ids as ids
from ansible_collections.gpuops.fleet.plugins.module_utils._common.gpushare import MEM as GPUSHARE_MEM
from ansible_collections.gpuops.fleet.plugins.module_utils._node import shared_memory
from ansible_collections.gpuops.fleet.plugins.module_utils._node import nodefile
from ansible_collections.gpuops.fleet.plugins.module_utils._node import options as options_table
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import InventoryError, UnsafeFileError

# the settings' names, types, defaults and checks, and their validation (validate_options, Options), are options.py's (one
# owner for the module, the guard and the role)

STATE_MISSING = "missing"
STATE_CORRUPT = "corrupt"
STATE_UP_TO_DATE = "up_to_date"
STATE_STALE = "stale"
STATE_INVENTORY_UNKNOWN = "inventory_unknown"


def entry_dict(entry):
    """Public form of a pod entry: flat device IDs, NUMA map for v2 (keys as strings)."""
    out = {
        "pod_uid": entry.pod_uid,
        "container_name": entry.container_name,
        "resource_name": entry.resource_name,
        "device_ids": entry.flat_device_ids(),
    }
    if isinstance(entry.device_ids, dict):
        out["numa_nodes"] = dict((str(node), list(v or ())) for node, v in sorted(entry.device_ids.items()))
    else:
        out["numa_nodes"] = None
    return out


def entry_with_envs(entry):
    """entry_dict plus ``alloc_envs``: the device plugin's envs from the entry's AllocResp (see _checkpoint.alloc_envs)."""
    return dict(entry_dict(entry), alloc_envs=codec.alloc_envs(entry.alloc_resp))


def check_file_options(path, max_bytes):
    """The checkpoint file's two settings (options.TABLE's checks); else ParameterError naming the field."""
    options_table.check("checkpoint_path", path)
    options_table.check("max_bytes", max_bytes)


def describe(path=options_table.DEFAULT_PATH, max_bytes=nodefile.DEFAULT_MAX_BYTES):
    """Read-only report of a checkpoint file (the ``kubelet_checkpoint_info`` result)."""
    check_file_options(path, max_bytes)
    result = {
        "checkpoint_path": path,
        "exists": False,
        "size": None,
        "layout": None,
        "checksum_valid": False,
        "stored_checksum": None,
        "computed_checksum": None,
        "boot_id": None,
        "registered_devices": {},
        "pod_device_entries": [],
        "error": None,
    }
    try:
        nf = nodefile.read(path, max_bytes)
    except UnsafeFileError as exc:
        # Reported, not raised: the info module describes, it does not judge.
        result["exists"] = os.path.lexists(path)
        result["error"] = str(exc)
        return result
    if nf is None:
        return result
    result["exists"] = True
    result["size"] = len(nf.data)
    decoded = codec.decode(nf.data)
    result["error"] = decoded.error
    cp = decoded.checkpoint
    if cp is not None:
        result["layout"] = cp.layout
        result["checksum_valid"] = decoded.valid
        result["stored_checksum"] = cp.checksum
        result["computed_checksum"] = cp.computed_checksum()
        result["boot_id"] = cp.boot_id or None
        result["registered_devices"] = dict((k, list(v or ())) for k, v in (cp.registered or {}).items())
        result["pod_device_entries"] = [entry_with_envs(e) for e in cp.entries or ()]
    return result


class Plan:
    """What is stale in a checkpoint, per GPU resource."""

    __slots__ = ("stale", "stale_registered", "affected", "unrecognized", "gpu_ids_listed", "registered_ids", "pod_ids")

    def __init__(self):
        self.stale = {}
        self.stale_registered = {}
        self.affected = []
        self.unrecognized = {}
        self.gpu_ids_listed = 0
        # every GPU-resource device ID listed, per resource (what the boot guard logs)
        self.registered_ids = {}
        self.pod_ids = {}

    @property
    def is_stale(self):
        return bool(self.stale)


def _add(bucket, resource, device_id):
    values = bucket.setdefault(resource, [])
    if device_id not in values:
        values.append(device_id)


def plan(cp, inventory, patterns, retired=()):
    """Classify every GPU-resource device ID of ``cp`` against ``inventory`` (pure).

    Every ID of a ``retired`` resource is stale whatever GPU it names: the node no longer offers
    that resource (``gpu_sharing_mode`` switched it between ``nvidia.com/gpu`` and
    ``aliyun.com/gpu-mem``), so its registrations and allocations are stale by construction.
    """
    result = Plan()
    state_of = {}
    retired = set(retired or ())

    def state(device_id, resource):
        if resource in retired:
            return ids.STALE
        if device_id not in state_of:
            state_of[device_id] = inventory.state(device_id)
        return state_of[device_id]

    for resource, values in (cp.registered or {}).items():
        if not ids.is_gpu_resource(resource, patterns) and resource not in retired:
            continue
        for device_id in values or ():
            result.gpu_ids_listed += 1
            _add(result.registered_ids, resource, device_id)
            s = state(device_id, resource)
            if s == ids.STALE:
                _add(result.stale, resource, device_id)
                _add(result.stale_registered, resource, device_id)
            elif s == ids.UNRECOGNIZED:
                _add(result.unrecognized, resource, device_id)
    for index, entry in enumerate(cp.entries or ()):
        if not ids.is_gpu_resource(entry.resource_name, patterns) and entry.resource_name not in retired:
            continue
        stale_here = []
        for device_id in entry.flat_device_ids():
            result.gpu_ids_listed += 1
            _add(result.pod_ids, entry.resource_name, device_id)
            s = state(device_id, entry.resource_name)
            if s == ids.STALE:
                _add(result.stale, entry.resource_name, device_id)
                if device_id not in stale_here:
                    stale_here.append(device_id)
            elif s == ids.UNRECOGNIZED:
                _add(result.unrecognized, entry.resource_name, device_id)
        if stale_here:
            item = entry_dict(entry)
            item["stale_device_ids"] = stale_here
            item["entry_index"] = index
            result.affected.append(item)
    return result


def choose_strategy(cp, the_plan, strategy):
    """``(strategy, reason)`` for a stale checkpoint; ``auto`` keeps what running pods still hold.

    ``auto`` is ``prune`` when any pod entry would survive pruning (it holds only valid
    GPU IDs, or a resource that is not a GPU, such as an RDMA device, that must never be
    taken from a running pod), and ``remove`` when none would (the field report's case:
    a rebooted node whose GPU changed; kubelet then starts from a fresh file, as GPUOps did).
    """
    if strategy != "auto":
        return strategy, "strategy=%s was asked for" % strategy
    dropped = set(item["entry_index"] for item in the_plan.affected)
    kept = [e for i, e in enumerate(cp.entries or ()) if i not in dropped]
    if kept:
        pods = sorted(set(e.pod_uid for e in kept))
        return "prune", "auto: %d pod entr%s only valid devices (pod%s %s): pruning keeps %s allocations" % (
            len(kept),
            "y still holds" if len(kept) == 1 else "ies still hold",
            "" if len(pods) == 1 else "s",
            ", ".join(pods),
            "its" if len(pods) == 1 else "their",
        )
    return "remove", "auto: no pod entry holds only valid devices, so nothing needs keeping: the checkpoint is moved aside"


def prune(cp, the_plan):
    """A copy of ``cp`` without stale registrations and without pod entries that hold stale IDs."""
    drop = set(item["entry_index"] for item in the_plan.affected)
    entries = None
    if cp.entries is not None:
        entries = [e.copy() for i, e in enumerate(cp.entries) if i not in drop]
    registered = None
    if cp.registered is not None:
        registered = {}
        for resource, values in cp.registered.items():
            stale = set(the_plan.stale_registered.get(resource, ()))
            registered[resource] = None if values is None else [v for v in values if v not in stale]
    return codec.Checkpoint(cp.layout, entries, registered, 0, cp.boot_id)


def render(cp):
    """Human-readable, secret-free rendering of a checkpoint for diffs (AllocResp redacted)."""
    if cp is None:
        return ""
    entries = None
    if cp.entries is not None:
        entries = []
        for e in cp.entries:
            item = entry_dict(e)
            item["alloc_resp"] = None if e.alloc_resp is None else "<redacted: %d bytes>" % len(e.alloc_resp)
            entries.append(item)
    doc = {"layout": cp.layout, "pod_device_entries": entries, "registered_devices": cp.registered}
    if cp.boot_id:
        doc["boot_id"] = cp.boot_id
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _base_result(path):
    return {
        "changed": False,
        "checkpoint_path": path,
        "status": None,
        "action": "none",
        "layout": None,
        "checksum_valid": False,
        "error": None,
        "stale": {},
        "affected_pods": [],
        "unrecognized": {},
        "registered_gpu_ids": {},
        "pod_gpu_ids": {},
        "shared_memory": None,
        "backup_path": None,
        "backups_removed": [],
        "strategy": None,
        "strategy_reason": None,
        "recovered": [],
        "msg": "",
    }


def _unknown(result, reason, unknown_inventory):
    if unknown_inventory == "fail":
        raise InventoryError("GPU inventory unknown, checkpoint left untouched: %s" % reason)
    result["status"] = STATE_INVENTORY_UNKNOWN
    result["action"] = "skipped"
    result["msg"] = "GPU inventory unknown, checkpoint left untouched: %s" % reason


def reconcile(facts, options, check_mode=False, diff=False, now=None, lock=True):
    """Bring the checkpoint in line with the GPUs in ``facts`` (a gpuops_gpus dict).

    ``options`` comes from validate_options(). Returns a result dict (see the
    kubelet_checkpoint module's RETURN), with ``diff`` ({before, after}, AllocResp
    redacted) only when ``diff`` is true. Outside check mode the run holds the
    checkpoint's lock from the read to the last write. Raises InventoryError (unknown
    inventory with ``unknown_inventory=fail``), ParameterError, UnsafeFileError or
    LockBusyError; the checkpoint is then untouched or replaced whole. ``lock=False``
    is for a caller that already holds the lock (``repair.repair``).
    """
    available, reason = ids.availability(facts)
    if check_mode or not lock:
        return _reconcile(facts, options, available, reason, check_mode, diff, now)
    with nodefile.run_lock(options.lock_dir, options.checkpoint_path, options.lock_timeout):
        return _reconcile(facts, options, available, reason, False, diff, now)


def _reconcile(facts, options, available, reason, check_mode, diff, now):
    result = _base_result(options.checkpoint_path)
    # what a killed run left comes first (in check mode: what would be done, and the plan is
    # made on the file that would be put back)
    steps, restore_from = nodefile.recover(options.checkpoint_path, options.backup_dir, check_mode, options.max_bytes, now)
    result["recovered"] = steps
    nf = nodefile.read(restore_from if check_mode and restore_from else options.checkpoint_path, options.max_bytes)
    if nf is not None and nf.path != options.checkpoint_path:
        nf = nodefile.NodeFile(options.checkpoint_path, nf.data, nf.st)
    cp = new_cp = None
    if nf is None:
        result["status"] = STATE_MISSING
        result["msg"] = "no checkpoint at %s; kubelet writes a fresh one" % options.checkpoint_path
    else:
        decoded = codec.decode(nf.data)
        cp = decoded.checkpoint
        new_cp = _decide(result, facts, available, reason, nf, decoded, options, check_mode, now)
    if steps:
        result["changed"] = True
        result["msg"] = "%s; %s" % (_recovery_msg(steps, check_mode), result["msg"])
    if diff:
        result["diff"] = _diff(result, nf, cp, new_cp)
    return result


def _recovery_msg(steps, check_mode):
    counts = {}
    for step in steps:
        counts[step["action"]] = counts.get(step["action"], 0) + 1
    words = {"restored": "put back the checkpoint it had moved aside", "removed": "removed %d temp file(s)", "rescued": "saved %d temp file(s) as backups"}
    parts = [words[a] if a == "restored" else words[a] % counts[a] for a in ("restored", "rescued", "removed") if a in counts]
    return "%sa run that was killed left files behind: %s" % ("would recover: " if check_mode else "", ", ".join(parts))


def _diff(result, nf, cp, new_cp):
    """Diff of what reconcile() did (or would do), rendered only for diff mode."""
    if nf is None:
        return {"before": "", "after": ""}
    before = render(cp) if cp is not None else "<undecodable checkpoint, %d bytes>\n" % len(nf.data)
    if result["action"] == "removed":
        after = ""
    elif new_cp is not None:
        after = render(new_cp)
    else:
        after = before
    return {"before": before, "after": after}


def _decide(result, facts, available, reason, nf, decoded, options, check_mode, now):
    """Fill ``result`` for an existing checkpoint and act on it; returns the pruned Checkpoint or None."""
    cp = decoded.checkpoint
    result["error"] = decoded.error
    result["checksum_valid"] = decoded.valid
    result["layout"] = cp.layout if cp is not None else None

    if not available:
        _unknown(result, reason or "gpu_uuid_facts reported the GPUs as unavailable", options.unknown_inventory)
        return None
    inventory = ids.inventory_from_facts(facts)
    the_plan = plan(cp, inventory, options.patterns, options.retired_resources) if cp is not None else None
    if the_plan is not None:
        result["registered_gpu_ids"] = the_plan.registered_ids
        result["pod_gpu_ids"] = the_plan.pod_ids
        if (cp.registered or {}).get(GPUSHARE_MEM):
            entries = [entry_with_envs(e) for e in cp.entries or ()]
            result["shared_memory"] = shared_memory.from_checkpoint(entries, cp.registered, facts.get("gpus"))
    if inventory.gpu_count == 0:
        if cp is None:
            _unknown(result, "zero GPUs seen and the checkpoint cannot be decoded", options.unknown_inventory)
            return None
        if the_plan.gpu_ids_listed:
            _unknown(result, "zero GPUs seen while the checkpoint lists %d GPU device IDs" % the_plan.gpu_ids_listed, options.unknown_inventory)
            return None

    if not decoded.valid:
        result["status"] = STATE_CORRUPT
        if options.on_corrupt == "report":
            result["msg"] = "checkpoint is corrupt (%s); kubelet ignores it; left in place (on_corrupt=report)" % decoded.error
        else:
            _act(result, nf, None, options, check_mode, now, "corrupt checkpoint (%s)" % decoded.error)
        return None

    result["stale"] = the_plan.stale
    result["affected_pods"] = the_plan.affected
    result["unrecognized"] = the_plan.unrecognized
    if not the_plan.is_stale:
        result["status"] = STATE_UP_TO_DATE
        result["msg"] = "checkpoint is up to date with the %d GPU(s) seen" % inventory.gpu_count
        return None

    result["status"] = STATE_STALE
    why = "stale device IDs %s" % ", ".join("%s: %s" % (r, " ".join(v)) for r, v in sorted(the_plan.stale.items()))
    strategy, result["strategy_reason"] = choose_strategy(cp, the_plan, options.strategy)
    result["strategy"] = strategy
    if strategy == "remove":
        _act(result, nf, None, options, check_mode, now, why)
        return None
    new_cp = prune(cp, the_plan)
    _act(result, nf, new_cp, options, check_mode, now, why)
    return new_cp


def _act(result, nf, new_cp, options, check_mode, now, why):
    """Move the checkpoint aside (``new_cp`` None) or rewrite it as ``new_cp``; backup first, rotate after."""
    result["changed"] = True
    result["action"] = "removed" if new_cp is None else "pruned"
    # a backup directory we would refuse is refused in check mode too: the plan must not promise
    nodefile.check_backup_dir(options.backup_dir)
    if not check_mode:
        if new_cp is None:
            result["backup_path"] = nodefile.remove(nf, options.backup_dir, now)
        else:
            data, dummy = codec.encode(new_cp)
            result["backup_path"] = nodefile.replace(nf, data, options.backup_dir, now)
        result["backups_removed"] = nodefile.rotate_backups(options.backup_dir, nf.path, options.backup_keep)
    if new_cp is None:
        result["msg"] = "%s: moved the checkpoint aside%s; kubelet writes a fresh one" % (
            why,
            "" if check_mode else " to " + result["backup_path"],
        )
    else:
        affected = len(result["affected_pods"])
        result["msg"] = "%s: removed them and %d pod entr%s; kept every other entry" % (why, affected, "y" if affected == 1 else "ies")
