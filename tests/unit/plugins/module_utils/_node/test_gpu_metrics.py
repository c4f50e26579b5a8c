# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpuops metrics``: NVML compute processes (the fake libnvidia-ml.so.1 under unmodified pynvml)
mapped to pods through a sysroot /proc holding the cgroup files of cgroup v1 and v2, containerd
and CRI-O, written as a node_exporter textfile."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import fakenode
import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node import gpu_metrics as gm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))))
RUNNER = fakenode.GUARD_RUNNER
G0 = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
G1 = "GPU-1b7d2a3e-5c8f-4e61-9a0d-3f2c4b5a6d7e"
UID_A = "7a4f0d3c-2b1e-4c5d-8e9f-0a1b2c3d4e5f"
UID_B = "9c8b7a6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d"
UID_C = "3e1f2a4b-6c7d-4e8f-9a0b-1c2d3e4f5a6b"
CID = dict((k, (k * 64)[:64]) for k in "abcdef")

# what kubelet and the runtimes make of a pod's container cgroup (kubelet's cgroup driver, the runtime)
CGROUPS = {
    # cgroup v2, systemd driver, containerd (Burstable)
    "v2-systemd-containerd": "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope\n"
                             % (UID_A.replace("-", "_"), CID["a"]),
    # cgroup v2, systemd driver, CRI-O (BestEffort)
    "v2-systemd-crio": "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/crio-%s.scope\n"
                       % (UID_B.replace("-", "_"), CID["b"]),
    # cgroup v1, cgroupfs driver, containerd (Guaranteed: no QoS level)
    "v1-cgroupfs-containerd": "12:pids:/kubepods/pod%s/%s\n11:memory:/kubepods/pod%s/%s\n1:name=systemd:/kubepods/pod%s/%s\n"
                              % (UID_C, CID["c"], UID_C, CID["c"], UID_C, CID["c"]),
    # cgroup v1, systemd driver, CRI-O
    "v1-systemd-crio": "9:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/crio-%s.scope\n"
                       "1:name=systemd:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/crio-%s.scope\n"
                       % (UID_B.replace("-", "_"), CID["d"], UID_B.replace("-", "_"), CID["d"]),
    # a host process (Xorg, a monitoring agent): no pod
    "host": "0::/system.slice/nvidia-persistenced.service\n",
}


@pytest.mark.parametrize("name, expected", [
    ("v2-systemd-containerd", (UID_A, CID["a"], "containerd")),
    ("v2-systemd-crio", (UID_B, CID["b"], "cri-o")),
    ("v1-cgroupfs-containerd", (UID_C, CID["c"], None)),
    ("v1-systemd-crio", (UID_B, CID["d"], "cri-o")),
    ("host", None),
])
def test_pod_of_cgroup(name, expected):
    assert gm.pod_of_cgroup(CGROUPS[name]) == expected


def bundle(root, runtime, cid, name):
    template = dict((r, t) for r, t, dummy in gm.BUNDLES)[runtime]
    key = dict((r, k) for r, dummy, k in gm.BUNDLES)[runtime]
    path = os.path.join(str(root), template.format(id=cid))
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as handle:
        json.dump({"ociVersion": "1.0.2", "annotations": {key: name, "other": "x"}}, handle)


@pytest.fixture()
def sysroot(tmp_path):
    """/proc/<pid>/cgroup of six processes and the runtimes' bundles of some containers."""
    pids = {4242: "v2-systemd-containerd", 4243: "v2-systemd-containerd", 5151: "v2-systemd-crio", 6161: "v1-cgroupfs-containerd",
            7171: "v1-systemd-crio", 900: "host"}
    for pid, name in pids.items():
        (tmp_path / "proc" / str(pid)).mkdir(parents=True)
        (tmp_path / "proc" / str(pid) / "cgroup").write_text(CGROUPS[name])
    bundle(tmp_path, "containerd", CID["a"], "app-3g-v1")
    bundle(tmp_path, "cri-o", CID["b"], "infer")
    bundle(tmp_path, "cri-o", CID["d"], "sidecar")
    # CID["c"] has no readable bundle: its container ID (12 characters) stands in
    return tmp_path


def run_metrics(env, root, textfile, *extra):
    proc = subprocess.run([sys.executable, "-c", RUNNER, "metrics", "--root", str(root), "--textfile", str(textfile)] + list(extra),
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


def samples(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            out[series] = float(value)
    return out


def test_metrics_per_pod_container_and_gpu(sysroot, fake_node, tmp_path):
    records = [fakenode.gpu(G0, minor=0, mem_mib=16384), fakenode.gpu(G1, minor=1, bus="00000000:00:08.0", mem_mib=16384),
               # two processes of one container (3.4 GiB between them), the field report's 3 GiB app on GPU 0
               fakenode.proc(0, 4242, 3000), fakenode.proc(0, 4243, 481), fakenode.proc(0, 5151, 3193),
               fakenode.proc(1, 6161, 6144), fakenode.proc(1, 7171, 100),
               fakenode.proc(1, 900, 64),  # a host process
               fakenode.proc(1, 31337, 10)]  # exited between NVML's answer and our read of /proc
    textfile = tmp_path / "textfile" / "gpuops.prom"
    textfile.parent.mkdir()
    rc, logs, err = run_metrics(fake_node(records), sysroot, textfile, "--node", "gpu-a")
    assert rc == 0, (logs, err)
    assert logs[-1]["event"] == "metrics_written" and sorted(logs[-1]["pods"]) == sorted([UID_A, UID_B, UID_C])
    text = textfile.read_text()
    got = samples(text.replace(',node="gpu-a"', "").replace('{node="gpu-a"}', ""))
    assert all('node="gpu-a"' in line for line in text.splitlines() if line and not line.startswith("#"))
    mib = 1024 * 1024
    assert got['gpuops_pod_gpu_memory_used_bytes{container="app-3g-v1",gpu="0",pod_uid="%s",uuid="%s"}' % (UID_A, G0)] == 3481 * mib
    assert got['gpuops_pod_gpu_memory_used_bytes{container="infer",gpu="0",pod_uid="%s",uuid="%s"}' % (UID_B, G0)] == 3193 * mib
    assert got['gpuops_pod_gpu_memory_used_bytes{container="%s",gpu="1",pod_uid="%s",uuid="%s"}' % (CID["c"][:12], UID_C, G1)] == 6144 * mib
    assert got['gpuops_pod_gpu_memory_used_bytes{container="sidecar",gpu="1",pod_uid="%s",uuid="%s"}' % (UID_B, G1)] == 100 * mib
    assert got['gpuops_gpu_memory_used_bytes{gpu="0",uuid="%s"}' % G0] == (3000 + 481 + 3193) * mib
    assert got['gpuops_gpu_memory_total_bytes{gpu="1",uuid="%s"}' % G1] == 16384 * mib
    assert got['gpuops_gpu_process_memory_unattributed_bytes{gpu="1",uuid="%s"}' % G1] == (64 + 10) * mib
    assert got['gpuops_gpu_process_memory_unattributed_bytes{gpu="0",uuid="%s"}' % G0] == 0
    assert got["gpuops_metrics_up"] == 1
    assert "# TYPE gpuops_pod_gpu_memory_used_bytes gauge" in text
    assert os.listdir(str(textfile.parent)) == ["gpuops.prom"]  # the temp file went with the rename
    assert oct(os.stat(str(textfile)).st_mode & 0o777) == "0o644"


def test_metrics_without_a_driver_says_so_in_the_file(sysroot, fake_node, tmp_path):
    textfile = tmp_path / "gpuops.prom"
    textfile.write_text("gpuops_metrics_up 1\n")  # an earlier run's file is replaced, not left stale
    rc, logs, err = run_metrics(fake_node([], init_error=9), sysroot, textfile)
    assert rc == 3, (logs, err)
    assert logs[-1]["event"] == "metrics_inventory_unknown" and "Driver Not Loaded" in logs[-1]["reason"]
    got = samples(textfile.read_text())
    assert got['gpuops_metrics_up{reason="NVIDIA driver is not loaded (NVML: Driver Not Loaded)"}'] == 0
    assert not [k for k in got if k.startswith("gpuops_pod_")]


def older_driver(tmp_path, name, records):
    """Environment of a node whose NVML library is an older driver's (fakenode.DRIVERS: symbols it lacks)."""
    lib_dir = fakenode.build_lib(os.path.join(ROOT, "build", "fakes", name), fakenode.DRIVERS[name])
    driver = {"r470": "470.256.02", "r440": "440.33.01"}[name]
    return fakenode.environ(lib_dir, fakenode.write_config(str(tmp_path / "node.cfg"), records, driver=driver))


def test_metrics_on_a_driver_without_the_v3_call_read_processes_through_v2(sysroot, tmp_path):
    # pynvml's unversioned call is _v3 and raises NVMLLibraryMismatchError (not an NVMLError) on such a driver
    env = older_driver(tmp_path, "r470", [fakenode.gpu(G0, mem_mib=16384), fakenode.proc(0, 4242, 3000), fakenode.proc(0, 900, 64)])
    check = subprocess.run([sys.executable, "-c", "import pynvml; pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)\n"
                            "try:\n    pynvml.nvmlDeviceGetComputeRunningProcesses(h)\nexcept pynvml.NVMLLibraryMismatchError:\n    print('mismatch')"],
                           env=env, capture_output=True, text=True, timeout=60, check=False)
    assert check.stdout.strip() == "mismatch", check  # the stand-in really is such a driver
    textfile = tmp_path / "gpuops.prom"
    rc, logs, err = run_metrics(env, sysroot, textfile, "--node", "old")
    assert rc == 0 and err == "", (logs, err)
    got = samples(textfile.read_text().replace(',node="old"', "").replace('{node="old"}', ""))
    assert got['gpuops_pod_gpu_memory_used_bytes{container="app-3g-v1",gpu="0",pod_uid="%s",uuid="%s"}' % (UID_A, G0)] == 3000 * 1024 * 1024
    assert got['gpuops_gpu_process_memory_unattributed_bytes{gpu="0",uuid="%s"}' % G0] == 64 * 1024 * 1024
    assert got["gpuops_metrics_up"] == 1


def test_metrics_on_a_driver_without_any_process_call_say_so_in_the_file_without_a_traceback(sysroot, tmp_path):
    textfile = tmp_path / "gpuops.prom"
    rc, logs, err = run_metrics(older_driver(tmp_path, "r440", [fakenode.gpu(G0), fakenode.proc(0, 4242, 3000)]), sysroot, textfile)
    assert rc == 3 and err == "", (logs, err)
    reason = logs[-1]["reason"]
    assert logs[-1]["event"] == "metrics_inventory_unknown"
    assert "nvmlDeviceGetComputeRunningProcesses_v3, nvmlDeviceGetComputeRunningProcesses_v2" in reason and "upgrade the NVIDIA driver" in reason
    got = samples(textfile.read_text())
    assert [value for key, value in got.items() if key.startswith("gpuops_metrics_up{")] == [0]
    assert not [k for k in got if k.startswith("gpuops_pod_")]


def test_metrics_write_failure_is_exit_6_and_leaves_no_temp_file(sysroot, fake_node, tmp_path):
    missing = tmp_path / "no-such-dir" / "gpuops.prom"
    rc, logs, err = run_metrics(fake_node([fakenode.gpu(G0)]), sysroot, missing)
    assert rc == 6 and logs[-1]["event"] == "metrics_write_failed", (logs, err)


def test_render_escapes_label_values():
    text = gm.render([("gpuops_gpu_memory_total_bytes", {"gpu": "0", "uuid": 'a"b\\c'}, 1)], now=1)
    assert 'gpuops_gpu_memory_total_bytes{gpu="0",uuid="a\\"b\\\\c"} 1' in text
    assert text.endswith("gpuops_metrics_last_run_timestamp_seconds 1\n")


# ---------------------------------------------------------------------------- untrusted input per process

SYSTEMD_POD = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice" % UID_A.replace("-", "_")


@pytest.mark.parametrize("path", [
    # a pod<uid> segment anywhere but under kubelet's own root is anyone's to make: a user's systemd slice,
    "/user.slice/user-1000.slice/user@1000.service/app.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope" % (UID_A.replace("-", "_"), CID["a"]),
    # a system service's own sub-cgroup,
    "/system.slice/evil.service/pod%s/%s" % (UID_A, CID["a"]),
    # a container engine's tree,
    "/docker/%s/kubepods/pod%s/%s" % (CID["e"], UID_A, CID["a"]),
    # kubelet's names below another root,
    "/foo/kubepods.slice/kubepods-pod%s.slice/cri-containerd-%s.scope" % (UID_A.replace("-", "_"), CID["a"]),
    # a QoS slice whose pod slice names another QoS (kubelet never nests them so),
    "/kubepods.slice/kubepods-besteffort.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope" % (UID_A.replace("-", "_"), CID["a"]),
    # and a name that only starts like kubelet's root
    "/kubepods.slice-evil/kubepods-pod%s.slice/cri-containerd-%s.scope" % (UID_A.replace("-", "_"), CID["a"]),
])
def test_a_pod_segment_outside_kubelets_hierarchy_is_not_a_pod(path):
    assert gm.pod_of_cgroup("0::%s\n" % path) is None


def test_a_process_in_a_sub_cgroup_of_its_container_keeps_its_container(tmp_path):
    cgroup = "0::%s/cri-containerd-%s.scope/init.scope\n" % (SYSTEMD_POD, CID["a"])
    assert gm.pod_of_cgroup(cgroup) == (UID_A, CID["a"], "containerd")
    assert gm.pod_of_cgroup("0::/kubepods/burstable/pod%s/%s/sub\n" % (UID_C, CID["c"])) == (UID_C, CID["c"], None)
    bundle(tmp_path, "containerd", CID["a"], "app-3g-v1")
    (tmp_path / "proc" / "77").mkdir(parents=True)
    (tmp_path / "proc" / "77" / "cgroup").write_text(cgroup)
    assert gm.attribute_process(str(tmp_path), 77) == (UID_A, "app-3g-v1")


def hostile_bundle(root, cid, raw):
    template = dict((r, t) for r, t, dummy in gm.BUNDLES)["containerd"]
    path = os.path.join(str(root), template.format(id=cid))
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as handle:
        handle.write(raw)


KEY = "io.kubernetes.cri.container-name"
HOSTILE = {
    "config.json is a list": b'[{"annotations": {}}]',
    "annotations are a list": b'{"annotations": ["io.kubernetes.cri.container-name", "x"]}',
    "the name is an object": b'{"annotations": {"%s": {"a": 1}}}' % KEY.encode(),
    "the name holds a lone surrogate": b'{"annotations": {"%s": "app\\udc80"}}' % KEY.encode(),
    "the name is a whole label set": b'{"annotations": {"%s": "x\\",pod_uid=\\"0"}}' % KEY.encode(),
    "config.json is not UTF-8": b'{"annotations": {"%s": "caf\xe9"}}' % KEY.encode(),
}


@pytest.mark.parametrize("case", sorted(HOSTILE) + ["non-UTF-8 byte in /proc/<pid>/cgroup"])
def test_what_a_pod_writes_cannot_crash_metrics_or_add_a_series(sysroot, fake_node, tmp_path, case):
    # one hostile process beside the honest ones: it is unattributed, the rest are as before, and
    # the file is rewritten with gpuops_metrics_up 1 (not left stale), with nothing on stderr
    pid = 8888
    (sysroot / "proc" / str(pid)).mkdir()
    cgroup = ("0::%s/cri-containerd-%s.scope\n" % (SYSTEMD_POD, CID["f"])).encode()
    if case in HOSTILE:
        hostile_bundle(sysroot, CID["f"], HOSTILE[case])
    else:
        cgroup = cgroup.replace(b"kubepods.slice/", b"kubepods.slice\xff/", 1)
    (sysroot / "proc" / str(pid) / "cgroup").write_bytes(cgroup)
    textfile = tmp_path / "gpuops.prom"
    textfile.write_text("gpuops_metrics_up 1\n# stale\n")
    records = [fakenode.gpu(G0, mem_mib=16384), fakenode.proc(0, 4242, 3000), fakenode.proc(0, pid, 512)]
    rc, logs, err = run_metrics(fake_node(records), sysroot, textfile)
    assert rc == 0 and err == "", (logs, err)
    text = textfile.read_text()
    assert "# stale" not in text
    got = samples(text)
    mib = 1024 * 1024
    assert got['gpuops_gpu_process_memory_unattributed_bytes{gpu="0",uuid="%s"}' % G0] == 512 * mib
    pods = [k for k in got if k.startswith("gpuops_pod_gpu_memory_used_bytes")]
    assert pods == ['gpuops_pod_gpu_memory_used_bytes{container="app-3g-v1",gpu="0",pod_uid="%s",uuid="%s"}' % (UID_A, G0)]
    assert got["gpuops_metrics_up"] == 1


def test_health_gauges_come_from_nvml_and_a_lost_gpu_leaves_the_others_read(fake_node, sysroot, tmp_path):
    g2 = "GPU-22222222-2222-3333-4444-555555555555"
    env = fake_node([fakenode.gpu(G0, mem_mib=16384), fakenode.gpu(G1, bus="00000000:00:08.0", mem_mib=16384),
                     fakenode.gpu(g2, bus="00000000:00:09.0", mem_mib=16384),
                     fakenode.health("recovery", 0, 1), fakenode.health("remap", 0, 0, 1, 1, 1), fakenode.health("arch", 1, 9),
                     fakenode.health("lost", 2), fakenode.proc(0, 4242, 3000)])
    textfile = tmp_path / "gpuops.prom"
    rc, logs, err = run_metrics(env, sysroot, textfile)
    assert rc == 0 and err == "", (logs, err)
    got = samples(textfile.read_text())
    assert got['gpuops_gpu_recovery_action{gpu="0",uuid="%s"}' % G0] == 1
    assert got['gpuops_gpu_row_remap_pending{gpu="0",uuid="%s"}' % G0] == 1
    assert got['gpuops_gpu_row_remap_failure{gpu="0",uuid="%s"}' % G0] == 1
    assert got['gpuops_gpu_retired_pages_pending{gpu="0",uuid="%s"}' % G0] == 0
    # a Hopper GPU answers NOT_SUPPORTED for retired pages: no series, not a 0 that would mean "checked, none pending"
    assert 'gpuops_gpu_retired_pages_pending{gpu="1",uuid="%s"}' % G1 not in got
    assert got['gpuops_gpu_recovery_action{gpu="1",uuid="%s"}' % G1] == 0
    assert (got['gpuops_gpu_lost{gpu="0"}'], got['gpuops_gpu_lost{gpu="1"}'], got['gpuops_gpu_lost{gpu="2"}']) == (0, 0, 1)
    # the lost GPU did not stop the rest: GPU 0's pod is still attributed, and the run is up
    assert got['gpuops_pod_gpu_memory_used_bytes{container="app-3g-v1",gpu="0",pod_uid="%s",uuid="%s"}' % (UID_A, G0)] == 3000 * 1024 * 1024
    assert got["gpuops_metrics_up"] == 1
