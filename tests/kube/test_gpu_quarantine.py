# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health, part 2: gpuops.fleet.gpu_quarantine against a real API server (SIMULATED nodes and GPUs), with the
disruption controller, the audit log as the judge.

A 3-GPU node with one ReplicaSet pod per GPU (kubelet's checkpoint, written by the simulated kubelet, says which);
GPU 0's recovery action says reset. The plan (playbooks/gpu_health.yml) hands its row to the quarantine: exactly one
eviction, for GPU 0's pod; the pods on GPUs 1 and 2 keep their UIDs; a second run writes nothing; the release
removes only what was added. A PodDisruptionBudget blocks the drain: the node stays quarantined at drain_blocked, and
more replicas let the next run finish. A run killed (SIGKILL) mid-drain leaves the annotation; the next run resumes
from it. A cordon someone else set survives the release.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import fakenode
import kubefleet
from test_gpu_health_plan import G, OTHER, WRITES, faulty, healthy, pdb, pdb_status, replica_set, running

PLAN_TASK = "Plan (read-only unless the breaker trips with gpuops_gpu_health_record, or is reset)"
REMEDIATION = "gpuops.fleet/gpu-remediation"
MARK = "gpuops.fleet/cordoned-for-gpu-health"
TAINT = "gpuops.fleet/gpu-unhealthy"


def setup(fleet, fake_lib_dir, nodes=None, before_pods=None):
    """The first node's three GPU pods (one ReplicaSet each) and GPU 0's recovery action "reset". ``before_pods(f)`` runs
    first; where it deploys the device plugin the pods go through the scheduler (else they are pinned by nodeName)."""
    f = fleet(nodes or [{"name": "a", "gpus": G}])
    for node in f.nodes:
        cfg = str(f.tmp / "nodes" / node["name"] / "fake_nvml.cfg")
        f.set_host_vars(node["name"], gpuops_node_name=node["name"], checkpoint_guard_checkpoint_path=node["checkpoint"],
                        checkpoint_guard_environment=fakenode.environ(fake_lib_dir, cfg, base={}), gpuops_gpu_health_kernel_log="none",
                        gpuops_gpu_health_mark_path=str(f.tmp / "nodes" / node["name"] / "var/lib/gpuops/health/last-remediation.json"))
    name = f.nodes[0]["name"]
    scheduled = before_pods is not None
    if scheduled:
        before_pods(f)
    for app in ("on-gpu0", "on-gpu1", "on-gpu2"):
        replica_set(f, app, name, scheduled)
        f.wait(lambda app=app: running(f, app), "%s running" % app)
    faulty(f, name, "recovery|0|1")
    return f, name


def plan_row(f, name):
    rc, run = f.play({"gpuops_gpu_health_plan": True, "gpuops_gpu_health_namespace": f.namespace}, playbook="gpu_health.yml")
    assert rc == 0, run.failure()
    return dict((r["node"], r) for r in run.localhost(PLAN_TASK)["nodes"])[name]


def quarantine_play(f, args):
    playbook = f.tmp / ("quarantine-%d.yml" % time.monotonic_ns())
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False,
                                     "tasks": [{"name": "the module", "gpuops.fleet.gpu_quarantine": args, "ignore_errors": True}]}]))
    return str(playbook)


def module(f, args, *extra):
    rc, run = f.play({}, *extra, playbook=quarantine_play(f, args))
    return run.localhost("the module"), run


def node_state(f, name):
    node = f.node(name)
    ann = node.metadata.annotations or {}
    taints = [(t.key, t.value, t.effect) for t in node.spec.taints or [] if t.key == TAINT]
    return bool(node.spec.unschedulable), json.loads(ann[REMEDIATION]) if REMEDIATION in ann else None, MARK in ann, taints


def writes(run, namespace=None):
    """The run's writes as (verb, resource[/subresource], name): all, or those in ``namespace``."""
    return [(c["verb"], c["objectRef"]["resource"] + ("/" + c["objectRef"]["subresource"] if c["objectRef"].get("subresource") else ""),
             c["objectRef"].get("name")) for c in run.api_calls
            if c["verb"] in WRITES and (namespace is None or c["objectRef"].get("namespace") == namespace)]


def report(f, name):
    """The node's remediation report (the role's gpu-remediation-<node>.json in the fleet's report directory)."""
    return json.loads((f.tmp / "report" / ("gpu-remediation-%s.json" % name)).read_text())


def evictions(run):
    """The pods an eviction request succeeded for (201), in order."""
    return [c["objectRef"]["name"] for c in run.api_calls
            if c["verb"] == "create" and c["objectRef"].get("subresource") == "eviction" and (c.get("responseStatus") or {}).get("code") == 201]


def ledger(f):
    return json.loads(f.cluster.core.read_namespaced_config_map("gpuops-remediation-ledger", f.namespace).data["ledger.json"])


def test_a_gpu_scoped_quarantine_evicts_only_the_faulty_gpus_pod_and_the_release_removes_only_ours(fleet, fake_lib_dir):
    f, name = setup(fleet, fake_lib_dir)
    row = plan_row(f, name)
    assert (row["action"], row["scope"], row["gpus"]) == ("reset", "gpu", [G[0]])
    uids = dict((app, running(f, app)[0].metadata.uid) for app in ("on-gpu0", "on-gpu1", "on-gpu2"))
    pod0 = "%s/%s" % (f.namespace, running(f, "on-gpu0")[0].metadata.name)
    args = {"state": "quarantined", "plan": row, "namespace": f.namespace, "drain_timeout": 60, "run": "job-41"}

    result, run = module(f, args, "--check")
    assert result["changed"] and result["evicted"] == [pod0] and not result.get("failed"), result
    assert writes(run) == []  # check mode writes nothing

    result, run = module(f, args)
    assert result["changed"] and result["step"] == "drained" and result["evicted"] == [pod0], result
    # exactly one eviction, for GPU 0's pod; the ledger's entry first (the record: where it cannot be written the node is
    # left as it was), then one node patch to quarantine, the GPUHealthy condition (the status subresource), the ledger's
    # step draining (the node is marked), the evictions, the ledger's step drained and its mirror on the node (a 1.20 API
    # server answers policy/v1's eviction 404 first: drain.evict then asks policy/v1beta1; only that one succeeds)
    assert evictions(run) == [pod0.split("/")[1]]
    assert [w[:2] for w in writes(run) if w[1] != "pods/eviction"] == [
        ("create", "configmaps"), ("patch", "nodes"), ("patch", "nodes/status"), ("update", "configmaps"), ("update", "configmaps"),
        ("patch", "nodes")]
    unschedulable, record, marked, taints = node_state(f, name)
    assert unschedulable and marked and taints == [(TAINT, G[0][:12], "NoSchedule")]
    assert (record["gpus"], record["action"], record["scope"], record["step"], record["run"], record["cordoned_by_us"]) == (
        [G[0]], "reset", "gpu", "drained", "job-41", True)
    # the other GPUs' pods were not touched; GPU 0's ReplicaSet made a new pod (it cannot land here: cordoned)
    assert [running(f, app)[0].metadata.uid for app in ("on-gpu1", "on-gpu2")] == [uids["on-gpu1"], uids["on-gpu2"]]
    f.wait(lambda: not [p for p in running(f, "on-gpu0") if p.metadata.uid == uids["on-gpu0"]], "GPU 0's pod gone")
    entry = ledger(f)["entries"][-1]
    assert (entry["node"], entry["gpus"], entry["action"], entry["closed_at"], entry["run"]) == (name, [G[0]], "reset", None, "job-41")
    assert (entry["step"], entry["scope"], entry["cordoned_by_us"]) == ("drained", "gpu", True)  # the record: the annotation mirrors it

    # a second run writes nothing
    result, run = module(f, args)
    assert not result["changed"] and result["step"] == "drained", result
    assert writes(run) == []

    # the plan now counts the node as in flight: a quarantine of ours
    released, run = module(f, {"state": "released", "node": name, "namespace": f.namespace, "result": "recovered"})
    assert released["changed"] and released["uncordoned"] and released["untainted"] and not released["foreign_cordon"], released
    assert node_state(f, name) == (False, None, False, [])
    entry = ledger(f)["entries"][-1]
    assert entry["result"] == "recovered" and entry["closed_at"] and entry["recover_seconds"] == released["recover_seconds"] >= 0
    again, run = module(f, {"state": "released", "node": name, "namespace": f.namespace})
    assert not again["changed"] and writes(run) == []


def test_a_pdb_blocks_the_drain_the_node_stays_quarantined_and_more_replicas_let_the_next_run_finish(fleet, fake_lib_dir):
    f, name = setup(fleet, fake_lib_dir)
    pdb(f, "keep-gpu0", "on-gpu0", 1)
    f.wait(lambda: pdb_status(f, "keep-gpu0").get("disruptionsAllowed") == 0, lambda: "the PDB's status: %s" % pdb_status(f, "keep-gpu0"))
    row = plan_row(f, name)
    assert [b["kind"] for b in row["blockers"]] == ["pdb"]
    args = {"state": "quarantined", "plan": row, "namespace": f.namespace, "drain_timeout": 8}
    result, run = module(f, args)
    assert result["failed"] and result["step"] == "drain_blocked" and "PodDisruptionBudget" in result["msg"], result
    assert "stays quarantined" in result["msg"]
    unschedulable, record, marked, taints = node_state(f, name)
    assert unschedulable and record["step"] == "drain_blocked" and taints
    assert len(running(f, "on-gpu0")) == 1  # nothing was evicted: the PDB held

    # more replicas: the disruption controller allows one eviction; the next run finishes from drain_blocked
    f.cluster.apps.patch_namespaced_replica_set("on-gpu0", f.namespace, {"spec": {"replicas": 2}})
    f.wait(lambda: pdb_status(f, "keep-gpu0").get("disruptionsAllowed") == 1, lambda: "the PDB's status: %s" % pdb_status(f, "keep-gpu0"))
    result, run = module(f, args)
    assert result["changed"] and result["step"] == "drained" and result["resumed_from"] == "drain_blocked", result
    assert node_state(f, name)[1]["step"] == "drained"


def test_a_killed_run_resumes_from_the_annotation(fleet, fake_lib_dir):
    f, name = setup(fleet, fake_lib_dir)
    pdb(f, "keep-gpu0", "on-gpu0", 1)
    f.wait(lambda: pdb_status(f, "keep-gpu0").get("disruptionsAllowed") == 0, lambda: "the PDB's status: %s" % pdb_status(f, "keep-gpu0"))
    row = plan_row(f, name)
    args = {"state": "quarantined", "plan": row, "namespace": f.namespace, "drain_timeout": 120}
    env = dict(os.environ, K8S_AUTH_KUBECONFIG=os.path.join(f.cluster.workdir, "role.kubeconfig"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(kubefleet_root(), "build", "collections"))
    out = f.tmp / "killed-run.log"
    with open(str(out), "w") as log:
        proc = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(f.inventory), quarantine_play(f, args)],
                                cwd=kubefleet_root(), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        f.wait(lambda: (node_state(f, name)[1] or {}).get("step") == "draining",
               lambda: "the run's first patch (step draining); the run said: %s" % out.read_text()[-2000:])
        time.sleep(2)  # inside the eviction's 429 retries
    finally:
        # the module runs in a process of its own (AnsiballZ, outside the playbook's process group): kill it too, as a
        # dead controller or OOM would
        for pid in module_processes("AnsiballZ_gpu_quarantine"):
            os.kill(pid, signal.SIGKILL)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    # a SIGKILLed process keeps its command line until the kernel has torn it down, which on a loaded machine is not at
    # once (CI saw two still listed right after the kill): wait for them, killing again what is left
    deadline = time.monotonic() + 30
    while module_processes("AnsiballZ_gpu_quarantine") and time.monotonic() < deadline:
        for pid in module_processes("AnsiballZ_gpu_quarantine"):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
    assert not module_processes("AnsiballZ_gpu_quarantine")
    unschedulable, record, marked, taints = node_state(f, name)
    assert unschedulable and marked and record["step"] == "draining" and len(running(f, "on-gpu0")) == 1

    f.cluster.apps.patch_namespaced_replica_set("on-gpu0", f.namespace, {"spec": {"replicas": 2}})
    f.wait(lambda: pdb_status(f, "keep-gpu0").get("disruptionsAllowed") == 1, lambda: "the PDB's status: %s" % pdb_status(f, "keep-gpu0"))
    result, run = module(f, dict(args, drain_timeout=60))
    assert result["changed"] and result["step"] == "drained" and result["resumed_from"] == "draining", result
    assert record["started"] == node_state(f, name)[1]["started"]  # the same quarantine, not a new one
    assert len([e for e in ledger(f)["entries"] if e["node"] == name and not e["closed_at"]]) == 1  # one ledger entry


def test_a_foreign_cordon_is_never_lifted_and_other_gpus_or_bad_input_are_refused_unchanged(fleet, fake_lib_dir):
    f, name = setup(fleet, fake_lib_dir, [{"name": "a", "gpus": G}, {"name": "b", "gpus": [OTHER[0]]}])
    f.cluster.core.patch_node(name, {"spec": {"unschedulable": True}})  # someone's kubectl cordon
    row = plan_row(f, name)
    result, run = module(f, {"state": "quarantined", "plan": row, "namespace": f.namespace, "drain_timeout": 60})
    assert result["changed"] and result["foreign_cordon"] and not result["cordoned"], result
    unschedulable, record, marked, taints = node_state(f, name)
    assert unschedulable and not marked and record["cordoned_by_us"] is False and taints

    # a quarantine of other GPUs on the same node is refused, naming the one in progress; nothing written
    other, run = module(f, {"state": "quarantined", "node": name, "gpus": [G[1]], "action": "reset", "namespace": f.namespace})
    assert other["failed"] and "already in a remediation" in other["msg"] and G[0] in other["msg"] and writes(run) == []
    # bad input names the option
    for bad, field in (({"action": "observe", "gpus": [G[0]]}, "action"), ({"action": "reset", "gpus": ["gpu0"]}, "gpus[0]"),
                       ({"action": "reset", "gpus": [G[0]], "scope": "node"}, "scope"), ({"action": "reset"}, "gpus")):
        refused, run = module(f, dict(bad, state="quarantined", node=f.nodes[1]["name"], namespace=f.namespace))
        assert refused["failed"] and refused["msg"].startswith(field + ":"), refused
        assert writes(run) == []

    released, run = module(f, {"state": "released", "node": name, "namespace": f.namespace})
    assert released["changed"] and released["foreign_cordon"] and not released["uncordoned"], released
    assert node_state(f, name) == (True, None, False, [])  # their cordon stays; our taint and annotation are gone


def module_processes(marker):
    """Live processes whose command line holds ``marker`` (a zombie, dead and not yet reaped, is not one)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as handle:
                    if marker.encode() not in handle.read():
                        continue
                with open("/proc/%s/stat" % pid, "rb") as handle:
                    if handle.read().rsplit(b")", 1)[-1].split()[0] in (b"Z", b"X"):
                        continue
                found.append(int(pid))
            except (OSError, IndexError):
                continue
    return found


def kubefleet_root():
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_pause_takes_the_nvml_clients_pods_off_the_drained_node_and_unpause_brings_them_back(fleet, fake_lib_dir):
    """Before a reset nothing may hold NVML: the device plugin's DaemonSet excludes gpuops.fleet/gpu-maintenance=true,
    so the real DaemonSet controller removes its pod from the paused node only; unpaused, it starts a new one (which is
    how the plugin marks a GPU Healthy again), and the rollout engine waits for it and checks it."""
    f, name = setup(fleet, fake_lib_dir)
    rc, run = f.play(f.role_vars())  # the collection's device plugin DaemonSet (OnDelete, the maintenance exclusion)
    assert rc == 0, run.failure()
    plugin = dict((p.spec.node_name, p.metadata.uid) for p in f.plugin_pods())
    assert name in plugin
    f.cluster.core.patch_node(name, {"metadata": {"labels": {"gpuops.fleet/gpu-maintenance": "false"}}})  # a value to restore
    row = plan_row(f, name)
    selector = [{"name": "nvidia-device-plugin-ds"}]

    refused, run = module(f, {"state": "paused", "node": name, "namespace": f.namespace, "pause_pods": selector})
    assert refused["failed"] and "not quarantined and drained" in refused["msg"] and writes(run) == []

    result, run = module(f, {"state": "quarantined", "plan": row, "namespace": f.namespace, "drain_timeout": 60})
    assert result["step"] == "drained", result
    paused, run = module(f, {"state": "paused", "node": name, "namespace": f.namespace, "pause_pods": selector, "pause_timeout": 60})
    assert paused["changed"] and paused["previous_labels"] == {"gpuops.fleet/gpu-maintenance": "false"}, paused
    assert name not in [p.spec.node_name for p in f.plugin_pods()]  # the controller took the plugin off this node only
    assert len(f.plugin_pods()) == len(plugin) - 1
    again, run = module(f, {"state": "paused", "node": name, "namespace": f.namespace, "pause_pods": selector, "pause_timeout": 60})
    assert not again["changed"] and [w for w in writes(run) if w[1] == "nodes"] == []

    unpaused, run = module(f, {"state": "unpaused", "node": name, "namespace": f.namespace})
    assert unpaused["changed"] and unpaused["restored_labels"] == {"gpuops.fleet/gpu-maintenance": "false"}, unpaused
    rollout = {"namespace": f.namespace, "name": "nvidia-device-plugin-daemonset", "nodes": [name], "verify_current": True, "pod_timeout": 60}
    back = f.module("gpuops.fleet.daemonset_rollout", rollout)
    assert not back.get("failed") and [(r["node"], r["status"]) for r in back["rows"]] == [(name, "ready")], back["rows"]
    now = dict((p.spec.node_name, p.metadata.uid) for p in f.plugin_pods())
    assert now[name] != plugin[name] and all(now[n] == uid for n, uid in plugin.items() if n != name)

    released, run = module(f, {"state": "released", "node": name, "namespace": f.namespace})
    assert released["changed"] and node_state(f, name) == (False, None, False, [])
    assert f.node(name).metadata.labels["gpuops.fleet/gpu-maintenance"] == "false"


def verified(run, name):
    """(verify, verify_seen) of the node's row in the role's verification pod run (device_plugin's entry point verify)."""
    found = [h[name] for h in run.tasks("Run the verification pod on the nodes (gpuops.fleet.daemonset_rollout, nothing deleted)") if name in h]
    assert found, "the verification pod did not run"
    row = [r for r in found[-1]["rows"] if r["node"] == name][0]
    return row["verify"], row["verify_seen"]


def remediation_fleet(fleet, fake_lib_dir, nodes=None):
    """A fleet for playbooks/gpu_remediation.yml: setup()'s node a (GPU 0 says reset) beside healthy b and c, each with a
    fake systemd; the device plugin deployed (with its maintenance exclusion); earlier tests' quarantines cleared.
    Returns (fleet, node a, the plugin pods' UIDs by node, the GPU pods' UIDs by app, the playbook's extra vars)."""
    def plugin_first(f):
        for node in f.nodes:
            cfg = str(f.tmp / "nodes" / node["name"] / "fake_nvml.cfg")
            systemd_dir = f.tmp / "nodes" / node["name"] / "systemd"
            systemd_dir.mkdir()
            f.set_host_vars(node["name"], checkpoint_guard_environment=dict(fakenode.environ(fake_lib_dir, cfg, base={}),
                                                                            GPUOPS_FAKE_SYSTEMD_DIR=str(systemd_dir)))
        rc, run = f.play(f.role_vars())  # the device plugin, with its maintenance exclusion
        assert rc == 0, run.failure()
        f.wait(lambda: all(f.allocatable(n["name"]) == len(n["gpus"]) for n in f.nodes), "every node's GPUs allocatable")

    # the device plugin first, then the pods through the scheduler: while the node is quarantined their replacements wait,
    # as on a real cluster, so the verification pod before the release is given the remediated GPU
    f, name = setup(fleet, fake_lib_dir, nodes or [{"name": "a", "gpus": G}, {"name": "b", "gpus": [OTHER[0]]}, {"name": "c", "gpus": [OTHER[1]]}],
                    before_pods=plugin_first)
    plugin = dict((p.spec.node_name, p.metadata.uid) for p in f.plugin_pods())
    # this API server is shared by the session's tests, and the plan's fleet-wide cap rightly counts every quarantine
    # of ours in flight: earlier tests' quarantined nodes would defer this one (deferred_capacity)
    for other in f.cluster.core.list_node().items:
        if REMEDIATION in (other.metadata.annotations or {}) and other.metadata.name != name:
            f.cluster.core.patch_node(other.metadata.name, {"metadata": {"annotations": {REMEDIATION: None}}})
    uids = dict((app, running(f, app)[0].metadata.uid) for app in ("on-gpu0", "on-gpu1", "on-gpu2"))
    extra = {"gpuops_gpu_health_namespace": f.namespace, "gpu_remediation_device_plugin_namespace": f.namespace,
             "gpu_remediation_pause_pods": [{"name": "nvidia-device-plugin-ds"}], "gpu_remediation_stop_units": [],
             "gpu_remediation_recovery_timeout": 60, "gpu_remediation_drain_timeout": 60,
             "gpu_remediation_report_dir": str(f.tmp / "report")}
    return f, name, plugin, uids, extra


def test_the_remediation_playbook_resets_only_the_faulty_gpu_and_releases_the_node(fleet, fake_lib_dir):
    """playbooks/gpu_remediation.yml end to end on the simulated fleet: report mode writes nothing; remediate
    quarantines node a, evicts GPU 0's pod only, pauses the device plugin there (the real DaemonSet controller removes
    it), resets GPU 0 on the fake node (the recovery action is gone), brings the plugin back, waits for it and
    releases the node; a second run finds nothing to do."""
    f, name, plugin, uids, extra = remediation_fleet(fleet, fake_lib_dir)
    pod0 = running(f, "on-gpu0")[0].metadata.name

    rc, run = f.play(extra, playbook="gpu_remediation.yml")  # report, the default
    assert rc == 0, run.failure()
    assert writes(run) == []

    rc, run = f.play(dict(extra, gpu_remediation_mode="remediate"), playbook="gpu_remediation.yml")
    assert rc == 0, run.failure()
    assert evictions(run) == [pod0], (run.localhost("Choose the nodes to act on"), run.tasks("Remediate the node"))
    cfg = (f.tmp / "nodes" / name / "fake_nvml.cfg").read_text()
    assert "recovery|0|1" not in cfg  # the fake nvidia-smi's reset cleared NVML's recovery action
    assert node_state(f, name) == (False, None, False, [])
    assert f.node(name).metadata.labels.get("gpuops.fleet/gpu-maintenance") is None  # the pause's label gone
    now = dict((p.spec.node_name, p.metadata.uid) for p in f.plugin_pods())
    assert now[name] != plugin[name] and all(now[n] == uid for n, uid in plugin.items() if n != name)
    assert [running(f, app)[0].metadata.uid for app in ("on-gpu1", "on-gpu2")] == [uids["on-gpu1"], uids["on-gpu2"]]
    entry = ledger(f)["entries"][-1]
    assert (entry["node"], entry["result"], entry["gpus"]) == (name, "recovered", [G[0]]) and entry["closed_at"]
    # before the release, the verification pod asked for every free GPU (GPU 0 alone: the others' pods run, GPU 0's
    # replacement waited for the cordon to go) and was given GPU 0; after it, the replacement runs again
    assert verified(run, name) == ("ok", [G[0]]), verified(run, name)
    f.wait(lambda: running(f, "on-gpu0"), "GPU 0's replacement pod running after the release")
    # the run's fleet page (issue 61): node a released, its GPU 0 in the remediation's state, its timeline with the controller's
    # times; the other nodes as the health report says (the page in a browser: tests/lab/test_fleet_page_browser.py)
    page = (f.tmp / "report" / "gpu-remediation.html").read_text()
    data = json.loads(page.split('<script type="application/json" id="fleet-data">', 1)[1].split("</script>", 1)[0])
    nodes = dict((n["node"], n) for n in data["nodes"])
    assert sorted(nodes) == sorted(n["name"] for n in f.nodes) and nodes[name]["state"] == "released"
    assert [c["state"] for c in nodes[name]["gpus"]] == ["released", "ok", "ok"], nodes[name]["gpus"]
    steps = [t["step"] for t in nodes[name]["timeline"]]
    assert steps[0] == "quarantine (1 pods evicted)" and steps[-1] == "release" and "reset" in steps, steps
    assert nodes[name]["timeline"][0]["at"] <= nodes[name]["timeline"][-1]["at"] and nodes[name]["timeline"][-1]["at"].endswith("Z")

    rc, run = f.play(dict(extra, gpu_remediation_mode="remediate"), playbook="gpu_remediation.yml")
    assert rc == 0, run.failure()
    assert writes(run) == []  # nothing planned, nothing touched


def test_node_reboot_fails_on_an_unchanged_boot_id_and_a_failed_reset_escalates_to_a_reboot_it_proves(fleet, fake_lib_dir):
    """node_reboot: a bootID that does not change fails the step, naming it. The playbook, with a process outside
    Kubernetes holding the GPU's NVML (the reset fails, "In use by another client"): with only reset allowed, the node
    stays quarantined (GPU 0's pod alone evicted, the pause undone) with a needs_human report; with reboot allowed too,
    the next run widens the quarantine to the node, runs the reboot command (the simulated kubelet power-cycles the fake
    node: the holder is killed, the GPU cleared, a new bootID), proves the reboot through the API, post-checks the GPU,
    and releases the node as rebooted; a third run writes nothing."""
    f, name, dummy, uids, extra = remediation_fleet(fleet, fake_lib_dir, [{"name": "a", "gpus": G}])
    boot = f.node(name).status.node_info.boot_id
    same = f.module("gpuops.fleet.node_reboot", {"node": name, "previous_boot_id": boot, "timeout": 2})
    assert same["failed"] and "did not reboot: its bootID is still %s" % boot in same["msg"] and same["rebooted"] is False

    pods = dict((app, running(f, app)[0].metadata.name) for app in ("on-gpu0", "on-gpu1", "on-gpu2"))
    cfg = str(f.tmp / "nodes" / name / "fake_nvml.cfg")
    holder = subprocess.Popen([sys.executable, "-c", "import pynvml, time; pynvml.nvmlInit(); print('up', flush=True); time.sleep(600)"],
                              env=fakenode.environ(fake_lib_dir, cfg), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        remediate = dict(extra, gpu_remediation_mode="remediate")
        rc, run = f.play(remediate, playbook="gpu_remediation.yml")
        assert rc != 0
        assert evictions(run) == [pods["on-gpu0"]]
        cordoned, record, marked, taints = node_state(f, name)
        assert cordoned and marked and (record["action"], record["step"], record["scope"]) == ("reset", "drained", "gpu")
        assert f.node(name).metadata.labels.get("gpuops.fleet/gpu-maintenance") is None  # the pause undone (always)
        report = json.loads((f.tmp / "report" / ("gpu-remediation-%s.json" % name)).read_text())
        assert (report["outcome"], report["failed_step"], report["tried"]) == ("needs_human", "reset", ["reset"]), report
        assert "In use by another client" in report["error"] and "reboot in gpu_remediation_allowed_actions" in report["next"]
        assert [running(f, app)[0].metadata.uid for app in ("on-gpu1", "on-gpu2")] == [uids["on-gpu1"], uids["on-gpu2"]]

        rc, run = f.play(dict(remediate, gpu_remediation_allowed_actions=["reset", "reboot"],
                              gpu_remediation_reboot_command=["touch", f.nodes[0]["reboot_request"]]), playbook="gpu_remediation.yml")
        assert rc == 0, run.failure()
        assert holder.wait(30) == -signal.SIGKILL  # the reboot killed it
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
        holder.stdout.close()
    # the widened quarantine evicted the pods on the other GPUs (the reboot takes the whole node; GPU 0's replacement
    # waits for the scheduler), never the device plugin's DaemonSet pod
    assert sorted(evictions(run)) == sorted([pods["on-gpu1"], pods["on-gpu2"]])
    # the verification pod asked for every free GPU (all three, now) and was given GPU 0
    assert verified(run, name) == ("ok", G), verified(run, name)
    wait = [h[name] for h in run.tasks("The node back, with a new boot ID, Ready (the API's proof)") if name in h][-1]
    assert wait["rebooted"] and wait["ready"] and wait["previous_boot_id"] == boot and wait["boot_id"] == f.node(name).status.node_info.boot_id
    assert "recovery|0|" not in (f.tmp / "nodes" / name / "fake_nvml.cfg").read_text()
    assert node_state(f, name) == (False, None, False, [])
    entry = ledger(f)["entries"][-1]
    assert (entry["node"], entry["result"], entry["action"], entry["escalated_from"]) == (name, "rebooted", "reboot", "reset") and entry["closed_at"]

    rc, run = f.play(dict(remediate, gpu_remediation_allowed_actions=["reset", "reboot"]), playbook="gpu_remediation.yml")
    assert rc == 0, run.failure()
    assert writes(run) == []


def test_the_ledger_at_the_configmaps_size_limit_never_leaves_a_node_changed_without_its_entry(fleet):
    """Issue 48, item 6, on the real API server (its 1 MiB ConfigMap limit, 422 past it). A ledger of closed 8-GPU entries
    just under 1 MiB: the quarantine trims the oldest closed entries and opens the node's (before, the node was cordoned
    and tainted, then the ledger's write failed with a bare 422), and the release closes it. A ledger of open entries
    just under 1 MiB cannot be trimmed: the quarantine fails naming the ConfigMap and its size, and the node is unchanged."""
    f = fleet([{"name": "a", "gpus": [G[0]]}])
    name = f.nodes[0]["name"]
    eight = ["GPU-%08x-2222-3333-4444-555555555555" % i for i in range(8)]

    def fill(open_entries):
        entries, now = [], int(time.time())
        ledger = {"version": 1, "breaker": {"state": "closed"}, "paused": False, "entries": entries}
        # as many as the API server takes (a ConfigMap's data, its key's name included, at most 1 MiB): one more entry does not fit
        while True:
            i = len(entries)
            entries.append({"node": "old-%d" % i, "gpus": eight, "action": "reset", "keys": ["recovery:1"], "driver_version": "535.104.05",
                            "at": now - 90000 + i, "closed_at": None if open_entries else now - 89000 + i, "result": None if open_entries
                            else "recovered", "run": "job-%d" % i, "recover_seconds": None if open_entries else 1000})
            if len(json.dumps(ledger, separators=(",", ":"))) + len("ledger.json") > 1024 * 1024:
                entries.pop()
                break
        # within 20 bytes of the limit (the last entry's run padded): no entry of any node fits beside them
        entries[-1]["run"] += "x" * (1024 * 1024 - len("ledger.json") - len(json.dumps(ledger, separators=(",", ":"))) - 20)
        body = {"metadata": {"name": "gpuops-remediation-ledger"}, "data": {"ledger.json": json.dumps(ledger, separators=(",", ":"))}}
        try:
            f.cluster.core.delete_namespaced_config_map("gpuops-remediation-ledger", f.namespace)
        except Exception:  # noqa: BLE001  pylint: disable=broad-exception-caught
            pass
        f.cluster.core.create_namespaced_config_map(f.namespace, body)  # the API server takes it: under 1 MiB
        return len(entries)

    count = fill(open_entries=False)
    assert count > 1700, count
    args = {"state": "quarantined", "node": name, "gpus": [G[0]], "action": "reset", "namespace": f.namespace, "drain_timeout": 30}
    result = f.module("gpuops.fleet.gpu_quarantine", args)
    assert not result.get("failed") and result["step"] == "drained", result
    cordoned, record, marked, taints = node_state(f, name)
    assert cordoned and marked and taints and (record["gpus"], record["step"]) == ([G[0]], "drained")
    data = f.cluster.core.read_namespaced_config_map("gpuops-remediation-ledger", f.namespace).data["ledger.json"]
    kept = json.loads(data)["entries"]
    assert len(data) <= 900 * 1024 and kept[-1]["node"] == name and kept[-1]["closed_at"] is None and len(kept) < count
    released = f.module("gpuops.fleet.gpu_quarantine", {"state": "released", "node": name, "namespace": f.namespace})
    assert released["changed"] and not released.get("failed") and node_state(f, name) == (False, None, False, [])
    assert ledger(f)["entries"][-1]["closed_at"] is not None

    fill(open_entries=True)
    result = f.module("gpuops.fleet.gpu_quarantine", args)
    assert result["failed"] and "ConfigMap %s/gpuops-remediation-ledger: the ledger would hold" % f.namespace in result["msg"], result
    assert "open entries, which are never dropped" in result["msg"]
    assert node_state(f, name) == (False, None, False, [])  # untouched: not cordoned, no taint, no annotation


def test_a_node_whose_device_plugin_does_not_come_back_stays_quarantined_without_the_verification_pod(fleet, fake_lib_dir):
    """Issue 48, item 8: with gpu_remediation_verify false the role released a node whose device-plugin pod was not Ready
    (daemonset_rollout named it in failed_nodes, and the role never read them), allocatable 0 of 3. The DaemonSet's new
    image crashes on node a (the simulated kubelet's plugin_crash, for that image only); the pod before the reset runs the
    old one. After the reset the node stays quarantined, its ledger entry open, with a needs_human report naming the pod."""
    broken = "registry.example/k8s-device-plugin:broken"
    nodes = [{"name": "a", "gpus": G, "faults": ["plugin_crash"], "fault_images": [broken]}]
    f, name, dummy, dummy2, extra = remediation_fleet(fleet, fake_lib_dir, nodes)
    ds = f.cluster.apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", f.namespace)
    ds.spec.template.spec.containers[0].image = broken  # OnDelete: the running pod keeps its image until the pause removes it
    f.cluster.apps.replace_namespaced_daemon_set("nvidia-device-plugin-daemonset", f.namespace, ds)
    rc, run = f.play(dict(extra, gpu_remediation_mode="remediate", gpu_remediation_verify=False, gpu_remediation_recovery_timeout=15),
                     playbook="gpu_remediation.yml")
    assert rc != 0
    assert "recovery|0|1" not in (f.tmp / "nodes" / name / "fake_nvml.cfg").read_text()  # the reset ran
    cordoned, record, marked, taints = node_state(f, name)
    assert cordoned and marked and taints and record["step"] == "drained", "the node was released with its device plugin down"
    report = json.loads((f.tmp / "report" / ("gpu-remediation-%s.json" % name)).read_text())
    assert (report["outcome"], report["failed_step"], report["tried"]) == ("needs_human", "recovery", ["reset"]), report
    assert "not Ready" in report["error"] and "device plugin's new pod" in report["next"], report
    assert ledger(f)["entries"][-1]["closed_at"] is None and f.allocatable(name) < len(G)
    # this API server is the session's: a quarantine left in flight would count against the later tests' capacity
    f.cluster.core.patch_node(name, {"metadata": {"annotations": {REMEDIATION: None}}})


def test_an_old_driver_node_reset_for_an_xid_48_line_is_not_reset_again_for_the_same_line(fleet):
    """Issue 48, item 9: on a driver without NVML's recovery-action field (common on 535) the decision comes from the kernel
    log, and after a good reset the boot's XID 48 line is still there. Nothing wrote the remediation mark, so each run reset
    the GPU again, and after three resets in 24 h the repeat rule called the healthy GPU an RMA candidate. gpu_reset now
    writes the mark after its verified reset (atomically, per GPU): the next plan does not count that line, and nothing is
    done."""
    lib = fakenode.build_lib(os.path.join(kubefleet.ROOT, "build", "fakes", "no-recovery-field"), fakenode.DRIVERS["no-recovery-field"])
    f, name, dummy, uids, extra = remediation_fleet(fleet, lib, [{"name": "a", "gpus": G}])
    log = f.tmp / "nodes" / name / "kern.log"
    log.write_text("[    1.000000] NVRM: Xid (PCI:0000:00:07): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error\n")
    f.set_host_vars(name, gpuops_gpu_health_kernel_log="file", gpuops_gpu_health_kernel_log_path=str(log))
    mark = f.tmp / "nodes" / name / "var/lib/gpuops/health/last-remediation.json"
    remediate = dict(extra, gpu_remediation_mode="remediate")

    rc, run = f.play(remediate, playbook="gpu_remediation.yml")
    assert rc == 0, run.failure()
    row = dict((r["node"], r) for r in run.localhost(PLAN_TASK)["nodes"])[name]
    assert (row["action"], row["row"], row["gpus"]) == ("reset", 11, [G[0]]), row  # from the log: field 230 is not supported
    assert len(evictions(run)) == 1 and node_state(f, name) == (False, None, False, [])
    marks = json.loads(mark.read_text())
    assert list(marks["gpus"]) == [G[0].lower()] and marks["boot_id"]

    rc, run = f.play(remediate, playbook="gpu_remediation.yml")
    assert rc == 0, run.failure()
    row = dict((r["node"], r) for r in run.localhost(PLAN_TASK)["nodes"])[name]
    assert row["action"] == "none" and writes(run) == [], (row, writes(run))  # the same line: dealt with, nothing done
    assert [e["node"] for e in ledger(f)["entries"]].count(name) == 1


APPROVE_TASK = "What this run would act on, for a person to approve (the job's artifacts, gpuops_approved_plan)"
CHOOSE_TASK = "Choose the nodes to act on"


def test_the_act_job_acts_only_on_the_approved_plan_where_the_fresh_plan_still_agrees(fleet, fake_lib_dir):
    """Issue 48, item 3, as the AWX workflow runs it: the plan job (check mode) hands its pin to the job's artifacts
    (set_stats gpuops_approved_plan); AWX passes it to the act job as an extra variable, and the act template requires it.
    Between the approval and the act, the fault moves to another GPU: the act job refuses the node, naming the difference,
    and touches nothing (before, it reset whatever the fresh plan said). A tampered pin fails the run before any node is
    touched; no pin fails it too. With the fault where it was approved, the act job acts: GPU 0's pod alone evicted."""
    f, name, dummy, uids, extra = remediation_fleet(fleet, fake_lib_dir, [{"name": "a", "gpus": G}])
    remediate = dict(extra, gpu_remediation_mode="remediate", gpu_remediation_require_approval=True)
    rc, run = f.play(remediate, "--check", playbook="gpu_remediation.yml")
    assert rc == 0, run.failure()
    assert writes(run) == []
    pin = run.localhost(APPROVE_TASK)["ansible_stats"]["data"]["gpuops_approved_plan"]
    assert [(n["node"], n["gpus"], [e["pod"].split("/")[1] for e in n["evictions"]]) for n in pin["nodes"]] == [
        (name, [G[0]], [running(f, "on-gpu0")[0].metadata.name])]

    healthy(f, name)
    faulty(f, name, "recovery|1|1")  # after the approval, GPU 1 asks for the reset, not GPU 0
    rc, run = f.play(dict(remediate, gpuops_approved_plan=pin), playbook="gpu_remediation.yml")
    assert rc == 0, run.failure()
    assert writes(run) == [], writes(run)
    skipped = run.localhost(CHOOSE_TASK)["ansible_facts"]["gpu_remediation_targets"]["skipped"]
    assert [s["node"] for s in skipped] == [name] and 'gpus ["%s"], approved ["%s"]' % (G[1], G[0]) in skipped[0]["why"], skipped

    healthy(f, name)
    faulty(f, name, "recovery|0|1")
    forged = json.loads(json.dumps(pin))
    forged["nodes"][0]["evictions"].append({"pod": "%s/on-gpu1" % f.namespace, "uid": uids["on-gpu1"]})
    for bad, says in ((forged, "its digest does not match its content"), (None, "this run acts only on an approved plan")):
        rc, run = f.play(dict(remediate, gpuops_approved_plan=bad), playbook="gpu_remediation.yml")
        assert rc != 0 and says in run.failure(), run.failure()
        assert writes(run) == []

    rc, run = f.play(dict(remediate, gpuops_approved_plan=pin), playbook="gpu_remediation.yml")
    assert rc == 0, run.failure()
    assert [e.split("-")[0:2] for e in evictions(run)] == [["on", "gpu0"]] and node_state(f, name) == (False, None, False, [])
    assert [running(f, app)[0].metadata.uid for app in ("on-gpu1", "on-gpu2")] == [uids["on-gpu1"], uids["on-gpu2"]]
