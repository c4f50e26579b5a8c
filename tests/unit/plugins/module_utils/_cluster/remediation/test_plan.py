# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU remediation plan, pure: the pod -> GPU map from kubelet's checkpoint in every ID form, GPU-scoped
evictions, PDB and accounting blockers, the breakers and the ledger."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import plan as rp
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import decision as hd
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

G = ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0", "GPU-11111111-2222-3333-4444-555555555555",
     "GPU-22222222-2222-3333-4444-555555555555", "GPU-33333333-2222-3333-4444-555555555555"]
MIG = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
NOW = 1800000000


def uid(n):
    return "%08d-0000-4000-8000-000000000000" % n


def gpu(i, recovery=0, **more):
    record = {"index": i, "uuid": G[i], "state": "ok", "architecture": 8, "recovery_action": {"value": recovery, "source": "nvml_field"},
              "remapped_rows": {"supported": True, "pending": False, "failure": False}, "retired_pages": {"supported": False},
              "ecc": {}, "nvlink": {"links": [], "peers": []}, "xids": [], "processes": [], "mig_devices": []}
    record.update(more)
    record["verdict"] = hd.decide_gpu(record)
    return record


def health(gpus, driver="580.65.06", **more):
    facts = {"available": True, "driver_version": driver, "gpus": gpus, "gpus_seen": len(gpus), "boot_time": NOW - 3600}
    facts.update(more)
    facts["verdict"] = hd.decide_node(facts)
    return facts


def entry(pod, ids, resource="nvidia.com/gpu", container="app", envs=None):
    return {"pod_uid": pod, "container_name": container, "resource_name": resource, "device_ids": ids, "alloc_envs": envs or {}}


def pod(n, node="n1", owner="ReplicaSet", labels=None, namespace="ml", volumes=None):
    meta = {"name": "p%d" % n, "namespace": namespace, "uid": uid(n), "labels": labels or {"app": "p%d" % n}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "o%d" % n, "controller": True}]
    return {"metadata": meta, "spec": {"nodeName": node, "volumes": volumes or []}, "status": {"phase": "Running"}}


def api_node(name, annotations=None, status=None):
    return {"metadata": {"name": name, "annotations": annotations or {}}, "spec": {}, "status": status or {}}


def plan(items, pods=(), pdbs=(), ledger=None, nodes=None, statuses=None, **settings):
    names = nodes or [i["node"] for i in items]
    return rp.plan(items, [api_node(n, status=(statuses or {}).get(n)) for n in names], list(pods), list(pdbs), ledger or ledgers.empty(),
                   settings, NOW)


def one(result, node):
    return [r for r in result["nodes"] if r["node"] == node][0]


# -- the pod -> GPU map --------------------------------------------------------------------------

def test_every_id_form_maps_its_pod_to_the_physical_gpu():
    gpus = [gpu(0), gpu(1, mig_mode="enabled", mig_devices=[MIG]), gpu(2), gpu(3)]
    entries = [
        entry(uid(1), [G[0]]),                                         # whole GPU
        entry(uid(2), [G[2] + "::3"], "nvidia.com/gpu.shared"),       # time-slicing replica
        entry(uid(3), [MIG], "nvidia.com/mig-1g.5gb"),                 # MIG device -> its GPU
        entry(uid(4), [G[0] + "-_-1", G[0] + "-_-2"], "aliyun.com/gpu-mem", envs={"NVIDIA_VISIBLE_DEVICES": G[3]}),  # gpushare
        entry(uid(5), ["2"]),                                         # index strategy
        entry(uid(6), ["1:0"]),                                       # index strategy, MIG device
        entry(uid(7), ["GPU-99999999-2222-3333-4444-555555555555"]),  # a GPU this node does not have
    ]
    holders, unmapped = rp.pod_gpu_map(entries, gpus)
    assert dict((g, sorted(p)) for g, p in holders.items()) == {
        G[0]: [uid(1)], G[1]: [uid(3), uid(6)], G[2]: [uid(2), uid(5)], G[3]: [uid(4)],
    }
    # gpushare: the fake IDs name GPU 0, but AllocResp gave the container GPU 3, which is what it holds
    assert uid(4) not in holders[G[0]]
    assert unmapped == ["GPU-99999999-2222-3333-4444-555555555555"]


def test_a_gpu_scoped_reset_evicts_only_the_pods_of_the_faulty_gpu():
    item = {"node": "n1", "host": "h1", "health": health([gpu(0, recovery=1), gpu(1), gpu(2)]),
            "entries": [entry(uid(1), [G[0]]), entry(uid(2), [G[1]]), entry(uid(3), [G[2]])]}
    result = plan([item], pods=[pod(1), pod(2), pod(3)])
    row = one(result, "n1")
    assert (row["action"], row["scope"], row["gpus"], row["batch"]) == ("reset", "gpu", [G[0]], 1)
    assert [(e["pod"], e["evict"]) for e in row["evictions"]] == [("ml/p1", True)]
    assert row["blockers"] == []


def test_a_gpushare_node_evicts_the_pods_whose_container_got_the_faulty_gpu():
    gpus = [gpu(0), gpu(1, recovery=1)]
    entries = [entry(uid(1), [G[1] + "-_-1"], "aliyun.com/gpu-mem", envs={"NVIDIA_VISIBLE_DEVICES": G[0]}),
               entry(uid(2), [G[0] + "-_-4"], "aliyun.com/gpu-mem", envs={"NVIDIA_VISIBLE_DEVICES": G[1]}),
               entry(uid(3), [G[1] + "-_-2"], "aliyun.com/gpu-mem", envs={"NVIDIA_VISIBLE_DEVICES": G[1]})]
    row = one(plan([{"node": "n1", "health": health(gpus), "entries": entries}], pods=[pod(1), pod(2), pod(3)]), "n1")
    assert sorted(e["pod"] for e in row["evictions"]) == ["ml/p2", "ml/p3"]


def test_nvlink_peers_pods_are_drained_where_the_recovery_action_asks():
    g0 = gpu(0, recovery=4, nvlink={"links": [{"link": 0, "active": True}], "peers": [G[1]]})
    entries = [entry(uid(1), [G[0]]), entry(uid(2), [G[1]]), entry(uid(3), [G[2]])]
    item = {"node": "n1", "health": health([g0, gpu(1), gpu(2)]), "entries": entries}
    row = one(plan([item], pods=[pod(1), pod(2), pod(3)]), "n1")
    assert row["targets"] == [G[0], G[1]]
    assert sorted(e["pod"] for e in row["evictions"]) == ["ml/p1", "ml/p2"]


def test_a_pod_using_the_gpu_outside_kubelets_accounting_and_a_host_process_block_it():
    procs = [{"pid": 10, "pod_uid": uid(9)}, {"pid": 11, "pod_uid": None}]
    item = {"node": "n1", "health": health([gpu(0, recovery=1, processes=procs)]), "entries": [entry(uid(1), [G[0]])]}
    row = one(plan([item], pods=[pod(1), pod(9, labels={"app": "sneaky"})]), "n1")
    kinds = sorted(b["kind"] for b in row["blockers"])
    assert kinds == ["host_process", "outside_accounting"]
    assert [b for b in row["blockers"] if b["kind"] == "outside_accounting"][0]["pod"] == "ml/p9"
    assert (row["deferred_reason"], row["batch"]) == ("blocked", None)


def test_a_pdb_with_no_disruption_allowed_is_named_as_a_blocker():
    pdb = {"metadata": {"name": "keep-one", "namespace": "ml"}, "spec": {"selector": {"matchLabels": {"app": "p1"}}},
           "status": {"disruptionsAllowed": 0}}
    roomy = {"metadata": {"name": "roomy", "namespace": "ml"}, "spec": {"selector": {"matchExpressions": [
        {"key": "app", "operator": "In", "values": ["p1"]}]}}, "status": {"disruptionsAllowed": 1}}
    item = {"node": "n1", "health": health([gpu(0, recovery=1)]), "entries": [entry(uid(1), [G[0]])]}
    row = one(plan([item], pods=[pod(1)], pdbs=[pdb, roomy]), "n1")
    assert row["evictions"][0]["pdb"] == "ml/keep-one"
    assert [(b["kind"], b["pdb"]) for b in row["blockers"]] == [("pdb", "ml/keep-one")]
    assert row["batch"] == 1  # a PDB is a wait (the eviction is retried until drain_timeout), not a refusal


def test_a_reboot_evicts_every_pod_of_the_node_but_daemonset_and_mirror_pods_and_names_a_bare_one():
    lost = {"index": 1, "uuid": G[1], "state": "lost", "xids": [], "nvlink": {"links": []}}
    lost["verdict"] = hd.decide_gpu(lost)
    item = {"node": "n1", "health": health([gpu(0), lost]), "entries": []}
    mirror = pod(4, owner=None)
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x"}
    pods = [pod(1), pod(2, owner="DaemonSet"), pod(3, owner=None), mirror, pod(5, node="n2")]
    row = one(plan([item], pods=pods), "n1")
    assert (row["action"], row["scope"]) == ("reboot", "node")
    assert [(e["pod"], e["evict"]) for e in row["evictions"]] == [("ml/p1", True), ("ml/p3", False)]
    assert [b["kind"] for b in row["blockers"]] == ["not_evictable"]


def test_a_pending_remap_never_evicts_and_waits_for_an_idle_gpu():
    busy = {"node": "n1", "health": health([gpu(0, remapped_rows={"supported": True, "pending": True, "failure": False})]),
            "entries": [entry(uid(1), [G[0]])]}
    idle = {"node": "n2", "health": health([gpu(0, retired_pages={"supported": True, "pending": True})]), "entries": []}
    result = plan([busy, idle], pods=[pod(1)], max_nodes_per_run=5)
    assert (one(result, "n1")["deferred_reason"], one(result, "n1")["evictions"]) == ("gpu_busy", [])
    assert one(result, "n2")["batch"] == 1


# -- breakers ------------------------------------------------------------------------------------

def fleet(faulty, total=10, recovery=1, driver="580.65.06"):
    items = []
    for i in range(total):
        items.append({"node": "n%02d" % i, "health": health([gpu(0, recovery=recovery if i < faulty else 0)], driver=driver), "entries": []})
    return items


def test_the_same_signal_on_3_of_10_nodes_is_a_fleet_event_and_touches_none():
    result = plan(fleet(3), max_nodes_per_run=10)
    assert result["summary"]["planned"] == 0
    assert [r["deferred_reason"] for r in result["nodes"][:3]] == ["fleet_event"] * 3
    assert result["breaker"]["state"] == "tripped" and result["refused"]
    assert result["signal_groups"] == [{"key": "recovery:1", "driver_version": "580.65.06", "nodes": ["n00", "n01", "n02"]}]


def test_the_same_key_with_two_driver_versions_is_two_groups():
    other = [dict(i, node="m%s" % i["node"]) for i in fleet(1, total=1, driver="570.1")]
    assert plan(fleet(1, total=3) + other)["breaker"]["state"] == "closed"
    # the threshold never drops below 2 nodes, and is at most same_signal_nodes: 2 of 4 with one driver trip it
    assert plan(fleet(2, total=3) + other)["same_signal_threshold"] == 2
    assert plan(fleet(2, total=3) + other)["breaker"]["state"] == "tripped"


def test_a_cap_of_one_with_two_unrelated_signals_plans_one_and_defers_one():
    items = [{"node": "a", "health": health([gpu(0, recovery=1)]), "entries": []},
             {"node": "b", "health": health([gpu(0, remapped_rows={"supported": True, "pending": False, "failure": True})]), "entries": []}]
    items += fleet(0, total=8)
    result = plan(items, max_nodes_per_run=1)
    assert result["breaker"]["state"] == "closed"
    assert [(r["node"], r["action"], r["batch"], r["deferred_reason"]) for r in result["nodes"][:2]] == [
        ("a", "reset", None, "deferred_capacity"), ("b", "replace", 1, None)]  # the more severe first


TAINTED = {"spec": {"taints": [{"key": rp.QUARANTINE_TAINT, "value": "GPU-1", "effect": "NoSchedule"}]}}


def _api(name, tainted=False, annotations=None):
    return dict(api_node(name, annotations), **(TAINTED if tainted else {}))


def _open(*nodes, age=60):
    return dict(ledgers.empty(), entries=[{"node": n, "gpus": [], "action": "reset", "at": NOW - age, "closed_at": None, "step": "drained"}
                                          for n in nodes])


def test_the_fleet_wide_cap_counts_our_quarantines_in_flight():
    items = [{"node": "a", "health": health([gpu(0, recovery=1)]), "entries": []}] + fleet(0, total=9)
    nodes = [_api(i["node"]) for i in items] + [_api("busy", tainted=True)]
    result = rp.plan(items, nodes, [], [], _open("busy", age=3600), {"max_nodes_per_run": 5}, NOW)
    assert result["capacity"] == {"cap": 1, "in_flight": ["busy"], "room": 0, "stale_open_entries": [], "waiting": []}
    assert one(result, "a")["deferred_reason"] == "deferred_capacity"


def test_a_nodes_own_annotation_never_takes_the_fleets_quarantine_room():
    """Issue 57, item 3: a healthy node annotates itself with our annotation (its kubelet may); the plan counted it in flight
    and deferred a really faulty node (deferred_capacity). In flight is the ledger's open entries alone."""
    items = [{"node": "a", "health": health([gpu(0, recovery=1)]), "entries": []}] + fleet(0, total=9)
    nodes = [_api(i["node"], annotations={rp.QUARANTINE_ANNOTATION: '{"step": "drained", "gpus": []}'} if i["node"] == "n00" else None)
             for i in items]
    result = rp.plan(items, nodes, [], [], ledgers.empty(), {"max_nodes_per_run": 5}, NOW)
    assert result["capacity"]["in_flight"] == [] and one(result, "a")["batch"] == 1


def test_an_entry_left_open_on_a_node_without_our_quarantine_stops_counting_after_ten_minutes():
    """Issue 48, item 6: a release that removed the node's marks and could not close its entry left it open for ever, and the
    capacity breaker gave every later plan room 0. Such an entry counts while its node's patch may be on its way (10
    minutes), then it is named and counts no more; the node carrying our taint (which only a cluster user can lift) still
    counts."""
    items = [{"node": "a", "health": health([gpu(0, recovery=1)]), "entries": []}] + fleet(0, total=9)
    nodes = [_api(i["node"]) for i in items] + [_api("gone"), _api("held", tainted=True)]
    settings = {"max_nodes_per_run": 5, "breaker_percent": 20}
    fresh = rp.plan(items, nodes, [], [], _open("gone", "held", age=60), settings, NOW)
    assert fresh["capacity"] == {"cap": 2, "in_flight": ["gone", "held"], "room": 0, "stale_open_entries": [], "waiting": []}
    old = rp.plan(items, nodes, [], [], _open("gone", "held", age=601), settings, NOW)
    assert old["capacity"] == {"cap": 2, "in_flight": ["held"], "room": 1, "stale_open_entries": ["gone"], "waiting": []}
    assert one(old, "a")["batch"] == 1


def test_the_cap_comes_from_the_gpu_fleet_the_api_shows_never_the_runs_limit():
    """Issue 57, item 10: an event run limited to one node had a cap of 1 (10 % of one host) while every quarantine in the
    cluster counted against it. The scope is the API's GPU Nodes (capacity, or GPU feature discovery's label)."""
    gpu_status = {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "0"}}
    nodes = [dict(api_node("g%02d" % i, status=gpu_status)) for i in range(19)] + [_api("busy", tainted=True)]
    nodes.append({"metadata": {"name": "gfd", "labels": {"nvidia.com/gpu.present": "true"}}, "spec": {}, "status": {}})
    nodes.append(api_node("cpu-1", status={"capacity": {"cpu": "64"}}))
    item = [{"node": "a", "host": "a", "health": health([gpu(0, recovery=1)]), "entries": []}]
    result = rp.plan(item, nodes, [], [], _open("busy", age=3600), {"max_nodes_per_run": 5}, NOW)
    assert result["scope"] == 21  # g00..g18, gfd and the run's own host; not busy (no GPU shown), not cpu-1
    assert result["capacity"] == {"cap": 3, "in_flight": ["busy"], "room": 2, "stale_open_entries": [], "waiting": []}
    assert one(result, "a")["batch"] == 1
    # the restart places count the same fleet from Nodes cut to what the count reads (fleet_view, a list's slim)
    assert rp.gpu_fleet([rp.fleet_view(n) for n in nodes]) == rp.gpu_fleet(nodes) and len(rp.gpu_fleet(nodes)) == 21 - 1
    assert set(rp.fleet_view(nodes[0])) == {"metadata", "status"} and rp.fleet_view("not a node")["metadata"] == {"name": None, "labels": {}}


def test_a_tripped_breaker_stays_tripped_and_a_reset_needs_a_reason():
    tripped = plan(fleet(3))
    ledger = dict(ledgers.empty(), breaker=tripped["breaker"])
    ledger = ledgers.parse({"data": ledgers.dump(ledger)}, "test")  # through the ConfigMap's form
    later = plan(fleet(1), ledger=ledger)  # the cause is gone from two nodes: still refused
    assert later["refused"] and one(later, "n00")["deferred_reason"] == "fleet_event"  # it carries the key that tripped it
    with pytest.raises(ParameterError) as info:
        rp.check_reset(True, "  ")
    assert str(info.value).startswith("breaker_reset_reason: ")
    closed = ledgers.reset(ledger, "bad driver rolled back", NOW)
    again = plan(fleet(1), ledger=closed)
    assert not again["refused"] and one(again, "n00")["batch"] == 1
    assert again["breaker"]["reset_reason"] == "bad driver rolled back"


def test_xids_logged_before_a_breaker_reset_no_longer_count():
    g = gpu(0, recovery=None, xids=[{"code": 119, "bucket": "RESET_GPU", "usec": 10 * 10 ** 6}])
    g["recovery_action"] = {"value": None, "source": "unsupported"}
    g["verdict"] = hd.decide_gpu(g)
    item = {"node": "n1", "health": health([g]), "entries": []}
    assert one(plan([item]), "n1")["action"] == "reset"
    ledger = dict(ledgers.empty(), breaker={"state": "closed", "reset_at": NOW - 60})  # the XID was an hour ago
    item = {"node": "n1", "health": health([dict(g, xids=list(g["xids"]))]), "entries": []}
    assert one(plan([item], ledger=ledger), "n1")["action"] == "none"


def test_the_ledger_window_counts_earlier_runs_nodes():
    ledger = dict(ledgers.empty(), entries=[{"node": "x%d" % i, "keys": ["recovery:1"], "driver_version": "580.65.06", "at": NOW - 60,
                                             "gpus": [], "closed_at": NOW} for i in range(2)])
    assert plan(fleet(1), ledger=ledger)["breaker"]["state"] == "tripped"
    old = dict(ledger, entries=[dict(e, at=NOW - 7200) for e in ledger["entries"]])
    assert plan(fleet(1), ledger=old)["breaker"]["state"] == "closed"


def test_a_repeat_offender_is_an_rma_candidate():
    ledger = dict(ledgers.empty(), entries=[{"node": "n00", "gpus": [G[0]], "at": NOW - 3600 * i, "keys": [], "closed_at": NOW}
                                            for i in range(3)])
    row = one(plan(fleet(1), ledger=ledger), "n00")
    assert (row["action"], row["scope"]) == ("replace", "node") and "repeat offender" in row["reasons"][-1]


def test_a_gpu_the_plugin_withholds_while_nvml_is_clean_is_row_17_reported_never_planned():
    items = [{"node": n, "health": health([gpu(0), gpu(1)]), "entries": []} for n in ("n1", "n2", "n3")]
    statuses = {"n1": {"capacity": {"nvidia.com/gpu": "2", "cpu": "8"}, "allocatable": {"nvidia.com/gpu": "1", "cpu": "7"}},
                "n2": {"capacity": {"nvidia.com/gpu": "2"}, "allocatable": {"nvidia.com/gpu": "2"}}}
    result = plan(items, [pod(1)], statuses=statuses)
    row = one(result, "n1")
    assert (row["action"], row["row"], row["scope"], row["batch"], row["evictions"]) == ("observe", 17, None, None, [])
    assert row["plugin_unhealthy"] == ["nvidia.com/gpu 1 of 2 allocatable"] and "restart the device-plugin pod" in row["reasons"][-1]
    # a node whose allocatable equals its capacity, and one the API server reports no status for: nothing
    assert (one(result, "n2")["action"], one(result, "n3")["action"]) == ("none", "none")
    assert result["summary"]["planned"] == 0 and result["breaker"]["state"] == "closed"
    # NVML's own verdict wins: a GPU that asks for a reset is planned as one, whatever the plugin says
    items[0]["health"] = health([gpu(0, recovery=1), gpu(1)])
    assert one(plan(items, [pod(1)], statuses=statuses), "n1")["action"] == "reset"


def test_an_unknown_node_is_never_planned_and_never_a_signal():
    items = [{"node": "n%d" % i, "health": {"available": False, "reason": "NVML: Unknown Error", "gpus": []}, "entries": []} for i in range(5)]
    result = plan(items)
    assert result["summary"]["unknown"] == 5 and result["summary"]["planned"] == 0 and result["breaker"]["state"] == "closed"


@pytest.mark.parametrize("key,value", [("same_signal_nodes", -1), ("breaker_percent", "ten"), ("batch", 0), ("breaker_percent", 101)])
def test_a_bad_threshold_names_its_option(key, value):
    with pytest.raises(ParameterError) as info:
        rp.check_settings({key: value})
    assert str(info.value).startswith(key + ": ")


def test_survey_strings_are_numbers():
    assert rp.check_settings({"max_nodes_per_run": "2", "same_signal_nodes": "4"})["same_signal_nodes"] == 4


@pytest.mark.parametrize("data", [{}, {"ledger.json": "{oops"}, {"ledger.json": json.dumps({"version": 2})},
                                  {"ledger.json": json.dumps({"version": 1, "breaker": {"state": "open-ish"}})}])
def test_a_ledger_we_did_not_write_is_an_error_never_an_empty_one(data):
    with pytest.raises(ledgers.LedgerError):
        ledgers.parse({"data": data}, "ConfigMap gpuops-system/gpuops-remediation-ledger")


def test_the_table_has_a_line_per_node():
    text = plan(fleet(1, total=2))["table"]
    assert text.splitlines()[0].split() == ["NODE", "HEALTH", "ACTION", "SCOPE", "GPUS", "EVICT", "BLOCKERS", "PLAN"]
    assert text.splitlines()[1].split()[:3] == ["n00", "faulty", "reset"]


# -- a node's data is about that node alone (issue 48, item 1) ------------------------------------

def test_a_pod_of_another_node_in_a_nodes_checkpoint_blocks_it_and_is_never_evicted():
    """n1's checkpoint gives its faulty GPU to pod 2, which runs on n2: the plan evicts nothing of n2's (the pod is named as
    a blocker no drain ends), and n1's own pod on that GPU is not evicted either while its checkpoint is not trusted."""
    items = [{"node": "n1", "host": "n1", "health": health([gpu(0, recovery=1)]), "entries": [entry(uid(1), [G[0]]), entry(uid(2), [G[0]])]}]
    result = plan(items, pods=[pod(1, node="n1"), pod(2, node="n2")], nodes=["n1", "n2"])
    row = one(result, "n1")
    assert [e["uid"] for e in row["evictions"]] == [uid(1)]
    assert [(b["kind"], b["pod"]) for b in row["blockers"]] == [("foreign_pod", "ml/p2")] and "runs on n2" in row["blockers"][0]["detail"]
    assert row["deferred_reason"] == "blocked" and row["batch"] is None


def test_two_hosts_naming_one_node_plan_it_for_nothing_and_the_others_go_on():
    items = [{"node": "n1", "host": "a", "health": health([gpu(0, recovery=1)]), "entries": []},
             {"node": "n1", "host": "b", "health": health([gpu(0, recovery=2)]), "entries": []},
             {"node": "n3", "host": "c", "health": health([gpu(0, recovery=1)], driver="1"), "entries": []}]
    result = plan(items, nodes=["n1", "n3"], max_nodes_per_run=3, breaker_percent=100, batch=3)
    rows = dict((r["host"], r) for r in result["nodes"])
    assert [(rows[h]["state"], rows[h]["batch"]) for h in "abc"] == [("unknown", None), ("unknown", None), ("faulty", 1)]
    assert "hosts a and b both name node n1" in rows["a"]["reasons"][0]


def test_a_host_whose_facts_named_a_controller_variable_is_unknown_with_the_reason():
    items = [{"node": "a", "host": "a", "health": {}, "entries": [], "untrusted": "host a returned facts named as variables ..."}]
    row = one(plan(items), "a")
    assert (row["state"], row["action"], row["reasons"]) == ("unknown", "none", ["host a returned facts named as variables ..."])


def test_a_tenants_hostile_eviction_annotation_blocks_its_node_only_and_the_plan_goes_on():
    """Issue 57, item 8: one pod's annotation of 5,000 digits crashed the whole plan (ValueError); it is a blocker naming the
    pod, on its node only, and the other faulty node is planned."""
    hostile = pod(1, node="a")
    hostile["metadata"]["annotations"] = {"gpuops.fleet/eviction-mode": "delete_after_timeout:" + "9" * 5000}
    items = [{"node": "a", "health": health([gpu(0, recovery=1)]), "entries": [entry(uid(1), [G[0]])]},
             {"node": "b", "health": health([gpu(0, recovery=1, uuid=G[1])], driver="570.1"), "entries": []}] + fleet(0, total=8)
    result = plan(items, pods=[hostile], max_nodes_per_run=5, breaker_percent=50)
    a, b = one(result, "a"), one(result, "b")
    assert a["deferred_reason"] == "blocked" and [k["kind"] for k in a["blockers"]] == ["eviction_mode"], a["blockers"]
    assert "ml/p1" in a["blockers"][0]["detail"] and len(a["blockers"][0]["detail"]) < 600
    assert b["batch"] == 1 and b["action"] == "reset"


def test_the_same_fault_gives_the_same_keys_and_condition_reason_whatever_order_its_signals_came_in():
    """Issue 59, item 4: the condition's reason was Xid48 one run and Recovery1 the next for the same fault: the keys came
    in the order of the node's readings."""
    from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import marks

    signals = [{"key": "xid:48", "kind": "xid", "gpu": G[0]}, {"key": "recovery:1", "kind": "recovery", "gpu": G[0]}]
    health = {"gpus": [{"uuid": G[0], "xids": [{"code": 48, "bucket": "reset"}]}]}
    first = rp._keys({"gpus": [G[0]], "signals": signals}, health)
    second = rp._keys({"gpus": [G[0]], "signals": list(reversed(signals))}, health)
    assert first == second == ["recovery:1", "xid:48"]
    assert marks.condition_reason(first, "reset") == marks.condition_reason(second, "reset") == "Recovery1"


@pytest.mark.parametrize("step", ["awaiting_pods", "drain_blocked"])
def test_a_waiting_node_takes_no_batch_place_and_the_run_goes_on_to_the_next_node(step):
    """Issue 59, item 1: a node waiting at awaiting_pods for an allow_completion pod (or at drain_blocked for a PDB) was planned
    as batch 1 on every run, so every faulty node that sorts after it waited as long as the training job (days). A waiting
    node is offered to every run (batch 1, named waiting) and takes no place; it still holds its place in the fleet's cap."""
    items = [{"node": n, "health": health([gpu(0, recovery=1)]), "entries": []} for n in ("a-waits", "b", "c")] + fleet(0, total=17)
    nodes = [_api(i["node"], tainted=i["node"] == "a-waits") for i in items]
    ledger = dict(ledgers.empty(), entries=[{"node": "a-waits", "gpus": [G[0]], "action": "reset", "at": NOW - 86400, "closed_at": None,
                                             "step": step}])
    result = rp.plan(items, nodes, [], [], ledger, {"max_nodes_per_run": 5, "breaker_percent": 10, "same_signal_nodes": 10, "same_signal_percent": 50}, NOW)
    rows = dict((r["node"], r) for r in result["nodes"])
    assert (rows["a-waits"]["batch"], rows["a-waits"]["waiting"]) == (1, step)
    # the fleet's cap is 2 (10% of 20): the waiting node holds one place, one faulty node gets the other, the batch's (1)
    assert result["capacity"]["in_flight"] == ["a-waits"] and result["capacity"]["waiting"] == ["a-waits"] and result["capacity"]["room"] == 1
    assert (rows["b"]["batch"], rows["b"]["waiting"]) == (1, None) and rows["c"]["deferred_reason"] == "deferred_capacity"
    assert "batch 1 (%s)" % step in rp.table(result["nodes"])
    # a node at drained (the reset's step, in this run's hands) is no waiting node: it takes its place, batch 1, and the next
    # faulty node is batch 2, which this run does not act on (what every waiting node did before)
    ledger["entries"][0]["step"] = "drained"
    settings = {"max_nodes_per_run": 5, "breaker_percent": 10, "same_signal_percent": 50, "same_signal_nodes": 10}
    again = dict((r["node"], r) for r in rp.plan(items, nodes, [], [], ledger, settings, NOW)["nodes"])
    assert (again["a-waits"]["batch"], again["a-waits"]["waiting"]) == (1, None) and again["b"]["batch"] == 2
