# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""events/leader.py: two activations elect one leader on a Lease (the in-memory API of test_leases, with its 409s), a
standby takes over only after it has seen the record unchanged for lease_seconds of its own clock, a leader that cannot
renew stops, one that stops gives the Lease up; the window's runs handed over, so the new leader runs no window again."""

from __future__ import annotations

import sys
import os

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import leases
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import leader, options
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events.window import FaultWindow
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from test_leases import ApiError, FakeCoordination  # noqa: E402  pylint: disable=wrong-import-position


class Down:
    """The API server away: every call raises."""

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise ConnectionError("connection refused")
        return fail


def pair():
    api, clock, wall = FakeCoordination(), [100.0], [1765000000.0]

    def elector(identity):
        return leader.Elector(leases.Leases(api, "gpuops-system", ApiError), "gpuops-events-leader", identity, 10, 2,
                              clocks=(lambda: clock[0], lambda: wall[0]))

    def tick(seconds):
        clock[0] += seconds
        wall[0] += seconds
    return api, elector("a"), elector("b"), tick


def test_one_leads_the_standby_takes_over_only_after_the_record_stood_still_for_the_lease():
    api, a, b, tick = pair()
    assert a.step() is True and b.step() is False
    for dummy in range(10):  # a renews every 2 s: b never takes it
        tick(2)
        assert a.step(handover={"n1": [1765000001.0, 1]}) and not b.step()
    # a dies (stops renewing): b takes over once it saw the record unchanged for 10 s of its clock, not before
    tick(2)
    assert not b.step()
    tick(7.9)
    assert not b.step()
    tick(0.2)
    assert b.step() is True and b.handed == {"n1": [1765000001.0, 1]}
    assert leases.holder(api.store["gpuops-events-leader"]) == "b"


def test_a_leader_that_finds_another_holder_or_cannot_renew_in_time_stops():
    api, a, b, tick = pair()
    assert a.step() and not b.step()
    tick(11)
    assert b.step()  # a stalled (a paused process) and b, which saw the record stand still, took over
    with pytest.raises(leader.LeaderLost):
        a.step()
    assert not a.leading
    # b cannot reach the API: it leads until its renew deadline (2/3 of the lease), then stops
    b.leases.api = Down()
    tick(2)
    assert b.step() and b.error
    tick(5)
    with pytest.raises(leader.LeaderLost):
        b.step()
    assert not b.leading


def test_a_leader_that_stops_gives_the_lease_up_and_the_standby_takes_it_at_once():
    api, a, b, tick = pair()
    assert a.step() and not b.step()
    assert a.give_up() is True
    tick(0.5)
    assert b.step()
    assert b.give_up() and not a.give_up()  # a no longer leads: nothing to give


def test_the_new_leader_runs_no_window_the_old_one_ran_within_its_flap():
    old, new = FaultWindow(2, 600), FaultWindow(2, 600)
    old.add({"gpuops": {"node": "n1"}}, 1000.0)
    assert old.flush(1002.0, "t")["gpuops"]["nodes"] == ["n1"]
    handed = old.handover(1003.0, 1765000003.0)
    assert handed == {"n1": [1765000002.0, 1]}
    new.seed(leader.read_handover({"metadata": {"annotations": {leader.HANDOVER: __import__("json").dumps(handed)}}}), 50.0, 1765000013.0)
    new.add({"gpuops": {"node": "n1"}}, 51.0)
    event = new.flush(53.0, "t")
    assert event["gpuops"]["kind"] == "gpu_faults_throttled" and event["gpuops"]["throttled"] == ["n1"]
    control = FaultWindow(2, 600)  # without the handover the same fault ran again
    control.add({"gpuops": {"node": "n1"}}, 51.0)
    assert control.flush(53.0, "t")["gpuops"]["nodes"] == ["n1"]


def test_a_handover_that_is_not_its_shape_is_left_out():
    lease = {"metadata": {"annotations": {leader.HANDOVER: '{"n1": [1.5, 2], "n2": "x", "n3": [1e999, 1], "n4": [1, 0]}'}}}
    assert leader.read_handover(lease) == {"n1": [1.5, 2]}
    assert leader.read_handover({"metadata": {"annotations": {leader.HANDOVER: "not json"}}}) is None
    assert leader.read_handover(None) is None


def test_the_leader_elections_options_are_checked_naming_the_key():
    checked = options.check_nodes({"leader_election": {"enabled": "true", "lease_seconds": "15"}})["leader_election"]
    assert (checked["lease"], checked["namespace"], checked["lease_seconds"], checked["renew_seconds"]) == (
        "gpuops-events-leader", "gpuops-system", 15, 2)
    assert options.check_nodes({"leader_election": {"enabled": "false"}})["leader_election"] is None
    assert options.check_nodes({})["leader_election"] is None
    for bad, field in (({"lease": "Leader!"}, "leader_election.lease"), ({"renew_seconds": 6}, "leader_election.renew_seconds"),
                       ({"lease_seconds": 1}, "leader_election.lease_seconds"), ({"term": 5}, "leader_election.term")):
        with pytest.raises(ParameterError) as caught:
            options.check_nodes({"leader_election": bad})
        assert caught.value.field == field, caught.value
