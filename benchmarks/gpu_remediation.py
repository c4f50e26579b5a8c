# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Figures for playbooks/gpu_remediation.yml (not a test): time from quarantine to release, split by step, and API
requests per remediated node, on a real control plane with SIMULATED nodes and GPUs.

The fleet is tests/kube/test_gpu_quarantine.py's: node a (3 GPUs, one ReplicaSet pod each, GPU 0's recovery action
says reset) beside healthy nodes, the collection's device plugin deployed. Two scenarios, each on a fresh fleet:

* ``reset``: GPU 0 is reset (quarantine, pause, gpu_reset, unpause, the plugin's new pod, release);
* ``reboot``: a process outside Kubernetes holds GPU 0's NVML, so the reset fails and escalates to a reboot (the
  quarantine widened, the reboot command, node_reboot, the post-check, the plugin, release).

Each is run after a ``report`` run (the plan alone): the remediated node's requests are the remediate run's less the
report run's (user ``gpuops`` in the audit log); the steps' times are the json callback's task durations.

    .venv/bin/python benchmarks/gpu_remediation.py [--healthy 2] [--scenario reset reboot] [--bare 1000 5000]

``--bare N``: N more GPU Nodes beside the simulated ones, API objects only (8 GPUs in capacity, no kubelet behind them), so
the plan reads a fleet of N Nodes while one node is remediated; each N is a scenario again, on the same cluster (the
remediated node's requests and seconds should not grow with N).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(HERE, "tests", "kube"))
sys.path.insert(0, os.path.join(HERE, "tests", "fakes"))
import kubefleet  # noqa: E402  pylint: disable=wrong-import-position
import test_gpu_quarantine as tq  # noqa: E402  pylint: disable=wrong-import-position
from test_gpu_health_plan import G, OTHER  # noqa: E402  pylint: disable=wrong-import-position


def classify(event):
    ref = event.get("objectRef") or {}
    return "%s %s" % (event["verb"], ref.get("resource", "?") + ("/" + ref["subresource"] if ref.get("subresource") else ""))


def _when(text):
    return datetime.datetime.strptime(text.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")


def steps(run, host):
    """(task name, seconds) of the remediation play's tasks that ran on ``host`` (or for it, delegated), in order."""
    out = []
    for play in run.out["plays"]:
        if play["play"]["name"] != "GPU nodes - remediate, one node at a time":
            continue
        for task in play["tasks"]:
            result = task["hosts"].get(host)
            if result is None or result.get("skipped"):
                continue
            duration = task["task"].get("duration") or {}
            if duration.get("start") and duration.get("end"):
                seconds = (_when(duration["end"]) - _when(duration["start"])).total_seconds()
                out.append((task["task"]["name"].split(" : ")[-1], seconds))
    return out


def bare_nodes(cluster, count):
    """``count`` GPU Nodes in all (API objects only) named bare-NNNNN, created where missing."""
    from concurrent.futures import ThreadPoolExecutor  # pylint: disable=import-outside-toplevel

    have = set(n.metadata.name for n in cluster.core.list_node().items)

    def make(i):
        name = "bare-%05d" % i
        if name in have:
            return
        cluster.core.create_node({"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}}})
        cluster.core.patch_node_status(name, {"status": {"capacity": {"nvidia.com/gpu": "8", "cpu": "64", "pods": "110"},
                                                         "allocatable": {"nvidia.com/gpu": "8", "cpu": "63", "pods": "110"}}})

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(make, range(count)))


def scenario(cluster, lib, base, kind, healthy, bare=0):
    work = base / ("%s-%d" % (kind, bare))
    work.mkdir()
    if bare:
        bare_nodes(cluster, bare)
    made = []

    def fleet(nodes, **options):
        made.append(kubefleet.Fleet(cluster, work, lib, nodes, **options))
        return made[-1]

    nodes = [{"name": "a", "gpus": G}] + [{"name": "h%d" % i, "gpus": [OTHER[i % len(OTHER)]]} for i in range(healthy)]
    holder = None
    try:
        f, name, dummy, dummy2, extra = tq.remediation_fleet(fleet, lib, nodes)
        rc, report = f.play(extra, playbook="gpu_remediation.yml")
        if rc != 0:
            raise SystemExit("report run failed: %s" % report.failure())
        remediate = dict(extra, gpu_remediation_mode="remediate")
        if kind == "reboot":
            cfg = str(work / "nodes" / name / "fake_nvml.cfg")
            holder = subprocess.Popen([sys.executable, "-c", "import pynvml, time; pynvml.nvmlInit(); print('up', flush=True); time.sleep(600)"],
                                      env=kubefleet.fakenode.environ(lib, cfg), stdout=subprocess.PIPE, text=True)
            holder.stdout.readline()
            remediate.update(gpu_remediation_allowed_actions=["reset", "reboot"],
                             gpu_remediation_reboot_command=["touch", f.nodes[0]["reboot_request"]])
        rc, run = f.play(remediate, playbook="gpu_remediation.yml")
        if rc != 0:
            raise SystemExit("%s run failed: %s" % (kind, run.failure()))
        kinds = collections.Counter(classify(e) for e in run.api_calls)
        kinds.subtract(collections.Counter(classify(e) for e in report.api_calls))
        return {"wall": run.elapsed, "report_wall": report.elapsed, "calls": len(run.api_calls), "report_calls": len(report.api_calls),
                "by_kind": dict((k, v) for k, v in sorted(kinds.items()) if v), "steps": steps(run, name)}
    finally:
        if holder is not None:
            holder.kill()
            holder.wait(10)
            holder.stdout.close()
        for item in made:
            item.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--healthy", type=int, default=2, help="healthy nodes beside the faulty one")
    parser.add_argument("--scenario", nargs="+", choices=["reset", "reboot"], default=["reset", "reboot"])
    parser.add_argument("--bare", type=int, nargs="+", default=[0], help="GPU Nodes beside them, API objects only (each count a run)")
    args = parser.parse_args()
    base = pathlib.Path(tempfile.mkdtemp(prefix="gpuops-bench-"))
    cluster = kubefleet.start_cluster(base / "cluster")
    lib = kubefleet.fakenode.build_lib(os.path.join(kubefleet.ROOT, "build", "fakes"))
    print("SIMULATED nodes and GPUs (simkubelet: pod start 0.5 s, GPU registration 0.5 s, stop 0.3 s); real kube-apiserver, "
          "controllers and audit log; 1 faulty node, %d healthy" % args.healthy)
    try:
        for kind, bare in [(k, b) for b in sorted(args.bare) for k in args.scenario]:
            got = scenario(cluster, lib, base, kind, args.healthy, bare)
            total = sum(s for dummy, s in got["steps"])
            print("\n%s, %d bare GPU Nodes beside: remediate run %.1f s (report run alone %.1f s); steps on the node %.1f s; "
                  "API requests %d (report run %d): %d for the remediated node"
                  % (kind, bare, got["wall"], got["report_wall"], total, got["calls"], got["report_calls"],
                     got["calls"] - got["report_calls"]))
            for step, seconds in got["steps"]:
                print("  %7.2f s  %s" % (seconds, step))
            print("  requests by kind: %s" % ", ".join("%s %d" % kv for kv in got["by_kind"].items()))
    finally:
        kubefleet.stop_cluster(base / "cluster")


if __name__ == "__main__":
    main()
