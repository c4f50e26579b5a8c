# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU inventory through unmodified pynvml (fake libnvidia-ml.so.1) and the fake nvidia-smi.

Each case runs in a subprocess: a loaded NVML library cannot be unloaded and
LD_LIBRARY_PATH is read when the process starts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import fakenode

from ansible_collections.gpuops.fleet.plugins.module_utils._node import gpu_inventory as inventory

GATHER = r"""
import json, subprocess, sys
from ansible_collections.gpuops.fleet.plugins.module_utils._node.gpu_inventory import gather
def run(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    return p.returncode, p.stdout, p.stderr
smi = sys.argv[2] or None
root = sys.argv[3] if len(sys.argv) > 3 else None
print(json.dumps(gather(run, sys.argv[1], smi, driver_root=root)))
"""
T4 = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
A100 = "GPU-11111111-2222-3333-4444-555555555555"
MIG = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
NODE = [
    fakenode.gpu(T4),
    fakenode.gpu(A100, fakenode.A100, "00000000:00:08.0", 40960, 1, mig=1),
    fakenode.mig(1, 0, MIG, "1g.5gb", 7, 0, 4864),
]


def gather(env, backend, smi=True, extra_path=None, driver_root=None):
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    smi_path = os.path.join(env["LD_LIBRARY_PATH"].split(":")[0], "nvidia-smi") if smi else ""
    if extra_path is not None:
        env["LD_LIBRARY_PATH"] = extra_path
    out = subprocess.run(
        [sys.executable, "-c", GATHER, backend, smi_path] + ([driver_root] if driver_root else []),
        env=env, capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout)


def test_nvml_reads_every_field(fake_node):
    facts = gather(fake_node(NODE), "nvml")
    assert facts["available"] and facts["backend"] == "nvml"
    assert (facts["driver_version"], facts["cuda_driver_version"], facts["count"]) == ("535.104.05", "12.2", 2)
    t4, a100 = facts["gpus"]
    assert t4 == {
        "index": 0,
        "uuid": T4,
        "name": "Tesla T4 (simulated)",
        "pci_bus_id": "00000000:00:07.0",
        "memory_total_mib": 15360,
        "minor_number": 0,
        "mig_mode": {"current": None, "pending": None},
        "mig_devices": [],
    }
    assert a100["mig_mode"] == {"current": "enabled", "pending": "enabled"}
    assert a100["mig_devices"] == [
        {"index": 0, "uuid": MIG, "profile": "1g.5gb", "gpu_instance_id": 7, "compute_instance_id": 0, "memory_total_mib": 4864}
    ]


def test_nvidia_smi_agrees_with_nvml_on_identity(fake_node):
    env = fake_node(NODE)
    nvml, smi = gather(env, "nvml"), gather(env, "nvidia-smi")
    assert smi["backend"] == "nvidia-smi"

    def identity(facts):
        return [
            (g["index"], g["uuid"], g["name"], g["pci_bus_id"], g["memory_total_mib"], g["mig_mode"], [m["uuid"] for m in g["mig_devices"]])
            for g in facts["gpus"]
        ]

    assert identity(nvml) == identity(smi)
    assert smi["gpus"][1]["mig_devices"][0]["profile"] == "1g.5gb"


@pytest.mark.parametrize("backend", ["auto", "nvml", "nvidia-smi"])
def test_driver_not_loaded_is_reported_not_raised(fake_node, backend):
    facts = gather(fake_node([], init_error=9), backend)
    assert not facts["available"]
    assert "driver is not loaded" in facts["reason"]
    assert facts["gpus"] == []


def test_library_mismatch_via_cli(fake_node):
    facts = gather(fake_node([], init_error=18), "nvidia-smi")
    assert not facts["available"] and "exit 18, driver/library version mismatch" in facts["reason"]


def test_gpu_lost_mid_query_is_unavailable(fake_node):
    facts = gather(fake_node(NODE + ["uuid_error|1|15"]), "nvml")
    assert not facts["available"]
    assert facts["reason"] == "NVML query failed: GPU is lost"


def test_no_library_falls_back_to_cli(fake_node):
    facts = gather(fake_node(NODE), "auto", extra_path="/nonexistent")
    assert facts["available"] and facts["backend"] == "nvidia-smi" and facts["count"] == 2


def test_no_library_and_no_cli_says_why(fake_node):
    facts = gather(fake_node(NODE), "auto", smi=False, extra_path="/nonexistent")
    assert not facts["available"] and facts["backend"] is None
    assert "libnvidia-ml.so.1" in facts["reason"] and "nvidia-smi: not found on PATH" in facts["reason"]


def test_no_devices_is_available_with_zero_gpus(fake_node):
    facts = gather(fake_node([]), "nvidia-smi")
    assert facts["available"] and facts["count"] == 0


def test_find_nvidia_smi_explicit_then_path_then_driver_dirs(tmp_path, monkeypatch):
    from ansible_collections.gpuops.fleet.plugins.module_utils._node import gpu_inventory as inv

    on_path = tmp_path / "bin" / "nvidia-smi"
    in_driver_dir = tmp_path / "nvidia" / "bin" / "nvidia-smi"
    for exe in (on_path, in_driver_dir):
        exe.parent.mkdir(parents=True)
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    not_exec = tmp_path / "plain"
    not_exec.write_text("")
    monkeypatch.setattr(inv, "NVIDIA_SMI_DIRS", [str(in_driver_dir.parent)])
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert inv.find_nvidia_smi(str(in_driver_dir)) == str(in_driver_dir)
    assert inv.find_nvidia_smi(str(not_exec)) is None
    assert inv.find_nvidia_smi() == str(on_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert inv.find_nvidia_smi() == str(in_driver_dir)
    monkeypatch.setattr(inv, "NVIDIA_SMI_DIRS", [])
    assert inv.find_nvidia_smi() is None


@pytest.mark.parametrize("libdir", ["usr/lib/x86_64-linux-gnu", "usr/lib64"])
def test_nvml_from_a_driver_root_without_ld_library_path(fake_node, fake_lib_dir, tmp_path, libdir):
    """The GPU Operator's layout: the library only under /run/nvidia/driver, nothing on the host's search path."""
    root = tmp_path / "run/nvidia/driver"
    (root / libdir).mkdir(parents=True)
    shutil.copy(os.path.join(fake_lib_dir, "libnvidia-ml.so.1"), str(root / libdir / "libnvidia-ml.so.1"))
    env = fake_node(NODE)
    facts = gather(env, "nvml", smi=False, extra_path="/nonexistent", driver_root=str(root))
    assert facts["available"] and facts["backend"] == "nvml" and facts["gpus"][0]["uuid"] == T4
    # the same node without the root: the host has no library
    assert not gather(env, "nvml", smi=False, extra_path="/nonexistent")["available"]


def test_a_driver_root_without_the_library_says_where_it_looked(fake_node, tmp_path):
    facts = gather(fake_node(NODE), "auto", smi=False, extra_path="/nonexistent", driver_root=str(tmp_path / "run/nvidia/driver"))
    assert not facts["available"]
    assert "libnvidia-ml.so.1 not found under the driver root %s" % (tmp_path / "run/nvidia/driver") in facts["reason"]
    assert "driver container" in facts["reason"]


@pytest.fixture()
def refused_device(tmp_path):
    """A file root may not open for writing (immutable): the kernel answers EPERM, as a devices cgroup does."""
    path = tmp_path / "nvidiactl"
    path.write_text("")
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False).returncode != 0:
        pytest.skip("this filesystem has no immutable attribute (chattr +i), which the EPERM test uses")
    try:
        with pytest.raises(PermissionError):
            os.open(str(path), os.O_RDWR)
        yield str(path)
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def test_a_refused_control_device_is_named_with_the_fix(refused_device, tmp_path):
    hint = inventory.device_hint(refused_device)
    assert hint.startswith(refused_device + " exists but this process may not open it (EPERM)")
    assert "gpuops_node_pod_gpu_access" in hint
    # a missing node (no driver, or not a GPU node) and one that opens say nothing
    assert inventory.device_hint(str(tmp_path / "absent")) is None
    (tmp_path / "plain").write_text("")
    assert inventory.device_hint(str(tmp_path / "plain")) is None


def test_nvml_refused_its_device_the_reason_says_why(fake_node, refused_device, monkeypatch):
    """The fake library opens GPUOPS_FAKE_NVML_OPEN first, as the real one opens /dev/nvidiactl; EPERM fails its init
    with NVML_ERROR_UNKNOWN (driver 580's answer in a container on an H200). gather() appends the device hint."""
    env = dict(fake_node(NODE), GPUOPS_FAKE_NVML_OPEN=refused_device)
    facts = gather(env, "nvml")
    assert not facts["available"] and facts["reason"].startswith("NVML initialisation failed: Unknown Error"), facts["reason"]
    monkeypatch.setattr(inventory, "CONTROL_DEVICE", refused_device)
    monkeypatch.setattr(inventory, "_gather", lambda *args: inventory.empty_facts("nvml", "NVML initialisation failed: Unknown Error"))
    found = inventory.gather(None)
    assert found["reason"].startswith("NVML initialisation failed: Unknown Error; %s exists but" % refused_device), found["reason"]


def test_a_device_that_opens_changes_nothing(fake_node, tmp_path):
    (tmp_path / "dev").write_text("")
    facts = gather(dict(fake_node(NODE), GPUOPS_FAKE_NVML_OPEN=str(tmp_path / "dev")), "nvml")
    assert facts["available"] and facts["count"] == 2


@pytest.mark.parametrize("path", ["/nonexistent/nvidia-smi", "nvidia-smi", "/etc"])
def test_a_bad_nvidia_smi_path_is_named_with_the_fix(path):
    """Issue 32 item 14: gpu_uuid_facts with a bad nvidia_smi_path said only 'Error executing command.'"""
    from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
    with pytest.raises(ParameterError, match=r"nvidia_smi_path: .* is not an executable file on this node: give the absolute path"):
        inventory.gather_on_node(lambda argv: (0, "", ""), "nvidia-smi", path)


def test_beside_the_host_an_nvidia_smi_link_is_followed_inside_the_host(tmp_path, monkeypatch):
    """The check of nvidia_smi_path reads the host's file: an absolute link on the host points into the host's root."""
    from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
    root = tmp_path / "host"
    (root / "opt" / "nvidia").mkdir(parents=True)
    (root / "usr" / "bin").mkdir(parents=True)
    tool = root / "opt" / "nvidia" / "nvidia-smi"
    tool.write_text("#!/bin/sh\nexit 9\n")
    os.chmod(str(tool), 0o755)
    os.symlink("/opt/nvidia/nvidia-smi", str(root / "usr" / "bin" / "nvidia-smi"))
    os.symlink("/usr/bin/loop", str(root / "usr" / "bin" / "loop"))
    monkeypatch.setenv("GPUOPS_HOST_ROOT", str(root))
    facts = inventory.gather_on_node(lambda argv: (9, "", "NVIDIA-SMI has failed"), "nvidia-smi", "/usr/bin/nvidia-smi")
    assert facts["available"] is False, "the host's nvidia-smi was run (and answered its failure), not refused"
    with pytest.raises(ParameterError, match="nvidia_smi_path: '/usr/bin/loop' is not an executable file"):
        inventory.gather_on_node(lambda argv: (0, "", ""), "nvidia-smi", "/usr/bin/loop")
