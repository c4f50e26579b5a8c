# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run killed at every step boundary: the boot guard and the module, SIGKILLed for real.

Each case runs ``gpuops check`` (or ``kubelet_checkpoint`` through ansible-playbook) in a
subprocess on a temp sysroot whose kubelet runs (the fake systemctl and systemd-run, the
real ``flock``), with ``GPUOPS_FAILPOINT=<step>``: the process SIGKILLs itself exactly
there (``_node.nodefile.failpoint``), as an OOM kill or a lost Ansible connection would end it.
After each kill:

* the checkpoint is whole: the bytes it had, or a new file with a valid checksum (for
  ``remove``, whose end state is no file: the old bytes at the path, in a claim beside it,
  or in a backup);
* kubelet is active again within the rescue's bound (``kubelet_rescue_seconds``: 1 here);
* the next run converges (exit 0; pruned, or removed) and a third run changes nothing;
* nothing is left in kubelet's directory and no temp file in the backup directory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import fakenode
import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec
from ansible_collections.gpuops.fleet.plugins.module_utils._node import nodefile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))))
COLLECTIONS = os.path.join(ROOT, "build", "collections")
NEW = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
OLD = "GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb"
E = codec.PodDevicesEntry
CHECKPOINTS = {
    # a pod on the gone GPU and one on the GPU still there: pruned
    "prune": codec.Checkpoint(
        "v2",
        [E("stale-pod", "c", "nvidia.com/gpu", {0: [OLD]}, b"old-env"), E("valid-pod", "c", "nvidia.com/gpu", {0: [NEW]}, b"keep-env")],
        {"nvidia.com/gpu": [OLD, NEW]},
    ),
    # only the gone GPU's pod: moved aside
    "remove": codec.Checkpoint("v2", [E("stale-pod", "c", "nvidia.com/gpu", {0: [OLD]}, b"old-env")], {"nvidia.com/gpu": [OLD, NEW]}),
}
# every step boundary of the repair, in its order, per strategy
STEPS = {
    "prune": ["rescue_armed", "kubelet_stopped", "backup_written", "new_written", "claimed", "swapped", "reconciled"],
    "remove": ["rescue_armed", "kubelet_stopped", "backup_written", "claimed", "removed", "reconciled"],
}
CASES = [(strategy, step) for strategy in ("prune", "remove") for step in STEPS[strategy]]
RESCUE_SECONDS = 1


def test_the_cases_cover_every_step_boundary():
    assert sorted(set(step for dummy, step in CASES)) == sorted(nodefile.STEPS)


@pytest.fixture()
def killed_node(tmp_path, fake_node):
    def make(strategy):
        plugins = tmp_path / "var/lib/kubelet/device-plugins"
        plugins.mkdir(parents=True)
        path = plugins / "kubelet_internal_checkpoint"
        data = codec.encode(CHECKPOINTS[strategy])[0]
        path.write_bytes(data)
        systemd = tmp_path / "systemd"
        systemd.mkdir()
        (systemd / "kubelet.service.state").write_text("active\n")
        env = fake_node([fakenode.gpu(NEW)])
        env["GPUOPS_FAKE_SYSTEMD_DIR"] = str(systemd)
        settings = {
            "checkpoint_path": str(path),
            "backup_dir": str(tmp_path / "var/lib/gpuops/backups"),
            "lock_dir": str(tmp_path / "run/gpuops"),
            "strategy": strategy,
            "kubelet_rescue_seconds": RESCUE_SECONDS,
        }
        config = tmp_path / "gpuops.json"
        config.write_text(json.dumps(settings))
        return Node(strategy, path, data, systemd, env, settings, str(config), tmp_path)

    return make


class Node:
    def __init__(self, strategy, path, data, systemd, env, settings, config, tmp):
        self.strategy, self.path, self.data, self.systemd, self.env = strategy, path, data, systemd, env
        self.settings, self.config, self.tmp = settings, config, tmp
        self.backup_dir = settings["backup_dir"]

    def guard(self, failpoint=None):
        env = dict(self.env)
        if failpoint:
            env[nodefile.FAILPOINT_ENV] = failpoint
        code, records, dummy = fakenode.run_guard("check", self.config, env)
        return code, records

    def kubelet_state(self):
        return (self.systemd / "kubelet.service.state").read_text().strip()

    def backups(self):
        names = os.listdir(self.backup_dir) if os.path.isdir(self.backup_dir) else []
        return [n for n in names if not n.startswith(".")], [n for n in names if n.startswith(".")]

    def assert_whole(self, step):
        """Right after the kill: the old bytes or a valid new file (remove: the old bytes are somewhere safe)."""
        plugins = os.path.dirname(str(self.path))
        if self.path.exists():
            now = self.path.read_bytes()
            assert now == self.data or (self.strategy == "prune" and codec.decode(now).valid), "%s: checkpoint neither old nor new" % step
            return
        assert self.strategy == "remove", "%s: the checkpoint is gone" % step
        kept = [os.path.join(plugins, n) for n in os.listdir(plugins)] + [os.path.join(self.backup_dir, n) for n in self.backups()[0]]
        assert any(_read(p) == self.data for p in kept), "%s: the old bytes are nowhere" % step

    def wait_for_kubelet(self, bound):
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            if self.kubelet_state() == "active":
                return time.monotonic() - (deadline - bound)
            time.sleep(0.05)
        raise AssertionError("kubelet still %s %.1f s after the kill" % (self.kubelet_state(), bound))

    def assert_converged(self):
        plugins = os.path.dirname(str(self.path))
        if self.strategy == "prune":
            decoded = codec.decode(self.path.read_bytes())
            assert decoded.valid and [e.pod_uid for e in decoded.checkpoint.entries] == ["valid-pod"]
            assert os.listdir(plugins) == ["kubelet_internal_checkpoint"]
        else:
            assert os.listdir(plugins) == []
        backups, temps = self.backups()
        assert temps == [] and backups, "a backup of the original is kept, no temp file"
        assert any(_read(os.path.join(self.backup_dir, n)) == self.data for n in backups)
        assert self.kubelet_state() == "active"
        assert not os.path.exists(os.path.join(self.settings["lock_dir"], os.path.basename(nodefile.lock_path("/", str(self.path)))[:-5] + ".kubelet-stopped"))


def _read(path):
    with open(path, "rb") as handle:
        return handle.read()


@pytest.mark.parametrize("strategy, step", CASES)
def test_the_guard_killed_at_each_step(killed_node, strategy, step):
    node = killed_node(strategy)
    code, records = node.guard(failpoint=step)
    assert code == -9, "the guard was not killed at %s: %s" % (step, records)
    node.assert_whole(step)
    # killed with kubelet stopped: the rescue starts it within the bound (plus the fake's own start-up)
    node.wait_for_kubelet(RESCUE_SECONDS + 5)
    code, records = node.guard()
    assert code == 0, records
    node.assert_converged()
    code, records = node.guard()
    assert code == 0 and not fakenode.finished(records)["changed"], records
    node.assert_converged()


PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - gpuops.fleet.kubelet_checkpoint: "{{ module_args }}"
      environment: "{{ module_env }}"
      register: out
    - ansible.builtin.copy:
        content: "{{ out | to_json }}"
        dest: "{{ result_file }}"
"""


@pytest.mark.parametrize("strategy, step", CASES)
def test_the_module_killed_at_each_step(killed_node, strategy, step):
    node = killed_node(strategy)
    playbook = node.tmp / "kill.yml"
    playbook.write_text(PLAYBOOK)
    args = dict(node.settings, gpus={"available": True, "reason": None, "count": 1, "gpus": [{"index": 0, "uuid": NEW}]})

    def play(env_extra):
        env = dict(node.env, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_NOCOLOR="1",
                   ANSIBLE_LOCAL_TEMP=str(node.tmp / "al"), ANSIBLE_REMOTE_TEMP=str(node.tmp / "ar"))
        # TMPDIR: AnsiballZ's payload directory of a killed module stays in the test's own directory, not /tmp
        payload = node.tmp / "payload"
        payload.mkdir(exist_ok=True)
        module_env = dict(env_extra, GPUOPS_FAKE_SYSTEMD_DIR=str(node.systemd), TMPDIR=str(payload))
        extra = {"module_args": args, "module_env": module_env, "result_file": str(node.tmp / "result.json")}
        cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e", json.dumps(extra), str(playbook)]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)

    killed = play({nodefile.FAILPOINT_ENV: step})
    # SIGKILL: rc 137 through the module's shell wrapper (older ansible-core say -9 and MODULE FAILURE)
    assert killed.returncode != 0 and re.search(r'"rc": (137|-9)\b', killed.stdout), killed.stdout[-3000:]
    node.assert_whole(step)
    node.wait_for_kubelet(RESCUE_SECONDS + 5)
    again = play({})
    assert again.returncode == 0, again.stdout[-3000:]
    result = json.loads((node.tmp / "result.json").read_text())
    assert result["kubelet"]["left_stopped_by_killed_run"]
    node.assert_converged()  # (a third run's changed=0 is asserted for the guard: the same engine)
