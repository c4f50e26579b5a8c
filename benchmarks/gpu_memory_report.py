# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Figures, not a test: gpuops.fleet.gpu_memory_report against a real Prometheus (Debian's) holding
N SIMULATED GPUs (8 per node; half the GPUs held whole by one pod, half shared by two pods), its
series served by loopback exporters in the formats of gpuops metrics, dcgm-exporter and
kube-state-metrics, with the gpu_monitoring role's rules.

Prints, per N: series scraped, queries per report, the module task's seconds (json callback,
median of --runs), the ansible-playbook wall seconds, and the in-process time of the queries and
the report (median).

  .venv/bin/python benchmarks/gpu_memory_report.py [--gpus 50 200] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "prometheus"))
sys.path.insert(0, os.path.join(ROOT, "build", "collections"))
import promrig  # noqa: E402  pylint: disable=wrong-import-position,import-error
import yaml  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import gpu_memory_report as gmr  # noqa: E402  pylint: disable=wrong-import-position

GIB = 1024 ** 3


def fleet(gpus):
    """Expositions of N GPUs: gpuops metrics (per node), kube-state-metrics and dcgm-exporter."""
    textfile, ksm, dcgm, pods = [], [], [], 0
    for index in range(gpus):
        node, gpu = "gpu-node-%03d" % (index // 8), str(index % 8)
        uuid = "GPU-%08x-0000-4000-8000-%012x" % (index, index)
        holders = [("whole-%d" % index, 14 if index % 4 else 3, {"nvidia_com_gpu": 1})] if index % 2 else \
            [("shared-%d-a" % index, 3, {"aliyun_com_gpu_mem": 4}), ("shared-%d-b" % index, 5 if index % 3 else 3, {"aliyun_com_gpu_mem": 4})]
        used = 0
        for name, gib, limits in holders:
            pods += 1
            uid = "%08x-1111-4222-8333-%012x" % (pods, pods)
            textfile.append('gpuops_pod_gpu_memory_used_bytes{container="c",gpu="%s",node="%s",pod_uid="%s",uuid="%s"} %d' % (gpu, node, uid, uuid, gib * GIB))
            ksm.append('kube_pod_info{namespace="ml",pod="%s",uid="%s",node="%s"} 1' % (name, uid, node))
            for resource, value in limits.items():
                ksm.append('kube_pod_container_resource_limits{namespace="ml",pod="%s",container="c",node="%s",resource="%s",unit="integer"} %d'
                           % (name, node, resource, value))
            used += gib
        textfile.append('gpuops_gpu_memory_used_bytes{gpu="%s",node="%s",uuid="%s"} %d' % (gpu, node, uuid, used * GIB))
        textfile.append('gpuops_gpu_memory_total_bytes{gpu="%s",node="%s",uuid="%s"} %d' % (gpu, node, uuid, 16 * GIB))
        labels = 'gpu="%s",UUID="%s",device="nvidia%s",modelName="Tesla V100-SXM2-16GB",Hostname="%s",container="",namespace="",pod=""' % (gpu, uuid, gpu, node)
        dcgm += ["DCGM_FI_DEV_FB_USED{%s} %d" % (labels, used * 1024), "DCGM_FI_DEV_FB_FREE{%s} %d" % (labels, (16 - used) * 1024),
                 "DCGM_FI_DEV_XID_ERRORS{%s} 0" % labels]
    return "\n".join(textfile) + "\n", "\n".join(ksm) + "\n", "\n".join(dcgm) + "\n", pods


def query(base, expr):
    with urllib.request.urlopen("%s/api/v1/query?%s" % (base, urllib.parse.urlencode({"query": expr})), timeout=30) as response:
        return gmr.parse_response(response.read().decode(), expr)


def run_module(base, tmp):
    play = tmp / "report.yml"
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "report", "gpuops.fleet.gpu_memory_report": {"url": base}}]}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=promrig.COLLECTIONS, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    started = time.monotonic()
    proc = subprocess.run([os.path.join(promrig.BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=%s" % sys.executable, str(play)], env=env, capture_output=True, text=True, check=True)
    wall = time.monotonic() - started
    task = json.loads(proc.stdout)["plays"][0]["tasks"][0]
    duration = task["task"]["duration"]
    seconds = (_ts(duration["end"]) - _ts(duration["start"]))
    return task["hosts"]["localhost"], seconds, wall


def _ts(text):
    from datetime import datetime  # pylint: disable=import-outside-toplevel
    return datetime.strptime(text.rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f").timestamp()


def bench(gpus, runs):
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="gpuops-report-bench-"))
    textfile, ksm, dcgm, pods = fleet(gpus)
    servers = [promrig.Exposition(text) for text in (textfile, ksm, dcgm)]
    rendered = promrig.render_role(tmp, gpu_monitoring_rule_interval="1s",
                                   gpu_monitoring_scrape_static_targets=[{"node": "all", "dcgm": servers[2].address, "node_exporter": servers[0].address}])
    jobs = yaml.safe_load((rendered / "gpuops-scrape-configs.yml").read_text())
    for job in jobs:
        job["honor_labels"] = True  # the series carry their own node label
    jobs.append({"job_name": "kube-state-metrics", "honor_labels": True, "static_configs": [{"targets": [servers[1].address]}]})
    config = tmp / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                      "rule_files": [str(rendered / "gpuops-gpu-memory.rules.yml")], "scrape_configs": jobs}))
    process, port, log = promrig.start_prometheus(tmp, config)
    base = "http://127.0.0.1:%d" % port
    try:
        deadline = time.monotonic() + 120
        while len(query(base, "namespace_pod:gpuops_gpu_memory_used_bytes:sum")) < pods:
            if time.monotonic() > deadline:
                raise SystemExit("the rules did not record every pod in time")
            time.sleep(0.5)
        series = int(query(base, "sum(scrape_samples_scraped)")[0][1])
        inproc = []
        for dummy in range(runs):
            started = time.monotonic()
            doc = gmr.report(dict((name, query(base, expr)) for name, expr in gmr.QUERIES))
            inproc.append(time.monotonic() - started)
        assert len(doc["gpus"]) == gpus and len(doc["pods"]) == pods, (len(doc["gpus"]), len(doc["pods"]))
        task, wall = [], []
        for dummy in range(runs):
            result, seconds, elapsed = run_module(base, tmp)
            assert len(result["gpus"]) == gpus and result["queries"] == len(gmr.QUERIES)
            task.append(seconds)
            wall.append(elapsed)
        return {"gpus": gpus, "pods": pods, "series": series, "queries": len(gmr.QUERIES), "task_s": statistics.median(task),
                "wall_s": statistics.median(wall), "inproc_s": statistics.median(inproc)}
    finally:
        process.terminate()
        process.wait(10)
        log.close()
        for server in servers:
            server.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print("SIMULATED GPUs; Debian's Prometheus %s" % subprocess.run(["prometheus", "--version"], capture_output=True, text=True, check=True).stdout.split()[2])
    print("%6s %6s %8s %8s %10s %10s %12s" % ("GPUs", "pods", "series", "queries", "task s", "wall s", "in-proc s"))
    for gpus in args.gpus:
        row = bench(gpus, args.runs)
        print("%(gpus)6d %(pods)6d %(series)8d %(queries)8d %(task_s)10.3f %(wall_s)10.3f %(inproc_s)12.4f" % row, flush=True)


if __name__ == "__main__":
    main()
