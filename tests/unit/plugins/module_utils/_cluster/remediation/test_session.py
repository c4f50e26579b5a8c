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
