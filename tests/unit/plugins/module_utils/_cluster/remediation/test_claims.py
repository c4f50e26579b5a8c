# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several remediations at once, safely (_cluster/remediation/claims.py, through the quarantine's session on the fake API):
a run's claim on a node refuses another run before it writes anything; the fleet's cap and the same-signal breaker hold
when two runs planned from the same ledger each open a node. Issue 59, item 3."""

from __future__ import annotations

import pytest

from fake_core_api import GOOD, NOW, ApiError, FakeApi, G, configmap, params

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import claims, quarantine as q
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import states
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.session import Session

GUARD = {"cap": 10, "in_flight": [], "threshold": 5, "window": 3600}


def writes(api):
    return [c for c in api.calls if c in ("write ledger", "patch node", "patch node status")]


def test_a_claim_refuses_another_run_until_it_ends_and_a_run_that_stops_lets_go():
    api = FakeApi(dict(ledgers.empty(), entries=[dict(GOOD, node="a", step=states.DRAINED)]))
    Session(api, params(claim="run-a"), False, ApiError, now=NOW).claim()
    entry = ledgers.parse(api.cm, "x")["entries"][0]
    assert entry["claim"] == {"run": "run-a", "until": NOW + claims.CLAIM_SECONDS}
    with pytest.raises(claims.Claimed) as err:
        Session(api, params(claim="run-b"), False, ApiError, now=NOW + 10).claim()
    assert err.value.claim["run"] == "run-a" and "run-a" in str(err.value)
    Session(api, params(claim="run-a"), False, ApiError, now=NOW + 20).claim()  # its own: taken again, longer
    assert ledgers.parse(api.cm, "x")["entries"][0]["claim"]["until"] == NOW + 20 + claims.CLAIM_SECONDS
    # a run that dies: its claim ends by itself
    Session(api, params(claim="run-b"), False, ApiError, now=NOW + 20 + claims.CLAIM_SECONDS + 1).claim()
    # a run that stops for the node gives it up in the same write
    Session(api, params(claim="run-b"), False, ApiError, now=NOW + 5000).ledger_set({"step": states.AWAITING_PODS}, let_go=True)
    assert ledgers.parse(api.cm, "x")["entries"][0]["claim"] is None
    Session(api, params(claim="run-c"), False, ApiError, now=NOW + 5001).claim()


def test_without_a_claim_nothing_is_claimed_as_before():
    api = FakeApi(dict(ledgers.empty(), entries=[dict(GOOD, node="a", step=states.DRAINED, claim={"run": "x", "until": NOW + 99})]))
    Session(api, params(), False, ApiError, now=NOW).claim()
    assert writes(api) == []


class Raced(FakeApi):
    """The ledger as a run started beside this one changes it between this run's read and its write: its first read is
    the ledger before, every later read the other run's."""

    def __init__(self, before, after):
        super().__init__(before)
        self.after, self.reads = configmap(after), 0

    def read_namespaced_config_map(self, name, namespace):
        self.reads += 1
        if self.reads > 1:
            self.cm, self.after = (self.after or self.cm), None
        return super().read_namespaced_config_map(name, namespace)


def test_two_runs_opening_one_node_together_the_second_is_refused_before_it_writes():
    other = dict(GOOD, node="a", gpus=[G[0]], step=states.MARKING, at=NOW, claim={"run": "run-x", "until": NOW + 3600})
    api = Raced(ledgers.empty(), dict(ledgers.empty(), entries=[other]))
    done = q.quarantine(Session(api, params(claim="run-b", guard=GUARD), False, ApiError, now=NOW))
    assert done["stops"] and not done["changed"] and done["claimed_by"]["run"] == "run-x" and writes(api) == []
    assert "another run (run-x) acts on it" in done["msg"]


def test_the_fleets_last_place_taken_by_a_run_started_beside_this_one_defers_the_node():
    """Both runs planned from the same ledger (cap 1, nothing in flight): the other run opened its node first."""
    theirs = dict(GOOD, node="b", at=NOW - 5)
    api = Raced(ledgers.empty(), dict(ledgers.empty(), entries=[theirs]))
    done = q.quarantine(Session(api, params(claim="run-a", guard=dict(GUARD, cap=1)), False, ApiError, now=NOW))
    assert done["stops"] and done["deferred"] == "deferred_capacity" and writes(api) == [] and not api.node["spec"].get("unschedulable")
    # the same open, planned with that node counted (it was in flight already) and a cap of 2: one place left, taken
    api = FakeApi(dict(ledgers.empty(), entries=[dict(theirs, at=NOW - 7200)]))
    done = q.quarantine(Session(api, params(claim="run-a", guard=dict(GUARD, cap=2, in_flight=["b"])), False, ApiError, now=NOW))
    assert done["step"] == states.DRAINED and not done.get("deferred") and ledgers.parse(api.cm, "x")["entries"][-1]["claim"]["run"] == "run-a"


def test_the_same_signal_seen_half_by_each_of_two_runs_trips_the_breaker_and_touches_no_more_nodes():
    theirs = dict(GOOD, node="b", at=NOW - 5)  # xid:48 on driver 535, opened by the run beside this one
    api = Raced(ledgers.empty(), dict(ledgers.empty(), entries=[theirs]))
    done = q.quarantine(Session(api, params(claim="run-a", keys=["xid:48"], guard=dict(GUARD, threshold=2)), False, ApiError, now=NOW))
    assert done["stops"] and done["deferred"] == "fleet_event" and not api.node["spec"].get("unschedulable")
    written = ledgers.parse(api.cm, "x")
    assert written["breaker"]["state"] == "tripped" and "xid:48" in written["breaker"]["reason"] and [e["node"] for e in written["entries"]] == ["b"]
    assert writes(api) == ["write ledger"]  # the breaker only: the node is as it was


@pytest.mark.parametrize("guard", [{"cap": "2"}, {"cap": True}, {"in_flight": "b"}, "cap"])
def test_a_malformed_guard_is_refused_naming_it(guard):
    with pytest.raises(Exception) as err:
        params(guard=guard)
    assert "plan.guard" in str(err.value)


def test_a_run_done_with_a_node_gives_its_claim_up_and_leaves_another_runs():
    """The role's always: whatever happened to the node (quarantine mode's end, a failed reset), the run gives its claim up,
    so a rerun may act at once (a failed run's claim held the node for an hour)."""
    from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import session

    api = FakeApi(dict(ledgers.empty(), entries=[dict(GOOD, node="a", step=states.DRAINED, claim={"run": "run-a", "until": NOW + 3600})]))
    mine = session.unclaim(Session(api, params(state="unclaimed", claim="run-a"), False, ApiError, now=NOW))
    assert mine["changed"] and ledgers.parse(api.cm, "x")["entries"][0]["claim"] is None
    assert not session.unclaim(Session(api, params(state="unclaimed", claim="run-a"), False, ApiError, now=NOW))["changed"]  # again: nothing
    Session(api, params(claim="run-b"), False, ApiError, now=NOW).claim()
    calls = len(api.calls)
    theirs = session.unclaim(Session(api, params(state="unclaimed", claim="run-a"), False, ApiError, now=NOW))
    assert not theirs["changed"] and ledgers.parse(api.cm, "x")["entries"][0]["claim"]["run"] == "run-b" and "write ledger" not in api.calls[calls:]
    assert not session.unclaim(Session(api, params(state="unclaimed", claim="run-b"), True, ApiError, now=NOW))["changed"]  # check mode


def test_a_node_another_run_holds_is_left_even_where_this_run_would_write_nothing():
    """A drained node another run is resetting: this run's quarantine has nothing to write, so no write would meet the claim;
    it leaves the node all the same (before, it went on to the pause and failed there)."""
    api = FakeApi(dict(ledgers.empty(), entries=[dict(GOOD, node="a", gpus=[G[0]], step=states.DRAINED, cordoned_by_us=True, scope="gpu",
                                                      claim={"run": "run-x", "until": NOW + 3600})]))
    done = q.quarantine(Session(api, params(claim="run-b", guard=GUARD), False, ApiError, now=NOW))
    assert done["stops"] and done["claimed_by"]["run"] == "run-x" and writes(api) == []
