# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The device_plugin role against a real kube-apiserver/controller-manager/scheduler with SIMULATED nodes.

Field report 002: an old plugin (1.0.0-beta4, no --pass-device-specs) runs as a RollingUpdate
DaemonSet on nodes whose kubelet uses cpuManagerPolicy=static.
"""

from __future__ import annotations

A = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
B = "GPU-68ce64fb-ea68-5ad6-7e72-31f3f07378df"
C = "GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"


def three_nodes(**faulty):
    nodes = [
        {"name": "gpu-a", "gpus": [A]},
        {"name": "gpu-b", "gpus": [B, C], "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        {"name": "gpu-c", "gpus": [C], "policy": "none"},
    ]
    for node in nodes:
        node.update(faulty.get(node["name"].replace("-", "_"), {}))
    return nodes


def test_preflight_refuses_an_old_plugin_on_static_nodes_and_changes_nothing(fleet):
    f = fleet(three_nodes())
    f.install_old_plugin()
    before = {p.metadata.uid for p in f.plugin_pods()}
    rc, run = f.play(f.role_vars(device_plugin_version="1.0.0-beta4", device_plugin_image="nvidia/k8s-device-plugin",
                                 device_plugin_pass_device_specs=False))
    assert rc != 0
    failure = run.failure()
    assert "refused on 2 node(s); nothing was changed" in failure
    assert "%sgpu-a (cpuManagerPolicy=static from config file /var/lib/kubelet/config.yaml)" % f.prefix in failure
    assert "%sgpu-b (cpuManagerPolicy=static" % f.prefix in failure
    assert "%sgpu-c" % f.prefix not in failure  # policy none: the old plugin is safe there
    assert "Fix: set device_plugin_version to v0.17.1" in failure
    ds = f.cluster.apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", f.namespace)
    assert ds.spec.update_strategy.type == "RollingUpdate"
    assert {p.metadata.uid for p in f.plugin_pods()} == before


def test_a_plugin_managed_by_helm_or_the_gpu_operator_is_refused_unless_taken_over(fleet):
    f = fleet(three_nodes())
    f.install_old_plugin()
    before = {p.metadata.uid for p in f.plugin_pods()}
    name = "nvidia-device-plugin-daemonset"

    def untouched():
        ds = f.cluster.apps.read_namespaced_daemon_set(name, f.namespace)
        return ds.spec.update_strategy.type == "RollingUpdate" and {p.metadata.uid for p in f.plugin_pods()} == before

    # a Helm release owns the DaemonSet (Helm 3's label and annotations)
    helm = {"metadata": {"labels": {"app.kubernetes.io/managed-by": "Helm"},
                         "annotations": {"meta.helm.sh/release-name": "nvdp", "meta.helm.sh/release-namespace": f.namespace}}}
    f.cluster.apps.patch_namespaced_daemon_set(name, f.namespace, helm)
    rc, run = f.play(f.role_vars())
    assert rc != 0
    assert ("the NVIDIA device plugin is managed by someone else; nothing was changed" in run.failure()
            and "- DaemonSet %s/%s: it is managed by Helm (release %s/nvdp)" % (f.namespace, name, f.namespace) in run.failure())
    assert untouched()

    # the GPU Operator deploys its own plugin (ClusterPolicy, devicePlugin enabled by default)
    unmarked = {"metadata": {"labels": {"app.kubernetes.io/managed-by": None},
                             "annotations": {"meta.helm.sh/release-name": None, "meta.helm.sh/release-namespace": None}}}
    f.cluster.apps.patch_namespaced_daemon_set(name, f.namespace, unmarked)
    f.cluster.cluster_policy_crd()
    policy = "gpuops-test-%s" % f.namespace
    f.cluster.custom.create_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", {
        "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": policy}, "spec": {"devicePlugin": {}}})
    try:
        rc, run = f.play(f.role_vars())
        assert rc != 0
        assert "- ClusterPolicy %s: the NVIDIA GPU Operator deploys and manages the device plugin" % policy in run.failure()
        assert untouched()
        # told to take over (a survey's string): the refusal is a warning, the plan goes on (check mode)
        rc, run = f.play(f.role_vars(device_plugin_take_over="true"), "--check")
        assert rc == 0, run.failure()
        shown = run.localhost("Taking over from another manager (device_plugin_take_over)")
        assert shown and any(("ClusterPolicy %s" % policy) in line for line in shown["msg"])
        assert untouched()
    finally:
        f.cluster.custom.delete_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", policy)


def test_a_node_without_kubelet_facts_is_refused(fleet):
    nodes = three_nodes()
    nodes[2]["in_inventory"] = False
    f = fleet(nodes)
    rc, run = f.play(f.role_vars())
    assert rc != 0
    assert "%sgpu-c: no kubelet facts: its cpuManagerPolicy is unknown" % f.prefix in run.failure()
    assert f.plugin_pods() == []


def test_check_mode_prints_the_plan_and_changes_nothing(fleet):
    f = fleet(three_nodes())
    f.install_old_plugin()
    before = {p.metadata.uid for p in f.plugin_pods()}
    rc, run = f.play(f.role_vars(device_plugin_verify=True), "--check")
    assert rc == 0, run.failure()
    plan = run.localhost("Show the plan")["msg"]
    assert plan == ["CHECK MODE: nothing is deleted"] + [
        "batch %d: %s%s: 1.0.0-beta4 -> v0.17.1 (delete %s)" % (i + 1, f.prefix, n, p.metadata.name)
        for i, (n, p) in enumerate(zip(("gpu-a", "gpu-b", "gpu-c"), f.plugin_pods()))]
    ds = f.cluster.apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", f.namespace)
    assert ds.spec.update_strategy.type == "RollingUpdate"
    assert ds.spec.template.spec.containers[0].image == "nvidia/k8s-device-plugin:1.0.0-beta4"
    assert {p.metadata.uid for p in f.plugin_pods()} == before


def test_upgrade_node_by_node_with_verification_then_nothing_to_do(fleet):
    f = fleet(three_nodes())
    f.install_old_plugin()
    old = {p.spec.node_name: p.metadata.uid for p in f.plugin_pods()}
    rc, run = f.play(f.role_vars(device_plugin_verify=True))
    assert rc == 0, run.failure()
    report = run.report
    names = [f.prefix + n for n in ("gpu-a", "gpu-b", "gpu-c")]
    assert report["upgraded"] == names and report["failed"] == [] and not report["stopped"]
    assert [(r["node"], r["gpus"], r["verify"]) for r in report["nodes"]] == [
        (names[0], "1/1", "ok"), (names[1], "2/2", "ok"), (names[2], "1/1", "ok")]
    ds = f.cluster.apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", f.namespace)
    assert ds.spec.update_strategy.type == "OnDelete"
    env = {e.name: e.value for e in ds.spec.template.spec.containers[0].env}
    assert env["PASS_DEVICE_SPECS"] == "true"
    pods = f.plugin_pods()
    assert [p.spec.containers[0].image for p in pods] == [NEW] * 3
    assert not set(old.values()) & {p.metadata.uid for p in pods}
    # node by node: each new pod was created after the previous node's new pod
    created = [p.metadata.creation_timestamp for p in pods]
    assert created == sorted(created)
    assert [f.allocatable(n) for n in names] == [1, 2, 1]
    # the verification pods are gone
    assert [p.metadata.name for p in f.cluster.core.list_namespaced_pod(f.namespace).items
            if p.metadata.name.startswith("gpuops-gpu-verify")] == []

    rc, again = f.play(f.role_vars(device_plugin_verify=True))
    assert rc == 0, again.failure()
    assert again.changed == 0
    assert again.report["nodes"] == [] and again.report["plan"] == ["nothing to replace: 3 node(s) already run %s" % NEW]
    assert {p.metadata.uid for p in f.plugin_pods()} == {p.metadata.uid for p in pods}


def test_a_failing_node_stops_the_rollout_with_a_report(fleet):
    # the new version crashes on gpu-b only: gpu-a is upgraded, gpu-c is left on the old plugin
    f = fleet(three_nodes(gpu_b={"faults": ["plugin_crash"], "fault_images": [NEW]}))
    f.install_old_plugin()
    rc, run = f.play(f.role_vars())
    assert rc != 0
    report = run.report
    assert report["upgraded"] == [f.prefix + "gpu-a"]
    assert report["failed"] == [f.prefix + "gpu-b"] and report["stopped"]
    assert report["not_started"] == [f.prefix + "gpu-c"]
    assert "CrashLoopBackOff" in report["nodes"][1]["reason"]
    failure = run.failure()
    assert "stopped with 1" in failure and "not started: %sgpu-c" % f.prefix in failure
    images = {p.spec.node_name: p.spec.containers[0].image for p in f.plugin_pods()}
    assert images[f.prefix + "gpu-c"] == "nvidia/k8s-device-plugin:1.0.0-beta4"
    assert f.allocatable(f.prefix + "gpu-c") == 1


def test_wrong_gpus_in_the_verification_pod_fail_the_node(fleet):
    f = fleet(three_nodes(gpu_a={"faults": ["wrong_gpus"]}))
    f.install_old_plugin()
    rc, run = f.play(f.role_vars(device_plugin_verify=True, device_plugin_max_failed_nodes=1, device_plugin_batch_size=2))
    assert rc != 0
    report = run.report
    # batch 1 = gpu-a, gpu-b; one failure is tolerated, so gpu-c runs too
    assert report["failed"] == [f.prefix + "gpu-a"] and not report["stopped"]
    assert report["upgraded"] == [f.prefix + "gpu-b", f.prefix + "gpu-c"]
    assert "GPU-00000000-dead-beef-0000-000000000000" in report["nodes"][0]["reason"]
    assert A in report["nodes"][0]["reason"]


def test_no_gpus_after_the_upgrade_fails_the_node(fleet):
    f = fleet(three_nodes(gpu_a={"faults": ["no_gpus"], "fault_images": [NEW]}))
    f.install_old_plugin()
    rc, run = f.play(f.role_vars())
    assert rc != 0
    assert run.report["nodes"][0]["reason"] == "the plugin registered no nvidia.com/gpu (capacity 0)"
    assert run.report["not_started"] == [f.prefix + "gpu-b", f.prefix + "gpu-c"]


def test_key_value_extra_vars_and_an_old_version_with_the_defaults(fleet):
    f = fleet(three_nodes())
    f.install_old_plugin()
    before = {p.metadata.uid for p in f.plugin_pods()}
    # -e key=value hands the role strings; they pass the settings check (they used to be refused
    # with "expected true or false, got 'false'")
    rc, run = f.play(f.role_vars(), "-e", "device_plugin_pass_device_specs=true", "-e", "device_plugin_fail_on_init_error=false", "--check")
    assert rc == 0, run.failure()
    rc, run = f.play(f.role_vars(), "-e", "device_plugin_pass_device_specs=false")
    assert rc != 0
    assert "device_plugin_pass_device_specs is false; containers lose /dev/nvidia*" in run.failure()
    assert "expected true or false" not in run.failure()
    # 1.0.0-beta4 with the role's defaults (pass_device_specs: true): the fix offered works, and
    # the static nodes are named too
    rc, run = f.play(f.role_vars(device_plugin_version="1.0.0-beta4", device_plugin_image="nvidia/k8s-device-plugin"))
    assert rc != 0
    failure = run.failure()
    assert "refused on 3 node(s); nothing was changed" in failure
    assert "- every targeted node (3: %sgpu-a, %sgpu-b, %sgpu-c): device_plugin_pass_device_specs=true needs" % ((f.prefix,) * 3) in failure
    assert "or set device_plugin_pass_device_specs: false (safe only where no node runs kubelet with cpuManagerPolicy=static)" in failure
    assert "leave device_plugin_pass_device_specs at its default" not in failure
    assert "- %sgpu-a (cpuManagerPolicy=static from config file /var/lib/kubelet/config.yaml): device plugin 1.0.0-beta4" % f.prefix in failure
    assert {p.metadata.uid for p in f.plugin_pods()} == before


def test_daemonset_rollout_refuses_a_rolling_update_daemonset_an_empty_node_list_and_an_unknown_node(fleet):
    f = fleet(three_nodes())
    f.install_old_plugin()  # updateStrategy RollingUpdate, as field report 002's hand-made DaemonSet
    before = sorted(p.metadata.uid for p in f.plugin_pods())
    target = {"namespace": f.namespace, "name": "nvidia-device-plugin-daemonset"}

    refused = f.module("gpuops.fleet.daemonset_rollout", target)
    assert refused["failed"] and "has updateStrategy RollingUpdate: its controller replaces the pods itself" in refused["msg"]
    assert "allow_rolling_update: true" in refused["msg"]

    empty = f.module("gpuops.fleet.daemonset_rollout", dict(target, nodes=[], allow_rolling_update=True))
    assert empty["failed"] and empty["msg"].startswith("nodes: is empty, so nothing would be rolled")

    unknown = f.module("gpuops.fleet.daemonset_rollout", dict(target, nodes=[f.nodes[0]["name"], "no-such-node"], allow_rolling_update=True,
                                                              pod_timeout=300))
    assert unknown["failed"] and "no such node in the cluster: no-such-node (nodes); nothing was deleted" in unknown["msg"], unknown["msg"]
    assert sorted(p.metadata.uid for p in f.plugin_pods()) == before, "a refused rollout deleted a pod"


def test_restart_recreates_a_current_plugin_pod_on_the_named_node_only_and_checks_it(fleet):
    """What a GPU remediation asks after a reset: the node's plugin pod recreated though it is current (the plugin marks
    a GPU Healthy again only in a new process), allocatable back to capacity, the verification pod on the node."""
    f = fleet(three_nodes())
    rc, run = f.play(f.role_vars())
    assert rc == 0, run.failure()
    pods = dict((p.spec.node_name, p.metadata.uid) for p in f.plugin_pods())
    names = [f.prefix + n for n in ("gpu-a", "gpu-b", "gpu-c")]
    target = {"namespace": f.namespace, "name": "nvidia-device-plugin-daemonset", "nodes": [names[1]], "restart": True,
              "resource": "nvidia.com/gpu", "pod_timeout": 60, "resource_timeout": 60}

    refused = f.module("gpuops.fleet.daemonset_rollout", dict(target, nodes=None))
    assert refused["failed"] and refused["msg"].startswith("restart: recreates the pods of the nodes named in nodes")
    # without restart a current pod is left alone: nothing to do
    idle = f.module("gpuops.fleet.daemonset_rollout", dict(target, restart=False))
    assert not idle["changed"] and dict((p.spec.node_name, p.metadata.uid) for p in f.plugin_pods()) == pods

    done = f.module("gpuops.fleet.daemonset_rollout", target)
    assert done["changed"] and not done.get("failed"), done
    assert [(r["node"], r["status"], r["gpus"]) for r in done["rows"]] == [(names[1], "updated", "2/2")]
    # (read through a wait: on a loaded machine the list can lag the rollout's own watch)
    f.wait(lambda: names[1] in [p.spec.node_name for p in f.plugin_pods()], "gpu-b's plugin pod listed")
    after = dict((p.spec.node_name, p.metadata.uid) for p in f.plugin_pods())
    assert after[names[1]] != pods[names[1]] and (after[names[0]], after[names[2]]) == (pods[names[0]], pods[names[2]])
