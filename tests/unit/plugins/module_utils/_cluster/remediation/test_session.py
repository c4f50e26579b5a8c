# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One operation's session (_cluster/remediation/session.py): the reads and writes every operation makes, on the fake API."""

from __future__ import annotations

import pytest

from fake_core_api import GOOD, NOW, WHERE, ApiError, FakeApi, params

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import states
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.session import QuarantineError, Session


def test_the_time_is_the_sessions_once_and_a_node_is_read_with_its_record():
    api = FakeApi(dict(ledgers.empty(), entries=[dict(GOOD, node="a", step=states.DRAINED, cordoned_by_us=True)]))
    s = Session(api, params(), False, ApiError, now=NOW + 0.9)
    assert s.now == NOW and s.node == "a" and s.check_mode is False
    node, entry, record = s.read()
    assert node["metadata"]["name"] == "a" and entry["node"] == "a" and record["step"] == states.DRAINED and record["cordoned_by_us"]
    assert Session(api, params(), False, ApiError).now > NOW - 10 ** 9  # no now given: the wall clock's


def test_a_patch_of_the_node_carries_the_resource_version_read():
    api = FakeApi(ledgers.empty())
    sent = []
    api.patch_node = lambda name, body: sent.append((name, body))
    Session(api, params(), False, ApiError).patch_node(api.node, {"unschedulable": True}, {"x": "1"}, labels=None)
    assert sent == [("a", {"metadata": {"resourceVersion": "1", "annotations": {"x": "1"}}, "spec": {"unschedulable": True}})]


class _Kubelet:
    """The API server's side of a Node patch at a resourceVersion, with a kubelet that writes between the read and the patch:
    its status (``status``: a heartbeat) or a field the patch writes (``spec``: another writer's cordon)."""

    def __init__(self, api, writes):
        self.api, self.writes, self.sent = api, list(writes), []

    def patch(self, name, body):
        self.sent.append(body["metadata"]["resourceVersion"])
        if self.writes:
            kind = self.writes.pop(0)
            meta = self.api.node["metadata"]
            meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
            if kind == "spec":
                self.api.node["spec"]["unschedulable"] = False
            else:
                self.api.node["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": str(len(self.sent))}]
        if body["metadata"]["resourceVersion"] != self.api.node["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict")
        self.api.node["spec"].update(body.get("spec") or {})
        return self.api.node


def test_a_kubelet_update_between_the_read_and_the_patch_is_retried_a_concurrent_writer_of_the_same_field_is_not():
    """Issue 59, item 3: the quarantine's patch at the resourceVersion read failed with 409 where one kubelet status update
    came in between (one in four tries on the real kubelet node), stopping the run. The same patch is sent again at the fresh
    resourceVersion where only the Node's status moved; where a field the patch writes moved, the 409 stands."""
    api = FakeApi(ledgers.empty())
    api.node["spec"]["unschedulable"] = None
    kubelet = _Kubelet(api, ["status", "status"])
    api.patch_node = kubelet.patch
    s = Session(api, params(), False, ApiError)
    s.patch_node(s.read_node(), {"unschedulable": True})
    assert kubelet.sent == ["1", "2", "3"] and api.node["spec"]["unschedulable"] is True
    other = FakeApi(ledgers.empty())
    other.node["spec"]["unschedulable"] = True
    writer = _Kubelet(other, ["spec"])
    other.patch_node = writer.patch
    s = Session(other, params(), False, ApiError)
    with pytest.raises(ApiError) as err:
        s.patch_node(s.read_node(), {"unschedulable": True})
    assert err.value.status == 409 and writer.sent == ["1"] and other.node["spec"]["unschedulable"] is False  # never overwritten
    busy = FakeApi(ledgers.empty())
    restless = _Kubelet(busy, ["status"] * 10)
    busy.patch_node = restless.patch
    s = Session(busy, params(), False, ApiError)
    with pytest.raises(ApiError):
        s.patch_node(s.read_node(), {"unschedulable": True})
    assert len(restless.sent) == 5  # CONFLICT_TRIES, then the 409


def test_the_ledger_set_refuses_a_node_whose_entry_another_run_closed():
    api = FakeApi(ledgers.empty())
    with pytest.raises(QuarantineError, match="holds no open entry for it any more"):
        Session(api, params(), False, ApiError).ledger_set({"step": states.DRAINED})
    assert api.calls == []


def test_a_cancel_closes_the_entry_without_recover_seconds_and_a_release_with_them():
    for outcome, seconds in ((states.CANCELLED_BY_OPERATOR, None), ("recovered", 40)):
        api = FakeApi(dict(ledgers.empty(), entries=[dict(GOOD, node="a", at=NOW - 40)]))
        Session(api, params(), False, ApiError, now=NOW).close_entry(outcome)
        (entry,) = ledgers.parse(api.cm, WHERE)["entries"]
        assert (entry["result"], entry["closed_at"], entry["recover_seconds"]) == (outcome, NOW, seconds)
