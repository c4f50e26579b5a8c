# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_reset run by ansible-playbook on a fake node: nvidia-smi's rules refuse with their cause and change nothing;
a reset turns persistence mode off only where it was on, stops and restarts the units that hold NVML, runs the
fake nvidia-smi (which clears what a reset clears) and checks the GPU after it; a process that holds NVML blocks
the reset, as a real client does, and persistence mode and the units still come back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fakenode
import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node.health import gpu_reset

G = ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0", "GPU-11111111-2222-3333-4444-555555555555",
     "GPU-22222222-2222-3333-4444-555555555555", "GPU-33333333-2222-3333-4444-555555555555"]
BUS = ["00000000:3B:00.0", "00000000:5E:00.0", "00000000:86:00.0", "00000000:AF:00.0"]


def records():
    return [
        fakenode.gpu(G[0], fakenode.A100, BUS[0], 40960, 0),
        fakenode.gpu(G[1], fakenode.A100, BUS[1], 40960, 1),
        fakenode.gpu(G[2], fakenode.A100, BUS[2], 40960, 2),
        fakenode.gpu(G[3], fakenode.A100, BUS[3], 40960, 3),
        # GPU 0: a DBE and a pending remap, NVML says reset; persistence mode on (the default)
        fakenode.health("recovery", 0, 1), fakenode.health("ecc", 0, 3, 1, 7, 2), fakenode.health("remap", 0, 0, 1, 1, 0),
        fakenode.proc(1, 4242, 1000),
        # GPUs 2 and 3: Turing (before Ampere), linked by NVLink; GPU 3's persistence mode off
        fakenode.health("arch", 2, 6), fakenode.health("arch", 3, 6),
        fakenode.health("nvlink", 2, 0, 1, 3, 0, 0, 0), fakenode.health("nvlink", 3, 0, 1, 2, 0, 0, 0),
        fakenode.health("persistence", 3, 0),
    ]


def lines(config, kind, index):
    with open(config) as handle:
        return [line.strip() for line in handle if line.startswith("%s|%d|" % (kind, index))]


def test_refusals_change_nothing_and_a_reset_restores_persistence_and_units(fake_node, playbook, tmp_path):
    env = fake_node(records())
    config = env["GPUOPS_FAKE_NVML_CONFIG"]
    systemd_dir = tmp_path / "systemd"
    systemd_dir.mkdir()
    # the timer and a run of its service in progress: both hold NVML, both are stopped, each with its own rescue
    (systemd_dir / "gpuops-metrics.timer.state").write_text("active\n")
    (systemd_dir / "gpuops-metrics.service.state").write_text("active\n")
    env["GPUOPS_FAKE_SYSTEMD_DIR"] = str(systemd_dir)
    before = Path(config).read_text()
    playbook("gpu_reset.yml", env, phase="main", gpus=G, lock_dir=str(tmp_path / "run"))
    got = json.loads((tmp_path / "main.json").read_text())

    check = got["in_check"]
    assert check["changed"] and check["reset"] == [G[0]] and check["persistence_off"] == [G[0]]
    assert check["units_to_stop"] == ["gpuops-metrics.timer", "gpuops-metrics.service"] and check["nvidia_smi_rc"] is None
    busy = got["busy"]
    assert busy["failed"] and "%s is in use by PID 4242 (not a pod's)" % G[1] in busy["msg"] and "nothing was changed" in busy["msg"]
    no_peer = got["no_peer"]
    assert no_peer["failed"] and "%s has NVLink peers %s" % (G[2], G[3]) in no_peer["msg"] and "a GPU before Ampere" in no_peer["msg"]
    refused = got["refused"]
    assert "is not on this node" in refused[0]["msg"]
    assert [r["msg"].split(":")[0] for r in refused[1:]] == ["gpus[0]", "stop_units[0]", "rescue_seconds"]
    assert all(r["failed"] for r in refused)

    # verify_only (the post-check alone, as after a reboot): fails naming what is wrong before the reset, passes after
    # it, and never changes anything (no nvidia-smi run)
    before_reset = got["verify_before"]
    assert before_reset["failed"] and not before_reset["changed"] and before_reset["nvidia_smi_rc"] is None
    assert "%s: recovery action GPU_RESET (nvml_field)" % G[0] in before_reset["msg"] and "a row remap is pending" in before_reset["msg"]
    after_reset = got["verify_after"]
    assert not after_reset.get("failed") and not after_reset["changed"] and after_reset["post"] == [] and after_reset["reset"] == []
    done = got["done"]
    assert done["changed"] and done["nvidia_smi_rc"] == 0 and done["reset"] == [G[0]] and done["post"] == [], done
    assert "GPU %s was successfully reset." % BUS[0] in done["stdout"]
    # the verified reset's mark (issue 48, item 9): GPU 0, this boot; check mode and the refusals wrote none
    mark = json.loads((tmp_path / "last-remediation.json").read_text())
    with open("/proc/sys/kernel/random/boot_id") as handle:
        assert (done["marked"], list(mark["gpus"]), mark["boot_id"]) == (str(tmp_path / "last-remediation.json"), [G[0].lower()],
                                                                         handle.read().strip())
    assert "marked" not in check and "marked" not in after_reset
    assert (done["persistence_off"], done["persistence_restored"]) == ([G[0]], [G[0]])
    units = ["gpuops-metrics.timer", "gpuops-metrics.service"]
    assert (done["units_stopped"], done["units_restarted"]) == (units, units), done
    assert done["after"][0]["recovery_action"]["value"] == 0 and done["after"][0]["persistence_mode"] is True
    # what the fake driver holds now: GPU 0's reset cleared its recovery action, volatile ECC and pending remap; the
    # refusals touched nothing else
    assert lines(config, "recovery", 0) == [] and lines(config, "ecc", 0) == ["ecc|0|0|0|7|2"] and lines(config, "remap", 0) == ["remap|0|0|1|0|0"]
    assert lines(config, "persistence", 0) == ["persistence|0|1"]
    unchanged = [line for line in before.splitlines() if line.split("|")[0] not in ("recovery", "ecc", "remap") or line.split("|")[1] != "0"]
    assert set(unchanged) <= set(Path(config).read_text().splitlines())
    # the timer was stopped then started, in that order; no rescue is left armed
    journal = [json.loads(line) for line in (systemd_dir / "journal.jsonl").read_text().splitlines()]
    assert [(e["unit"], e["verb"]) for e in journal if e["unit"] in units] == [
        ("gpuops-metrics.timer", "stop"), ("gpuops-metrics.service", "stop"), ("gpuops-metrics.timer", "start"), ("gpuops-metrics.service", "start")]
    rescues = sorted(p.name for p in systemd_dir.iterdir() if p.name.startswith("gpuops-rescue-") and p.name.endswith(".state"))
    assert rescues and all((systemd_dir / r).read_text().strip() == "inactive" for r in rescues), rescues
    assert {"gpuops-rescue-gpuops-metrics.timer.state", "gpuops-rescue-gpuops-metrics-timer.timer.state"} <= set(rescues), rescues


def test_a_process_holding_nvml_blocks_the_reset_and_persistence_comes_back(fake_node, playbook, tmp_path):
    env = fake_node(records())
    config = env["GPUOPS_FAKE_NVML_CONFIG"]
    env["GPUOPS_FAKE_SYSTEMD_DIR"] = str(tmp_path / "systemd")
    os.makedirs(env["GPUOPS_FAKE_SYSTEMD_DIR"])
    holder = subprocess.Popen([sys.executable, "-c", "import pynvml, sys, time; pynvml.nvmlInit(); print('up', flush=True); time.sleep(120)"],
                              env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        playbook("gpu_reset.yml", env, phase="held", gpus=G, lock_dir=str(tmp_path / "run"))
    finally:
        holder.kill()
        holder.wait(10)
        holder.stdout.close()
    held = json.loads((tmp_path / "held.json").read_text())["held"]
    assert held["failed"] and held["nvidia_smi_rc"] == 255 and "In use by another client" in held["msg"], held
    # the peer came in with include_peers; persistence mode was on only on GPU 2: off for the reset, on again
    assert (held["reset"], held["peers_included"]) == ([G[2], G[3]], [G[3]])
    assert held["persistence_restored"] == [G[2]]
    assert lines(config, "persistence", 2) == ["persistence|2|1"] and lines(config, "persistence", 3) == ["persistence|3|0"]


def facts(**gpu):
    base = {"uuid": G[0], "state": "ok", "architecture": 8, "persistence_mode": True, "processes": [], "mig_devices": [],
            "nvlink": {"peers": []}, "recovery_action": {"value": 0}, "remapped_rows": {"supported": True}, "ecc": {}}
    base.update(gpu)
    return {"available": True, "gpus": [base], "fabric_manager": None, "nvswitch": False}


@pytest.mark.parametrize("gpu, says", [
    ({"processes": [{"pid": 7, "pod_uid": "u-1", "container": "train"}]}, "in use by PID 7 (pod u-1, container train)"),
    ({"state": "lost"}, "is lost (off the bus)"),
    ({"mig_devices": ["MIG-1"]}, "has MIG instances MIG-1"),
])
def test_each_precondition_refuses_by_name(gpu, says):
    dummy, dummy2, refusals = gpu_reset.reset_set(facts(**gpu), [G[0]])
    assert len(refusals) == 1 and says in refusals[0], refusals


def test_an_unreadable_node_is_never_reset_and_an_ampere_nvswitch_needs_fabric_manager():
    refusals = gpu_reset.reset_set({"available": False, "reason": "NVML: Unknown Error"}, [G[0]])[2]
    assert refusals == ["NVML could not be read on this node (NVML: Unknown Error): nothing is reset on a node whose GPU inventory could not be read"]
    nvswitch = dict(facts(architecture=7), nvswitch=True, fabric_manager="inactive")
    assert "needs Fabric Manager for a reset, and it is inactive" in gpu_reset.reset_set(nvswitch, [G[0]])[2][0]
    assert gpu_reset.reset_set(dict(nvswitch, fabric_manager="active"), [G[0]])[2] == []


def test_the_post_check_names_what_is_still_wrong():
    # "healthy again" is the decision's own rules: every one at the reset's severity or above that fires, with its row
    after = facts(recovery_action={"value": 2, "name": "NODE_REBOOT", "source": "nvml_field"}, remapped_rows={"supported": True, "pending": True},
                  ecc={"volatile_dbe": 1})
    lines = gpu_reset.post_check(after, [G[0]])
    assert [line.split(" (row ")[-1] for line in lines] == ["4)", "16)"], lines
    assert lines[0].startswith("%s: recovery action NODE_REBOOT (nvml_field): NVIDIA says reboot" % G[0])
    assert lines[1].startswith("%s: a row remap is pending" % G[0])
    # NVML says the recovery action: double-bit ECC errors with NONE are a signal (row 18's observe), not unhealthy; where this
    # driver cannot say it, they are row 11's reset, so the GPU is not healthy
    assert gpu_reset.post_check(facts(recovery_action={"value": 0, "source": "nvml_field"}, ecc={"volatile_dbe": 1}), [G[0]]) == []
    unsupported = gpu_reset.post_check(facts(recovery_action={"value": None, "source": "unsupported"}, ecc={"volatile_dbe": 1}), [G[0]])
    assert len(unsupported) == 1 and unsupported[0].endswith("(row 11)") and "1 uncorrectable (double-bit) ECC errors" in unsupported[0]
    for state, row in (("lost", 2), ("reset_required", 5), ("unreadable", 1)):
        assert gpu_reset.post_check(facts(state=state), [G[0]])[0].endswith("(row %d)" % row), state
    assert gpu_reset.post_check(facts(), [G[0]]) == []
    assert gpu_reset.post_check(facts(), [G[1]]) == ["%s is gone after the reset (a GPU fell off the bus, or its UUID changed)" % G[1]]


def test_beside_the_host_the_rescues_wait_for_the_hosts_lock_file(monkeypatch):
    """In a node pod (GPUOPS_HOST_ROOT=/host) the module locks /host/run/gpuops/gpu-reset.lock; the host's systemd runs the
    rescues, which must wait for the same file by its host path, else a rescue could fire while the reset still runs."""
    monkeypatch.setattr(gpu_reset.hostroot, "root", lambda: "/host")
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, "", ""

    node = gpu_reset.Node(run, None, "/usr/bin/nvidia-smi", "/host/run/gpuops", which=lambda name, path=None: "/usr/bin/" + name)
    armed = gpu_reset._arm(node, {"rescue_seconds": 30}, [G[0]], ["gpuops-metrics.timer"], "/host/run/gpuops/gpu-reset.lock")
    assert armed == [gpu_reset.PERSISTENCE_RESCUE, "gpuops-metrics.timer"] and len(calls) == 2
    assert all("/run/gpuops/gpu-reset.lock" in argv and "/host/run/gpuops/gpu-reset.lock" not in argv for argv in calls), calls
