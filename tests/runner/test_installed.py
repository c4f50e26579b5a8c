# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection as users have it: built, installed from the tarball onto a READ-ONLY path, run by FQCN.

The install directory is bind-mounted read-only (as root, file modes would not stop a write),
so any write inside the collection fails the run. Lab nodes, SIMULATED GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_code as guard_code

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


@pytest.fixture()
def readonly(tmp_path):
    target = tmp_path / "collections"
    target.mkdir()
    mounted = []

    def seal():
        subprocess.run(["mount", "--bind", str(target), str(target)], check=True)
        mounted.append(target)
        subprocess.run(["mount", "-o", "remount,ro,bind", str(target)], check=True)

    yield target, seal
    for path in mounted:
        # a process the run left behind (or the kernel, briefly) can hold the mount busy: detach it
        # lazily then, and make sure it is gone, so no read-only mount outlives the test (a later
        # `rm -rf` of the checkout would fail on it)
        if subprocess.run(["umount", str(path)], check=False, capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(path)], check=True)
        with open("/proc/self/mountinfo") as handle:
            assert " %s " % path not in handle.read(), "the read-only mount %s is still there" % path


def test_site_by_fqcn_from_a_read_only_installed_tarball(tmp_path, readonly, fake_lib_dir):
    target, seal = readonly
    galaxy = os.path.join(BIN, "ansible-galaxy")
    subprocess.run([galaxy, "collection", "build", "--output-path", str(tmp_path), ROOT], check=True, capture_output=True)
    (tarball,) = [str(p) for p in tmp_path.iterdir() if p.name.endswith(".tar.gz")]
    subprocess.run([galaxy, "collection", "install", "--force", "--no-deps", "-p", str(target), tarball], check=True, capture_output=True)
    seal()
    probe = target / "ansible_collections" / "gpuops" / "fleet" / "probe"
    with pytest.raises(OSError):
        probe.write_text("x")  # really read-only
    work = tmp_path / "work"
    work.mkdir()
    extra = json.dumps({"gpuops_lab_root": str(tmp_path / "nodes") + "/{{ inventory_hostname }}"})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(target), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    inventory = os.path.join(ROOT, "lab", "inventory.yml")
    setup = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", inventory, "-e", extra, os.path.join(ROOT, "lab", "setup.yml")],
                           env=env, cwd=str(work), capture_output=True, text=True, check=False)
    assert setup.returncode == 0, setup.stdout[-3000:]
    run = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", inventory, "-e", extra, "gpuops.fleet.site"],
                         env=env, cwd=str(work), capture_output=True, text=True, check=False, timeout=900)
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
    # the installed copy ran (not the checkout), and the report went to the current directory
    assert str(target) in subprocess.run([os.path.join(BIN, "ansible-doc"), "gpuops.fleet.kubelet_checkpoint"], env=env,
                                         capture_output=True, text=True, check=True).stdout
    report = json.loads((work / "gpuops-report" / "fleet-summary.json").read_text())
    actions = dict((n["node"], n["action"]) for n in report["nodes"])
    assert actions == {"lab-healthy": "none", "lab-replaced-gpu": "removed", "lab-gpushare": "pruned", "lab-corrupt": "removed", "lab-no-driver": "skipped"}
    # the guard's one file was built from the installed, read-only copy
    guard_lib = tmp_path / "nodes/lab-healthy/usr/local/lib/gpuops/gpuops.pyz"
    assert guard_lib.read_bytes() == guard_code.build(str(target / "ansible_collections" / "gpuops" / "fleet"))[0]
