# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: every remediation finishes on its own. A node our quarantine holds at a waiting
step (``states.WAITING``) is offered again as a ``remediation_due`` event when what it waits for has happened, so the
rulebook runs its remediation with no person and no schedule:

* ``awaiting_pods``: the pods its ledger entry names (``waiting_for``, with their UIDs) are gone from the node (``pods_gone``),
  or a ``delete_after_timeout`` pod's time has come (``deadline``: the entry's ``due_at``);
* ``drain_blocked``: the drain is tried again (``drain_retry``) a minute after it was blocked (``blocked_at``), then twice as
  long after each offer, at most ``retry_max`` seconds.

What is read is the controller's record and the API's: the remediation's ledger (a ConfigMap no kubelet may write), our
taint on the Node (which only a cluster user can write or lift: the Node watch's ``quarantined``) and the pods the API says
run on the node. What a node writes of itself (our annotation's mirror) is never read here, so a node can neither end,
hurry nor hide its own remediation; at worst an event offers a run that finds nothing to do. Each offer of a node is
followed by the same backoff (a run that failed is offered again, never in a loop); a node healthy again, released or
cancelled is forgotten. ``Checker`` reads through the API; ``Due`` decides, pure."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import kinds
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events.nodes import limit
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.pods import active
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import states

FIRST_RETRY = 60  # seconds from an offer (or a blocked drain) to the next, doubled after each offer
PODS_GONE, DEADLINE, DRAIN_RETRY = "pods_gone", "deadline", "drain_retry"


def waiting_nodes(ledger, views):
    """``{node: entry}``: the ledger's open entries at a waiting step whose Node the watch sees carrying our taint."""
    return ledgers.waiting(ledger, lambda node: bool((views.get(node) or {}).get("quarantined")))


def _meta(pod):
    return pod.get("metadata") or {}


def pods_left(entry, pods):
    """The entry's waited-for pods still on the node (by UID; by name where the entry kept none): a pod that ended (its phase
    Succeeded or Failed) is gone, one being deleted is not (it holds the GPU until it is)."""
    live_uids, live_names = set(), set()
    for pod in pods:
        if active(pod):
            live_uids.add(_meta(pod).get("uid"))
            live_names.add("%s/%s" % (_meta(pod).get("namespace"), _meta(pod).get("name")))
    return [w for w in entry.get("waiting_for") or () if (w.get("uid") in live_uids if w.get("uid") else w.get("pod") in live_names)]


class Due:
    """Which waiting nodes are due, with each node's offers backed off: ``check(ledger, views, pods_of, now, observed)`` returns
    the ``remediation_due`` events (``pods_of(node)``: the pods the API says run on the node, asked only for a node at
    awaiting_pods)."""

    def __init__(self, retry_max=3600):
        self.retry_max = max(retry_max, FIRST_RETRY)
        self.offered = {}  # (node, the entry's at) -> (offers, when last)

    def _after(self, key):
        offers, last = self.offered.get(key, (0, None))
        return None if last is None else last + min(self.retry_max, FIRST_RETRY * 2 ** min(offers - 1, 20))

    def check(self, ledger, views, pods_of, now, observed):
        found = waiting_nodes(ledger, views)
        for key in [k for k in self.offered if k[0] not in found or found[k[0]].get("at") != k[1]]:
            del self.offered[key]  # released, cancelled, healthy again, or a new quarantine: forgotten
        events = []
        for node in sorted(found):
            entry = found[node]
            key = (node, entry.get("at"))
            after = self._after(key)
            if after is not None and now < after:
                continue
            why = self._why(entry, pods_of, now)
            if why is None:
                continue
            offers = self.offered.get(key, (0, None))[0] + 1
            self.offered[key] = (offers, now)
            events.append({"gpuops": {"kind": kinds.REMEDIATION_DUE, "node": node, "step": entry["step"], "why": why, "attempt": offers,
                                      "observed_at": observed}, "meta": {"hosts": limit([node])}})
        return events

    def _why(self, entry, pods_of, now):
        if entry["step"] == states.DRAIN_BLOCKED:
            blocked = entry.get("blocked_at") if isinstance(entry.get("blocked_at"), (int, float)) else entry.get("at", now)
            return DRAIN_RETRY if now >= blocked + FIRST_RETRY else None
        if not entry.get("waiting_for"):
            return PODS_GONE  # an entry that names no pod (written before it kept them): a run looks, then backs off
        left = pods_left(entry, pods_of(entry["node"]))
        if not left:
            return PODS_GONE
        if any(isinstance(w.get("due_at"), (int, float)) and w["due_at"] <= now for w in left):
            return DEADLINE
        return None


class Checker:
    """The API side of ``Due``: the ledger (``ledger.read``'s, a missing one empty) and the pods on a node; an error reading
    either is said (``error``, for the heartbeat) and checks nothing this time, never stopping the Node watch."""

    def __init__(self, api, namespace, api_exception, retry_max=3600):
        self.api, self.namespace, self.api_exception = api, namespace, api_exception
        self.due, self.error = Due(retry_max), None

    def pods_of(self, node):
        serial = self.api.api_client.sanitize_for_serialization
        return [serial(p) for p in self.api.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node).items]

    def check(self, views, now, observed):
        try:
            ledger, found = ledgers.read(self.api, self.namespace, self.api_exception)
            events = self.due.check(ledger, views, self.pods_of, now, observed)
        except Exception as exc:  # 403 (the source's RBAC), the API server away, an unreadable ledger: said, tried again
            self.error = "%s: %s" % (type(exc).__name__, str(exc)[:200])
            return []
        held = sorted(n for n, v in views.items() if v.get("quarantined"))
        # our taint on nodes and no ledger here: the ledger is elsewhere (the playbooks' gpuops_gpu_health_namespace), said
        self.error = ("no ledger %s in %s, though %d nodes carry our taint (%s): is ledger_namespace the playbooks' namespace?"
                      % (ledgers.NAME, self.namespace, len(held), ", ".join(held[:5]))) if found is None and held else None
        return events
