# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 60: site.yml run as an AWX sliced job against one cluster. AWX gives slice k of N the inventory's hosts sorted by
name, every N-th from the k-th (``awx/main/models/inventory.py``, ``get_sliced_hosts``: ``hosts[offset::slice_count]``
over ``order_by('name')``), each slice its own ``ansible-playbook`` started together. Twelve lab nodes (SIMULATED GPUs, the
fake systemctl's kubelet taking 2 s to start) all need a repair; ``gpuops_kubelet_restart_batch`` is 2. The fake systemctl's
journals say when each kubelet was stopped and started: at most 2 at once across the 4 slices, each node repaired once.
The control run, the same slices with the fleet-wide places turned off (serial alone, per slice), stops more than 2 at
once: what the places prevent, shown on this rig."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import yaml

import kubefleet

ROOT = kubefleet.ROOT
BIN = os.path.dirname(sys.executable)
sys.path.insert(0, os.path.join(ROOT, "lab"))
import fleet as labfleet  # noqa: E402  pylint: disable=wrong-import-position

SLICES, NODES, BATCH = 4, 12, 2


def awx_slices(inventory, count):
    """The inventories AWX gives the slices of a job: hosts by name, slice k (1-based) every ``count``-th from the k-th;
    each slice's groups keep only its hosts, the variables as they are."""
    hosts = sorted(inventory["gpu_nodes"]["hosts"])
    out = []
    for number in range(1, count + 1):
        mine = hosts[number - 1::count]
        copy = dict(inventory, gpu_nodes=dict(inventory["gpu_nodes"], hosts=dict((h, inventory["gpu_nodes"]["hosts"][h]) for h in mine)))
        out.append(copy)
    return out


def stops(base):
    """Each node's kubelet down intervals (stop to start) from the fake systemctl's journal."""
    found = {}
    for node in sorted(os.listdir(os.path.join(base, "nodes"))):
        path = os.path.join(base, "nodes", node, "run", "systemd", "journal.jsonl")
        records = []
        if os.path.exists(path):
            with open(path) as handle:
                records = [json.loads(line) for line in handle]
        down, spans = None, []
        for record in (r for r in records if r["unit"] == "kubelet.service"):
            if record["state"] == "inactive" and down is None:
                down = record["time"]
            elif record["state"] == "active" and down is not None:
                spans.append((down, record["time"]))
                down = None
        found[node] = spans
    return found


def most_at_once(spans):
    edges = sorted([(s, 1) for node in spans.values() for s, dummy in node] + [(e, -1) for node in spans.values() for dummy, e in node],
                   key=lambda edge: (edge[0], edge[1]))
    now = peak = 0
    for dummy, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def run_slices(cluster, base, namespace, extra):
    labfleet.generate(NODES, str(base), kind="lab-replaced-gpu")
    for node in os.listdir(os.path.join(base, "nodes")):
        with open(os.path.join(base, "nodes", node, "run", "systemd", "kubelet.service.delay"), "w") as handle:
            handle.write("2\n")
    with open(os.path.join(base, "inventory.yml")) as handle:
        inventory = yaml.safe_load(handle)
    env = dict(os.environ, K8S_AUTH_KUBECONFIG=os.path.join(cluster.workdir, "role.kubeconfig"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    procs = []
    with contextlib.ExitStack() as logs:
        for number, part in enumerate(awx_slices(inventory, SLICES), 1):
            path = base / ("slice-%d.yml" % number)
            path.write_text(yaml.safe_dump(part))
            variables = dict(extra, gpuops_kubelet_restart_batch=str(BATCH), gpuops_kubelet_restart_namespace=namespace,
                             gpuops_report_dir=str(base / ("report-%d" % number)), awx_job_id=1000 + number, awx_workflow_job_id=999,
                             gpuops_workload_audit_enabled=False)
            log = logs.enter_context(open(str(base / ("slice-%d.log" % number)), "w"))
            procs.append(subprocess.Popen([os.path.join(BIN, "ansible-playbook"), "-i", str(path), "-e", json.dumps(variables),
                                           os.path.join(ROOT, "playbooks", "site.yml")], cwd=str(base), env=env, stdout=log,
                                          stderr=subprocess.STDOUT))
        for proc in procs:
            proc.wait(600)
    outputs = [(base / ("slice-%d.log" % n)).read_text() for n in range(1, SLICES + 1)]
    for proc, text in zip(procs, outputs):
        assert proc.returncode == 0, text[-4000:]
    return stops(str(base)), outputs


def test_a_sliced_site_job_stops_at_most_the_fleets_batch_of_kubelets_across_its_slices(cluster, tmp_path):
    namespace = cluster.namespace("gpuops-slices-%d" % (int(time.time()) % 100000))

    control, dummy = run_slices(cluster, tmp_path / "control", namespace, {"gpuops_kubelet_restart_fleet_wide": False})
    assert all(len(spans) == 1 for spans in control.values()), control
    assert most_at_once(control) > BATCH, "the rig shows no overlap without the places: %r" % control

    spans, dummy = run_slices(cluster, tmp_path / "sliced", namespace, {})
    assert sorted(spans) == sorted(control) and all(len(s) == 1 for s in spans.values()), spans  # each node repaired once
    assert most_at_once(spans) <= BATCH, spans
    # every place was given back; a place is a Lease of the fleet's namespace, none beyond the batch
    from kubernetes.client import CoordinationV1Api  # pylint: disable=import-outside-toplevel

    held = CoordinationV1Api(cluster.api_client).list_namespaced_lease(namespace).items
    assert sorted(lease.metadata.name for lease in held) == ["gpuops-kubelet-restart-%d" % i for i in range(BATCH)]
    assert [lease.spec.holder_identity for lease in held] == [None] * BATCH
    # each slice's report names its slice; one report joins them (playbooks/fleet_report_merge.yml on the slices' files)
    base = tmp_path / "sliced"
    files = [str(base / ("report-%d" % n) / "fleet-summary.json") for n in range(1, SLICES + 1)]
    jobs = []
    for path in files:
        with open(path) as handle:
            jobs.append(json.load(handle)["job"])
    assert [(j["awx_job_id"], j["awx_workflow_job_id"], j["nodes"]) for j in jobs] == [(1000 + n, 999, NODES // SLICES) for n in range(1, SLICES + 1)]
    merged_dir = base / "merged"
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), os.path.join(ROOT, "playbooks", "fleet_report_merge.yml"), "-e",
                           json.dumps({"gpuops_fleet_report_files": files, "gpuops_report_dir": str(merged_dir)})], cwd=str(base),
                          env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_NOCOLOR="1"),
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(str(merged_dir / "fleet-summary.json")) as handle:
        merged = json.load(handle)
    assert [r["node"] for r in merged["nodes"]] == sorted(spans) and merged["conflicts"] == []
    assert [s["job"] for s in merged["slices"]] == [1001, 1002, 1003, 1004] and (merged_dir / "fleet-summary.md").exists()
    print("SLICES: %d slices of %d nodes, batch %d: at most %d kubelets stopped at once (per-slice control: %d)"
          % (SLICES, NODES // SLICES, BATCH, most_at_once(spans), most_at_once(control)))
