# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Two trees of this collection on the same lab fleet, interleaved (prints figures; not a test).

One run is not a measurement on a shared 2-core machine: ping of the same nodes moved by 40 % within an hour. This
compares two checkouts in the same minutes: for each tree a fresh lab of N SIMULATED nodes (lab/fleet.py), its first
full site.yml run, then ROUNDS rounds of ``ansible -m ping``, a second full run and the check stage
(``--tags facts,checkpoint --check``). Each line gives wall seconds, and CPU seconds per host split into the modules'
(every module's Python runs through benchmarks/fleet.py's interpreter wrapper) and the controller's (the rest of the
run's process tree); the last lines give each stage's medians.

    git worktree add /tmp/before <rev>   # then link its build/ as make does (collection link, fakes)
    .venv/bin/python benchmarks/fleet_compare.py /tmp/before . [--nodes 50] [--rounds 3] [--forks 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fleet  # noqa: E402  pylint: disable=wrong-import-position


def stages(tree, work, nodes, env):
    """The argv of each stage on ``tree``'s own lab, site.yml and collection."""
    bin_dir = os.path.join(tree, ".venv", "bin")
    lab = os.path.join(work, "lab")
    inventory = os.path.join(lab, "inventory.yml")
    site = [os.path.join(bin_dir, "ansible-playbook"), "-i", inventory, os.path.join(tree, "playbooks", "site.yml"),
            "-e", "gpuops_report_dir=" + os.path.join(work, "report")]
    setup = fleet.run([os.path.join(bin_dir, "python"), os.path.join(tree, "lab", "fleet.py"), "--nodes", str(nodes), "--out", lab], env)
    if setup[2] != 0:
        raise SystemExit("lab set-up on %s failed:\n%s" % (tree, setup[3]))
    return {"ping": [os.path.join(bin_dir, "ansible"), "-i", inventory, "gpu_nodes", "-m", "ping"], "second": site,
            "check": site + ["--tags", "facts,checkpoint", "--check"], "first": site}


def measure(tree, argv, work, tag, env):
    """(wall, CPU, module CPU) of one stage, run with ``tree``'s collection."""
    env = dict(env, ANSIBLE_COLLECTIONS_PATH=os.path.join(tree, "build", "collections"), ANSIBLE_CONFIG=os.path.join(tree, "ansible.cfg"))
    wall, dummy, rc, tail, cpu, module, dummy2 = fleet.timed(argv, env, work, tag)
    if rc != 0:
        raise SystemExit("%s on %s failed (rc %d):\n%s" % (tag, tree, rc, tail))
    return wall, cpu, module


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs=2, help="two checkouts, each with its build/collections link (make collection-link)")
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--forks", type=int, default=10)
    args = parser.parse_args(argv)
    env = fleet.environment(args.forks, False)
    trees = [os.path.abspath(t) for t in args.trees]
    rows = {}
    # keyed by position, not path: the same checkout twice is an A/A run (the machine's own noise)
    names = ["%d:%s" % (index, tree) for index, tree in enumerate(trees)]
    with tempfile.TemporaryDirectory(prefix="gpuops-fleet-compare-") as top:
        plans = {}
        for index, (name, tree) in enumerate(zip(names, trees)):
            work = os.path.join(top, "tree-%d" % index)
            os.makedirs(work)
            plans[name] = (tree, work, stages(tree, work, args.nodes, env))
            rows.setdefault((name, "first"), []).append(measure(tree, plans[name][2]["first"], work, "first", env))
        for round_ in range(args.rounds):
            for name in names:
                tree, work, argvs = plans[name]
                for stage in ("ping", "second", "check"):
                    rows.setdefault((name, stage), []).append(measure(tree, argvs[stage], work, "%s-%d" % (stage, round_), env))
    print("%-40s %-7s %8s %10s %13s %11s" % ("tree", "stage", "wall s", "CPU s/host", "module s/host", "ctl s/host"))
    for (name, stage), done in rows.items():
        for wall, cpu, module in done:
            per_host = (cpu / args.nodes, module / args.nodes, (cpu - module) / args.nodes)
            print("%-40s %-7s %8.1f %10.3f %13.3f %11.3f" % ((name[-40:], stage, wall) + per_host))
    for (name, stage), done in rows.items():
        print("median %-33s %-7s wall %6.1f s, controller %.3f s/host" % (
            name[-33:], stage, statistics.median(r[0] for r in done), statistics.median((r[1] - r[2]) / args.nodes for r in done)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
