# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_health_info run by ansible-playbook on a fake node: every value the fake NVML sets comes back through
unmodified pynvml, a lost GPU is reported without failing the others, and without field 230 the recovery
action comes from the XID 154 line."""

from __future__ import annotations

import json
import os

import fakenode

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
G = ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0", "GPU-11111111-2222-3333-4444-555555555555",
     "GPU-22222222-2222-3333-4444-555555555555", "GPU-33333333-2222-3333-4444-555555555555"]
BUS = ["00000000:3B:00.0", "00000000:5E:00.0", "00000000:86:00.0", "00000000:AF:00.0"]
POD = "7a4f0d3c-2b1e-4c5d-8e9f-0a1b2c3d4e5f"
CID = "a" * 64
KMSG = "\n".join([
    "6,100,700000,-;NVRM: GPU at PCI:0000:3b:00: %s" % G[0],
    "6,101,700001,-;NVRM: GPU at PCI:0000:5e:00: %s" % G[1],
    "6,102,700002,-;NVRM: GPU at PCI:0000:86:00: %s" % G[2],
    "6,103,700003,-;NVRM: GPU at PCI:0000:af:00: %s" % G[3],
    "3,200,5000000,-;NVRM: Xid (PCI:0000:5e:00): 119, pid=4242, name=python, Timeout after 6s of waiting for RPC response from GPU1 GSP!",
    "3,201,5000001,-;NVRM: Xid (PCI:0000:5e:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
    "3,202,6000000,-;NVRM: Xid (PCI:0000:86:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "3,203,6000001,-;NVRM: GPU 0000:86:00.0: GPU has fallen off the bus.",
]) + "\n"


def records():
    return [
        fakenode.gpu(G[0], fakenode.A100, BUS[0], 40960, 0),
        fakenode.gpu(G[1], fakenode.A100, BUS[1], 40960, 1),
        fakenode.gpu(G[2], fakenode.A100, BUS[2], 40960, 2),
        fakenode.gpu(G[3], fakenode.A100, BUS[3], 40960, 3),
        fakenode.health("persistence", 0, 0),
        fakenode.health("temp", 0, 61, 87, 92),
        fakenode.health("clocks", 0, "0x48"),
        fakenode.health("nvlink", 0, 0, 1, 1, 4, 5, 6),
        fakenode.health("arch", 1, 8),
        fakenode.health("recovery", 1, 1),
        fakenode.health("remap", 1, 2, 1, 1, 0),
        fakenode.health("retired", 1, 3, 4, 1),
        fakenode.health("ecc", 1, 5, 1, 10, 2),
        fakenode.health("nvlink", 1, 0, 0, 0, 7, 8, 9),
        fakenode.proc(1, 4242, 1000),
        fakenode.health("lost", 2),
        fakenode.health("reset_required", 3),
    ]


def test_every_value_the_fake_sets_comes_back(fake_node, playbook, tmp_path):
    env = fake_node(records())
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(KMSG)
    # the beside-the-host run: the host's root with the saved log and the process's pod cgroup
    sysroot = tmp_path / "host"
    (sysroot / "var" / "log").mkdir(parents=True)
    (sysroot / "var" / "log" / "kmsg.saved").write_text(KMSG)
    (sysroot / "proc" / "4242").mkdir(parents=True)
    cgroup = "0::/kubepods.slice/kubepods-pod%s.slice/cri-containerd-%s.scope\n" % (POD.replace("-", "_"), CID)
    (sysroot / "proc" / "4242" / "cgroup").write_text(cgroup)
    no_field = fakenode.build_lib(os.path.join(ROOT, "build", "fakes", "no-recovery-field"), fakenode.DRIVERS["no-recovery-field"])
    bad = fakenode.write_config(str(tmp_path / "bad.cfg"), [], init_error=9)
    ok, changed, out = playbook("gpu_health_info.yml", env, kmsg=str(kmsg), sysroot=str(sysroot), no_field_lib=no_field, bad_config=bad)
    assert changed == 1, out  # the saved JSON; the module never changes anything
    got = json.loads((tmp_path / "health.json").read_text())
    read = got["read"]
    assert (read["available"], read["gpus_seen"], read["gpus_expected"], read["driver_version"]) == (True, 4, 4, "535.104.05")
    g0, g1, g2, g3 = read["gpus"]
    # GPU 0: healthy, persistence off, hot-ish, HW slowdown bits, one active NVLink to GPU 1
    assert (g0["state"], g0["persistence_mode"], g0["temperature"]) == ("ok", False, {"current": 61, "slowdown": 87, "shutdown": 92})
    assert g0["clocks_event_reasons"] == ["hw_slowdown", "hw_thermal_slowdown"]
    assert g0["nvlink"]["links"] == [{"link": 0, "active": True, "peer_pci_bus_id": BUS[1], "peer_uuid": G[1], "replay": 4, "recovery": 5,
                                      "crc_flit": 6}]
    assert (g0["nvlink"]["peers"], g0["recovery_action"]) == ([G[1]], {"value": 0, "name": "NONE", "source": "nvml_field"})
    assert g0["verdict"]["action"] == "observe"
    # GPU 1: every counter, the recovery action from field 230, its XIDs
    assert g1["recovery_action"] == {"value": 1, "name": "GPU_RESET", "source": "nvml_field"}
    assert g1["remapped_rows"] == {"supported": True, "correctable": 2, "uncorrectable": 1, "pending": True, "failure": False}
    assert g1["retired_pages"] == {"supported": True, "sbe": 3, "dbe": 4, "pending": True}
    assert g1["ecc"] == {"mode": "enabled", "volatile_sbe": 5, "volatile_dbe": 1, "aggregate_sbe": 10, "aggregate_dbe": 2}
    assert (g1["architecture"], g1["architecture_name"], g1["nvlink"]["inactive"]) == (8, "ada", 1)
    assert g1["processes"] == [{"pid": 4242, "used_mib": 1000, "pod_uid": None, "container": None}]  # no such process here
    assert [x["code"] for x in g1["xids"]] == [119, 154]
    assert (g1["verdict"]["action"], g1["verdict"]["row"]) == ("reset", 5)  # field 230 (GPU_RESET) over the 154 line (reboot)
    # GPU 2: lost, reported without failing the others; its UUID from the driver's own line for its bus
    assert (g2["state"], g2["uuid"], g2["uuid_source"], g2["fallen_off_bus"]) == ("lost", G[2], "kernel_log", True)
    assert (g2["verdict"]["action"], g2["verdict"]["row"]) == ("reboot", 2)
    # GPU 3: reset required
    assert (g3["state"], g3["uuid"], g3["verdict"]["action"]) == ("reset_required", G[3], "reset")
    assert (read["verdict"]["state"], read["verdict"]["action"], read["verdict"]["gpus"]) == ("faulty", "reboot", [G[2]])
    assert read["kernel_log"]["source"] == "file" and read["kernel_log"]["unattributed_xids"] == []
    # beside the host: the log under the host's root, the process mapped to its pod through the host's /proc
    beside = got["beside"]
    assert beside["gpus"][1]["processes"] == [{"pid": 4242, "used_mib": 1000, "pod_uid": POD, "container": CID[:12]}]
    assert [x["code"] for x in beside["gpus"][1]["xids"]] == [119, 154]
    # without field 230 the recovery action is the XID 154 line's, and it decides
    nf1 = got["no_field"]["gpus"][1]
    assert nf1["recovery_action"] == {"value": 2, "name": "NODE_REBOOT", "source": "xid154_log"}
    assert (nf1["verdict"]["action"], nf1["verdict"]["row"]) == ("reboot", 4)
    assert got["no_field"]["gpus"][0]["recovery_action"]["source"] == "unsupported"
    # a node whose NVML does not load: unknown, never a verdict
    unreadable = got["unreadable"]
    assert (unreadable["available"], unreadable["verdict"]["state"], unreadable["verdict"]["action"]) == (False, "unknown", "none")
    assert "Driver Not Loaded" in unreadable["reason"]


def test_mig_with_instances_and_hopper_answer_not_supported(fake_node, playbook, tmp_path):
    env = fake_node([
        fakenode.gpu(G[0], fakenode.A100, BUS[0], 40960, 0, mig=1),
        fakenode.mig(0, 0, "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "1g.5gb", 7, 0, 4864),
        fakenode.gpu(G[1], "NVIDIA H200 (simulated)", BUS[1], 143771, 1),
        fakenode.health("arch", 1, 9),
        fakenode.health("remap", 0, 1, 1, 1, 1),
    ])
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    bad = fakenode.write_config(str(tmp_path / "bad.cfg"), [], init_error=9)
    no_field = fakenode.build_lib(os.path.join(ROOT, "build", "fakes", "no-recovery-field"), fakenode.DRIVERS["no-recovery-field"])
    playbook("gpu_health_info.yml", env, kmsg=str(kmsg), sysroot=str(tmp_path), no_field_lib=no_field, bad_config=bad)
    read = json.loads((tmp_path / "health.json").read_text())["read"]
    mig, hopper = read["gpus"]
    # remap counts are not queryable with MIG instances (even a failure flag set in the fake stays unseen)
    assert (mig["mig_mode"], mig["remapped_rows"]["supported"], mig["verdict"]["action"]) == ("enabled", False, "none")
    # a Hopper GPU has no retired pages (as the lent H200 answered), and remap counts it has
    assert (hopper["retired_pages"]["supported"], hopper["remapped_rows"]["supported"]) == (False, True)
    assert read["gpus_expected"] == 4 and read["verdict"]["action"] == "reboot"  # 2 seen, 4 expected (the playbook's)


def test_the_journal_is_read_first_and_only_the_kernels_lines_count(fake_node, playbook, tmp_path):
    """kernel_log auto: journalctl -k -b -o json (tests/fakes/fake_journalctl.py, journald's JSON export of the records),
    where a line a process wrote to /dev/kmsg (facility 1) is recorded as such and never counts."""
    env = fake_node(records())
    journal = tmp_path / "journal.kmsg"
    journal.write_text(KMSG + "11,300,7000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n")
    env["GPUOPS_FAKE_JOURNAL"] = str(journal)
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    bad = fakenode.write_config(str(tmp_path / "bad.cfg"), [], init_error=9)
    no_field = fakenode.build_lib(os.path.join(ROOT, "build", "fakes", "no-recovery-field"), fakenode.DRIVERS["no-recovery-field"])
    playbook("gpu_health_info.yml", env, kmsg=str(kmsg), sysroot=str(tmp_path), no_field_lib=no_field, bad_config=bad, health_kernel_log="auto")
    read = json.loads((tmp_path / "health.json").read_text())["read"]
    assert (read["kernel_log"]["source"], read["kernel_log"]["records"]) == ("journal", 8)  # the forged record is not one
    assert [x["code"] for x in read["gpus"][1]["xids"]] == [119, 154] and read["gpus"][0]["xids"] == []
    assert read["gpus"][0]["verdict"]["action"] == "observe"  # GPU 0: its HW slowdown bits only, not the forged XID 79
