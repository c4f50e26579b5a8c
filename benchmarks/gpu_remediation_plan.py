# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Figures, not a test: the GPU remediation plan (``_cluster/remediation/plan.plan``, pure) over N SIMULATED
nodes of 8 GPUs each, 8 GPU pods a node (one per GPU) and a PDB per pod, 1 % of the nodes faulty (each its own
signal, so that no breaker trips and every faulty node is mapped and planned), in this process.

Prints per N: the plan's CPU seconds (median of --runs), the peak of memory the plan itself allocated (tracemalloc) and
the pod list calls it would make (the module asks for the pods of each node a row acts on, as here), besides the
process's peak RSS (getrusage).

  .venv/bin/python benchmarks/gpu_remediation_plan.py [--nodes 200 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "build", "collections"))
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as remediation_ledger
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import plan as remediation_plan
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import decision as health_decision

XIDS = (119, 120, 62, 95, 109, 46, 140, 143, 155, 156)


def uuid(n, g):
    return "GPU-%08x-0000-4000-8000-%012x" % (n, g)


def build(nodes):
    items, pods, pdbs, api_nodes = [], [], [], []
    for n in range(nodes):
        name = "node-%05d" % n
        api_nodes.append({"metadata": {"name": name, "annotations": {}}, "spec": {}})
        gpus, entries = [], []
        for g in range(8):
            gpu = {"index": g, "uuid": uuid(n, g), "state": "ok", "architecture": 9, "recovery_action": {"value": 0, "source": "nvml_field"},
                   "remapped_rows": {"supported": True, "pending": False, "failure": False}, "retired_pages": {"supported": False},
                   "ecc": {"volatile_dbe": 0}, "nvlink": {"links": [], "peers": []}, "processes": [], "mig_devices": [], "xids": []}
            if n % 100 == 0 and g == 0:  # 1 % of the nodes: a different XID bucket each, with the field unsupported
                gpu["recovery_action"] = {"value": None, "source": "unsupported"}
                gpu["xids"] = [{"code": XIDS[(n // 100) % len(XIDS)], "bucket": "RESET_GPU", "usec": 10 ** 6}]
            gpu["verdict"] = health_decision.decide_gpu(gpu)
            gpus.append(gpu)
            uid = "%08x-0000-4000-8000-%012x" % (n, g)
            entries.append({"pod_uid": uid, "container_name": "c", "resource_name": "nvidia.com/gpu", "device_ids": [uuid(n, g)],
                            "alloc_envs": {"NVIDIA_VISIBLE_DEVICES": uuid(n, g)}})
            pods.append({"metadata": {"name": "p-%d-%d" % (n, g), "namespace": "ml", "uid": uid, "labels": {"app": "a%d-%d" % (n, g)},
                                      "ownerReferences": [{"kind": "ReplicaSet", "name": "r", "controller": True}]},
                         "spec": {"nodeName": name}, "status": {"phase": "Running"}})
            pdbs.append({"metadata": {"name": "b-%d-%d" % (n, g), "namespace": "ml"},
                         "spec": {"selector": {"matchLabels": {"app": "a%d-%d" % (n, g)}}}, "status": {"disruptionsAllowed": 1}})
        health = {"available": True, "driver_version": "580.%d" % n, "gpus": gpus, "gpus_seen": 8, "boot_time": 0}
        health["verdict"] = health_decision.decide_node(health)
        items.append({"node": name, "host": name, "health": health, "entries": entries})
    return items, api_nodes, pods, pdbs


def pods_source(by_node, pods, asked):
    """``pods(node)`` as the module asks the API: one node's pods (a field selector), None for every pod; each ask recorded."""
    def pods_of(node):
        asked.append(node)
        return list(by_node.get(node, ())) if node is not None else pods
    return pods_of


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print("%8s %10s %12s %14s %10s %14s" % ("nodes", "pods", "plan cpu s", "plan peak MiB", "planned", "pod list calls"))
    for nodes in args.nodes:
        items, api_nodes, pods, pdbs = build(nodes)
        by_node = {}
        for pod in pods:
            by_node.setdefault(pod["spec"]["nodeName"], []).append(pod)
        asked = []

        pods_of = pods_source(by_node, pods, asked)
        times, peak, planned = [], 0, 0
        for dummy in range(args.runs):
            tracemalloc.start()
            start = time.process_time()
            del asked[:]
            result = remediation_plan.plan(items, api_nodes, pods_of, pdbs, remediation_ledger.empty(),
                                           {"max_nodes_per_run": nodes, "breaker_percent": 100}, 1800000000)
            times.append(time.process_time() - start)
            peak = max(peak, tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
            planned = result["summary"]["planned"]
        print("%8d %10d %12.3f %14.1f %10d %14d" % (nodes, len(pods), statistics.median(times), peak / 2 ** 20, planned, len(asked)))
    print("process peak RSS: %.1f MiB" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0))


if __name__ == "__main__":
    main()
