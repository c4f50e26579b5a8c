# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several remediations at once, on a real API server (SIMULATED nodes and GPUs): two runs of playbooks/gpu_remediation.yml
started together, each on its own share of the fleet, both planned from the same ledger with one place left in the fleet's
cap: the slices of an AWX sliced job (issue 60: each slice's inventory holds only its hosts, as AWX's get_sliced_hosts
gives it, test_slices.awx_slices), which is also what a rulebook's parallel windows launch (issue 59, item 3: each run
limited to its window's node). Each run's plan gives its node that place (the cap is of the fleet the API shows, never of
the slice); where a run opens its node's ledger entry the cap is checked again in the ledger's own write
(plugins/module_utils/_cluster/remediation/claims.py), so exactly one node is quarantined and the other run defers its
node without touching it; neither run fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import yaml

import kubefleet
from test_gpu_health_plan import OTHER, faulty
from test_gpu_quarantine import TAINT, G, ledger, node_state, setup
from test_slices import awx_slices

QUARANTINE_TASK = "Quarantine (cordon, taint, drain the faulty GPU's pods; the whole node's for a reboot)"


def start(f, extra, number, count):
    """ansible-playbook playbooks/gpu_remediation.yml as slice ``number`` of ``count`` of an AWX sliced job (its share of the
    inventory, its own awx_job_id), started (not waited for)."""
    with open(str(f.inventory)) as handle:
        inventory = yaml.safe_load(handle)
    part = f.tmp / ("slice-%d.yml" % number)
    part.write_text(yaml.safe_dump(awx_slices(inventory, count)[number - 1]))
    vars_file = f.tmp / ("vars-concurrent-%d.json" % number)
    vars_file.write_text(json.dumps(dict(extra, awx_job_id=2000 + number, awx_workflow_job_id=1999)))
    env = dict(os.environ, K8S_AUTH_KUBECONFIG=os.path.join(f.cluster.workdir, "role.kubeconfig"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(kubefleet.ROOT, "build", "collections"), ANSIBLE_NOCOLOR="1")
    return subprocess.Popen([os.path.join(kubefleet.BIN, "ansible-playbook"), "-i", str(part), "-e", "@%s" % vars_file,
                             os.path.join(kubefleet.ROOT, "playbooks", "gpu_remediation.yml")],
                            cwd=kubefleet.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc):
    out, err = proc.communicate(timeout=600)
    try:
        return proc.returncode, kubefleet.Run(json.loads(out))
    except ValueError:
        raise AssertionError("ansible-playbook output is not JSON:\n%s\n%s" % (out[-3000:], err[-3000:])) from None


def test_two_runs_started_together_never_take_the_fleets_last_place_twice(fleet, fake_lib_dir):
    f, name = setup(fleet, fake_lib_dir, [{"name": "a", "gpus": G}, {"name": "b", "gpus": [OTHER[0]]}])
    other = f.nodes[1]["name"]
    faulty(f, other, "remap|0|0|1|0|1")  # another signal (a row-remap failure: replace): the cap decides, not the breaker
    extra = {"gpuops_gpu_health_namespace": f.namespace, "gpu_remediation_mode": "quarantine", "gpuops_gpu_health_breaker_max_nodes": 1,
             "gpu_remediation_drain_timeout": 60, "gpu_remediation_report_dir": str(f.tmp / "report")}
    assert [sorted(part["gpu_nodes"]["hosts"]) for part in awx_slices({"gpu_nodes": {"hosts": dict((n, {}) for n in (name, other))}}, 2)] == [
        [min(name, other)], [max(name, other)]]  # one faulty node a slice
    runs = [start(f, extra, 1, 2), start(f, extra, 2, 2)]
    started = time.monotonic()
    (rc_a, run_a), (rc_b, run_b) = [finish(p) for p in runs]
    if name > other:
        run_a, run_b = run_b, run_a
    print("two runs started together: both ended %.1f s after the start" % (time.monotonic() - started))
    assert rc_a == 0 and rc_b == 0, (run_a.failure(), run_b.failure())
    held = [n for n in (name, other) if TAINT in [t[0] for t in node_state(f, n)[3]]]
    assert len(held) == 1, held  # the fleet's one place, taken once
    results = [r for run, node in ((run_a, name), (run_b, other)) for h in run.tasks(QUARANTINE_TASK) for host, r in h.items()
               if host == node]
    assert sorted(bool(r.get("deferred")) for r in results) == [False, True], results
    deferred = [r for r in results if r.get("deferred")][0]
    assert deferred["deferred"] == "deferred_capacity" and deferred["stops"] and not deferred["changed"], deferred
    opened = [e for e in ledger(f)["entries"] if not e["closed_at"]]
    assert [e["node"] for e in opened] == held and opened[0].get("claim") is None  # its run gave its claim up once done with it
    # the deferred node is as it was: no cordon, no taint of ours, no entry
    left = [n for n in (name, other) if n not in held][0]
    unschedulable, record, marked, taints = node_state(f, left)
    assert not unschedulable and record is None and not marked and not taints
