# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuops.fleet.gpu_workload_audit through playbooks/recover_pods.yml (it runs there when a cluster is configured),
against a real API server: the bad patterns of field report 004 in seeded pods, nothing in a clean one."""

from __future__ import annotations

HOST, CTR = "/home/kubernetes/bin/nvidia", "/usr/local/nvidia"
GPU = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"


def _pod(name, node, container, volumes=(), labels=None):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [dict({"name": "app", "image": "cuda:12"}, **container)], "volumes": list(volumes)}}


def test_the_audit_finds_each_bad_pattern_with_its_fix_and_nothing_in_a_clean_pod(fleet):
    f = fleet([{"name": "gpu-a", "gpus": [GPU]}])
    node = f.prefix + "gpu-a"
    gpu = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
    ld = [{"name": "LD_LIBRARY_PATH", "value": CTR + "/lib64"}]
    nvidia = {"name": "nvidia", "hostPath": {"path": HOST}}
    seeded = [
        _pod("clean", node, dict(gpu, env=ld, volumeMounts=[{"name": "nvidia", "mountPath": CTR, "readOnly": True}]), [nvidia]),
        # field report 004's end state: privileged, bin and lib64 mounted crosswise, no LD_LIBRARY_PATH
        _pod("swapped", node, dict(gpu, securityContext={"privileged": True},
                                   volumeMounts=[{"name": "bin", "mountPath": CTR + "/lib64"}, {"name": "lib", "mountPath": CTR + "/bin"}]),
             [{"name": "bin", "hostPath": {"path": HOST + "/bin"}}, {"name": "lib", "hostPath": {"path": HOST + "/lib64"}}]),
        _pod("host-dev", node, dict(gpu, env=ld, volumeMounts=[{"name": "dev", "mountPath": "/dev"}]), [{"name": "dev", "hostPath": {"path": "/dev"}}]),
        _pod("web", node, {}),  # no GPU, no driver: not audited
        _pod("installer", node, dict(gpu, securityContext={"privileged": True}), labels={"k8s-app": "nvidia-driver-installer"}),
    ]
    for body in seeded:
        f.cluster.core.create_namespaced_pod(f.namespace, body)
    rc, run = f.play({"gpuops_recover_nodes": []}, playbook="recover_pods.yml")
    assert rc == 0, run.failure()
    audit = run.localhost("Audit how GPU workloads reach the driver (gpu_workload_audit)")
    ours = {p["name"]: [(x["container"], x["kind"]) for x in p["findings"]] for p in audit["pods"] if p["namespace"] == f.namespace}
    assert ours == {"clean": [], "host-dev": [("app", "dev_mounted")],
                    "swapped": [("app", "privileged"), ("app", "swapped_mount"), ("app", "swapped_mount"), ("app", "ld_library_path")]}
    assert audit["by_node"][node] == 5 and not audit["changed"]
    fixes = [x["fix"] for p in audit["pods"] if p["name"] == "swapped" and p["namespace"] == f.namespace for x in p["findings"]]
    assert fixes[1] == "mount %s/bin at %s/bin, or the whole %s read-only at %s" % (HOST, CTR, HOST, CTR)
    # read-only: the pods are as they were
    assert sorted(p.metadata.name for p in f.cluster.core.list_namespaced_pod(f.namespace).items) == sorted(b["metadata"]["name"] for b in seeded)
