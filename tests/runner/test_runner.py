# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""site.yml under ansible-runner, the way AWX runs a job template (lab nodes, SIMULATED GPUs).

A private data dir as AWX builds one: project/ (a playbook importing gpuops.fleet.site by FQCN),
inventory/, env/extravars (survey answers: strings) and env/envvars. ansible-runner sets
AWX_ISOLATED_DATA_DIR to the job's artifacts dir, where the report must land, and hands
set_stats data back as the stats event's artifact_data (AWX's job artifacts).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
LAB_HOSTS = ["lab-corrupt", "lab-gpushare", "lab-healthy", "lab-no-driver", "lab-replaced-gpu"]
PLAN_TASK = "Read the GPUs, plan the checkpoint repair (read-only) and install the boot guard where it differs"


def events(pdd, ident):
    """The job's events, once each (ansible-runner can write an event under two counters)."""
    found = {}
    for path in glob.glob(os.path.join(str(pdd), "artifacts", ident, "job_events", "*.json")):
        with open(path) as handle:
            event = json.load(handle)
        found.setdefault(event["uuid"], event)
    return sorted(found.values(), key=lambda e: e.get("counter", 0))


def test_site_under_ansible_runner_reports_to_the_job_and_is_idempotent(tmp_path, fake_lib_dir):
    pdd = tmp_path / "job"
    for sub in ("project", "inventory", "env"):
        (pdd / sub).mkdir(parents=True)
    (pdd / "project" / "site.yml").write_text("---\n- name: gpuops fleet\n  ansible.builtin.import_playbook: gpuops.fleet.site\n")
    with open(os.path.join(ROOT, "lab", "inventory.yml")) as handle:
        lab = handle.read().replace("{{ inventory_dir | dirname }}", ROOT)
    (pdd / "inventory" / "hosts.yml").write_text(lab)
    extravars = {
        "gpuops_lab_root": str(tmp_path / "nodes") + "/{{ inventory_hostname }}",
        # as a survey sends them: strings
        "gpuops_kubelet_restart_batch": "2",
        "gpuops_kubelet_max_fail_percentage": "0",
        "checkpoint_guard_backup_keep": "5",
    }
    (pdd / "env" / "extravars").write_text(json.dumps(extravars))
    (pdd / "env" / "envvars").write_text(yaml.safe_dump({"ANSIBLE_COLLECTIONS_PATH": os.path.join(ROOT, "build", "collections")}))
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"))
    setup = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(pdd / "inventory" / "hosts.yml"), "-e", "@%s" % (pdd / "env" / "extravars"),
                            os.path.join(ROOT, "lab", "setup.yml")], env=env, capture_output=True, text=True, check=False)
    assert setup.returncode == 0, setup.stdout[-3000:]

    def run(ident):
        proc = subprocess.run([os.path.join(BIN, "ansible-runner"), "run", str(pdd), "-p", "site.yml", "--ident", ident],
                              env=env, capture_output=True, text=True, check=False, timeout=900)
        status = (pdd / "artifacts" / ident / "status").read_text()
        assert status == "successful", proc.stdout[-4000:] + proc.stderr[-2000:]
        return events(pdd, ident)

    first = run("first")
    # the role's one task per node: the plan, and the guard's install after it
    planned = sorted(e["event_data"]["host"] for e in first
                     if e["event"] == "runner_on_ok" and e["event_data"]["task"] == PLAN_TASK)
    assert planned == LAB_HOSTS
    repaired = sorted(e["event_data"]["host"] for e in first
                      if e["event"] == "runner_on_ok" and e["event_data"]["task"] == "Repair the checkpoint (stop kubelet, repair, start kubelet)"
                      and e["event_data"].get("role") == "checkpoint_guard")
    assert repaired == ["lab-corrupt", "lab-gpushare", "lab-replaced-gpu"]
    (stats,) = [e for e in first if e["event"] == "playbook_on_stats"]
    report = stats["event_data"]["artifact_data"]["gpuops_fleet_report"]
    artifacts = str(pdd / "artifacts" / "first")
    assert report["report_dir"] == os.path.join(artifacts, "gpuops-report")
    assert sorted(n["node"] for n in report["nodes"]) == LAB_HOSTS
    assert sorted(n["node"] for n in report["nodes"] if n["kubelet_restarted"]) == repaired
    on_disk = json.loads((pdd / "artifacts" / "first" / "gpuops-report" / "fleet-summary.json").read_text())
    assert on_disk["nodes"] == report["nodes"]
    assert not os.path.exists(os.path.join(ROOT, "out", "report", "gpuops-report"))

    second = run("second")
    (stats,) = [e for e in second if e["event"] == "playbook_on_stats"]
    assert stats["event_data"]["changed"] == {}, stats["event_data"]["changed"]
    assert stats["event_data"]["failures"] == {} and stats["event_data"]["dark"] == {}
