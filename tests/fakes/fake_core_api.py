# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CoreV1Api calls of gpu_quarantine's operations (the quarantine, the pause, the release) and of the ledger, in memory:
one Node ``a``, the ledger's ConfigMap, no pods. The unit tests of _cluster/remediation share it; the real API server's
behaviour is tests/kube's."""

from __future__ import annotations

import copy
import json

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import quarantine as q

G = ["GPU-%08x-2222-3333-4444-555555555555" % i for i in range(8)]
NOW = 1800000000
WHERE = "ConfigMap ns/gpuops-remediation-ledger"
# node b's open entry, well formed
GOOD = {"node": "b", "gpus": [G[1]], "action": "reset", "keys": ["xid:48"], "driver_version": "535", "at": NOW - 50, "closed_at": None,
        "result": None, "run": None}


def configmap(ledger):
    return {"metadata": {"resourceVersion": "1"}, "data": {ledgers.KEY: json.dumps(ledger)}}


class ApiError(Exception):
    def __init__(self, status, reason=""):
        super().__init__("%s %s" % (status, reason))
        self.status, self.reason = status, reason


class FakeApi:
    """The CoreV1Api calls of the quarantine and the ledger, in memory; ``refuse`` makes the ledger's writes answer it."""

    def __init__(self, ledger=None, refuse=None, conflicts=0):
        self.cm = configmap(ledger) if ledger is not None else None
        self.node = {"metadata": {"name": "a", "resourceVersion": "1", "annotations": {}, "labels": {}}, "spec": {},
                     "status": {"nodeInfo": {"bootID": "boot-1"}}}
        self.refuse, self.conflicts, self.calls = refuse, conflicts, []
        self.api_client = self

    def sanitize_for_serialization(self, obj):
        return copy.deepcopy(obj)

    def read_namespaced_config_map(self, name, namespace):
        if self.cm is None:
            raise ApiError(404)
        return self.cm

    def _write(self, body):
        self.calls.append("write ledger")
        if self.conflicts:
            self.conflicts -= 1
            raise ApiError(409, "Conflict")
        if self.refuse:
            raise ApiError(*self.refuse)
        self.cm = dict(body, metadata=dict(body["metadata"], resourceVersion="2"))
        return self.cm

    def create_namespaced_config_map(self, namespace, body):
        return self._write(body)

    def replace_namespaced_config_map(self, name, namespace, body):
        return self._write(body)

    def read_node(self, name):
        return self.node

    def patch_node(self, name, body):
        self.calls.append("patch node")
        meta = self.node["metadata"]
        for part in ("annotations", "labels"):
            for key, value in (body.get("metadata", {}).get(part) or {}).items():
                if value is None:
                    meta[part].pop(key, None)
                else:
                    meta[part][key] = value
        self.node["spec"].update(body.get("spec") or {})
        return self.node

    def patch_node_status(self, name, body):
        """A strategic merge of ``status.conditions`` by type, as the API server does."""
        self.calls.append("patch node status")
        conditions = [c for c in self.node["status"].get("conditions") or [] if c["type"] not in [n["type"] for n in body["status"]["conditions"]]]
        self.node["status"]["conditions"] = conditions + body["status"]["conditions"]
        return self.node

    def list_pod_for_all_namespaces(self, **kwargs):
        return type("Pods", (), {"items": []})()


def params(**kw):
    base = {"state": "quarantined", "plan": None, "node": "a", "gpus": [G[0]], "action": "reset", "scope": None, "evictions": [],
            "blockers": [], "keys": ["xid:48"], "driver_version": "535", "run": None, "result": "recovered", "namespace": "ns",
            "drain_timeout": 300, "drain_force": False, "drain_delete_emptydir_data": False}
    base.update(kw)
    return q.check_params(base)
