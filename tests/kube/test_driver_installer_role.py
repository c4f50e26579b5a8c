# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver_installer role (field report 004) against a real kube-apiserver/controller-manager/
scheduler with SIMULATED nodes: the installer's init container runs and its log is served by the
simulated kubelet's HTTPS endpoint, read through the API server (pods/log)."""

from __future__ import annotations

import itertools
import os

A = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
B = "GPU-68ce64fb-ea68-5ad6-7e72-31f3f07378df"
C = "GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb"
IMAGE = "registry.example/gke-nvidia-installer@sha256:" + "ab" * 32
OLD, NEW = "535.104.05", "550.54.15"
SERIAL = itertools.count(1)


def fleet_of(fleet, **faulty):
    # a label key of this test's own: nodes of earlier fleets (their simulated kubelet gone) keep theirs
    accel = "gpuops.test/accel-%d-%d" % (os.getpid(), next(SERIAL))
    nodes = [{"name": "gpu-a", "gpus": [A], "labels": {accel: "nvidia-tesla-t4"}},
             {"name": "gpu-b", "gpus": [B, C], "labels": {accel: "nvidia-tesla-t4"}},
             {"name": "gpu-c", "gpus": [C], "labels": {accel: "nvidia-l4"}},
             {"name": "cpu-x", "gpus": [], "in_inventory": False}]  # no accelerator label: never targeted
    for node in nodes:
        node.update(faulty.get(node["name"].replace("-", "_"), {}))
    f = fleet(nodes)
    return f, accel


def role_vars(f, accel, **extra):
    values = {"driver_installer_namespace": f.namespace, "driver_installer_accelerator_label": accel,
              "driver_installer_image": IMAGE, "driver_installer_version": OLD, "driver_installer_pod_timeout": 30,
              "driver_installer_verify_timeout": 30, "driver_installer_verify_image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    values.update(extra)
    return values


def installer_pods(f):
    pods = f.cluster.core.list_namespaced_pod(f.namespace, label_selector="k8s-app=nvidia-driver-installer").items
    return {p.spec.node_name: p for p in pods if p.metadata.deletion_timestamp is None}


def report(run, name="Keep the report (driver_installer_report)"):
    res = run.localhost(name)
    return res["ansible_facts"]["driver_installer_report"] if res else None


def test_install_verify_upgrade_node_by_node_then_nothing_to_do(fleet):
    f, accel = fleet_of(fleet)
    f.install_old_plugin()  # registers nvidia.com/gpu, which the verification pods ask for
    names = [f.prefix + n for n in ("gpu-a", "gpu-b", "gpu-c")]
    rc, run = f.play(role_vars(f, accel), playbook="driver_installer.yml")
    assert rc == 0, run.failure()
    got = report(run)
    assert got["installed"] == names and got["failed"] == [] and got["daemonset_changed"]
    # the installer's log came through the API server (pods/log) from the simulated kubelet
    assert [r["log"]["groups"] for r in got["nodes"]] == [{"version": OLD}] * 3
    logs = [e for e in run.api_calls if e["verb"] == "get" and (e.get("objectRef") or {}).get("subresource") == "log"]
    assert len(logs) == 3 and all(e["responseStatus"]["code"] == 200 for e in logs)
    assert sorted(installer_pods(f)) == names  # never on the node without the accelerator label
    verified = run.localhost("Keep the result (driver_installer_verify_report)")["ansible_facts"]["driver_installer_verify_report"]
    assert verified["verified"] == names and verified["failed"] == []
    assert [r["verify"] for r in verified["nodes"]] == ["ok"] * 3
    assert not [p for p in f.cluster.core.list_namespaced_pod(f.namespace).items if p.metadata.name.startswith("gpuops-driver-verify")]
    ds = f.cluster.apps.read_namespaced_daemon_set("nvidia-driver-installer", f.namespace)
    spec = ds.spec.template.spec
    assert ds.spec.update_strategy.type == "OnDelete"
    assert [c.security_context.privileged for c in spec.init_containers] == [True]  # the installer loads kernel modules
    assert not spec.containers[0].security_context.privileged and spec.containers[0].security_context.capabilities.drop == ["ALL"]
    assert {m.mount_path for m in spec.init_containers[0].volume_mounts} >= {"/usr/local/nvidia", "/dev", "/root"}

    # a new driver version: the old installer pods are replaced node by node, each checked
    before = {n: p.metadata.uid for n, p in installer_pods(f).items()}
    rc, run = f.play(role_vars(f, accel, driver_installer_version=NEW, driver_installer_verify=False), playbook="driver_installer.yml")
    assert rc == 0, run.failure()
    got = report(run)
    assert [(r["node"], r["status"], r["log"]["groups"]["version"]) for r in got["nodes"]] == [(n, "updated", NEW) for n in names]
    now = installer_pods(f)
    assert not set(before.values()) & {p.metadata.uid for p in now.values()}
    created = [now[n].metadata.creation_timestamp for n in names]
    assert created == sorted(created)

    rc, again = f.play(role_vars(f, accel, driver_installer_version=NEW, driver_installer_verify=False), playbook="driver_installer.yml")
    assert rc == 0, again.failure()
    assert again.changed == 0 and report(again)["nodes"] == []


def test_a_failing_installer_stops_the_rollout_and_a_wrong_version_fails_its_node(fleet):
    f, accel = fleet_of(fleet, gpu_b={"faults": ["installer_fail"]}, gpu_c={"driver_version": "470.57.02"})
    rc, run = f.play(role_vars(f, accel, driver_installer_max_failed_nodes=1, driver_installer_verify=False), playbook="driver_installer.yml")
    assert rc != 0
    got = report(run)
    rows = {r["node"]: r for r in got["nodes"]}
    assert got["installed"] == [f.prefix + "gpu-a"], got
    assert got["failed"] == [f.prefix + "gpu-b", f.prefix + "gpu-c"] and got["stopped"]
    assert "init container nvidia-driver-installer: CrashLoopBackOff" in rows[f.prefix + "gpu-b"]["reason"]
    assert rows[f.prefix + "gpu-c"]["reason"] == "nvidia-driver-installer's log: version is 470.57.02, expected %s" % OLD
    failure = run.failure()
    assert "driver installer rollout stopped with\n2 failed node(s)" in failure or "2 failed node(s)" in failure
    assert f.prefix + "gpu-b: failed" in failure


def test_bad_input_is_refused_before_anything_changes(fleet):
    f, accel = fleet_of(fleet)
    rc, run = f.play(role_vars(f, accel, driver_installer_image="registry.example/gke-nvidia-installer:latest"), playbook="driver_installer.yml")
    assert rc != 0
    assert "driver_installer_image must name the installer by digest" in run.failure()
    assert installer_pods(f) == {}
    # check mode on a cluster without the installer: the plan says it would be created; nothing is
    rc, run = f.play(role_vars(f, accel), "--check", playbook="driver_installer.yml")
    assert rc == 0, run.failure()
    assert report(run)["plan"] == ["CHECK MODE: nothing is deleted", "the DaemonSet would be created; its pods are not rolled"]
    assert f.cluster.apps.list_namespaced_daemon_set(f.namespace).items == [] and installer_pods(f) == {}
