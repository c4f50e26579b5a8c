# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the GPU remediation ledger, a ConfigMap that makes the
breakers last across runs.

One key, ``ledger.json``: ``{"version": 1, "breaker": {"state": "closed"|"tripped", "reason", "keys", "at",
"reset_reason", "reset_at"}, "paused": false, "entries": [{"node", "gpus", "action", "keys",
"driver_version", "at", "closed_at", "result", "run", "step", "scope", "cordoned_by_us", "paused_labels", "boot_id"}]}``;
times are epoch seconds. The breaker never closes by itself (NVSentinel's "will NOT automatically reset"): only a reset
with a reason does, and the reason and time are kept.

**The truth about what we did.** A node's open entry is its quarantine's record: its step (``STEPS``), whether we cordoned
it, the labels a pause changed (their previous values), its boot ID at quarantine. A kubelet may write its own Node's
annotations, ``spec.unschedulable`` and conditions, never a ConfigMap in the controller's namespace: what the controller
reads back to decide a write (what to cancel, uncordon or restore; what is in flight) comes from here, never from the Node.

**What cannot be read.** A ledger whose top level or breaker is not this (not JSON, another version, a breaker
of another shape) is an error naming the ConfigMap, never an empty ledger: an empty ledger would close a
tripped breaker. An *entry* of another shape (a field of the wrong type, a time that is not a finite number) is
reported (``invalid``, with the field) and kept as it was, but counts for nothing: one bad entry never stops
another node's quarantine or release.

**Its size.** A ConfigMap's data holds at most 1 MiB (the API server answers 422 past it), so the ledger is
trimmed by size, not only by count: it is written at most ``MAX_BYTES`` (900 KiB, a margin for the object's
metadata), dropping the oldest closed (and unreadable) entries first. Open entries are never dropped (the
breakers count them); where they alone do not fit, the write fails naming the ConfigMap and its size. What a
node puts in an entry (its driver version, its signal keys) is bounded (``bounded_entry``).

**Writes** replace the object at the ``resourceVersion`` read, so two runs never overwrite each other's trip (the
API answers 409 to the second); ``update`` then reads again and applies its change again, a few times.
"""

from __future__ import annotations

import json
import math

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import states

NAME = "gpuops-remediation-ledger"
KEY = "ledger.json"
VERSION = 1
MAX_ENTRIES = 2000
# the ConfigMap's data limit is 1 MiB (1,048,576 bytes; the API server's validation answers 422 past it): the ledger's JSON
# stays under this, leaving room for the object's metadata
MAX_BYTES = 900 * 1024
# what one entry may hold of a node's own strings
MAX_KEYS = 32
MAX_TEXT = 128
MAX_DRIVER = 64
MAX_GPUS = 64
ATTEMPTS = 3
# an open entry whose node carries no quarantine annotation counts as in flight this long (seconds): the time between the
# ledger's write and the node's patch; after it, an entry left open (a run killed there, a release of old) counts no more
STALE_OPEN = 600
# an open entry is the quarantine's record (the controller's: no kubelet may write this namespace), its step one of the
# recorded states (states.py): ``marking`` from the entry's write until the node's patch (cordon, taint, annotation) is
# known done, then the drain's steps. The node's annotation mirrors it for people; it is never read back as the truth.
MARKING = states.MARKING
STEPS = states.RECORDED
MAX_PAUSED = 16


class LedgerError(GpuopsError):
    """The ledger ConfigMap holds something this collection did not write, or cannot hold what it must."""


def empty():
    return {"version": VERSION, "breaker": {"state": "closed"}, "paused": False, "entries": [], "invalid": []}


def _finite(value):
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and abs(value) < 2 ** 53


def _texts(value, limit=None):
    return isinstance(value, list) and (limit is None or len(value) <= limit) and all(isinstance(v, str) and len(v) <= 256 for v in value)


MAX_WAITING = 64


def _waiting_for(value):
    """An awaiting_pods entry's pods: ``[{pod, uid, due_at}]`` (due_at: when a delete_after_timeout pod's time comes)."""
    return isinstance(value, list) and len(value) <= MAX_WAITING and all(
        isinstance(v, dict) and isinstance(v.get("pod"), str) and len(v["pod"]) <= 317
        and (v.get("uid") is None or isinstance(v.get("uid"), str) and len(v["uid"]) <= 64)
        and (v.get("due_at") is None or _finite(v.get("due_at"))) for v in value)


# each field of an entry: (may it be missing or null, its check); a field not listed is kept as it is
_ENTRY = {
    "node": (False, lambda v: isinstance(v, str) and 0 < len(v) <= 253),
    "gpus": (True, lambda v: _texts(v, MAX_GPUS)),
    "action": (True, lambda v: isinstance(v, str) and len(v) <= 32),
    "keys": (True, _texts),
    "driver_version": (True, lambda v: isinstance(v, str) and len(v) <= 256),
    "at": (False, _finite),
    "closed_at": (True, _finite),
    "result": (True, lambda v: isinstance(v, str) and len(v) <= 64),
    "run": (True, lambda v: isinstance(v, str) and len(v) <= 256),
    "recover_seconds": (True, _finite),
    "escalated_from": (True, lambda v: isinstance(v, str) and len(v) <= 32),
    "step": (True, lambda v: v in STEPS),
    "scope": (True, lambda v: v in ("gpu", "node")),
    "cordoned_by_us": (True, lambda v: isinstance(v, bool)),
    "boot_id": (True, lambda v: isinstance(v, str) and len(v) <= 64),
    "waiting_for": (True, _waiting_for),
    "claim": (True, lambda v: isinstance(v, dict) and isinstance(v.get("run"), str) and len(v["run"]) <= 256 and _finite(v.get("until"))),
    "blocked_at": (True, _finite),
    "paused_labels": (True, lambda v: isinstance(v, dict) and len(v) <= MAX_PAUSED and all(
        isinstance(k, str) and len(k) <= 317 and (x is None or isinstance(x, str) and len(x) <= 63) for k, x in v.items())),
}
_BREAKER = {
    "reason": lambda v: isinstance(v, str),
    "tripped_reason": lambda v: isinstance(v, str),
    "reset_reason": lambda v: isinstance(v, str),
    "keys": _texts,
    "at": _finite,
    "reset_at": _finite,
}


def waiting(ledger, held):
    """``{node: entry}``: the open entries at a waiting step (``states.WAITING``: pods that run to their end, a PDB) of the
    nodes ``held(node)`` says our quarantine holds (the plan: in flight; the event source: our taint in the watch's view)."""
    out = {}
    for entry in ledger.get("entries") or ():
        node = entry.get("node")
        if not entry.get("closed_at") and entry.get("step") in states.WAITING and isinstance(node, str) and held(node):
            out[node] = entry
    return out


def entry_problem(entry):
    """Why ``entry`` is not one this collection writes (naming the field), or None."""
    if not isinstance(entry, dict):
        return "an entry is a %s, not a mapping" % type(entry).__name__
    for field, (optional, valid) in _ENTRY.items():
        value = entry.get(field)
        if value is None and optional:
            continue
        if not valid(value):
            return "%s is %s" % (field, repr(value)[:80] if value is not None else "missing")
    return None


def parse(configmap, where):
    """The ledger of a ConfigMap (a dict as the API serves it), ``empty()`` when there is none. ``entries`` holds the
    entries that can be read; ``invalid`` the others (``{index, problem, entry}``), kept for the next write."""
    if configmap is None:
        return empty()
    text = ((configmap.get("data") or {}).get(KEY))
    if text is None:
        raise LedgerError("%s has no %s key: it is not a ledger this collection wrote; move it away or delete it" % (where, KEY))
    try:
        ledger = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise LedgerError("%s: %s is not JSON (%s); a tripped breaker may be recorded there, so it is not ignored: fix or delete "
                          "it" % (where, KEY, str(exc)[:200])) from None
    if not isinstance(ledger, dict) or ledger.get("version") != VERSION:
        raise LedgerError("%s: %s is not a version %d ledger" % (where, KEY, VERSION))
    breaker = ledger.get("breaker")
    if not isinstance(breaker, dict) or breaker.get("state") not in ("closed", "tripped"):
        raise LedgerError("%s: the breaker's state is %r, not closed or tripped" % (where, (breaker or {}).get("state") if isinstance(breaker, dict)
                                                                                    else breaker))
    for field, valid in _BREAKER.items():
        if breaker.get(field) is not None and not valid(breaker[field]):
            raise LedgerError("%s: the breaker's %s is %s, not one this collection writes; a tripped breaker is kept there, so it is "
                              "not ignored: fix or delete it" % (where, field, repr(breaker[field])[:80]))
    entries = ledger.get("entries", [])
    if not isinstance(entries, list):
        raise LedgerError("%s: entries is not a list" % where)
    if not isinstance(ledger.get("paused", False), bool):
        raise LedgerError("%s: paused is %r, not true or false" % (where, ledger.get("paused")))
    good, bad = [], []
    for index, entry in enumerate(entries):
        problem = entry_problem(entry)
        if problem:
            bad.append({"index": index, "problem": problem, "entry": entry})
        else:
            good.append(entry)
    ledger.update(entries=good, invalid=bad, paused=ledger.get("paused", False))
    return ledger


def bounded_entry(entry):
    """``entry`` with what a node put in it bounded: its driver version (MAX_DRIVER characters), its signal keys (MAX_KEYS of
    MAX_TEXT characters), its GPUs (MAX_GPUS), the run (MAX_TEXT)."""
    out = dict(entry)
    if isinstance(out.get("driver_version"), str):
        out["driver_version"] = out["driver_version"][:MAX_DRIVER]
    out["keys"] = [k[:MAX_TEXT] for k in (out.get("keys") or []) if isinstance(k, str)][:MAX_KEYS]
    out["gpus"] = [g[:MAX_TEXT] for g in (out.get("gpus") or []) if isinstance(g, str)][:MAX_GPUS]
    if isinstance(out.get("run"), str):
        out["run"] = out["run"][:MAX_TEXT]
    return out


def _compact(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def dump(ledger, where=NAME):
    """The ConfigMap's ``data``: at most MAX_ENTRIES entries and MAX_BYTES bytes, the oldest closed and unreadable entries
    dropped first; LedgerError (naming ``where`` and the size) where the open entries alone do not fit."""
    kept = [("entry", e) for e in ledger.get("entries") or []] + [("invalid", i["entry"]) for i in ledger.get("invalid") or []]
    kept.sort(key=lambda item: item[1].get("at") if item[0] == "entry" else -1)  # the unreadable first, then by age
    head = dict((k, v) for k, v in ledger.items() if k not in ("entries", "invalid"))
    base = len(_compact(dict(head, entries=[])))
    sizes = [len(_compact(e)) for dummy, e in kept]
    total = base + sum(sizes) + max(0, len(kept) - 1)

    def droppable(item):
        kind, entry = item
        return kind == "invalid" or bool(entry.get("closed_at"))

    drop = set()
    for i, item in enumerate(kept):
        if total <= MAX_BYTES and len(kept) - len(drop) <= MAX_ENTRIES:
            break
        if droppable(item):
            drop.add(i)
            total -= sizes[i] + 1
    if total > MAX_BYTES:
        raise LedgerError("ConfigMap %s: the ledger would hold %d bytes, more than the %d it may (a ConfigMap holds at most 1 MiB), "
                          "with %d open entries, which are never dropped; close or release those nodes' remediations, or move the "
                          "ledger aside" % (where, total, MAX_BYTES, sum(1 for i, item in enumerate(kept) if i not in drop and not droppable(item))))
    entries = [e for i, (dummy, e) in enumerate(kept) if i not in drop]
    text = _compact(dict(head, entries=entries))
    return {KEY: text}


def read(api, namespace, api_exception):
    """``(ledger, configmap or None)`` from the API."""
    try:
        found = api.read_namespaced_config_map(NAME, namespace)
    except api_exception as exc:
        if getattr(exc, "status", None) == 404:
            return empty(), None
        raise
    serialized = api.api_client.sanitize_for_serialization(found)
    return parse(serialized, "ConfigMap %s/%s" % (namespace, NAME)), serialized


def write(api, namespace, ledger, current, api_exception=None):
    """Create the ConfigMap, or replace it at the resourceVersion read (``current``). The API's refusal of the object (422)
    is a LedgerError naming the ConfigMap and its size; a 409 (another writer) is raised as it came, for ``update``."""
    where = "%s/%s" % (namespace, NAME)
    data = dump(ledger, where)
    body = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "gpuops.fleet"}},
            "data": data}
    refused = api_exception if api_exception is not None else ()
    try:
        if current is None:
            return api.create_namespaced_config_map(namespace, body)
        body["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
        return api.replace_namespaced_config_map(NAME, namespace, body)
    except refused as exc:
        if getattr(exc, "status", None) in (404, 409):
            raise
        raise LedgerError("ConfigMap %s: the API server refused the ledger (%s %s) of %d bytes; nothing else was changed"
                          % (where, getattr(exc, "status", None), getattr(exc, "reason", "") or "", len(data[KEY]))) from None


def update(api, namespace, change, api_exception, attempts=ATTEMPTS):
    """Read the ledger, ``change(ledger)`` (a new ledger, or None: nothing to write), write it at the resourceVersion read;
    a conflict (409: another run wrote in between) reads and changes again, up to ``attempts`` times. Returns the ledger
    written (or read, where there was nothing to write)."""
    for dummy in range(attempts):
        ledger, current = read(api, namespace, api_exception)
        changed = change(ledger)
        if changed is None:
            return ledger
        try:
            write(api, namespace, changed, current, api_exception)
            return changed
        except api_exception as exc:
            if getattr(exc, "status", None) != 409:
                raise
    raise LedgerError("ConfigMap %s/%s: another run wrote the ledger at each of %d attempts; nothing was changed: run again"
                      % (namespace, NAME, attempts))


def reset(ledger, reason, now):
    """The ledger with its breaker closed, the reason and time kept."""
    breaker = dict(ledger.get("breaker") or {})
    breaker.update(state="closed", reset_reason=reason, reset_at=now, tripped_reason=breaker.get("reason"))
    breaker.pop("reason", None)
    breaker.pop("keys", None)
    return dict(ledger, breaker=breaker)
