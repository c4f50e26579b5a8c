# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node code beside the host (the node pod on a host without python3): host paths reached under the
host's root, host programs run chrooted into it, reports in host paths, and the GPUs read there."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

import fakenode
from ansible_collections.gpuops.fleet.plugins.module_utils._node import gpu_inventory, hostroot
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError, UnsafeFileError

T4 = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"


@pytest.fixture()
def host(tmp_path):
    """A host's / as the node pod sees it: /var/lib/kubelet a link with an absolute target (a data disk),
    /bin -> usr/bin as on merged-/usr systems, /usr/sbin/flock an absolute link."""
    root = tmp_path / "host"
    for d in ("mnt/data/kubelet/device-plugins", "var/lib", "usr/bin", "usr/sbin", "etc", "run"):
        (root / d).mkdir(parents=True)
    os.symlink("/mnt/data/kubelet", str(root / "var/lib/kubelet"))
    os.symlink("usr/bin", str(root / "bin"))
    for tool in ("systemctl", "systemd-run", "flock-real", "sh"):
        (root / "usr/bin" / tool).write_text("#!/bin/sh\n")
        (root / "usr/bin" / tool).chmod(0o755)
    (root / "usr/bin/not-executable").write_text("")
    os.symlink("/usr/bin/flock-real", str(root / "usr/sbin/flock"))
    return str(root)


def test_on_the_host_itself_everything_is_the_identity(monkeypatch):
    monkeypatch.delenv(hostroot.ENV, raising=False)
    assert hostroot.root() is None
    assert hostroot.local("/var/lib/kubelet/x") == "/var/lib/kubelet/x" and hostroot.host("/host/x") == "/host/x"
    assert hostroot.to_host({"a": ["/host/x"]}) == {"a": ["/host/x"]} and hostroot.argv(["systemctl", "is-active"]) == ["systemctl", "is-active"]
    run = object()
    assert hostroot.runner(run) is run and hostroot.which("sh") == shutil.which("sh")
    monkeypatch.setenv(hostroot.ENV, "/")
    assert hostroot.root() is None, "the host's own / is the host"


@pytest.mark.parametrize("value", ["host", "/nonexistent/host", "/etc/hostname"])
def test_a_bad_root_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(hostroot.ENV, value)
    with pytest.raises(ParameterError, match="^GPUOPS_HOST_ROOT: .* must be the absolute path of the host's root"):
        hostroot.root()
    assert hostroot.to_host("/host/x") == "/host/x", "reporting that error never raises again"


def test_host_paths_resolve_inside_the_root_as_the_host_resolves_them(host):
    # the link's absolute target is the host's /mnt/data, not the pod's
    assert hostroot.local("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", host) == \
        host + "/mnt/data/kubelet/device-plugins/kubelet_internal_checkpoint"
    # the last component is kept (an atomic rename replaces a link there, as on the host); .. never leaves the root
    assert hostroot.local("/var/lib/kubelet", host) == host + "/var/lib/kubelet"
    assert hostroot.local("/../../etc/machine-id", host) == host + "/etc/machine-id"
    assert hostroot.local("relative/path", host) == "relative/path" and hostroot.local("", host) == ""
    os.symlink("/loop", host + "/loop")
    # issue 32 item 8: a loop is named, never the plain path (whose links the kernel would follow in the pod: a
    # checkpoint under a looping directory read as "missing")
    with pytest.raises(UnsafeFileError, match=r"^/loop/x: Too many levels of symbolic links \(a link loop\) inside the host's root"):
        hostroot.local("/loop/x", host)
    with pytest.raises(OSError) as looped:
        hostroot.readable("/loop", host)
    assert looped.value.errno == errno.ELOOP


def test_the_node_identity_beside_the_host_reads_the_host_s_machine_id_through_its_link(host, monkeypatch):
    """/etc/machine-id is often a link (to /var/lib/dbus/machine-id, or /run/machine-id): beside the host, the host's."""
    os.makedirs(host + "/var/lib/dbus")
    with open(host + "/var/lib/dbus/machine-id", "w") as handle:
        handle.write("0123456789abcdef0123456789abcdef\n")
    os.symlink("/var/lib/dbus/machine-id", host + "/etc/machine-id-link")
    monkeypatch.setenv("GPUOPS_HOST_ROOT", host)
    linked = gpu_inventory.node_identity(("/etc/machine-id-link",))
    monkeypatch.delenv("GPUOPS_HOST_ROOT")
    assert linked == gpu_inventory.node_identity((host + "/var/lib/dbus/machine-id",))


def test_reports_name_host_paths(host):
    local = hostroot.local("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", host)
    assert hostroot.host(local, host) == "/mnt/data/kubelet/device-plugins/kubelet_internal_checkpoint" and hostroot.host(host, host) == "/"
    result = {"checkpoint_path": local, "backups_removed": [host + "/var/lib/gpuops/b1"], "msg": "moved %s aside to %s/var/lib/gpuops/b1" % (local, host),
              "count": 2, "gpus": {"name": "Tesla T4"}}
    assert hostroot.to_host(result, host) == {
        "checkpoint_path": "/mnt/data/kubelet/device-plugins/kubelet_internal_checkpoint", "backups_removed": ["/var/lib/gpuops/b1"],
        "msg": "moved /mnt/data/kubelet/device-plugins/kubelet_internal_checkpoint aside to /var/lib/gpuops/b1", "count": 2,
        "gpus": {"name": "Tesla T4"}}


def test_which_finds_the_host_s_programs_and_answers_host_paths(host, monkeypatch):
    monkeypatch.setenv("PATH", "/opt/nothing")  # the pod's PATH: the host's default PATH is searched after it
    assert hostroot.which("systemctl", base=host) == "/usr/bin/systemctl"
    assert hostroot.which("flock", base=host) == "/usr/sbin/flock", "an absolute link is followed inside the root"
    assert hostroot.which("sh", path="/bin", base=host) == "/bin/sh"
    assert hostroot.which("/usr/bin/systemd-run", base=host) == "/usr/bin/systemd-run"
    assert hostroot.which("python3", base=host) is None and hostroot.which("not-executable", base=host) is None


def test_host_programs_run_chrooted_with_their_argv_as_data(host):
    argv = hostroot.argv(["systemctl", "start", "--no-block", "kubelet.service; rm -rf /"], base=host)
    assert argv[:2] == [sys.executable, "-c"] and argv[3:] == [host, "systemctl", "start", "--no-block", "kubelet.service; rm -rf /"]
    calls = []
    run = hostroot.runner(lambda a, **kw: calls.append((a, kw)) or (0, "", ""), base=host)
    run(["systemctl", "is-active", "kubelet.service"], check_rc=False)
    assert calls == [(hostroot.argv(["systemctl", "is-active", "kubelet.service"], base=host), {"check_rc": False})]


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.isfile("/bin/busybox"), reason="chroot needs root, and a static busybox to run in the root")
def test_a_host_program_runs_in_the_host_s_root(tmp_path):
    root = tmp_path / "host"
    (root / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    shutil.copy("/bin/busybox", str(root / "bin/busybox"))
    os.symlink("busybox", str(root / "bin/cat"))
    (root / "etc/marker").write_text("the host's file\n")
    proc = subprocess.run(hostroot.argv(["cat", "/etc/marker"], base=str(root)), env={"PATH": "/bin"}, capture_output=True, text=True, check=False)
    assert (proc.returncode, proc.stdout) == (0, "the host's file\n"), proc.stderr
    proc = subprocess.run(hostroot.argv(["nvidia-smi", "-L"], base=str(root)), env={"PATH": "/bin"}, capture_output=True, text=True, check=False)
    assert proc.returncode == 127 and "nvidia-smi: not runnable on the host" in proc.stderr


GATHER_ON_NODE = r"""
import json, sys
from ansible_collections.gpuops.fleet.plugins.module_utils._node.gpu_inventory import gather_on_node
print(json.dumps(gather_on_node(lambda argv: (127, "", "no"), "nvml", driver_root=sys.argv[1] or None)))
"""


@pytest.mark.parametrize("layout", ["home/kubernetes/bin/nvidia/lib64", "driver-root"])
def test_beside_the_host_nvml_is_the_host_s_and_so_is_the_node_identity(tmp_path, fake_lib_dir, layout):
    """No NVML in the pod (no NVIDIA runtime put one there): the host's own, COS's installer layout, or a driver root given as a host path."""
    root = tmp_path / "host"
    lib_dir = root / (layout if layout != "driver-root" else "run/nvidia/driver/usr/lib/x86_64-linux-gnu")
    lib_dir.mkdir(parents=True)
    shutil.copy(os.path.join(fake_lib_dir, "libnvidia-ml.so.1"), str(lib_dir / "libnvidia-ml.so.1"))
    (root / "etc").mkdir()
    (root / "etc/machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    env = fakenode.environ(fake_lib_dir, fakenode.write_config(str(tmp_path / "node.cfg"), [fakenode.gpu(T4)]))
    env.update(LD_LIBRARY_PATH="/nonexistent", PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **{hostroot.ENV: str(root)})
    driver_root = "/run/nvidia/driver" if layout == "driver-root" else ""
    out = subprocess.run([sys.executable, "-c", GATHER_ON_NODE, driver_root], env=env, capture_output=True, text=True, check=True).stdout
    facts = json.loads(out)
    assert facts["available"] and [g["uuid"] for g in facts["gpus"]] == [T4], facts
    assert facts["node_id"] == hashlib.sha256(b"gpuops.fleet node identity:0123456789abcdef0123456789abcdef").hexdigest()[:32]
    # nothing there: the reason says so (no traceback, no GPUs invented)
    shutil.rmtree(str(lib_dir))
    facts = json.loads(subprocess.run([sys.executable, "-c", GATHER_ON_NODE, driver_root], env=env, capture_output=True, text=True, check=True).stdout)
    assert not facts["available"] and "libnvidia-ml.so.1" in facts["reason"]


def test_the_drivers_own_tool_comes_before_paths_on_the_host_and_beside_it(tmp_path):
    """hostroot.driver_tool: the one way gpu_reset and gpu_rma_evidence find the driver's nvidia-smi (issue 59, item 4)."""
    for base in (None, str(tmp_path / "host")):
        where = (tmp_path / "host" if base else tmp_path) / "run/nvidia/driver"  # where this process finds it
        driver = "/run/nvidia/driver" if base else str(where)  # the host path the user gives
        assert hostroot.driver_tool("nvidia-smi", "/usr/bin/nvidia-smi", driver, base) == "/usr/bin/nvidia-smi"  # none there
        (where / "usr/bin").mkdir(parents=True)
        tool = where / "usr/bin/nvidia-smi"
        tool.write_text("#!/bin/sh\n")
        assert hostroot.driver_tool("nvidia-smi", "/usr/bin/nvidia-smi", driver, base) == "/usr/bin/nvidia-smi"  # not executable
        tool.chmod(0o755)
        # the host path, which run (chrooted beside the host) runs
        assert hostroot.driver_tool("nvidia-smi", None, driver, base) == driver + "/usr/bin/nvidia-smi"
        assert hostroot.driver_tool("nvidia-smi", "/usr/bin/nvidia-smi", None, base) == "/usr/bin/nvidia-smi"
        assert hostroot.driver_tool("nvidia-smi", None, "run/nvidia/driver", base) is None  # a relative root names nothing
    # beside the host, a link in the driver root is followed inside the host's root, never the pod's
    (tmp_path / "host/run/nvidia/driver/usr/bin/nvidia-smi").unlink()
    os.symlink("/usr/bin/true", str(tmp_path / "host/run/nvidia/driver/usr/bin/nvidia-smi"))
    assert hostroot.driver_tool("nvidia-smi", None, "/run/nvidia/driver", str(tmp_path / "host")) is None
