# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pods kubelet rejected at admission, brought back after the repair (playbooks/recover_pods.yml).

A real kube-apiserver and kube-controller-manager (its ReplicaSet controller) with a SIMULATED
node whose kubelet rejects GPU pods while it carries the label gpuops.test/reject-gpu-pods=true
(a stale device checkpoint), then accepts them once the label is gone (the repair).
"""

from __future__ import annotations

REJECT = "gpuops.test/reject-gpu-pods"
GPU = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"


def gpu_pod_spec(node):
    return {
        "nodeName": node,
        "containers": [{"name": "train", "image": "registry.example/train:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
    }


def pods(f):
    return {p.metadata.name: p for p in f.cluster.core.list_namespaced_pod(f.namespace).items if p.metadata.deletion_timestamp is None}


def failed(f):
    return {n: p for n, p in pods(f).items() if p.status.phase == "Failed" and p.status.reason == "UnexpectedAdmissionError"}


def test_owned_rejected_pod_is_deleted_and_replaced_a_bare_one_reported(fleet):
    f = fleet([{"name": "gpu-a", "gpus": [GPU], "labels": {REJECT: "true"}}])
    node = f.prefix + "gpu-a"
    f.cluster.core.create_namespaced_pod(f.namespace, {"metadata": {"name": "notebook"}, "spec": gpu_pod_spec(node)})
    f.cluster.apps.create_namespaced_replica_set(f.namespace, {
        "metadata": {"name": "train"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "train"}},
                 "template": {"metadata": {"labels": {"app": "train"}}, "spec": gpu_pod_spec(node)}},
    })
    # kubelet (stale) rejects both; the ReplicaSet controller keeps creating pods that are rejected too
    f.wait(lambda: "notebook" in failed(f) and any(n.startswith("train-") for n in failed(f)),
           lambda: "both pods rejected (pods: %s; simkubelet: %s)" % (
               {n: (p.spec.node_name, p.status.phase, p.status.reason) for n, p in pods(f).items()},
               (f.tmp / "simkubelet.log").read_text()[-2000:]))
    # the repair: kubelet admits GPU pods again
    f.cluster.core.patch_node(node, {"metadata": {"labels": {REJECT: None}}})
    f.wait(lambda: any(p.status.phase == "Running" for n, p in pods(f).items() if n.startswith("train-")), "a running replacement")
    rejected_before = sorted(n for n in failed(f) if n.startswith("train-"))
    extra = {"gpuops_recover_nodes": [node], "gpuops_recover_pods": True}

    rc, run = f.play(extra, "--check", playbook="recover_pods.yml")
    assert rc == 0, run.failure()
    planned = run.localhost("Delete rejected pods that have a controller, list the bare ones")
    assert planned["changed"] and planned["deleted"] == []
    assert sorted(p["name"] for p in planned["pods"] if p["action"] == "delete") == rejected_before
    assert [(b["name"], b["action"]) for b in planned["bare"]] == [("notebook", "report")]
    assert sorted(failed(f)) == sorted(rejected_before + ["notebook"])  # check mode deleted nothing

    rc, run = f.play(extra, playbook="recover_pods.yml")
    assert rc == 0, run.failure()
    done = run.localhost("Delete rejected pods that have a controller, list the bare ones")
    assert done["deleted"] == ["%s/%s" % (f.namespace, n) for n in rejected_before]
    assert done["bare"][0]["recreate_command"] == "kubectl -n %s get pod notebook -o yaml | kubectl replace --force -f -" % f.namespace
    f.wait(lambda: sorted(failed(f)) == ["notebook"], "the rejected ReplicaSet pods gone")
    running = [n for n, p in pods(f).items() if n.startswith("train-") and p.status.phase == "Running"]
    assert len(running) == 1  # the ReplicaSet's pod, made by the real controller-manager, runs on the repaired node
    assert run.localhost("Bare pods to recreate by hand")["msg"] == [done["bare"][0]["recreate_command"]]
    deletes = [e for e in run.api_calls if e["verb"] == "delete" and e["objectRef"]["resource"] == "pods"]
    assert sorted(e["objectRef"]["name"] for e in deletes) == rejected_before  # never the bare pod

    # a second run has nothing to delete; with verification on, a pod asking for one GPU runs on the
    # repaired node (the device plugin registered its GPU) and sees the node's current UUID
    f.install_old_plugin()
    extra.update(gpuops_verify_repaired=True, gpuops_verify_steps=[{"node": node, "gpu_uuids": [GPU], "gpu_request": 1}],
                 device_plugin_namespace=f.namespace, device_plugin_poll_interval=0.5, device_plugin_verify_timeout=30)
    rc, run = f.play(extra, playbook="recover_pods.yml")
    again = run.localhost("Delete rejected pods that have a controller, list the bare ones")
    assert rc == 0 and not again["changed"] and again["deleted"] == [], run.failure()
    verdict = run.localhost("Each repaired node gave the pod one of its current GPUs")
    assert verdict["results"][0]["msg"] == "%s: the pod saw %s, a current GPU of the node" % (node, GPU)


def test_verification_fails_when_the_node_gives_a_gpu_it_does_not_have(fleet):
    f = fleet([{"name": "gpu-a", "gpus": [GPU], "faults": ["wrong_gpus"], "fault_images": ["nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"]}])
    node = f.prefix + "gpu-a"
    f.install_old_plugin()
    extra = {"gpuops_recover_nodes": [node], "gpuops_recover_pods": True, "gpuops_verify_repaired": True,
             "gpuops_verify_steps": [{"node": node, "gpu_uuids": [GPU], "gpu_request": 1}],
             "device_plugin_namespace": f.namespace, "device_plugin_poll_interval": 0.5, "device_plugin_verify_timeout": 30}
    rc, run = f.play(extra, playbook="recover_pods.yml")
    assert rc != 0
    assert "%s: the pod saw GPU-00000000-dead-beef-0000-000000000000; gpu_uuid_facts lists %s" % (node, GPU) in run.failure()


def test_a_running_pod_on_a_gone_gpu_is_replaced_when_the_repair_named_it(fleet):
    # a real kubelet keeps such a pod Running, its container in CreateContainerError at every start;
    # the repair names its UID (kubelet_checkpoint's affected_pods), recover_pods.yml brings it back
    f = fleet([{"name": "gpu-a", "gpus": [GPU]}])
    node = f.prefix + "gpu-a"
    gone = {"gpuops.test/gpu-gone": "true"}
    f.cluster.core.create_namespaced_pod(f.namespace, {"metadata": {"name": "notebook", "annotations": gone}, "spec": gpu_pod_spec(node)})
    f.cluster.core.create_namespaced_pod(f.namespace, {"metadata": {"name": "unnamed", "annotations": gone}, "spec": gpu_pod_spec(node)})
    f.cluster.apps.create_namespaced_replica_set(f.namespace, {
        "metadata": {"name": "train"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "train"}},
                 "template": {"metadata": {"labels": {"app": "train"}, "annotations": gone}, "spec": gpu_pod_spec(node)}},
    })

    def broken():
        return {n: p for n, p in pods(f).items() if p.status.phase == "Running" and any(
            (c.state.waiting and c.state.waiting.reason == "CreateContainerError") for c in p.status.container_statuses or ())}

    f.wait(lambda: len(broken()) == 3, lambda: "three pods in CreateContainerError (pods: %s)" % sorted(pods(f)))
    first = [n for n in broken() if n.startswith("train-")][0]
    # "unnamed" is broken the same way, but the repair did not name it: never touched
    stale = [pods(f)[first].metadata.uid, pods(f)["notebook"].metadata.uid]
    # the ReplicaSet's replacement is a fresh pod on the repaired node: give the template a present GPU
    f.cluster.apps.patch_namespaced_replica_set("train", f.namespace, {"spec": {"template": {"metadata": {"annotations": {"gpuops.test/gpu-gone": None}}}}})
    extra = {"gpuops_recover_nodes": [node], "gpuops_recover_pods": True, "gpuops_stale_pod_uids": stale}

    rc, run = f.play(extra, playbook="recover_pods.yml")
    assert rc == 0, run.failure()
    done = run.localhost("Delete rejected pods that have a controller, list the bare ones")
    assert done["deleted"] == ["%s/%s" % (f.namespace, first)]
    assert [(b["name"], b["kind"], b["action"]) for b in done["bare"]] == [("notebook", "gpu_gone", "report")]
    assert "CreateContainerError" in [p["reason"] for p in done["pods"] if p["name"] == first]
    f.wait(lambda: first not in pods(f) and any(n.startswith("train-") and p.status.phase == "Running" and n != first
                                                and n not in broken() for n, p in pods(f).items()),
           "the ReplicaSet's replacement Running on a present GPU")
    assert sorted(broken()) == ["notebook", "unnamed"]  # the bare pod is reported, the unnamed one untouched
    deletes = [e for e in run.api_calls if e["verb"] == "delete" and e["objectRef"]["resource"] == "pods"]
    assert [e["objectRef"]["name"] for e in deletes] == [first]
    # a second run: the bare pod is reported again, nothing deleted
    rc, again = f.play(extra, playbook="recover_pods.yml")
    assert rc == 0 and again.localhost("Delete rejected pods that have a controller, list the bare ones")["deleted"] == []
