# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: a node's facts at the controller's edge, checked field by field.

What a node returns (``gpu_health_info``'s ``gpuops_gpu_health`` fact, ``kubelet_checkpoint_info``'s entries) is data
about that node alone, and that node may be broken or hostile. Before the plan reads them, every field it (or the
decision table it calls) reads is checked for the type and bounds ``gpu_health_info`` and ``kubelet_checkpoint_info``
give. A node whose facts do not pass is ``unknown``, with the first field that failed named (``FactsError``), and
planned for nothing; the other nodes are planned as if it were not there.

A field the plan does not read is not checked (a newer node module may add some). The bounds are far above what a real
node returns (64 GPUs, 100,000 XIDs, a 4 KiB string), so a real read never fails them.
"""

from __future__ import annotations

import math

from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import actions, decision
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError, ParameterError

MAX_TEXT = 4096
MAX_ITEMS = 100000
MAX_GPUS = 64
STATES = ("unknown", "ok", "attention", "faulty")
SCOPES = ("gpu", "node")


class FactsError(GpuopsError):
    """A node's facts are not of the shape its module returns: ``field`` says where."""

    def __init__(self, field, problem):
        super().__init__("%s: %s" % (field, problem))
        self.field = field
        self.problem = problem


def _kind(value):
    return "null" if value is None else type(value).__name__


def _text(value, path, optional=True, limit=MAX_TEXT):
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise FactsError(path, "expected a string%s, got %s" % (" or null" if optional else "", _kind(value)))
    if len(value) > limit:
        raise FactsError(path, "a string of %d characters, more than %d" % (len(value), limit))


def _integer(value, path, optional=True, low=None):
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise FactsError(path, "expected an integer%s, got %s" % (" or null" if optional else "", _kind(value)))
    if abs(value) > 2 ** 63 or (low is not None and value < low):
        raise FactsError(path, "%s is out of range" % (str(value)[:40],))


def _number(value, path, optional=True):
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FactsError(path, "expected a number%s, got %s" % (" or null" if optional else "", _kind(value)))
    if isinstance(value, float) and not math.isfinite(value):
        raise FactsError(path, "%r is not a finite number" % value)
    if abs(value) > 2 ** 63:
        raise FactsError(path, "%s is out of range" % (str(value)[:40],))


def _flag(value, path, optional=True):
    if value is None and optional:
        return
    if not isinstance(value, bool):
        raise FactsError(path, "expected true or false%s, got %s" % (" or null" if optional else "", _kind(value)))


def _scalar(value, path):
    if isinstance(value, float) and not math.isfinite(value):
        raise FactsError(path, "%r is not a finite number" % value)
    if value is not None and not isinstance(value, (str, int, float, bool)):
        raise FactsError(path, "expected a string, number, boolean or null, got %s" % _kind(value))
    if isinstance(value, str):
        _text(value, path)


def _mapping(value, path, optional=True):
    """The mapping ({} where it is null and may be)."""
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise FactsError(path, "expected a mapping%s, got %s" % (" or null" if optional else "", _kind(value)))
    return value


def _items(value, path, limit=MAX_ITEMS, optional=True):
    """The list ([] where it is null and may be)."""
    if value is None and optional:
        return []
    if not isinstance(value, list):
        raise FactsError(path, "expected a list%s, got %s" % (" or null" if optional else "", _kind(value)))
    if len(value) > limit:
        raise FactsError(path, "a list of %d items, more than %d" % (len(value), limit))
    return value


def _texts(value, path, limit=MAX_ITEMS, optional=True):
    for i, item in enumerate(_items(value, path, limit, optional)):
        _text(item, "%s[%d]" % (path, i), optional=False)


def _signals(value, path, optional=True):
    for i, signal in enumerate(_items(value, path, optional=optional)):
        where = "%s[%d]" % (path, i)
        signal = _mapping(signal, where, optional=False)
        for key in ("kind", "key", "source"):
            _text(signal.get(key), "%s.%s" % (where, key), optional=False)
        _text(signal.get("gpu"), "%s.gpu" % where)
        _scalar(signal.get("value"), "%s.value" % where)


def _choice(value, path, choices, optional=True):
    if value is None and optional:
        return
    if not isinstance(value, str) or value not in choices:
        raise FactsError(path, "%s is not one of %s" % (repr(value)[:80] if isinstance(value, str) else _kind(value), ", ".join(choices)))


def _verdict(value, path, node=False):
    """A verdict of health_decision's: a GPU's (``decide_gpu``), or with ``node`` the node's (``decide_node``), which also has a
    state and its GPUs. Every key the plan reads must be there."""
    verdict = _mapping(value, path)
    if not verdict:
        return
    needed = ("action", "scope", "row", "reasons", "signals") + (("state", "gpus") if node else ())
    missing = [key for key in needed if key not in verdict]
    if missing:
        raise FactsError(path, "a verdict without %s" % ", ".join(missing))
    _choice(verdict.get("action"), "%s.action" % path, actions.NAMES, optional=False)
    _choice(verdict.get("scope"), "%s.scope" % path, SCOPES)
    _choice(verdict.get("state"), "%s.state" % path, STATES, optional=not node)
    row = verdict.get("row")
    if not isinstance(row, str):
        _integer(row, "%s.row" % path)
    if node:
        _texts(verdict.get("gpus"), "%s.gpus" % path, MAX_GPUS, optional=False)
    _texts(verdict.get("reasons"), "%s.reasons" % path, optional=False)
    _signals(verdict.get("signals"), "%s.signals" % path, optional=False)
    for key in ("peers", "opportunistic"):
        _flag(verdict.get(key), "%s.%s" % (path, key))


def _xids(value, path):
    for i, xid in enumerate(_items(value, path)):
        where = "%s[%d]" % (path, i)
        xid = _mapping(xid, where, optional=False)
        _integer(xid.get("code"), "%s.code" % where, optional=False, low=0)
        _text(xid.get("bucket"), "%s.bucket" % where, limit=64)
        _integer(xid.get("usec"), "%s.usec" % where)
        _integer(xid.get("pid"), "%s.pid" % where)
        _integer(xid.get("recovery_action"), "%s.recovery_action" % where)


def _gpu(gpu, path):
    gpu = _mapping(gpu, path, optional=False)
    _integer(gpu.get("index"), "%s.index" % path)
    _text(gpu.get("uuid"), "%s.uuid" % path, limit=128)
    _text(gpu.get("state"), "%s.state" % path, limit=64)
    _text(gpu.get("error"), "%s.error" % path)
    _integer(gpu.get("architecture"), "%s.architecture" % path)
    rec = _mapping(gpu.get("recovery_action"), "%s.recovery_action" % path)
    _integer(rec.get("value"), "%s.recovery_action.value" % path)
    _text(rec.get("source"), "%s.recovery_action.source" % path, limit=64)
    for group, flags in (("remapped_rows", ("supported", "pending", "failure")), ("retired_pages", ("supported", "pending"))):
        found = _mapping(gpu.get(group), "%s.%s" % (path, group))
        for flag in flags:
            _flag(found.get(flag), "%s.%s.%s" % (path, group, flag))
    ecc = _mapping(gpu.get("ecc"), "%s.ecc" % path)
    _integer(ecc.get("volatile_dbe"), "%s.ecc.volatile_dbe" % path)
    temp = _mapping(gpu.get("temperature"), "%s.temperature" % path)
    for key in ("current", "shutdown"):
        _number(temp.get(key), "%s.temperature.%s" % (path, key))
    _texts(gpu.get("clocks_event_reasons"), "%s.clocks_event_reasons" % path, 64)
    nvlink = _mapping(gpu.get("nvlink"), "%s.nvlink" % path)
    for i, link in enumerate(_items(nvlink.get("links"), "%s.nvlink.links" % path, 64)):
        link = _mapping(link, "%s.nvlink.links[%d]" % (path, i), optional=False)
        _integer(link.get("link"), "%s.nvlink.links[%d].link" % (path, i))
        _flag(link.get("active"), "%s.nvlink.links[%d].active" % (path, i))
    _texts(nvlink.get("peers"), "%s.nvlink.peers" % path, MAX_GPUS)
    _texts(gpu.get("mig_devices"), "%s.mig_devices" % path, 128)
    for i, proc in enumerate(_items(gpu.get("processes"), "%s.processes" % path)):
        proc = _mapping(proc, "%s.processes[%d]" % (path, i), optional=False)
        _integer(proc.get("pid"), "%s.processes[%d].pid" % (path, i))
        _text(proc.get("pod_uid"), "%s.processes[%d].pod_uid" % (path, i), limit=128)
        _text(proc.get("container"), "%s.processes[%d].container" % (path, i))
    _xids(gpu.get("xids"), "%s.xids" % path)
    _integer(gpu.get("xids_dropped"), "%s.xids_dropped" % path, low=0)
    _verdict(gpu.get("verdict"), "%s.verdict" % path)


def check_health(health):
    """``health`` (a node's ``gpuops_gpu_health`` fact) checked where the plan reads it; FactsError names the first field
    that is not what ``gpu_health_info`` gives."""
    health = _mapping(health, "health", optional=False)
    _flag(health.get("available"), "health.available")
    for key in ("reason", "driver_version", "boot_id", "fabric_manager"):
        _text(health.get(key), "health.%s" % key, limit=MAX_TEXT if key == "reason" else 256)
    _number(health.get("boot_time"), "health.boot_time")
    for key in ("gpus_seen", "gpus_expected"):
        _integer(health.get(key), "health.%s" % key, low=0)
    _flag(health.get("nvswitch"), "health.nvswitch")
    for i, gpu in enumerate(_items(health.get("gpus"), "health.gpus", MAX_GPUS)):
        _gpu(gpu, "health.gpus[%d]" % i)
    _verdict(health.get("verdict"), "health.verdict", node=True)
    try:  # the thresholds the node decided with: the controller decides again with them, so they are checked as the node checks them
        decision.thresholds_of({"thresholds": _mapping(health.get("thresholds"), "health.thresholds")})
    except ParameterError as exc:
        raise FactsError("health.%s: %s" % (exc.field, exc.reason)) from None
    return health


def check_entries(entries):
    """Kubelet's checkpoint entries (``kubelet_checkpoint_info``'s ``pod_device_entries``) checked where the plan reads them."""
    for i, entry in enumerate(_items(entries, "entries")):
        where = "entries[%d]" % i
        entry = _mapping(entry, where, optional=False)
        for key in ("pod_uid", "container_name", "resource_name"):
            _text(entry.get(key), "%s.%s" % (where, key), limit=256)
        _texts(entry.get("device_ids"), "%s.device_ids" % where)
        envs = _mapping(entry.get("alloc_envs"), "%s.alloc_envs" % where)
        for key, value in envs.items():
            _text(key, "%s.alloc_envs (a name)" % where, optional=False, limit=256)
            _text(value, "%s.alloc_envs.%s" % (where, str(key)[:64]), limit=65536)
    return entries
