# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's facts at the plan's edge (issue 48, item 2): one node's facts of a wrong type make that node ``unknown``, with
the field named, and every other node is planned as before. The issue's fourteen shapes, then every field of a full
health read and checkpoint replaced by each of a set of hostile values (the count is the adversarial pass's figure)."""

from __future__ import annotations

import math

import pytest
from hostile_values import mutations, replaced

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import node_facts
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import plan as rp

from test_plan import G, NOW, api_node, entry, gpu, health, pod, uid

SETTINGS = {"max_nodes_per_run": 2, "batch": 2, "breaker_percent": 100}
XID = {"code": 48, "bucket": "WORKFLOW_XID_48", "usec": 5000000, "pid": 42, "bus": "0000:07:00", "line": "NVRM: Xid (PCI:0000:07:00): 48"}


def rich_node():
    """A full read: GPU 0 asks for a reset (with an XID, a process of a pod, an NVLink peer), GPU 1 is fine; the checkpoint
    gives each GPU a pod (one through gpushare's NVIDIA_VISIBLE_DEVICES)."""
    gpus = [gpu(0, recovery=1, xids=[dict(XID)], processes=[{"pid": 42, "pod_uid": uid(1), "container": "app", "used_mib": 100}],
                nvlink={"links": [{"link": 0, "active": True}], "peers": [G[1]]}, temperature={"current": 40, "shutdown": 90},
                clocks_event_reasons=["gpu_idle"], retired_pages={"supported": True, "sbe": 1, "dbe": 0, "pending": False}),
            gpu(1, ecc={"volatile_dbe": 0}, retired_pages={"supported": True, "sbe": 2, "dbe": 0, "pending": False})]
    facts = health(gpus, driver="535.1")
    entries = [entry(uid(1), [G[0]]), entry(uid(2), [G[1] + "-_-1"], "aliyun.com/gpu-mem", envs={"NVIDIA_VISIBLE_DEVICES": G[1]})]
    return facts, entries


def fleet_plan(bad_health, bad_entries, ledger=None):
    """The plan of the node ``bad`` (given facts) beside ``good`` (a GPU asking for a reset, another driver). With a ledger
    whose breaker was reset, the controller decides each node again with the rules (``_redecide``)."""
    good_health = health([gpu(0, recovery=1)], driver="580.1")
    items = [{"host": "bad", "node": "bad", "health": bad_health, "entries": bad_entries},
             {"host": "good", "node": "good", "health": good_health, "entries": [entry(uid(9), [G[0]])]}]
    pods = [pod(1, node="bad"), pod(2, node="bad"), pod(9, node="good")]
    return rp.plan(items, [api_node("bad"), api_node("good")], pods, [], ledger or ledgers.empty(), SETTINGS, NOW)


# a breaker reset after GPU 0's XID: the plan decides GPU 0 again on the controller without it, so every rule meets the
# hostile facts of GPU 0
REDECIDED = ledgers.reset(ledgers.empty(), "test", NOW - 60)


def rows(result):
    return dict((r["node"], r) for r in result["nodes"])


def test_the_rich_read_is_planned_as_it_stands():
    facts, entries = rich_node()
    node_facts.check_health(facts)
    node_facts.check_entries(entries)
    found = rows(fleet_plan(facts, entries))
    assert (found["bad"]["action"], found["bad"]["batch"], found["good"]["batch"]) == ("reset", 1, 1), found


# the shapes: (where, the wrong value, the field the reason must name)
SHAPES = [
    (("health", "gpus", 0, "verdict", "signals", 0, "key"), ["xid:48"], "gpus[0].verdict.signals[0].key"),
    (("health", "driver_version"), ["535"], "health.driver_version"),
    (("health", "gpus"), [1], "health.gpus[0]"),
    (("entries", 0, "device_ids"), 7, "entries[0].device_ids"),
    (("entries", 1, "alloc_envs", "NVIDIA_VISIBLE_DEVICES"), 3, "entries[1].alloc_envs.NVIDIA_VISIBLE_DEVICES"),
    (("health", "gpus", 0, "processes", 0, "pod_uid"), [uid(1)], "gpus[0].processes[0].pod_uid"),
    (("health", "gpus", 0, "nvlink", "peers"), 3, "gpus[0].nvlink.peers"),
    (("health", "gpus", 0, "xids", 0, "code"), "48", "gpus[0].xids[0].code"),
    (("health", "gpus", 0, "xids", 0, "usec"), float("nan"), "gpus[0].xids[0].usec"),
    (("health", "boot_time"), float("nan"), "health.boot_time"),
    (("health", "verdict", "action"), "obliterate", "health.verdict.action"),
    (("health", "gpus", 0, "recovery_action"), [1], "gpus[0].recovery_action"),
    (("health", "gpus", 0, "temperature", "current"), "hot", "gpus[0].temperature.current"),
    (("entries",), {"pod_uid": uid(1)}, "entries"),
]


@pytest.mark.parametrize("path,value,field", SHAPES, ids=[s[2] for s in SHAPES])
def test_each_shape_the_review_found_makes_that_node_unknown_naming_the_field_and_the_others_are_planned(path, value, field):
    facts, entries = rich_node()
    both = replaced({"health": facts, "entries": entries}, path, value)
    found = rows(fleet_plan(both["health"], both["entries"]))
    assert found["bad"]["state"] == "unknown" and found["bad"]["action"] == "none" and found["bad"]["batch"] is None, found["bad"]
    assert field in found["bad"]["reasons"][0], found["bad"]["reasons"]
    assert (found["good"]["action"], found["good"]["batch"]) == ("reset", 1)


def test_the_pass_decides_again_on_the_controller_with_the_breaker_reset():
    facts, entries = rich_node()
    found = rows(fleet_plan(facts, entries, REDECIDED))
    assert facts["gpus"][0]["xids_before_reset"] == 1 and found["bad"]["action"] == "reset"  # GPU 0 decided again, by field 230


def test_every_field_replaced_by_each_hostile_value_never_raises_and_never_stops_the_other_node():
    """The adversarial pass over the plan's edge: no input makes the plan raise; the node with bad facts is unknown (a field
    named) or, where the value is one gpu_health_info could give, planned; the good node is planned every time."""
    facts, entries = rich_node()
    base = {"health": facts, "entries": entries}
    tried = unknown = 0
    for (path, value, both), ledger in ((m, ledger) for m in mutations(base) for ledger in (None, REDECIDED)):
        tried += 1
        found = rows(fleet_plan(both.get("health"), both.get("entries"), ledger))
        assert (found["good"]["action"], found["good"]["batch"]) == ("reset", 1), (path, value)
        bad = found["bad"]
        if bad["state"] == "unknown":
            unknown += 1
            assert bad["batch"] is None and bad["evictions"] == [] and bad["reasons"], (path, value, bad)
        else:
            assert bad["action"] in ("none", "observe", "reset", "investigate", "reboot", "replace"), (path, value, bad)
        for eviction in bad["evictions"]:
            assert eviction["uid"] in (uid(1), uid(2)), (path, value, eviction)  # only this node's pods, ever
    assert tried > 2000 and unknown > tried // 4, (tried, unknown)
    print("adversarial pass over the plan's edge: %d inputs, %d nodes unknown, 0 exceptions" % (tried, unknown))


def test_numbers_and_strings_out_of_bounds_are_named():
    with pytest.raises(node_facts.FactsError, match=r"health.gpus_seen: -1 is out of range"):
        node_facts.check_health({"gpus_seen": -1})
    with pytest.raises(node_facts.FactsError, match=r"health.reason: a string of 5000 characters"):
        node_facts.check_health({"reason": "r" * 5000})
    with pytest.raises(node_facts.FactsError, match=r"health.gpus: a list of 65 items"):
        node_facts.check_health({"gpus": [{}] * 65})
    assert math.isnan(float("nan"))  # (NaN is refused where a number is read: SHAPES)
