# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""make demo-doctor: the GPU doctor on three SIMULATED GPU nodes, end to end, in one command.

A real control plane (hack/kube-cluster.sh: Debian's kube-apiserver, controller-manager and scheduler; built the first time,
about 8 minutes on 2 cores, then cached), three Nodes with a SIMULATED kubelet and device plugin (tests/kube/simkubelet.py,
the rig's: its health loop withholds a GPU that NVML says is unhealthy), the collection's device plugin and one pod on each
GPU of lab-gpu-a, and the shipped rulebook extensions/eda/rulebooks/gpu_health.yml run by the real ansible-rulebook in
remediate mode. Then a critical XID (79, "GPU has fallen off the bus", with NVML's recovery action "reset") is written into
lab-gpu-a's GPU 0 (the fake NVML's config), and the story is printed as it happens, one line a step, with the seconds since
the fault: the event, the remediation's steps (quarantine: only GPU 0's pod evicted), the reset, the verification pod, the
release. It ends with the fleet's state and the run's fleet page, and stops everything it started (also on Ctrl-C).

  .venv/bin/python lab/doctor.py [--out out/doctor] [--cluster DIR]   (--cluster: a control plane already up, left up)
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import signal
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests", "kube"), os.path.join(ROOT, "tests", "fakes"), os.path.join(ROOT, "build", "collections")]

import kubefleet  # noqa: E402  pylint: disable=wrong-import-position
from test_gpu_health_plan import faulty, healthy  # noqa: E402  pylint: disable=wrong-import-position
from test_gpu_health_rulebook import activation, node_vars, released, shipped, step, wait_text  # noqa: E402  pylint: disable=wrong-import-position
from test_gpu_quarantine import G, OTHER, remediation_fleet, running  # noqa: E402  pylint: disable=wrong-import-position

NODES = [{"name": "a", "gpus": G}, {"name": "b", "gpus": [OTHER[0]]}, {"name": "c", "gpus": [OTHER[1]]}]


class Story:
    """The lines of the story, each once, with the seconds since the fault."""

    def __init__(self):
        self.start, self.said = None, set()

    def say(self, key, text):
        if key in self.said:
            return
        self.said.add(key)
        at = "%6.1f s" % (time.monotonic() - self.start) if self.start is not None else " " * 8
        print("%s  %s" % (at, text), flush=True)


def _terminate(signum, frame):  # pylint: disable=unused-argument
    raise KeyboardInterrupt  # SIGTERM as Ctrl-C: every finally below stops what it started


def watch(f, name, log, pods, uids, story, timeout):
    """Poll the cluster, the rulebook's log and the node's fake NVML until the node is released; print each step once."""
    deadline, seen_steps = time.monotonic() + timeout, []
    others = dict((app, uids[app]) for app in ("on-gpu1", "on-gpu2"))
    cfg = f.tmp / "nodes" / name / "fake_nvml.cfg"
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if f.allocatable(name) < len(G):
            story.say("withheld", "device plugin: %s's GPU 0 unhealthy, withheld (allocatable %d of %d)" % (name, f.allocatable(name), len(G)))
        if "'kind': 'gpu_unallocatable'" in text:
            story.say("event", "event: gpu_unallocatable for %s (the gpu_nodes source's Node watch)" % name)
        if "'kind': 'gpu_faults'" in text:
            story.say("window", "window closed: gpu_faults -> playbooks/gpu_remediation.yml runs for %s alone" % name)
        if "TASK [Plan (read-only" in text:
            story.say("plan", "plan: %s's GPU health read, decided by NVIDIA's catalog; the breakers and the fleet's cap checked" % name)
        current = step(f, name)
        if current and (not seen_steps or seen_steps[-1] != current):
            seen_steps.append(current)
            story.say("step-%d" % len(seen_steps), "remediation step: %s%s" % (current, " (cordoned, tainted: the plan chose reset of GPU 0)"
                                                                               if len(seen_steps) == 1 else ""))
        names = set(p.metadata.name for p in f.cluster.core.list_namespaced_pod(f.namespace).items if not p.metadata.deletion_timestamp)
        if pods["on-gpu0"] not in names:
            kept = all(running(f, app) and running(f, app)[0].metadata.uid == uid for app, uid in others.items())
            story.say("evicted", "quarantine: evicted GPU 0's pod only (%s); GPU 1's and GPU 2's pods %s" % (
                pods["on-gpu0"], "keep running, their UIDs unchanged" if kept else "CHANGED"))
        if "recovery|0|1" not in cfg.read_text():
            story.say("reset", "reset: GPU 0 reset on %s (nvidia-smi -r; NVML's recovery action cleared)" % name)
        if "The verification passed" in text:
            story.say("verify", "verification: a pod asked for the node's free GPUs and was given GPU 0")
        if released(f, name):
            story.say("released", "released: %s uncordoned, the taint off, the ledger entry closed (recovered)" % name)
            return True
        time.sleep(0.25)
    return False


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "out", "doctor"), help="where the run's reports and the fleet page go")
    parser.add_argument("--cluster", help="a control plane already up (hack/kube-cluster.sh start DIR): used, and left up")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    args.out = os.path.abspath(args.out)  # the rulebook runs each playbook in a directory of its own
    signal.signal(signal.SIGTERM, _terminate)
    print("gpuops.fleet: the GPU doctor on three SIMULATED GPU nodes (fake NVML, simulated kubelet and device plugin); the API "
          "server, scheduler, controllers and ansible-rulebook are real.", flush=True)
    cache = os.environ.get("GPUOPS_CACHE", os.path.expanduser("~/.cache/gpuops"))
    if not args.cluster and not os.path.exists(os.path.join(cache, "kube-v1.20.2", "kube-apiserver")):
        print("First run: building the control plane from Debian's kubernetes source, about 8 minutes on 2 cores (cached after).",
              flush=True)
    work = tempfile.mkdtemp(prefix="gpuops-doctor-")
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    story, made, cluster, ok = Story(), [], None, False
    try:
        print("starting the control plane ...", flush=True)
        cluster = kubefleet.Cluster(args.cluster) if args.cluster else kubefleet.start_cluster(os.path.join(work, "cluster"))
        lib = kubefleet.fakenode.build_lib(os.path.join(ROOT, "build", "fakes"))

        def fleet(nodes, **options):
            made.append(kubefleet.Fleet(cluster, pathlib.Path(work), lib, nodes, prefix="lab-gpu-", **options))
            return made[-1]

        print("registering lab-gpu-a (3 GPUs, a pod on each), lab-gpu-b and lab-gpu-c; deploying the device plugin ...", flush=True)
        f, name, dummy, uids, extra = remediation_fleet(fleet, lib, NODES)
        healthy(f, name)
        pods = dict((app, running(f, app)[0].metadata.name) for app in ("on-gpu0", "on-gpu1", "on-gpu2"))
        log = pathlib.Path(work) / "rulebook.log"
        variables = shipped(f, node_vars(extra), gpuops_events_settle_seconds=2, gpu_remediation_mode="remediate",
                            gpuops_events_report_dir=args.out)
        print("starting ansible-rulebook with extensions/eda/rulebooks/gpu_health.yml (remediate mode) ...", flush=True)
        with activation(f, variables, log):
            print("the rulebook is watching %d GPU Nodes. Now the fault:" % len(f.nodes), flush=True)
            story.start = time.monotonic()
            faulty(f, name, "recovery|0|1", "xid|0|79")
            story.say("fault", "fault: XID 79 (GPU has fallen off the bus) and NVML's recovery action GPU_RESET on %s's GPU 0" % name)
            ok = watch(f, name, log, pods, uids, story, args.timeout)
            # the run's end (its report and fleet page are written after the release) before the rulebook is stopped
            if ok and not wait_text(log, "PLAY RECAP", 120):
                print("the remediation's run did not end within 120 s of the release", flush=True)
            f.wait(lambda: f.allocatable(name) == len(G), "every GPU of %s allocatable again" % name, timeout=60)
        print("\nthe fleet now:", flush=True)
        for node in f.nodes:
            api = f.node(node["name"])
            state = "cordoned" if api.spec.unschedulable else "schedulable"
            print("  %-12s GPUs allocatable %d of %d, %s" % (node["name"], f.allocatable(node["name"]), len(node["gpus"]), state), flush=True)
        page = os.path.join(args.out, "gpu-remediation.html")
        print("the fleet page: %s%s" % (page, "" if os.path.exists(page) else " (NOT written)"), flush=True)
        shutil.copy(str(log), os.path.join(args.out, "rulebook.log"))
        print("the run's reports, and ansible-rulebook's output (rulebook.log): %s" % args.out, flush=True)
    except KeyboardInterrupt:
        print("\nstopped (Ctrl-C): stopping what it started ...", flush=True)
    finally:
        for item in made:
            item.stop()
        if cluster is not None:
            cluster.close()
        if cluster is not None and not args.cluster:
            kubefleet.stop_cluster(os.path.join(work, "cluster"))
        shutil.rmtree(work, ignore_errors=True)
    print("done: %s; nothing left running." % ("the node was remediated and released" if ok else "NOT released in time"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
