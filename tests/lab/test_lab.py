# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab default through the ansible-core next to this Python (the matrix runs it on each one).

lab/setup.yml, then playbooks/site.yml twice: the first run repairs, the second reports
changed=0; then each lab node's installed `gpuops check --config` exits as documented
(0, or 3 where the driver is not loaded), which proves the role wrote a config the
guard accepts (numbers as numbers) on this ansible-core. GPUs are SIMULATED (fake NVML).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
RECAP = re.compile(r"^(lab-[a-z-]+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
EXPECTED_GUARD_EXIT = {"lab-healthy": 0, "lab-replaced-gpu": 0, "lab-gpushare": 0, "lab-corrupt": 0, "lab-no-driver": 3}
REPAIRED = {"lab-replaced-gpu", "lab-gpushare", "lab-corrupt"}


@pytest.fixture(scope="module")
def lab(tmp_path_factory, fake_lib_dir):
    base = tmp_path_factory.mktemp("lab")
    extra = {
        "gpuops_lab_root": str(base) + "/nodes/{{ inventory_hostname }}",
        "gpuops_report_dir": str(base / "report"),
    }
    env = dict(os.environ)
    env.update(
        ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"),
        ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_LOCAL_TEMP=str(base / "tmp"),
    )

    def play(name, *args):
        cmd = [os.path.join(BIN, "ansible-playbook"), "-i", os.path.join(ROOT, "lab", "inventory.yml"), "-e", json.dumps(extra)]
        proc = subprocess.run(cmd + list(args) + [name], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
        return proc.returncode, proc.stdout + proc.stderr

    return {"base": base, "play": play, "env": env}


WARNING = re.compile(r"^\[(?:DEPRECATION )?WARNING\]:?.*(?:\n(?!\S).*)*", re.M)


def warnings(output):
    """Every warning and deprecation ansible-core printed (with its indented continuation lines)."""
    return [m.group(0) for m in WARNING.finditer(output)]


def recap(output):
    return dict((m.group(1), tuple(int(x) for x in m.groups()[1:])) for m in RECAP.finditer(output))


def kubelet_journal(lab, node, unit="kubelet.service"):
    """The simulated kubelet's stops and starts on a lab node (the fake systemctl's journal), or another unit's."""
    path = lab["base"] / "nodes" / node / "run/systemd/journal.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [r for r in records if r["unit"] == unit]


def test_lab_repairs_in_batches_then_is_idempotent_and_the_installed_guard_accepts_its_config(lab, fake_lib_dir):
    rc, out = lab["play"](os.path.join(ROOT, "lab", "setup.yml"))
    assert rc == 0, out[-4000:]
    rc, first = lab["play"](os.path.join(ROOT, "playbooks", "site.yml"), "-e", "gpuops_kubelet_restart_batch=2")
    assert rc == 0, first[-6000:]
    # the main job prints no warning on any ansible-core (2.19+ warned twice of the role's templated argument dicts)
    assert warnings(first) == [], warnings(first)
    rows = recap(first)
    assert sorted(rows) == sorted(EXPECTED_GUARD_EXIT)
    assert all(r[2:] == (0, 0) for r in rows.values()), rows
    report = json.loads((lab["base"] / "report" / "fleet-summary.json").read_text())
    nodes = dict((n["node"], n) for n in report["nodes"])
    actions = dict((name, n["action"]) for name, n in nodes.items())
    assert actions == {"lab-healthy": "none", "lab-replaced-gpu": "removed", "lab-gpushare": "pruned", "lab-corrupt": "removed", "lab-no-driver": "skipped"}

    # only the three nodes that changed had kubelet stopped and started, two at a time, in node-name
    # order (the repair play's order: sorted); the other two were never touched
    batches = dict((name, n["restart_batch"]) for name, n in nodes.items() if n["kubelet_restarted"])
    assert batches == {"lab-corrupt": 1, "lab-gpushare": 1, "lab-replaced-gpu": 2}, batches
    journals = dict((node, kubelet_journal(lab, node)) for node in EXPECTED_GUARD_EXIT)
    assert journals["lab-healthy"] == [] and journals["lab-no-driver"] == []
    for node in REPAIRED:
        assert [(e["verb"], e["state"]) for e in journals[node]] == [("stop", "inactive"), ("start", "active")], journals[node]
        # the rescue timer: armed before the stop, disarmed after the start, never fired
        rescue = kubelet_journal(lab, node, "gpuops-rescue-kubelet.timer")
        assert [(e["verb"], e["state"]) for e in rescue] == [("systemd-run", "active"), ("stop", "inactive")], rescue
        assert rescue[0]["time"] < journals[node][0]["time"] and rescue[1]["time"] > journals[node][1]["time"]
    first_batch_done = max(journals[n][1]["time"] for n in ("lab-corrupt", "lab-gpushare"))
    assert journals["lab-replaced-gpu"][0]["time"] > first_batch_done
    assert "kubelet restarted on 3 node(s), in 2 batch(es): batch 1: lab-corrupt, lab-gpushare; batch 2: lab-replaced-gpu" in first

    # no cluster in the lab: lab-gpushare's shared GPU memory comes from its own checkpoint, as read
    # before the repair (GPU-0650a168 was replaced: 3 GiB there, 4 GiB on GPU 1 of 15 GiB each)
    sharing = dict((name, n.get("sharing")) for name, n in nodes.items())
    assert sharing["lab-gpushare"] == {"source": "checkpoint", "allocated_gib": 7, "total_gib": 30, "percent": 23,
                                       "gpus_gone": 1, "unattributed_gib": 0}, sharing
    assert [name for name, value in sharing.items() if value] == ["lab-gpushare"]
    assert "7/30 GiB (23%), from checkpoint, 1 GPU gone" in first and "GPU sharing from checkpoint: node-derived" in first

    # the second run through an interpreter that logs each module it runs (pipelining off: the module's file is its
    # argument) and the node it runs for (the node's fake-NVML config, in the task's environment)
    calls = lab["base"] / "module-calls.log"
    wrapper = lab["base"] / "python-logging-modules"
    wrapper.write_text('#!/bin/sh\nprintf "%%s %%s\\n" "$(basename "$1")" "${GPUOPS_FAKE_NVML_CONFIG:-}" >> %s\nexec %s "$@"\n'
                       % (calls, sys.executable))
    wrapper.chmod(0o755)
    rc, second = lab["play"](os.path.join(ROOT, "playbooks", "site.yml"), "-e", "ansible_python_interpreter=%s ansible_pipelining=false" % wrapper)
    assert rc == 0, second[-6000:]
    assert warnings(second) == [], warnings(second)
    assert all(r[1] == 0 and r[2:] == (0, 0) for r in recap(second).values()), recap(second)
    # one round trip per node (issue 36): the read-only plan, which also read that the guard's install would change
    # nothing; no module that can change a node ran (the install's result is the plan's reading: planned)
    ran = [line.split() for line in calls.read_text().splitlines()]
    on_nodes = sorted((os.path.basename(os.path.dirname(r[1])), r[0]) for r in ran if len(r) == 2)
    assert on_nodes == [(node, "AnsiballZ_kubelet_checkpoint.py") for node in sorted(EXPECTED_GUARD_EXIT)], ran
    # and none on the controller: the report's files are written by gpuops.fleet.report_files' action plugin in
    # ansible-core's own process (issue 62: one module call per node is the whole run)
    assert [r for r in ran if len(r) != 2] == [], ran
    assert len(ran) == len(EXPECTED_GUARD_EXIT), ran
    after = dict((n["node"], n) for n in json.loads((lab["base"] / "report" / "fleet-summary.json").read_text())["nodes"])
    # the prune took the replaced GPU's registrations and its pod's entry out
    assert after["lab-gpushare"]["sharing"] == {"source": "checkpoint", "allocated_gib": 4, "total_gib": 15, "percent": 26,
                                                "gpus_gone": 0, "unattributed_gib": 0}

    for node, expected in sorted(EXPECTED_GUARD_EXIT.items()):
        root = lab["base"] / "nodes" / node
        config = json.loads((root / "etc/gpuops/gpuops.json").read_text())
        assert isinstance(config["max_bytes"], int) and isinstance(config["driver_wait_seconds"], int), config
        assert isinstance(config["restart_kubelet"], bool) and isinstance(config["backup_keep"], int), config
        env = dict(lab["env"])
        env.update(
            LD_LIBRARY_PATH=fake_lib_dir,
            PATH="%s:/usr/local/bin:/usr/bin:/bin" % fake_lib_dir,
            GPUOPS_FAKE_NVML_CONFIG=str(root / "fake_nvml.cfg"),
        )
        proc = subprocess.run(
            [str(root / "usr/local/bin/gpuops"), "check", "--config", str(root / "etc/gpuops/gpuops.json")],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )
        assert proc.returncode == expected, (node, proc.stdout, proc.stderr)
        records = [json.loads(line) for line in proc.stdout.splitlines()]
        assert records[-1]["event"] == "finished" and records[-1]["exit_code"] == expected
        assert records[-1].get("changed") in (False, None), (node, records[-1])
    # the second run and the installed guards restarted no kubelet
    assert all(len(kubelet_journal(lab, node)) == (2 if node in REPAIRED else 0) for node in EXPECTED_GUARD_EXIT)

    # what the README says of `make demo` run again (issue 48, item 13): it rebuilds the lab (setup.yml) before site.yml, so
    # every node changes (its guard installed again) and the three broken nodes are repaired again, kubelet restarted; the
    # run with changed=0 is site.yml's alone (above)
    rc, out = lab["play"](os.path.join(ROOT, "lab", "setup.yml"))
    assert rc == 0, out[-4000:]
    rc, demo = lab["play"](os.path.join(ROOT, "playbooks", "site.yml"))
    assert rc == 0, demo[-6000:]
    assert all(r[1] > 0 for r in recap(demo).values()), recap(demo)
    assert sorted(node for node in EXPECTED_GUARD_EXIT if kubelet_journal(lab, node)) == sorted(REPAIRED)


def test_a_failed_batch_stops_the_run_before_the_next_batch(lab):
    rc, out = lab["play"](os.path.join(ROOT, "lab", "setup.yml"))
    assert rc == 0, out[-4000:]
    # lab-gpushare's kubelet cannot be stopped: its batch (with lab-corrupt) fails, and
    # lab-replaced-gpu's batch never starts
    (lab["base"] / "nodes/lab-gpushare/run/systemd/kubelet.service.fail").write_text("stop\n")
    rc, out = lab["play"](os.path.join(ROOT, "playbooks", "site.yml"), "-e", "gpuops_kubelet_restart_batch=2")
    assert rc != 0, out[-4000:]
    assert "stopping kubelet.service failed" in out and "the checkpoint was left alone" in out
    assert [e["verb"] for e in kubelet_journal(lab, "lab-corrupt")] == ["stop", "start"]
    assert kubelet_journal(lab, "lab-gpushare") == [] and kubelet_journal(lab, "lab-replaced-gpu") == []
    stale = lab["base"] / "nodes/lab-replaced-gpu/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    with open(os.path.join(ROOT, "lab", "files", "seed_checkpoint.json"), "rb") as handle:
        assert stale.read_bytes() == handle.read()


def test_a_node_that_fails_its_plan_is_left_out_and_every_other_row_is_its_own(lab, tmp_path):
    """The nodes still in the run are listed by one run_once task whose one fact goes to localhost alone (issue 36;
    on 2.21 a run_once task's variables otherwise fan out to every node of the batch, ansible/ansible#87148): a node
    whose plan failed has no row of results, and every other node's row holds its own GPUs."""
    rc, out = lab["play"](os.path.join(ROOT, "lab", "setup.yml"))
    assert rc == 0, out[-4000:]
    broken = tmp_path / "broken.yml"
    broken.write_text("all:\n  hosts:\n    lab-corrupt:\n      ansible_python_interpreter: /nonexistent/python3\n")
    rc, out = lab["play"](os.path.join(ROOT, "playbooks", "site.yml"), "-i", str(broken))
    assert rc != 0, out[-4000:]
    assert recap(out)["lab-corrupt"][3] == 1 and all(r[3] == 0 for n, r in recap(out).items() if n != "lab-corrupt"), recap(out)
    rows = dict((r["node"], r) for r in json.loads((lab["base"] / "report" / "fleet-summary.json").read_text())["nodes"])
    assert rows["lab-corrupt"]["status"] == "no_result", rows["lab-corrupt"]
    assert set(rows) == set(EXPECTED_GUARD_EXIT)
    uuids = dict((n, tuple(r["gpu_uuids"])) for n, r in rows.items() if n != "lab-corrupt")
    assert uuids["lab-no-driver"] == () and len(set(v for v in uuids.values() if v)) == 3, uuids
    assert all(r["status"] != "no_result" for n, r in rows.items() if n != "lab-corrupt"), rows


def test_a_bad_role_variable_stops_site_yml_on_the_controller_before_any_node_is_touched(lab):
    """The checkpoint_guard role's argument spec is checked once on the controller (issue 36), with ansible-core's own
    messages, for every node; no node task runs (no lab node in the recap)."""
    rc, out = lab["play"](os.path.join(ROOT, "playbooks", "site.yml"), "-e", "checkpoint_guard_backup_keep=many")
    assert rc != 0, out[-4000:]
    assert "gpuops.fleet.checkpoint_guard's variables on 5 node(s)" in out, out[-4000:]
    # the type's wording differs between ansible-core lines (2.16: <class 'str'>)
    assert re.search(r"argument 'checkpoint_guard_backup_keep' is of type .+? and we were unable to convert to int", out), out[-4000:]
    assert recap(out) == {}, recap(out)  # no lab node ran a task


def test_gpu_health_reports_each_node_and_site_yml_shows_the_column(lab):
    """playbooks/gpu_health.yml on the lab (no cluster: no plan): lab-gpushare's GPU 1 asks for a reset (NVML's
    recovery action, its XID 119 from the node's saved kernel log), lab-no-driver is unknown (never faulty), the
    rest are ok; nothing changes and nothing warns. site.yml with gpuops_gpu_health shows the GPU health column."""
    rc, out = lab["play"](os.path.join(ROOT, "lab", "setup.yml"))
    assert rc == 0, out[-4000:]
    rc, out = lab["play"](os.path.join(ROOT, "playbooks", "gpu_health.yml"))
    assert rc == 0, out[-6000:]
    assert warnings(out) == [], warnings(out)
    assert all(r[1:] == (0, 0, 0) for r in recap(out).values()), recap(out)
    report = json.loads((lab["base"] / "report" / "gpu-health.json").read_text())
    rows = dict((r["node"], r) for r in report["nodes"])
    assert dict((n, (r["state"], r["action"])) for n, r in rows.items()) == {
        "lab-healthy": ("ok", "none"), "lab-replaced-gpu": ("ok", "none"), "lab-gpushare": ("faulty", "reset"),
        "lab-corrupt": ("ok", "none"), "lab-no-driver": ("unknown", "none")}
    assert rows["lab-gpushare"]["gpus"] == ["GPU-1b7d2a3e-5c8f-4e61-9a0d-3f2c4b5a6d7e"]
    assert report["plan"] is None
    assert "lab-gpushare: faulty: reset GPU-1b7d2a3e (SIMULATED GPUs)" in out
    rc, out = lab["play"](os.path.join(ROOT, "playbooks", "site.yml"), "--check", "-e", "gpuops_gpu_health=true")
    assert rc == 0, out[-6000:]
    assert "GPU health" in out and "faulty: reset GPU-1b7d2a3e" in out
    summary = json.loads((lab["base"] / "report" / "fleet-summary.json").read_text())
    assert summary["gpu_health"]["lab-gpushare"]["action"] == "reset" and summary["gpu_health"]["lab-no-driver"]["state"] == "unknown"
