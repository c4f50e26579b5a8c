# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health, part 1, against a real API server (SIMULATED nodes and GPUs), through playbooks/gpu_health.yml.

A real kube-apiserver with the ReplicaSet and disruption controllers: three ReplicaSet pods on a 3-GPU node, one per
GPU (kubelet's checkpoint, written by the simulated kubelet, says which); GPU 0's NVML recovery action says reset.
Check mode writes nothing (the audit log); the plan evicts only GPU 0's pod and names its PodDisruptionBudget, whose
disruptionsAllowed 0 the real disruption controller computed (without it the status would be empty and every PDB
would block: the harness change is what makes this a test of the PDB, not of a missing controller). Then the same
signal on every node trips the breaker; with record=true the ledger keeps it and the next run is refused until a
reset with a reason.
"""

from __future__ import annotations

import json

import fakenode
from kubernetes.dynamic import DynamicClient

G = ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0", "GPU-11111111-2222-3333-4444-555555555555", "GPU-22222222-2222-3333-4444-555555555555"]
OTHER = ["GPU-33333333-2222-3333-4444-555555555555", "GPU-44444444-2222-3333-4444-555555555555"]
WRITES = ("create", "update", "patch", "delete", "deletecollection")


def replica_set(f, name, node, scheduled=False):
    """One GPU pod of a ReplicaSet on ``node``: pinned by nodeName (past any cordon, as field report 000's pods are), or
    ``scheduled`` through the scheduler (a hostname selector), which keeps a replacement off a cordoned node."""
    pin = {"nodeSelector": {"kubernetes.io/hostname": node}} if scheduled else {"nodeName": node}
    f.cluster.apps.create_namespaced_replica_set(f.namespace, {
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": dict(pin, containers=[{"name": "train", "image": "registry.example/train:1",
                                                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}])}},
    })


def running(f, app, namespace=None):
    """The running pods of ``app`` in ``namespace`` (the fleet's own by default), none being deleted."""
    pods = f.cluster.core.list_namespaced_pod(namespace or f.namespace, label_selector="app=%s" % app).items
    return [p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]


def pdbs(f):
    """policy/v1beta1 PodDisruptionBudgets: what a 1.20 API server serves."""
    return DynamicClient(f.cluster.api_client).resources.get(api_version="policy/v1beta1", kind="PodDisruptionBudget")


def pdb(f, name, app, min_available):
    pdbs(f).create(namespace=f.namespace, body={
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": f.namespace},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}}})


def pdb_status(f, name):
    return pdbs(f).get(name=name, namespace=f.namespace).to_dict().get("status") or {}


def faulty(f, node_name, *lines):
    cfg = f.tmp / "nodes" / node_name / "fake_nvml.cfg"
    with open(str(cfg), "a") as handle:
        handle.write("".join(line + "\n" for line in lines))


def healthy(f, node_name):
    cfg = f.tmp / "nodes" / node_name / "fake_nvml.cfg"
    cfg.write_text("".join(line + "\n" for line in cfg.read_text().splitlines() if not line.startswith("recovery|")))


def test_plan_in_check_mode_evicts_only_the_faulty_gpus_pod_names_its_pdb_and_a_tripped_breaker_stays(fleet, fake_lib_dir):
    f = fleet([{"name": "a", "gpus": G}, {"name": "b", "gpus": [OTHER[0]]}, {"name": "c", "gpus": [OTHER[1]]}])
    names = dict((spec, f.prefix + spec) for spec in ("a", "b", "c"))
    for node in f.nodes:
        cfg = str(f.tmp / "nodes" / node["name"] / "fake_nvml.cfg")
        f.set_host_vars(node["name"], gpuops_node_name=node["name"], checkpoint_guard_checkpoint_path=node["checkpoint"],
                        checkpoint_guard_environment=fakenode.environ(fake_lib_dir, cfg, base={}), gpuops_gpu_health_kernel_log="none")
    # one pod per GPU, in order, so that the simulated kubelet gives them GPU 0, 1, 2
    for app in ("on-gpu0", "on-gpu1", "on-gpu2"):
        replica_set(f, app, names["a"])
        f.wait(lambda app=app: running(f, app), "%s running" % app)
    holders = dict((e.pod_uid, [i for ids in e.device_ids.values() for i in ids or ()]) for e in f.checkpoint(names["a"]).entries)
    uid = dict((app, running(f, app)[0].metadata.uid) for app in ("on-gpu0", "on-gpu1", "on-gpu2"))
    assert [holders[uid[app]] for app in ("on-gpu0", "on-gpu1", "on-gpu2")] == [[G[0]], [G[1]], [G[2]]]
    pdb(f, "keep-gpu0", "on-gpu0", 1)
    pdb(f, "roomy-gpu1", "on-gpu1", 0)
    # the real disruption controller fills the status (without it: no status, every eviction 429 "still being processed")
    f.wait(lambda: pdb_status(f, "keep-gpu0").get("disruptionsAllowed") == 0 and pdb_status(f, "roomy-gpu1").get("disruptionsAllowed") == 1,
           lambda: "the PDBs' status from the disruption controller: %s %s" % (pdb_status(f, "keep-gpu0"), pdb_status(f, "roomy-gpu1")))
    faulty(f, names["a"], "recovery|0|1")
    ledger_ns = f.namespace
    base = {"gpuops_gpu_health_plan": True, "gpuops_gpu_health_namespace": ledger_ns}

    rc, run = f.play(base, "--check", playbook="gpu_health.yml")
    assert rc == 0, run.failure()
    assert [c for c in run.api_calls if c["verb"] in WRITES] == []  # check mode: nothing written
    plan = run.localhost("Plan (read-only unless the breaker trips with gpuops_gpu_health_record, or is reset)")
    rows = dict((r["node"], r) for r in plan["nodes"])
    row = rows[names["a"]]
    assert (row["action"], row["scope"], row["gpus"], row["batch"]) == ("reset", "gpu", [G[0]], 1)
    pod0 = running(f, "on-gpu0")[0].metadata.name
    assert [(e["pod"], e["evict"], e["pdb"]) for e in row["evictions"]] == [("%s/%s" % (f.namespace, pod0), True, "%s/keep-gpu0" % f.namespace)]
    assert [(b["kind"], b["pdb"]) for b in row["blockers"]] == [("pdb", "%s/keep-gpu0" % f.namespace)]
    assert (rows[names["b"]]["action"], rows[names["c"]]["action"]) == ("none", "none")
    assert plan["breaker"]["state"] == "closed" and plan["ledger_written"] is False

    # the same signal on every node: a fleet event, recorded
    faulty(f, names["b"], "recovery|0|1")
    faulty(f, names["c"], "recovery|0|1")
    rc, run = f.play(dict(base, gpuops_gpu_health_record=True), playbook="gpu_health.yml")
    assert rc != 0
    plan = run.localhost("Plan (read-only unless the breaker trips with gpuops_gpu_health_record, or is reset)")
    assert plan["breaker"]["state"] == "tripped" and plan["ledger_written"] is True
    assert [g["key"] for g in plan["signal_groups"]] == ["recovery:1"]
    assert sorted(r["deferred_reason"] for r in plan["nodes"]) == ["fleet_event"] * 3
    writes = [(c["verb"], c["objectRef"]["resource"]) for c in run.api_calls if c["verb"] in WRITES]
    assert writes == [("create", "configmaps")]  # the ledger, nothing else: no node, no pod touched
    assert [len(running(f, app)) for app in ("on-gpu0", "on-gpu1", "on-gpu2")] == [1, 1, 1]

    # the cause gone from b and c: still refused, until a reset with a reason
    healthy(f, names["b"])
    healthy(f, names["c"])
    rc, run = f.play(base, playbook="gpu_health.yml")
    assert rc != 0
    plan = run.localhost("Plan (read-only unless the breaker trips with gpuops_gpu_health_record, or is reset)")
    assert "the breaker is tripped" in plan["msg"] and dict((r["node"], r["deferred_reason"]) for r in plan["nodes"])[names["a"]] == "fleet_event"
    rc, run = f.play(dict(base, gpuops_gpu_health_breaker_reset=True), playbook="gpu_health.yml")
    assert rc != 0  # no reason: refused, named
    assert "breaker_reset_reason" in run.localhost("Plan (read-only unless the breaker trips with gpuops_gpu_health_record, or is reset)")["msg"]
    rc, run = f.play(dict(base, gpuops_gpu_health_breaker_reset=True, gpuops_gpu_health_breaker_reset_reason="bad firmware batch replaced"),
                     playbook="gpu_health.yml")
    assert rc == 0, run.failure()
    plan = run.localhost("Plan (read-only unless the breaker trips with gpuops_gpu_health_record, or is reset)")
    assert plan["breaker"]["state"] == "closed" and plan["breaker"]["reset_reason"] == "bad firmware batch replaced"
    assert dict((r["node"], r["batch"]) for r in plan["nodes"])[names["a"]] == 1
    ledger = json.loads(f.cluster.core.read_namespaced_config_map("gpuops-remediation-ledger", ledger_ns).data["ledger.json"])
    assert ledger["breaker"]["state"] == "closed" and "recovery:1" in ledger["breaker"]["tripped_reason"]


def shared_replica_set(f, name, node, gib):
    """A ReplicaSet of one pod holding ``gib`` GiB of aliyun.com/gpu-mem (gpushare) on ``node``."""
    f.cluster.apps.create_namespaced_replica_set(f.namespace, {
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"nodeName": node, "containers": [{"name": "infer", "image": "registry.example/infer:1",
                                                                         "resources": {"limits": {"aliyun.com/gpu-mem": str(gib)}}}]}}},
    })


def test_plan_on_a_gpushare_node_evicts_only_the_pods_whose_allocation_names_the_faulty_gpu(fleet, fake_lib_dir):
    """gpushare: kubelet's checkpoint holds fake IDs ``<uuid>-_-<n>`` picked without regard to the GPU, so the IDs
    cannot say which GPU a pod uses; the plugin's AllocResp (NVIDIA_VISIBLE_DEVICES) can. Two pods share GPU 0 and
    one sits on GPU 1; GPU 0's recovery action says reset: both GPU 0 pods, and only they, are planned for eviction."""
    f = fleet([{"name": "s", "gpus": G[:2], "gpu_mem_gib": 15}])
    node = f.nodes[0]["name"]
    cfg = str(f.tmp / "nodes" / node / "fake_nvml.cfg")
    f.set_host_vars(node, gpuops_node_name=node, checkpoint_guard_checkpoint_path=f.nodes[0]["checkpoint"],
                    checkpoint_guard_environment=fakenode.environ(fake_lib_dir, cfg, base={}), gpuops_gpu_health_kernel_log="none")
    # the gpushare device plugin's pod (the simulated kubelet registers aliyun.com/gpu-mem once it runs)
    f.cluster.core.create_namespaced_pod(f.namespace, {
        "metadata": {"name": "gpushare-plugin", "labels": {"component": "gpushare-device-plugin"}},
        "spec": {"nodeName": node, "containers": [{"name": "plugin", "image": "registry.example/gpushare-device-plugin:1"}]}})
    f.wait(lambda: int((f.node(node).status.allocatable or {}).get("aliyun.com/gpu-mem", "0")) == 30, "aliyun.com/gpu-mem allocatable 30")
    # binpack, in order: big-a (10 GiB) on GPU 0, big-b (10 GiB) does not fit beside it: GPU 1, small (4 GiB) on GPU 0
    for app, gib in (("big-a", 10), ("big-b", 10), ("small", 4)):
        shared_replica_set(f, app, node, gib)
        f.wait(lambda app=app: running(f, app), "%s running" % app)
    placed = dict((app, running(f, app)[0].metadata.annotations.get("ALIYUN_COM_GPU_MEM_IDX")) for app in ("big-a", "big-b", "small"))
    assert placed == {"big-a": "0", "big-b": "1", "small": "0"}
    faulty(f, node, "recovery|0|1")

    rc, run = f.play({"gpuops_gpu_health_plan": True, "gpuops_gpu_health_namespace": f.namespace}, "--check", playbook="gpu_health.yml")
    assert rc == 0, run.failure()
    assert [c for c in run.api_calls if c["verb"] in WRITES] == []
    plan = run.localhost("Plan (read-only unless the breaker trips with gpuops_gpu_health_record, or is reset)")
    row = dict((r["node"], r) for r in plan["nodes"])[node]
    assert (row["action"], row["scope"], row["gpus"]) == ("reset", "gpu", [G[0]])
    on_gpu0 = sorted("%s/%s" % (f.namespace, running(f, app)[0].metadata.name) for app in ("big-a", "small"))
    assert sorted(e["pod"] for e in row["evictions"]) == on_gpu0
    assert all(e["evict"] for e in row["evictions"]) and row["blockers"] == []
    # the plugin's own pod is not a GPU holder and is not planned: a GPU-scoped drain leaves the node's other pods be
    assert not [e for e in row["evictions"] if e["pod"].endswith("/gpushare-plugin")]
