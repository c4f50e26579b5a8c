# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/gpu_sharing.yml (role gpu_sharing, gpu_sharing_mode, gpu_share_info) against a real
API server with SIMULATED nodes: label switching both ways with its refusal, the plugin
DaemonSets landing only where they should, kubectl-inspect-cgpu tables line by line, the
checkpoint cross-check, the switched nodes' checkpoints."""

from __future__ import annotations

import os

from kubernetes.client.rest import ApiException

G = ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0", "GPU-1b7d2a3e-5c8f-4e61-9a0d-3f2c4b5a6d7e",
     "GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb", "GPU-383cd6a5-00a6-b455-62c4-c163d164b837"]


def sharing_vars(f, label, **extra):
    values = {"gpu_sharing_label": label, "gpu_sharing_namespace": f.namespace,
              "gpu_sharing_extender_node_selector": f.label, "gpu_sharing_pod_timeout": 30, "gpu_sharing_resource_timeout": 30,
              "gpu_sharing_report_nodes": [n["name"] for n in f.nodes], "gpu_sharing_report_details": True,
              "gpu_sharing_drain_timeout": 30}
    values.update(extra)
    return values


def not_sharing(label):
    """The NVIDIA device plugin's affinity as role device_plugin renders it: never on label=true nodes."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": label, "operator": "NotIn", "values": ["true"]}]}]}}}


def pods_of(f, selector):
    pods = f.cluster.core.list_namespaced_pod(f.namespace, label_selector=selector).items
    return dict((p.spec.node_name, p) for p in pods if p.metadata.deletion_timestamp is None and p.status.phase == "Running")


def resources(f, name):
    alloc = f.node(name).status.allocatable or {}
    return dict((k, int(v)) for k, v in alloc.items() if k in ("nvidia.com/gpu", "aliyun.com/gpu-mem", "aliyun.com/gpu-count"))


def pod(f, name, node, limits, annotations=None):
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": f.namespace, "annotations": annotations or {}},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": name.split("-")[0], "image": "registry.example/cuda-malloc:3G", "resources": {"limits": limits}}]}}
    f.cluster.core.create_namespaced_pod(f.namespace, body)


def labels(f, name):
    return f.node(name).metadata.labels or {}


def test_switch_both_ways_components_and_inspect_tables(fleet):
    f = fleet([
        {"name": "a", "gpus": G[:2], "host_vars": {"gpu_sharing_enabled": "true"}},  # a survey string
        {"name": "b", "gpus": G[2:3], "host_vars": {"gpu_sharing_enabled": False}},
        # the plugin gives containers the GPU at the other end of the list (index vs minor order)
        {"name": "c", "gpus": G[2:4], "host_vars": {"gpu_sharing_enabled": True}, "faults": ["gpushare_index_order"]},
    ])
    a, b, c = (n["name"] for n in f.nodes)
    label = "gpuops.test/cgpu-%s" % f.prefix.strip("-")
    f.install_old_plugin("nvcr.io/nvidia/k8s-device-plugin:v0.17.1", affinity=not_sharing(label))
    # a training pod holds a whole GPU on a
    pod(f, "train-0", a, {"nvidia.com/gpu": "1"})
    f.wait(lambda: f.cluster.core.read_namespaced_pod("train-0", f.namespace).status.phase == "Running", "train-0 running")
    checkpoint_a = f.checkpoint(a)
    assert checkpoint_a.registered["nvidia.com/gpu"] == G[:2] and [e.resource_name for e in checkpoint_a.entries] == ["nvidia.com/gpu"]

    # check mode: the plan, nothing changed
    rc, run = f.play(sharing_vars(f, label, gpu_sharing_drain=True, gpu_sharing_drain_force=True), "--check", "--diff", playbook="gpu_sharing.yml")
    assert rc == 0, run.failure()
    mode = run.localhost("Set each node's sharing mode (its label)")
    assert mode["changed"] and mode["evicted"] == ["%s/train-0" % f.namespace]
    assert [(r["node"], r["desired"], r["removes"]) for r in mode["plan"]] == [(a, "true", "nvidia.com/gpu"), (b, "false", None), (c, "true", "nvidia.com/gpu")]
    assert label not in labels(f, a) and f.cluster.core.read_namespaced_pod("train-0", f.namespace).status.phase == "Running"
    assert f.cluster.apps.list_namespaced_daemon_set(f.namespace, label_selector="app.kubernetes.io/name=gpushare-device-plugin").items == []

    # refused: train-0 holds nvidia.com/gpu on a; nothing changes anywhere
    rc, run = f.play(sharing_vars(f, label), playbook="gpu_sharing.yml")
    assert rc != 0
    message = run.failure()
    assert "refusing to switch the GPU sharing mode of 1 node whose pods" in message
    assert "%s (unset -> true: nvidia.com/gpu still used by %s/train-0)" % (a, f.namespace) in message, message
    assert "gpu_sharing_drain" in message and label not in labels(f, a) and label not in labels(f, b)

    # told to drain, but train-0 is a bare pod: kubectl drain's rule refuses it without --force; nothing changes
    rc, run = f.play(sharing_vars(f, label, gpu_sharing_drain=True), playbook="gpu_sharing.yml")
    assert rc != 0
    message = run.failure()
    assert "refusing to drain, nothing was changed: node %s: %s/train-0 has no controller" % (a, f.namespace) in message, message
    assert "drain_force" in message and label not in labels(f, a) and not f.node(a).spec.unschedulable

    # forced: train-0 is evicted (a bare pod: gone, and said so), the labels set, nodes uncordoned
    rc, run = f.play(sharing_vars(f, label, gpu_sharing_drain=True, gpu_sharing_drain_force=True), playbook="gpu_sharing.yml")
    assert rc == 0, run.failure()
    mode = run.localhost("Set each node's sharing mode (its label)")
    assert mode["evicted"] == ["%s/train-0" % f.namespace]
    assert mode["eviction_notes"] == [{"pod": "%s/train-0" % f.namespace, "note": "no controller, nothing recreates it (drain_force)"}]
    assert [(s["node"], s["retired"], s["host"]) for s in mode["switched"]] == [(a, "nvidia.com/gpu", a), (c, "nvidia.com/gpu", c)]
    assert (labels(f, a)[label], labels(f, b)[label], labels(f, c)[label]) == ("true", "false", "true")
    assert not any(f.node(n).spec.unschedulable for n in (a, b, c))
    try:
        f.cluster.core.read_namespaced_pod("train-0", f.namespace)
        raise AssertionError("train-0 was not evicted")
    except ApiException as exc:
        assert exc.status == 404

    # a run killed between its cordon and its uncordon left b cordoned with our mark; c was cordoned by
    # someone else: the next run uncordons b only, and says so
    f.cluster.core.patch_node(b, {"spec": {"unschedulable": True}, "metadata": {"annotations": {"gpuops.fleet/cordoned-for-sharing-switch": label + "=false"}}})
    f.cluster.core.patch_node(c, {"spec": {"unschedulable": True}})
    rc, run = f.play(sharing_vars(f, label, gpu_sharing_components=False), playbook="gpu_sharing.yml")
    assert rc == 0, run.failure()
    mode = run.localhost("Set each node's sharing mode (its label)")
    assert mode["changed"] and mode["finished_cordons"] == [b] and "uncordoned %s, cordoned by a run of ours" % b in mode["msg"]
    assert not f.node(b).spec.unschedulable and "gpuops.fleet/cordoned-for-sharing-switch" not in (f.node(b).metadata.annotations or {})
    assert f.node(c).spec.unschedulable
    f.cluster.core.patch_node(c, {"spec": {"unschedulable": False}})

    # each plugin only where it belongs; no node offers both resources
    f.wait(lambda: sorted(pods_of(f, "component=gpushare-device-plugin")) == [a, c]
           and sorted(pods_of(f, "name=nvidia-device-plugin-ds")) == [b], "the plugins where they belong")
    f.wait(lambda: resources(f, a).get("aliyun.com/gpu-mem") == 30 and resources(f, c).get("aliyun.com/gpu-mem") == 30,
           "aliyun.com/gpu-mem on a and c")
    assert resources(f, a) == {"nvidia.com/gpu": 0, "aliyun.com/gpu-mem": 30, "aliyun.com/gpu-count": 2}
    assert "aliyun.com/gpu-mem" not in resources(f, b)
    extender = f.cluster.apps.read_namespaced_deployment("gpushare-schd-extender", f.namespace)
    assert extender.spec.template.spec.containers[0].security_context.allow_privilege_escalation is False
    assert f.cluster.core.read_namespaced_service("gpushare-schd-extender", f.namespace).spec.ports[0].node_port == 32766
    # the switched nodes' checkpoints lost nvidia.com/gpu (a backup first); b's kept it
    assert "nvidia.com/gpu" not in (f.checkpoint(a).registered or {}) or f.checkpoint(a).registered["nvidia.com/gpu"] == []
    assert os.listdir(f.hosts[a]["gpu_sharing_backup_dir"])
    assert f.checkpoint(b).registered["nvidia.com/gpu"] == G[2:3]

    # field report 003: two pods of 4 GiB share a GPU of a; one on c lands on the GPU its annotation does not name
    pod(f, "app-3g-v1-0", a, {"aliyun.com/gpu-mem": "4"})
    pod(f, "app-3g-v1-1", a, {"aliyun.com/gpu-mem": "4"})
    pod(f, "infer-0", c, {"aliyun.com/gpu-mem": "6"})
    pod(f, "legacy-0", c, {"aliyun.com/gpu-mem": "2"}, {"gpuops.test/gpushare": "no-annotation"})
    pod(f, "queued-0", c, {"aliyun.com/gpu-mem": "3"}, {"gpuops.test/gpushare": "assumed"})
    pod(f, "huge-0", a, {"aliyun.com/gpu-mem": "40"})  # more than a has: never scheduled

    def placed():
        pods = dict((p.metadata.name, p) for p in f.cluster.core.list_namespaced_pod(f.namespace).items)

        def ann(name):
            return (pods[name].metadata.annotations or {}) if name in pods else {}
        return (all(ann(n).get("ALIYUN_COM_GPU_MEM_ASSIGNED") == "true" for n in ("app-3g-v1-0", "app-3g-v1-1", "infer-0"))
                and ann("queued-0").get("ALIYUN_COM_GPU_MEM_ASSIGNED") == "false" and pods["legacy-0"].status.phase == "Running")
    f.wait(placed, "the shared pods placed")

    rc, run = f.play(sharing_vars(f, label, gpu_sharing_fail_on_findings=False), playbook="gpu_sharing.yml")
    assert rc == 0, run.failure()
    assert run.changed == 0  # modes, components and plugin pods already as asked
    info = run.localhost("Read the allocation (kubectl inspect cgpu) and compare it with the nodes' checkpoints")
    ns = f.namespace
    assert info["table"].splitlines() == [
        "NAME:       %s" % a,
        "IPADDRESS:  127.0.0.1",
        "",
        "NAME         NAMESPACE%s  GPU0(Allocated)  GPU1(Allocated)" % (" " * (len(ns) - 9)),
        "app-3g-v1-0  %s  4                0" % ns,
        "app-3g-v1-1  %s  4                0" % ns,
        "Allocated :  8 (26%)",
        "Total :      30",
        "-" * (2 * len("app-3g-v1-0\t%s\t4\t0\t\n" % ns) + 10),
        "",
        "NAME:       %s" % c,
        "IPADDRESS:  127.0.0.1",
        "",
        "NAME         NAMESPACE%s  GPU0(Allocated)  GPU1(Allocated)  Assumed(Allocated)  Pending(Allocated)" % (" " * (len(ns) - 9)),
        "infer-0      %s  6                0                0                   0" % ns,
        "queued-0     %s  0                0                3                   0" % ns,
        "legacy-0     %s  0                0                0                   2" % ns,
        "Allocated :  11 (36%)",
        "Total :      30",
        "-" * (2 * len("app-3g-v1-0\t%s\t4\t0\t\n" % ns) + 10),
        "",
        "Allocated/Total GPU Memory In Cluster:  19/60 (31%)",
        "Not scheduled yet (in no total):        40 GiB in 1 pod: %s/huge-0" % ns,
    ], info["table"]
    # the cross-check: infer-0's annotation says GPU 0, the plugin gave it GPU 1 (G[3]); nothing else disagrees
    assert [(x["node"], x["pod"], x["kind"]) for x in info["findings"]] == [(c, "%s/infer-0" % ns, "annotation_mismatch")], info["findings"]
    assert G[3] in info["findings"][0]["detail"] and sorted(info["checked_nodes"]) == [a, c]

    # back to whole GPUs on a: refused while the shared pods run there, naming them
    f.set_host_vars(a, gpu_sharing_enabled=False)
    rc, run = f.play(sharing_vars(f, label), playbook="gpu_sharing.yml")
    assert rc != 0 and "aliyun.com/gpu-mem still used by %s/app-3g-v1-0, %s/app-3g-v1-1" % (ns, ns) in run.failure()
    assert labels(f, a)[label] == "true"
    for name in ("app-3g-v1-0", "app-3g-v1-1", "huge-0"):
        f.cluster.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    f.wait(lambda: not [p for p in f.cluster.core.list_namespaced_pod(ns).items if p.spec.node_name == a
                        and p.metadata.name.startswith("app-")], "the shared pods gone from a")
    rc, run = f.play(sharing_vars(f, label, gpu_sharing_fail_on_findings=False), playbook="gpu_sharing.yml")
    assert rc == 0, run.failure()
    assert labels(f, a)[label] == "false"
    f.wait(lambda: sorted(pods_of(f, "component=gpushare-device-plugin")) == [c]
           and sorted(pods_of(f, "name=nvidia-device-plugin-ds")) == [a, b], "the NVIDIA plugin back on a")
    f.wait(lambda: resources(f, a).get("nvidia.com/gpu") == 2 and resources(f, a).get("aliyun.com/gpu-mem") == 0, "a offers whole GPUs")
    # the retire step took aliyun.com/gpu-mem out; the NVIDIA plugin's registration is there again
    f.wait(lambda: f.checkpoint(a).registered.get("nvidia.com/gpu") == G[:2], "a's checkpoint registering nvidia.com/gpu")
    assert not f.checkpoint(a).registered.get("aliyun.com/gpu-mem")
