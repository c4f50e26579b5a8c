# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Figures (not a test): how soon the always-on path remediates a GPU fault on the REAL kubelet v1.20.2 + containerd node
(SIMULATED GPUs: the fake NVML, a fake device plugin), through the real ansible-rulebook in remediate mode: the XID written
to the event, to the faulty GPU's pod evicted, to the node released. Runs tests/knode/test_gpu_health_rulebook_node.py's
story ``--runs`` times (5), each its own pytest session (its own control plane and node), and prints each figure's median
and maximum (issue 59, item 3's goals: evicted <= 15 s, released <= 60 s, median of 5). One node per machine: never beside
``make kube-node`` or CI.

    .venv/bin/python benchmarks/remediation_latency.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST = "tests/knode/test_gpu_health_rulebook_node.py::test_an_xid_on_the_real_kubelet_is_remediated_by_the_rulebook_for_that_gpu_alone"
FIGURES = os.path.join(ROOT, "out", "knode-gpu-events-remediation.json")


def one(index):
    """One run's figures ({name: seconds}); the run's output where it failed."""
    if os.path.exists(FIGURES):
        os.remove(FIGURES)
    env = dict(os.environ, GPUOPS_REQUIRE_KUBE_NODE="1")
    basetemp = os.path.join(ROOT, "build", "pytest", "bench-latency-%d" % index)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "--basetemp=%s" % basetemp, TEST],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not os.path.exists(FIGURES):
        raise SystemExit("run %d failed:\n%s" % (index, (proc.stdout + proc.stderr)[-4000:]))
    with open(FIGURES) as handle:
        return json.load(handle)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    runs = []
    for index in range(args.runs):
        runs.append(one(index))
        print("run %d: %s" % (index + 1, ", ".join("%s %.1f s" % kv for kv in runs[-1].items())), flush=True)
    print("\n| figure | median | max | runs |\n|---|---|---|---|")
    for name in runs[0]:
        values = [r[name] for r in runs if name in r]
        print("| %s | %.1f s | %.1f s | %s |" % (name, statistics.median(values), max(values), ", ".join("%.1f" % v for v in values)))


if __name__ == "__main__":
    main()
