# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""leases.py (a Lease's times, who holds it, when it lapses) and restart_slots.py (the fleet's kubelet restart places) over
an in-memory API with the API server's optimistic concurrency: a write at an old resourceVersion is a 409."""

from __future__ import annotations

import copy
import threading
from types import SimpleNamespace

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import leases, restart_slots
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError


class ApiError(Exception):
    def __init__(self, status):
        super().__init__(status)
        self.status = status


class FakeCoordination:
    """CoordinationV1Api's Lease calls in memory: create (409 where it exists), replace (409 at an old resourceVersion), read
    (404), list by label; ``before_write`` runs before each write (a concurrent run's write)."""

    def __init__(self):
        self.store, self.version, self.lock, self.before_write = {}, 0, threading.Lock(), None
        self.api_client = SimpleNamespace(sanitize_for_serialization=copy.deepcopy)

    def _bump(self, body):
        self.version += 1
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(self.version)
        self.store[body["metadata"]["name"]] = body
        return copy.deepcopy(body)

    def read_namespaced_lease(self, name, namespace):
        if name not in self.store:
            raise ApiError(404)
        return copy.deepcopy(self.store[name])

    def list_namespaced_lease(self, namespace, label_selector):
        key, value = label_selector.split("=")
        items = [SimpleNamespace(metadata=SimpleNamespace(name=n), **{"_b": b}) for n, b in sorted(self.store.items())
                 if b["metadata"].get("labels", {}).get(key) == value]
        self.api_client.sanitize_for_serialization = lambda item: copy.deepcopy(getattr(item, "_b", item))
        return SimpleNamespace(items=items)

    def create_namespaced_lease(self, namespace, body):
        if self.before_write:
            self.before_write()
        with self.lock:
            if body["metadata"]["name"] in self.store:
                raise ApiError(409)
            return self._bump(body)

    def replace_namespaced_lease(self, name, namespace, body):
        if self.before_write:
            self.before_write()
        with self.lock:
            if self.store[name]["metadata"]["resourceVersion"] != body["metadata"]["resourceVersion"]:
                raise ApiError(409)
            return self._bump(body)


def api():
    return leases.Leases(FakeCoordination(), "gpuops-system", ApiError)


def test_micro_time_round_trips_and_reads_the_apis_forms():
    assert leases.micro(0) == "1970-01-01T00:00:00.000000Z"
    assert leases.parse_micro(leases.micro(1765000000.25)) == pytest.approx(1765000000.25)
    assert leases.parse_micro("2026-12-06T17:00:00Z") == leases.parse_micro("2026-12-06T18:00:00+01:00")
    assert leases.parse_micro("yesterday") is None and leases.parse_micro(None) is None


def test_a_lease_is_free_when_nobody_holds_it_or_its_hold_lapsed():
    held = {"spec": {"holderIdentity": "run/a", "leaseDurationSeconds": 10, "renewTime": leases.micro(100)}}
    assert not leases.free(held, 109.9) and leases.free(held, 110)
    assert leases.free(None, 0) and leases.free({"spec": {"leaseDurationSeconds": 10}}, 0)
    assert leases.free({"spec": {"holderIdentity": "x", "renewTime": "garbage", "leaseDurationSeconds": 10}}, 0)  # unreadable: lapsed
    taken = leases.held_spec(held, "run/b", 30, 200)
    assert taken["holderIdentity"] == "run/b" and taken["leaseTransitions"] == 1 and taken["acquireTime"] == leases.micro(200)
    renewed = leases.held_spec(dict(held, spec=dict(held["spec"], acquireTime=leases.micro(90))), "run/a", 30, 200)
    assert renewed["leaseTransitions"] == 0 and renewed["acquireTime"] == leases.micro(90) and renewed["renewTime"] == leases.micro(200)


def test_places_from_a_number_or_a_percentage_of_the_fleet_and_a_bad_limit_named():
    assert restart_slots.places("5", 1000) == 5 and restart_slots.places(" 5 ", 0) == 5
    assert restart_slots.places("10%", 1000) == 100 and restart_slots.places("10%", 3) == 1 and restart_slots.places("1%", 0) == 1
    for bad in ("0", "-1", "five", "0%", "101%", "", "5.5"):
        with pytest.raises(ParameterError) as caught:
            restart_slots.places(bad, 10)
        assert caught.value.field == "limit"


def test_two_places_are_taken_a_third_run_waits_and_gets_one_given_back():
    lease_api, clock = api(), [1000.0]
    places = restart_slots.Places(lease_api, 2, clock=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s))
    assert places.hold("r1/a", 600, 0) == "gpuops-kubelet-restart-0"
    assert places.hold("r2/b", 600, 0) == "gpuops-kubelet-restart-1"
    with pytest.raises(restart_slots.NoPlace) as caught:
        places.hold("r3/c", 600, 30)
    assert caught.value.holders == ["r1/a", "r2/b"] and clock[0] >= 1030
    assert places.give_back("r1/a") == ["gpuops-kubelet-restart-0"]
    assert places.hold("r3/c", 600, 0) == "gpuops-kubelet-restart-0"
    assert places.hold("r2/b", 600, 0) == "gpuops-kubelet-restart-1"  # its own, renewed, not a second one
    assert places.give_back("nobody/x") == []


def test_a_dead_runs_place_lapses_after_its_hold_and_another_run_takes_it():
    lease_api, clock = api(), [1000.0]
    places = restart_slots.Places(lease_api, 1, clock=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s))
    places.hold("dead/a", 60, 0)
    assert places.hold("live/b", 600, 120) == "gpuops-kubelet-restart-0"  # waited until the dead run's hold lapsed
    assert 59 <= places.waited <= 63


def test_two_runs_racing_for_the_last_place_cannot_both_take_it():
    """The other run's write lands between this run's read and its write: the API answers 409, this run reads again and
    finds the place taken (it waits, then gives up), never holding it too."""
    lease_api, clock = api(), [1000.0]
    places = restart_slots.Places(lease_api, 1, clock=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s))
    other = restart_slots.Places(leases.Leases(lease_api.api, "gpuops-system", ApiError), 1, clock=lambda: clock[0])
    places.hold("r0/z", 600, 0)
    places.give_back("r0/z")
    fired = []

    def the_other_run_first():
        if not fired:
            fired.append(None)
            fired[0] = other.hold("r1/a", 600, 0)
    lease_api.api.before_write = the_other_run_first
    with pytest.raises(restart_slots.NoPlace):
        places.hold("r2/b", 600, 5)
    assert fired == ["gpuops-kubelet-restart-0"]
    assert leases.holder(lease_api.read("gpuops-kubelet-restart-0")) == "r1/a"


def test_the_repair_tasks_restart_place_is_checked_naming_the_field():
    from ansible_collections.gpuops.fleet.plugins.plugin_utils import _restart_place as restart_place  # pylint: disable=import-outside-toplevel

    good = {"limit": "10%", "namespace": "gpuops-system", "run": "1042", "hold_seconds": "600", "wait_seconds": 60, "kubeconfig": ""}
    assert restart_place.check(good)["hold_seconds"] == 600  # a survey's string, typed
    for field, value in (("limit", "0"), ("run", "a b"), ("namespace", "Gpu"), ("hold_seconds", 0), ("wait_seconds", "soon"),
                         ("hold_seconds", True), ("kubeconfig", 5), ("node", "gpu-node-7"), ("rack", "r1")):
        with pytest.raises(ParameterError) as caught:
            restart_place.check(dict(good, **{field: value}))
        assert caught.value.field == "restart_place.%s" % field, caught.value
    with pytest.raises(ParameterError):
        restart_place.check("5")
    assert restart_place.check(dict(good, limit=2, wait_seconds="0"))["limit"] == "2"  # a number of places, as the role gives it
    with pytest.raises(ParameterError) as caught:
        restart_place.check(dict(good, run=None))
    assert caught.value.field == "restart_place.run"
    # the holder is the inventory's host name, never a name the node's facts give: a plain name as it is, another hashed
    assert restart_place.holder("1042", "gpu-node-7.example") == "1042/gpu-node-7.example"
    odd = restart_place.holder("1042", "rack 7 / node\n8")
    assert odd.startswith("1042/sha256-") and "\n" not in odd and odd.count("/") == 1
