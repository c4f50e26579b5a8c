# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A generated lab fleet (lab/fleet.py, SIMULATED GPUs) through site.yml's check stage, on the
ansible-core next to this Python (the matrix runs it on each one): every node of every kind gets
the plan its kind should get, the fleet report has a row per node, and nothing on a node changed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
sys.path.insert(0, os.path.join(ROOT, "lab"))

import fleet  # noqa: E402  pylint: disable=wrong-import-position

# what the five-node lab shows for each kind (tests/lab/test_lab.py), as the check stage plans it
PLANNED = {"lab-healthy": ("up_to_date", "none"), "lab-replaced-gpu": ("stale", "removed"), "lab-gpushare": ("stale", "pruned"),
           "lab-corrupt": ("corrupt", "removed"), "lab-no-driver": ("inventory_unknown", "skipped")}
NODES = 30  # the smallest fleet the pattern gives every kind


def _digests(root):
    found = {}
    for base, dummy, files in os.walk(root):
        for name in files:
            path = os.path.join(base, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, root)] = hashlib.sha256(handle.read()).hexdigest()
    return found


def test_generated_fleet_check_stage_plans_each_kind_and_changes_nothing(tmp_path, fake_lib_dir):
    out = tmp_path / "fleet"
    mix = fleet.generate(NODES, str(out))
    assert set(mix.values()) == set(PLANNED)
    before = _digests(str(out / "nodes"))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(out / "inventory.yml"), os.path.join(ROOT, "playbooks", "site.yml"),
                           "--tags", "facts,checkpoint", "--check", "-e", "gpuops_report_dir=%s" % (tmp_path / "report")],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "LAB: %d of %d nodes run on SIMULATED GPUs" % (NODES, NODES) in proc.stdout
    report = json.loads((tmp_path / "report" / "fleet-summary.json").read_text())
    assert report["check_mode"] is True
    rows = dict((row["node"], row) for row in report["nodes"])
    assert sorted(rows) == sorted(mix)
    for node, kind in mix.items():
        row = rows[node]
        assert (row["status"], row["action"]) == PLANNED[kind], (node, kind, row)
        assert row["simulated"] is True and row["kubelet_restarted"] is False
        # the simulated kubelet runs on every node: a would-be repair would restart it
        assert row["kubelet_would_restart"] is (PLANNED[kind][1] in ("removed", "pruned")), (node, row)
    assert _digests(str(out / "nodes")) == before
