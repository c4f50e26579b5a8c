# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Figures for the device_plugin role (not a test): rollout wall time and API calls per node.

Starts the real control plane (hack/kube-cluster.sh), registers N SIMULATED GPU nodes
(tests/kube/simkubelet.py), installs an old plugin (1.0.0-beta4, RollingUpdate) and runs
playbooks/device_plugin.yml to v0.17.1. The role's API calls are counted in the apiserver's
audit log (user "gpuops"). The one-off part is measured by a second run, which finds every
pod current and replaces nothing; per node = (first run - second run) / nodes.

    .venv/bin/python benchmarks/device_plugin_rollout.py [--nodes 5 20] [--batch 1 5] [--verify]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import pathlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "kube"))
import kubefleet  # noqa: E402  pylint: disable=wrong-import-position


def uuid(i, j):
    return "GPU-%08x-0000-4000-8000-%012x" % (i, j)


def classify(event):
    ref = event.get("objectRef") or {}
    name = ref.get("resource", "?") + ("/" + ref["subresource"] if ref.get("subresource") else "")
    return "%s %s" % (event["verb"], name)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[5, 20])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--verify", action="store_true", help="run the verification pod on every node")
    parser.add_argument("--start-delay", type=float, default=0.5, help="simulated image pull + container start, seconds")
    args = parser.parse_args()
    base = pathlib.Path(tempfile.mkdtemp(prefix="gpuops-bench-"))
    cluster = kubefleet.start_cluster(base / "cluster")
    lib = kubefleet.fakenode.build_lib(os.path.join(kubefleet.ROOT, "build", "fakes"))
    print("SIMULATED nodes (simkubelet: start %.1f s, GPU registration 0.5 s, stop 0.3 s); verify %s"
          % (args.start_delay, args.verify))
    floor = args.start_delay + 0.5
    print("floor per batch (pod start + GPU registration): %.1f s" % floor)
    header = ("nodes", "batch", "wall_s", "s/node", "marg s/node", "x floor", "api_calls", "no-op_run", "calls/node", "per-node calls by kind")
    print("%6s %6s %8s %8s %12s %8s %10s %10s %11s  %s" % header, flush=True)
    try:
        for count in args.nodes:
            for batch in args.batch:
                work = base / ("n%d-b%d" % (count, batch))
                work.mkdir()
                nodes = [{"name": "gpu-%02d" % i, "gpus": [uuid(i, 0), uuid(i, 1)]} for i in range(count)]
                fleet = kubefleet.Fleet(cluster, work, lib, nodes, start_delay=args.start_delay)
                try:
                    fleet.install_old_plugin()
                    role_vars = fleet.role_vars(device_plugin_batch_size=batch, device_plugin_verify=args.verify)
                    rc, run = fleet.play(role_vars)
                    if rc != 0 or len(run.report["upgraded"]) != count:
                        raise SystemExit("rollout failed: %s" % run.failure())
                    rc2, again = fleet.play(role_vars)
                    if rc2 != 0 or again.report["nodes"]:
                        raise SystemExit("second run was not a no-op: %s" % again.failure())
                    kinds = collections.Counter(classify(e) for e in run.api_calls)
                    kinds.subtract(collections.Counter(classify(e) for e in again.api_calls))
                    per_node = dict((k, round(v / float(count), 2)) for k, v in sorted(kinds.items()) if v)
                    total, fixed = len(run.api_calls), len(again.api_calls)
                    marginal = (run.elapsed - again.elapsed) / count
                    batches = -(-count // batch)
                    row = (count, batch, run.elapsed, run.elapsed / count, marginal, marginal * count / batches / floor,
                           total, fixed, (total - fixed) / float(count), per_node)
                    print("%6d %6d %8.1f %8.2f %12.2f %8.2f %10d %10d %11.2f  %s" % row, flush=True)
                finally:
                    fleet.stop()
    finally:
        kubefleet.stop_cluster(base / "cluster")


if __name__ == "__main__":
    main()
