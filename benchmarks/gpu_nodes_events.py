# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Figures, not a test: the event source gpuops.fleet.gpu_nodes watching N SIMULATED Nodes on a real kube-apiserver
(hack/kube-cluster.sh), each Node's status updated every --period seconds as kubelet does (a Ready heartbeat; 1 in 100
updates also withholds or gives back a GPU); each Node carries 50 images in its status, as kubelet reports them. The
source runs in its own process (its ``follow``, as ansible-rulebook's ``main`` runs it); this one creates the Nodes and
patches them.

Prints: the updates sent per second, the events the source emitted, and the source process's CPU (% of one core, from
/proc/<pid>/stat over the measured window) and peak RSS (VmHWM).

  .venv/bin/python benchmarks/gpu_nodes_events.py --nodes 1000 --period 10 --seconds 60
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "build", "collections"))

CHILD = r"""
import importlib.util, json, sys, threading
spec = importlib.util.spec_from_file_location("src", sys.argv[1]); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
opts = m.options.check_nodes({"kubeconfig": sys.argv[2], "heartbeat": 10})
counts = {}
def emit(e):
    k = e["gpuops"]["kind"]; counts[k] = counts.get(k, 0) + 1
    if k == "heartbeat":
        print(json.dumps(counts), flush=True)
m.follow(opts, emit, threading.Event())
"""


# kubelet reports up to 50 images in a Node's status (nodeStatusMaxImages): a real Node object is mostly them
IMAGES = [{"names": ["registry.example.com/team-%02d/trainer@sha256:%064x" % (i, i), "registry.example.com/team-%02d/trainer:v%d" % (i, i)],
           "sizeBytes": 1000000000 + i} for i in range(50)]


def status(free, beat):
    return {"status": {"images": IMAGES, "capacity": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
                       "allocatable": {"nvidia.com/gpu": str(free), "cpu": "63", "memory": "500Gi", "pods": "110"},
                       "nodeInfo": {"bootID": "b", "machineID": "m", "systemUUID": "s", "kernelVersion": "k", "osImage": "o",
                                    "containerRuntimeVersion": "c", "kubeletVersion": "v1.20.2", "kubeProxyVersion": "v1.20.2",
                                    "operatingSystem": "linux", "architecture": "amd64"},
                       "conditions": [{"type": t, "status": "True" if t == "Ready" else "False", "reason": "r", "message": "m",
                                       "lastHeartbeatTime": beat, "lastTransitionTime": "2026-11-29T10:00:00Z"}
                                      for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")]}}


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hwm_mib(pid):
    with open("/proc/%d/status" % pid) as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--period", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    from kubernetes import client, config

    work = tempfile.mkdtemp(prefix="gpuops-events-bench-")
    subprocess.run([os.path.join(ROOT, "hack", "kube-cluster.sh"), "start", work], check=True, stdout=subprocess.DEVNULL)
    try:
        kubeconfig = os.path.join(work, "kubeconfig")
        core = client.CoreV1Api(config.new_client_from_config(kubeconfig))
        names = ["bench-%04d" % i for i in range(args.nodes)]
        for name in names:
            core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels={"nvidia.com/gpu.present": "true"})))
            core.patch_node_status(name, status(8, "2026-11-29T10:00:00Z"))
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "collections"))  # the collection, as installed
        child = subprocess.Popen([sys.executable, "-c", CHILD, os.path.join(ROOT, "extensions/eda/plugins/event_source/gpu_nodes.py"),
                                  kubeconfig], stdout=subprocess.PIPE, text=True, env=env)
        last = {}
        threading.Thread(target=lambda: [last.update(json.loads(line)) for line in child.stdout], daemon=True).start()
        time.sleep(5)  # the first list
        begin_cpu, begin, sent, i = cpu_seconds(child.pid), time.monotonic(), 0, 0
        interval = args.period / args.nodes
        while time.monotonic() - begin < args.seconds:
            name = names[i % args.nodes]
            free = 7 if (i // args.nodes) % 2 == 0 and i % 100 == 0 else 8
            core.patch_node_status(name, status(free, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
            sent, i = sent + 1, i + 1
            time.sleep(max(0.0, begin + i * interval - time.monotonic()))
        elapsed = time.monotonic() - begin
        if child.poll() is not None:
            raise SystemExit("the source ended (rc %s)" % child.returncode)
        used = cpu_seconds(child.pid) - begin_cpu
        print(json.dumps({"nodes": args.nodes, "updates_per_second": round(sent / elapsed, 1), "seconds": round(elapsed, 1),
                          "source_cpu_percent_of_one_core": round(100.0 * used / elapsed, 2), "source_peak_rss_mib": round(hwm_mib(child.pid), 1),
                          "events_by_kind": last}))
        child.kill()
    finally:
        subprocess.run([os.path.join(ROOT, "hack", "kube-cluster.sh"), "stop", work], check=False)


if __name__ == "__main__":
    main()
