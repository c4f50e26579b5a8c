# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation ledger under bad data and at its size (issue 48, items 6 and 7).

A tampered ledger: the top level and the breaker are read strictly (LedgerError naming the ConfigMap, never a raw
exception), one entry of another shape is reported and counts for nothing, and never stops another node's quarantine or
release. The size: trimmed by bytes (oldest closed first), never an open entry, what a node puts in bounded, and the
ledger written before the node is touched (a ledger that cannot be written leaves the node as it was). The real API
server's 1 MiB: tests/kube/test_gpu_quarantine.py."""

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import quarantine as q
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import marks, pause, release
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.session import Session
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import plan as rp

G = ["GPU-%08x-2222-3333-4444-555555555555" % i for i in range(8)]
NOW = 1800000000
WHERE = "ConfigMap ns/gpuops-remediation-ledger"


def closed(i, node="old", gpus=G):
    return {"node": "%s-%d" % (node, i), "gpus": list(gpus), "action": "reset", "keys": ["recovery:1"], "driver_version": "535.104.05",
            "at": NOW - 100000 + i, "closed_at": NOW - 99000 + i, "result": "recovered", "run": "job-%d" % i, "recover_seconds": 1000}


def configmap(ledger):
    return {"metadata": {"resourceVersion": "1"}, "data": {ledgers.KEY: json.dumps(ledger)}}


GOOD = {"node": "b", "gpus": [G[1]], "action": "reset", "keys": ["xid:48"], "driver_version": "535", "at": NOW - 50, "closed_at": None,
        "result": None, "run": None}
# an entry's field of another shape: the entry is reported, never raised, never stops node b's
ENTRY_SHAPES = [
    ("node", None), ("node", 7), ("node", ["a"]), ("node", ""), ("node", "n" * 300),
    ("gpus", "GPU-1"), ("gpus", [1]), ("gpus", {"a": 1}), ("gpus", ["g"] * 65),
    ("action", 5), ("action", ["reset"]),
    ("keys", "xid:48"), ("keys", [None]), ("keys", [{"k": 1}]),
    ("driver_version", 535), ("driver_version", ["535"]), ("driver_version", "d" * 300),
    ("at", float("nan")), ("at", float("inf")), ("at", "1800000000"), ("at", None), ("at", True), ("at", 10 ** 30), ("at", [1]),
    ("closed_at", float("nan")), ("closed_at", "yes"), ("closed_at", {}),
    ("result", 1), ("run", 1), ("recover_seconds", float("-inf")), ("escalated_from", 3),
]


@pytest.mark.parametrize("field,value", ENTRY_SHAPES, ids=["%s=%r" % (f, v)[:40] for f, v in ENTRY_SHAPES])
def test_an_entry_of_another_shape_is_reported_and_never_stops_another_nodes_plan_quarantine_or_release(field, value):
    bad = dict(GOOD, node="a")
    if value is None and field != "node" and field != "at":
        bad.pop(field)
    else:
        bad[field] = value
    ledger = ledgers.parse(configmap(dict(ledgers.empty(), entries=[bad, GOOD])), WHERE)
    assert ledger["entries"] == [GOOD] and [i["index"] for i in ledger["invalid"]] == [0], ledger["invalid"]
    assert ledger["invalid"][0]["problem"].startswith(field) or ledger["invalid"][0]["problem"].startswith("node"), ledger["invalid"]
    # the plan's breakers and repeat rule read it; b's open entry counts; a's does not
    assert rp._in_flight({}, ledger, NOW) == ({"b"}, set())
    # b's release finds and closes its entry; a's finds none (the bad entry stays as it was, reported)
    assert marks.open_entry(ledger, "b") == GOOD and marks.open_entry(ledger, "a") is None
    again = ledgers.parse({"data": ledgers.dump(ledger)}, WHERE)  # written back: the bad entry kept as it was
    assert again["entries"] == [GOOD] and len(again["invalid"]) == 1


@pytest.mark.parametrize("text", [
    "[]", '{"version": 2}', '{"version": 1}', '{"version": 1, "breaker": []}', '{"version": 1, "breaker": {"state": "open"}}',
    '{"version": 1, "breaker": {"state": "tripped", "at": NaN}}', '{"version": 1, "breaker": {"state": "tripped", "keys": "xid:48"}}',
    '{"version": 1, "breaker": {"state": "closed", "reset_at": "now"}}', '{"version": 1, "breaker": {"state": "closed", "reason": 1}}',
    '{"version": 1, "breaker": {"state": "closed"}, "entries": {}}', '{"version": 1, "breaker": {"state": "closed"}, "paused": "no"}',
    "{" * 100000, "not json",
])
def test_a_ledger_whose_top_level_or_breaker_cannot_be_read_is_a_ledger_error_naming_the_configmap(text):
    with pytest.raises(ledgers.LedgerError) as failed:
        ledgers.parse({"data": {ledgers.KEY: text}}, WHERE)
    assert str(failed.value).startswith(WHERE)


def test_the_ledger_is_trimmed_by_size_oldest_closed_first_and_an_open_entry_is_never_dropped():
    """1,830 closed 8-GPU entries are about the ConfigMap's 1 MiB: with the new open entry the ledger is written under
    MAX_BYTES, the oldest closed entries gone, the open ones (old and new) kept."""
    entries = [closed(i) for i in range(1830)]
    entries.insert(5, dict(closed(5, node="open"), closed_at=None, result=None))  # an old entry still open
    ledger = dict(ledgers.empty(), entries=entries + [dict(GOOD)])
    full = len(json.dumps(dict(ledger, entries=entries), separators=(",", ":")))
    assert full > 1024 * 1024 - 100000, full
    data = ledgers.dump(ledger, WHERE)
    back = ledgers.parse({"data": data}, WHERE)
    assert len(data[ledgers.KEY]) <= ledgers.MAX_BYTES
    nodes = [e["node"] for e in back["entries"]]
    assert "open-5" in nodes and nodes[-1] == "b" and "old-1829" in nodes and "old-0" not in nodes
    assert nodes == sorted(nodes, key=lambda n: [e["at"] for e in entries + [GOOD] if e["node"] == n][0])


def test_open_entries_alone_that_do_not_fit_are_an_error_naming_the_configmap_and_its_size():
    entries = [dict(closed(i, node="open"), closed_at=None) for i in range(2000)]
    with pytest.raises(ledgers.LedgerError) as failed:
        ledgers.dump(dict(ledgers.empty(), entries=entries), "ns/gpuops-remediation-ledger")
    assert "ConfigMap ns/gpuops-remediation-ledger: the ledger would hold" in str(failed.value) and "2000 open entries" in str(failed.value)


def test_what_a_node_puts_in_an_entry_is_bounded():
    entry = ledgers.bounded_entry({"node": "a", "driver_version": "5" * 10000, "keys": ["k%d" % i + "x" * 1000 for i in range(1000)],
                                   "gpus": G * 20, "run": "r" * 1000, "at": NOW})
    assert len(entry["driver_version"]) == ledgers.MAX_DRIVER and len(entry["keys"]) == ledgers.MAX_KEYS
    assert all(len(k) == ledgers.MAX_TEXT for k in entry["keys"]) and len(entry["gpus"]) == ledgers.MAX_GPUS and len(entry["run"]) == 128
    assert len(json.dumps(entry)) < 16 * 1024


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


def test_a_ledger_the_api_refuses_leaves_the_node_unchanged_on_quarantine_and_on_release():
    """Before: the node was cordoned and tainted, then the ledger's write failed with a bare 422; a release removed the
    node's marks, then failed, leaving its entry open for ever. Now the ledger comes first."""
    api = FakeApi(ledgers.empty(), refuse=(422, "Unprocessable Entity"))
    with pytest.raises(ledgers.LedgerError) as failed:
        q.quarantine(Session(api, api, params(), False, ApiError, now=NOW))
    assert "ConfigMap ns/gpuops-remediation-ledger: the API server refused the ledger (422 Unprocessable Entity) of" in str(failed.value)
    assert api.calls == ["write ledger"] and api.node["spec"] == {} and api.node["metadata"]["annotations"] == {}

    api.refuse = None
    done = q.quarantine(Session(api, api, params(), False, ApiError, now=NOW))
    assert done["step"] == "drained" and api.node["spec"]["unschedulable"] and api.calls[1:3] == ["write ledger", "patch node"]
    api.refuse, api.calls = (422, "Unprocessable Entity"), []
    with pytest.raises(ledgers.LedgerError):
        release.release(Session(api, api, params(state="released"), False, ApiError, now=NOW + 60))
    assert api.calls == ["write ledger"] and api.node["spec"]["unschedulable"], "the node stays quarantined, as the ledger says"
    api.refuse = None
    released = release.release(Session(api, api, params(state="released"), False, ApiError, now=NOW + 60))
    entry = ledgers.parse(api.cm, WHERE)["entries"][-1]
    assert released["changed"] and (entry["closed_at"], entry["recover_seconds"]) == (NOW + 60, 60) and not api.node["spec"]["unschedulable"]


def test_a_node_patch_that_fails_takes_the_runs_ledger_entry_back():
    api = FakeApi(ledgers.empty())

    def refused(name, body):
        api.calls.append("patch node")
        raise ApiError(409, "Conflict")

    api.patch_node = refused
    with pytest.raises(q.QuarantineError) as failed:
        q.quarantine(Session(api, api, params(), False, ApiError, now=NOW))
    assert "node a could not be marked (409 Conflict): the node was not changed; its ledger entry was taken back" in str(failed.value)
    assert ledgers.parse(api.cm, WHERE)["entries"] == []


def test_another_runs_write_in_between_is_read_and_applied_again():
    api = FakeApi(dict(ledgers.empty(), entries=[dict(GOOD)]), conflicts=2)
    q.quarantine(Session(api, api, params(), False, ApiError, now=NOW))
    assert api.calls[:4] == ["write ledger", "write ledger", "write ledger", "patch node"]
    assert [e["node"] for e in ledgers.parse(api.cm, WHERE)["entries"]] == ["b", "a"]
    api = FakeApi(ledgers.empty(), conflicts=5)
    with pytest.raises(ledgers.LedgerError, match="another run wrote the ledger at each of 3 attempts"):
        q.quarantine(Session(api, api, params(), False, ApiError, now=NOW))
    assert "patch node" not in api.calls


def test_a_release_of_a_node_whose_entry_has_a_nan_time_releases_it():
    """The review's case: an entry with at NaN made every release of that node crash. Its entry is unreadable, so it is not
    the node's open entry: the release removes the node's marks and says so."""
    api = FakeApi(dict(ledgers.empty(), entries=[dict(GOOD, node="a", at=float("nan")), dict(GOOD)]))
    q.quarantine(Session(api, api, params(), False, ApiError, now=NOW))
    released = release.release(Session(api, api, params(state="released"), False, ApiError, now=NOW + 5))
    assert released["changed"] and released["recover_seconds"] == 5 and not api.node["spec"]["unschedulable"]
    back = ledgers.parse(api.cm, WHERE)
    assert [(e["node"], e["closed_at"]) for e in back["entries"]] == [("b", None), ("a", NOW + 5)] and len(back["invalid"]) == 1


def _condition(api):
    found = [c for c in api.node["status"].get("conditions") or [] if c["type"] == marks.CONDITION]
    return (found[0]["status"], found[0]["reason"]) if found else None


def test_the_node_condition_says_why_and_a_refused_condition_never_stops_the_quarantine_or_the_release():
    api = FakeApi(ledgers.empty())
    api.node["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
    done = q.quarantine(Session(api, api, params(), False, ApiError, now=NOW))
    assert done["condition_error"] is None and _condition(api) == ("False", "Xid48")
    assert [c["type"] for c in api.node["status"]["conditions"]] == ["Ready", marks.CONDITION]  # kubelet's own stays
    again = q.quarantine(Session(api, api, params(), False, ApiError, now=NOW + 5))
    assert not again["changed"] and "patch node status" not in api.calls[api.calls.index("patch node status") + 1:]

    refusing = FakeApi(ledgers.empty())

    def forbidden(name, body):
        refusing.calls.append("patch node status")
        raise ApiError(403, "Forbidden")

    refusing.patch_node_status = forbidden
    done = q.quarantine(Session(refusing, refusing, params(), False, ApiError, now=NOW))
    assert done["step"] == "drained" and refusing.node["spec"]["unschedulable"], "the quarantine went on"
    assert "could not be written (403 Forbidden): grant patch on nodes/status" in done["condition_error"]
    released = release.release(Session(refusing, refusing, params(state="released"), False, ApiError, now=NOW + 60))
    assert released["changed"] and not refusing.node["spec"]["unschedulable"] and "403" in released["condition_error"]


def test_an_uncordon_alone_cancels_nothing_it_is_reported_and_the_quarantine_holds():
    """Issue 57, item 1 (critical): a faulty node's kubelet may uncordon its own Node. The next run took that for an operator's
    cancel: the controller removed our taint (which the node itself may not), closed the entry cancelled_by_operator, and the
    plan then left the faulty node alone. Now an uncordon is reported (who may have done it, how to cancel) and nothing of
    ours comes off."""
    api = FakeApi(ledgers.empty())
    q.quarantine(Session(api, api, params(), False, ApiError, now=NOW))
    api.node["spec"]["unschedulable"] = False  # the node's kubelet (or anyone) uncordons it
    api.calls = []
    again = q.quarantine(Session(api, api, params(), False, ApiError, now=NOW + 30))
    assert again["step"] == "drained" and not again["changed"] and "cancelled_by_operator" not in again, again
    assert "uncordoned while quarantined" in again["uncordoned_while_quarantined"] and "kubectl taint node a %s-" % q.TAINT_KEY in again["msg"]
    assert api.calls == [], api.calls  # nothing written: the taint, the annotation and the open entry stay
    assert [t["key"] for t in api.node["spec"]["taints"]] == [q.TAINT_KEY]
    entry = ledgers.parse(api.cm, WHERE)["entries"][-1]
    assert entry["closed_at"] is None and entry["step"] == "drained" and entry["cordoned_by_us"] is True
    # the release lifts nothing it did not put on: the node is schedulable already
    released = release.release(Session(api, api, params(state="released"), False, ApiError, now=NOW + 60))
    assert released["untainted"] and not released["uncordoned"] and not api.node["spec"]["taints"]


def test_an_operator_who_takes_off_our_taint_cancels_and_gets_the_node_back_our_cordon_lifted():
    """The operator's cancel is a signal no kubelet can forge: our taint removed (NodeRestriction refuses a kubelet's change of
    its taints). The entry closes cancelled_by_operator; our cordon (the ledger says it is ours) comes off with its mark."""
    api = FakeApi(ledgers.empty())
    q.quarantine(Session(api, api, params(), False, ApiError, now=NOW))
    api.node["spec"]["taints"].append({"key": "example.com/theirs", "effect": "NoSchedule"})
    api.node["spec"]["taints"] = [t for t in api.node["spec"]["taints"] if t["key"] != q.TAINT_KEY]  # kubectl taint ... -
    preview = q.quarantine(Session(api, api, params(), True, ApiError, now=NOW + 30))
    assert preview["changed"] and preview["step"] == q.CANCELLED_BY_OPERATOR and q.REMEDIATION in api.node["metadata"]["annotations"]
    done = q.quarantine(Session(api, api, params(), False, ApiError, now=NOW + 30))
    assert done["step"] == q.CANCELLED_BY_OPERATOR and done["cancelled_by_operator"] == "removed the taint %s" % q.TAINT_KEY
    assert done["evicted"] == [] and not api.node["spec"]["unschedulable"] and q.CORDON_MARK not in api.node["metadata"]["annotations"]
    assert api.node["spec"]["taints"] == [{"key": "example.com/theirs", "effect": "NoSchedule"}]
    entry = ledgers.parse(api.cm, WHERE)["entries"][-1]
    assert (entry["result"], entry["closed_at"], entry["keys"]) == ("cancelled_by_operator", NOW + 30, ["xid:48"])
    assert q.REMEDIATION not in api.node["metadata"]["annotations"] and _condition(api) == ("Unknown", "CancelledByOperator")


FORGED = {"gpus": [G[0]], "action": "reset", "scope": "gpu", "step": "drained", "started": NOW - 99, "cordoned_by_us": True,
          "paused_labels": {"node-restriction.kubernetes.io/pool": "secure", "gpuops.fleet/gpu-maintenance": None}}


def test_a_forged_annotation_neither_skips_the_quarantine_nor_makes_the_controller_write_a_label():
    """Issue 57, item 2 (critical): a faulty node, not yet quarantined, writes our annotation on itself (cordoned_by_us, a
    pause's labels naming node-restriction.kubernetes.io/pool): the run cancelled instead of quarantining, and the controller
    wrote that label (a confused deputy). The ledger holds no open entry for it: it is quarantined as any node, the forged
    annotation overwritten, and no label is ever written but the pause's own keys."""
    api = FakeApi(ledgers.empty())
    api.node["spec"]["unschedulable"] = True  # it cordoned itself too, as it may
    api.node["metadata"]["annotations"][q.REMEDIATION] = json.dumps(FORGED)
    api.node["metadata"]["annotations"][q.CORDON_MARK] = "gpu-remediation"
    done = q.quarantine(Session(api, api, params(), False, ApiError, now=NOW))
    assert done["step"] == "drained" and "cancelled_by_operator" not in done and done["foreign_cordon"] and not done["cordoned"], done
    assert [t["key"] for t in api.node["spec"]["taints"]] == [q.TAINT_KEY]
    entry = ledgers.parse(api.cm, WHERE)["entries"][-1]
    assert (entry["node"], entry["closed_at"], entry["step"], entry["cordoned_by_us"]) == ("a", None, "drained", False)
    mirror = json.loads(api.node["metadata"]["annotations"][q.REMEDIATION])
    assert "paused_labels" not in mirror and mirror["cordoned_by_us"] is False and mirror["started"] == NOW
    paused = pause.pause(Session(api, api, dict(params(state="paused"), pause_labels={pause.MAINTENANCE_LABEL: "true"}, pause_pods=[], pause_timeout=5),
                     False, ApiError))
    assert paused["previous_labels"] == {pause.MAINTENANCE_LABEL: None}
    api.node["metadata"]["annotations"][q.REMEDIATION] = json.dumps(FORGED)  # forged again, mid-remediation
    pause.unpause(Session(api, api, dict(params(state="unpaused")), False, ApiError))
    released = release.release(Session(api, api, params(state="released"), False, ApiError, now=NOW + 60))
    assert released["restored_labels"] == {} and not released["uncordoned"] and api.node["spec"]["unschedulable"], released
    assert "node-restriction.kubernetes.io/pool" not in api.node["metadata"]["labels"] and pause.MAINTENANCE_LABEL not in api.node["metadata"]["labels"]
    assert api.node["spec"]["taints"] == []


def test_a_garbage_annotation_never_blocks_the_nodes_own_quarantine():
    """Before, an annotation the quarantine could not read was an error ("remove it by hand"): a node could write garbage on
    itself and never be quarantined. The annotation is no input any more."""
    for text in ("reset please", "[" * 20000 + "]" * 20000, json.dumps({"gpus": "x", "step": 5}), '"\ud800"'):
        api = FakeApi(ledgers.empty())
        api.node["metadata"]["annotations"][q.REMEDIATION] = text
        assert q.quarantine(Session(api, api, params(), False, ApiError, now=NOW))["step"] == "drained"
        assert json.loads(api.node["metadata"]["annotations"][q.REMEDIATION])["step"] == "drained"
