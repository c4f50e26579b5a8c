# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: one cluster-side remediation operation's session (module gpu_quarantine), as
kubernetes.core passes one ``K8sService(client, module)``: the API client, the CoreV1 API, the checked parameters, check
mode, the error edge (the client's ``ApiException``), the clock and the time the operation started. The operations
(``quarantine.py``, ``pause.py``, ``release.py``) take it, and the reads and writes every one of them makes are here: the
Node, the ledger (the truth about what we did), one patch of the Node at the resourceVersion read."""

from __future__ import annotations

import time

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import claims, marks, states
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ResultError


# how many times one Node patch is sent where only the Node's resourceVersion moved (kubelet's updates)
CONFLICT_TRIES = 5


def _basis(node, spec, annotations, labels):
    """What a patch of ``node`` was built from: the spec fields it writes (the cordon, the taints) and the present values of
    the annotation and label keys it writes. A change elsewhere (the status, kubelet's other labels) leaves it the same."""
    meta = marks.meta(node)
    found = {"spec": dict((k, marks.spec(node).get(k)) for k in sorted(spec or {}))}
    for part, written in (("annotations", annotations), ("labels", labels)):
        present = meta.get(part) or {}
        found[part] = dict((k, present.get(k)) for k in sorted(written or {}))
    return found


class QuarantineError(ResultError):
    """Refused before anything changed, or the drain could not finish (``result`` says where the node stands)."""


class Session:
    """``api`` (CoreV1Api; its ``api_client`` serializes), ``p`` (the checked parameters), ``check_mode``, ``api_exception``;
    ``now`` (epoch seconds, the ledger's and the condition's time) and ``clock`` (monotonic, the waits' deadlines)."""

    def __init__(self, api, p, check_mode, api_exception, now=None, clock=time.monotonic):
        self.client, self.api, self.p, self.check_mode, self.api_exception = api.api_client, api, p, check_mode, api_exception
        self.now = int(now if now is not None else time.time())
        self.clock = clock
        self.wrote = 0  # the ledger's writes this operation made (a claim refused before the first leaves the node as it was)

    @property
    def node(self):
        return self.p["node"]

    def serial(self, obj):
        return self.client.sanitize_for_serialization(obj)

    def read_node(self):
        return self.serial(self.api.read_node(self.node))

    def read(self):
        """``(node, entry, record)``: the Node, its open ledger entry and the quarantine's record from it."""
        node = self.read_node()
        ledger, dummy = ledgers.read(self.api, self.p["namespace"], self.api_exception)
        entry = marks.open_entry(ledger, self.node)
        return node, entry, marks.record(entry, node)

    def pods_on_node(self):
        return [self.serial(x) for x in self.api.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % self.node).items]

    def ledger_update(self, change, let_go=False):
        """The ledger changed by ``change(ledger)`` (None: nothing to write), as ``ledger.update`` writes it. With the run's
        ``claim``, a write of the node's open entry takes the claim (claims.take: Claimed where another run's is live, before
        anything is written); ``let_go``: the run stops for the node and gives its claim up in the same write."""
        run = self.p.get("claim")
        writes = []

        def guarded(ledger):
            out = change(ledger)
            writes[:] = [out is not None]
            entry = marks.open_entry(out, self.node) if out is not None and run else None
            if entry is not None:
                claims.take(self.node, entry, run, self.now, self.p.get("claim_seconds") or claims.CLAIM_SECONDS)
                if let_go:
                    claims.let_go(entry, run)
            return out

        written = ledgers.update(self.api, self.p["namespace"], guarded, self.api_exception)
        self.wrote += 1 if writes and writes[0] else 0
        return written

    def claim(self):
        """The run's claim on the node's open entry (a write), where the run has one: Claimed where another run's is live."""
        if self.p.get("claim"):
            self.ledger_update(lambda ledger: ledger if marks.open_entry(ledger, self.node) is not None else None)

    def ledger_set(self, fields, let_go=False):
        """The node's open ledger entry updated with ``fields`` (the record's step, a pause's labels) before the node mirrors
        them; QuarantineError where the ledger holds no open entry for it any more (another run released it)."""
        found = []

        def change(ledger):
            entry = marks.open_entry(ledger, self.node)
            del found[:]
            if entry is None:
                return None
            found.append(entry)
            if all(entry.get(k) == v for k, v in fields.items()):
                return None
            entry.update(fields)
            return ledger

        self.ledger_update(change, let_go)
        if not found:
            raise QuarantineError("node %s: the ledger holds no open entry for it any more (another run released or cancelled it); "
                                  "nothing more was changed" % self.node)

    def patch_node(self, node, spec=None, annotations=None, labels=None):
        """One patch of ``node`` at the resourceVersion read: a concurrent writer of what the patch was built from makes it fail
        with 409, never mixes. Where the Node changed only elsewhere (kubelet's status updates and heartbeats bump its
        resourceVersion every few seconds), the same patch is sent again at the fresh resourceVersion, up to CONFLICT_TRIES
        times: one kubelet update in between failed a quarantine in one of four tries on the real kubelet node."""
        for attempt in range(1, CONFLICT_TRIES + 1):
            body = {"metadata": {"resourceVersion": marks.meta(node).get("resourceVersion")}}
            for part, value in (("annotations", annotations), ("labels", labels)):
                if value:
                    body["metadata"][part] = value
            if spec:
                body["spec"] = spec
            try:
                return self.api.patch_node(marks.meta(node)["name"], body)
            except self.api_exception as exc:
                if getattr(exc, "status", None) != 409 or attempt == CONFLICT_TRIES:
                    raise
                fresh = self.read_node()
                if _basis(fresh, spec, annotations, labels) != _basis(node, spec, annotations, labels):
                    raise  # what the patch was built from changed: a concurrent writer's, never overwritten
                node = fresh
        raise AssertionError("unreachable")  # pragma: no cover

    def set_condition(self, node, status, reason, message):
        """The Node's GPUHealthy condition (``marks.set_condition``): None, or why it could not be written."""
        return marks.set_condition(self.api, node, (status, reason, message), self.now, self.api_exception)

    def close_entry(self, outcome):
        """The node's open ledger entry closed with ``outcome``: its seconds from quarantine to release, but for an operator's
        cancel (no release)."""

        def close(ledger):
            found = marks.open_entry(ledger, self.node)
            if found is None:
                return None
            found.update(closed_at=self.now, result=outcome,
                         recover_seconds=None if outcome == states.CANCELLED_BY_OPERATOR else self.now - int(found["at"]))
            return ledger

        self.ledger_update(close)


def unclaim(s):
    """``state: unclaimed``: the run's claim on the node's open entry given up (claims.let_go), in one write where it held one;
    another run's live claim, or none, is left as it is. Nothing else changes."""
    run = s.p.get("claim")
    result = {"node": s.node, "changed": False, "claim": None}
    if not run or s.check_mode:
        return dict(result, msg="no claim of this run to give up")

    def change(ledger):
        entry = marks.open_entry(ledger, s.node)
        held = (entry or {}).get("claim")
        return ledger if isinstance(held, dict) and held.get("run") == run else None

    try:
        s.ledger_update(change, let_go=True)
    except claims.Claimed as exc:  # another run took it once ours ran out: its to keep
        return dict(result, claim=exc.claim, msg=str(exc))
    result["changed"] = bool(s.wrote)
    return dict(result, msg="this run's claim on node %s given up" % s.node if s.wrote else "no claim of this run on node %s" % s.node)
