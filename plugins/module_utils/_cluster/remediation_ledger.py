# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the GPU remediation ledger, a ConfigMap that makes the
breakers last across runs.

One key, ``ledger.json``: ``{"version": 1, "breaker": {"state": "closed"|"tripped", "reason", "keys", "at",
"reset_reason", "reset_at"}, "paused": false, "entries": [{"node", "gpus", "action", "keys",
"driver_version", "at", "closed_at", "result"}]}``; times are epoch seconds. The breaker never closes
by itself (NVSentinel's "will NOT automatically reset"): only a reset with a reason does, and the
reason and time are kept.

A ledger that cannot be read as this (not JSON, another version, a breaker state we do not know) is
an error naming the ConfigMap, never an empty ledger: an empty ledger would close a tripped breaker.
Writes replace the object at the ``resourceVersion`` read, so two runs never overwrite each other's
trip (the API answers 409 to the second).
"""

from __future__ import annotations

import json

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError

NAME = "gpuops-remediation-ledger"
KEY = "ledger.json"
VERSION = 1
MAX_ENTRIES = 2000


class LedgerError(GpuopsError):
    """The ledger ConfigMap holds something this collection did not write."""


def empty():
    return {"version": VERSION, "breaker": {"state": "closed"}, "paused": False, "entries": []}


def parse(configmap, where):
    """The ledger of a ConfigMap (a dict as the API serves it), ``empty()`` when there is none."""
    if configmap is None:
        return empty()
    text = ((configmap.get("data") or {}).get(KEY))
    if text is None:
        raise LedgerError("%s has no %s key: it is not a ledger this collection wrote; move it away or delete it" % (where, KEY))
    try:
        ledger = json.loads(text)
    except ValueError as exc:
        raise LedgerError("%s: %s is not JSON (%s); a tripped breaker may be recorded there, so it is not ignored: fix or delete "
                          "it" % (where, KEY, exc)) from None
    if not isinstance(ledger, dict) or ledger.get("version") != VERSION:
        raise LedgerError("%s: %s is not a version %d ledger" % (where, KEY, VERSION))
    breaker = ledger.get("breaker")
    if not isinstance(breaker, dict) or breaker.get("state") not in ("closed", "tripped"):
        raise LedgerError("%s: the breaker's state is %r, not closed or tripped" % (where, (breaker or {}).get("state") if isinstance(breaker, dict)
                                                                                    else breaker))
    if not isinstance(ledger.get("entries", []), list):
        raise LedgerError("%s: entries is not a list" % where)
    ledger.setdefault("entries", [])
    ledger.setdefault("paused", False)
    return ledger


def dump(ledger):
    """The ConfigMap's ``data``; the oldest entries beyond MAX_ENTRIES are dropped."""
    ledger = dict(ledger, entries=(ledger.get("entries") or [])[-MAX_ENTRIES:])
    return {KEY: json.dumps(ledger, sort_keys=True, separators=(",", ":"))}


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


def write(api, namespace, ledger, current):
    """Create the ConfigMap, or replace it at the resourceVersion read (``current``)."""
    body = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "gpuops.fleet"}},
            "data": dump(ledger)}
    if current is None:
        return api.create_namespaced_config_map(namespace, body)
    body["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
    return api.replace_namespaced_config_map(NAME, namespace, body)


def reset(ledger, reason, now):
    """The ledger with its breaker closed, the reason and time kept."""
    breaker = dict(ledger.get("breaker") or {})
    breaker.update(state="closed", reset_reason=reason, reset_at=now, tripped_reason=breaker.get("reason"))
    breaker.pop("reason", None)
    breaker.pop("keys", None)
    return dict(ledger, breaker=breaker)
