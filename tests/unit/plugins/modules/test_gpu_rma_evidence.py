# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_rma_evidence run by ansible-playbook on a fake node: each GPU's serial and board part number through unmodified
pynvml, this boot's XIDs as the driver printed them (a real-format /dev/kmsg log), nvidia-smi -q, the NVML counters, the
bug report only where allowed and never in check mode, every byte under the cap and nothing of the kernel log but the
NVRM XID lines."""

from __future__ import annotations

import json
import os
import shutil
import stat

import fakenode

G = ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0", "GPU-11111111-2222-3333-4444-555555555555"]
BUS = ["00000000:3B:00.0", "00000000:5E:00.0"]
SECRET = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
KMSG_LINES = [
    "6,100,700000,-;NVRM: GPU at PCI:0000:3b:00: %s" % G[0],
    "6,101,700001,-;NVRM: GPU at PCI:0000:5e:00: %s" % G[1],
    "6,150,800000,-;systemd[1]: Started session with %s" % SECRET,  # the kernel log holds more than the driver's lines
    "3,200,5000000,-;NVRM: Xid (PCI:0000:5e:00): 48, pid=4242, name=python, An uncorrectable double bit error (DBE) has been detected",
    "3,201,5000001,-;NVRM: Xid (PCI:0000:5e:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
]


def test_the_evidence_holds_the_serials_and_this_boots_xids_under_the_cap(fake_node, playbook, tmp_path):
    many = ["3,%d,%d,-;NVRM: Xid (PCI:0000:5e:00): 13, pid=%d, name=python, Graphics Exception: ESR 0x%x" % (300 + i, 6000000 + i, 5000 + i, i)
            for i in range(400)]  # an XID storm: more than the cap holds
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("\n".join(KMSG_LINES + many) + "\n")
    env = fake_node([
        fakenode.gpu(G[0], fakenode.A100, BUS[0], 40960, 0), fakenode.gpu(G[1], fakenode.A100, BUS[1], 40960, 1),
        "board|0|1652020012345|692-2G506-0200-002", "board|1|1652020067890|692-2G506-0200-002",
        fakenode.health("recovery", 1, 1), fakenode.health("ecc", 1, 0, 3, 0, 7), fakenode.health("remap", 1, 0, 2, 1, 0)])
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "nvidia-bug-report.sh"
    tool.write_text('#!/bin/sh\n# as NVIDIA\'s: --output-file NAME writes NAME.gz\n[ "$1" = --output-file ] || exit 2\n'
                    'printf "nvidia-bug-report (SIMULATED)" | gzip > "$2.gz"\n')
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    env["PATH"] = str(bindir) + os.pathsep + env["PATH"]
    ok, changed, out = playbook("gpu_rma_evidence.yml", env, kmsg=str(kmsg), target=G[1], bug_dir=str(tmp_path / "evidence"))
    got = json.loads((tmp_path / "evidence.json").read_text())

    check = got["in_check"]
    assert not check["changed"] and check["evidence"]["bug_report"] == {"skipped": "check mode: nvidia-bug-report.sh writes a file"}
    ev = got["collected"]["evidence"]
    assert got["collected"]["changed"]  # the bug report's archive was written
    assert [(g["uuid"], g["serial"], g["board_part_number"], g["target"]) for g in ev["gpus"]] == [
        (G[0], "1652020012345", "692-2G506-0200-002", False), (G[1], "1652020067890", "692-2G506-0200-002", True)]
    assert ev["gpus"][1]["recovery_action"]["value"] == 1 and ev["gpus"][1]["ecc"]["volatile_dbe"] == 3
    assert ev["gpus"][1]["remapped_rows"]["uncorrectable"] == 2
    # the cap: the oldest XIDs go first, what was cut is said, and the whole is under it
    assert len(json.dumps(ev, sort_keys=True)) <= 20000 and ev["bytes"] <= 20000 and ev["truncated"], ev["truncated"]
    assert ev["xids"][-1]["line"].endswith("ESR 0x18f") and all(x["code"] == 13 for x in ev["xids"])
    assert any(t.startswith("xids: the ") for t in ev["truncated"])
    # nvidia-smi -q is cut first (the NVML counters and serials above hold what it says of the ticket's GPU)
    assert ev["truncated"][0].startswith("nvidia_smi_q: ") and "[... cut: the evidence is capped at 20000 bytes]" in ev["nvidia_smi_q"]
    bug = ev["bug_report"]
    assert bug["path"] == str(tmp_path / "evidence" / ("nvidia-bug-report-%s.log.gz" % ev["boot_id"][:36]))
    assert bug["bytes"] == os.path.getsize(bug["path"]) and len(bug["sha256"]) == 64

    plain = got["plain"]["evidence"]
    assert not got["plain"]["changed"] and plain["bug_report"] == {"skipped": "not allowed (bug_report: false)"}
    assert [(x["code"], x["bus"]) for x in plain["xids"][:2]] == [(48, "0000:5e:00"), (154, "0000:5e:00")]
    assert plain["xids"][0]["line"].startswith("NVRM: Xid (PCI:0000:5e:00): 48, pid=4242")
    assert "Serial Number                         : 1652020067890" in plain["nvidia_smi_q"]
    assert "Board Part Number                     : 692-2G506-0200-002" in plain["nvidia_smi_q"]
    assert not plain["truncated"] and plain["bytes"] <= 262144
    # nothing of the kernel log but the driver's XID lines left the node
    assert SECRET not in json.dumps(got)

    assert got["too_small"]["failed"] and "max_bytes" in got["too_small"]["msg"]


def test_on_a_gpu_operator_node_the_evidence_runs_the_drivers_own_nvidia_smi(fake_node, fake_lib_dir, playbook, tmp_path):
    """Issue 59, item 4: the driver's tools are found one way (hostroot.driver_tool), as gpu_reset finds them: on a GPU
    Operator node nvidia-smi is only under the driver root (/run/nvidia/driver/usr/bin), and before, the evidence looked on
    PATH only, so its nvidia-smi -q was always missing there."""
    root = tmp_path / "run/nvidia/driver"
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "usr/bin").mkdir(parents=True)
    shutil.copy(os.path.join(fake_lib_dir, "libnvidia-ml.so.1"), str(root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"))
    shutil.copy(os.path.join(fake_lib_dir, "nvidia-smi"), str(root / "usr/bin/nvidia-smi"))
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("\n".join(KMSG_LINES) + "\n")
    env = fake_node([fakenode.gpu(G[0], fakenode.A100, BUS[0], 40960, 0), fakenode.gpu(G[1], fakenode.A100, BUS[1], 40960, 1),
                     "board|0|1652020012345|692-2G506-0200-002", "board|1|1652020067890|692-2G506-0200-002"])
    # the host has neither the library nor nvidia-smi: only the driver root does
    env["PATH"] = os.pathsep.join(d for d in env["PATH"].split(os.pathsep) if d != fake_lib_dir)
    env["LD_LIBRARY_PATH"] = ""
    playbook("gpu_rma_evidence.yml", env, kmsg=str(kmsg), target=G[1], bug_dir=str(tmp_path / "evidence"), driver_root=str(root))
    got = json.loads((tmp_path / "evidence.json").read_text())
    operator, plain = got["operator"]["evidence"], got["plain"]["evidence"]
    assert operator["available"] and [g["serial"] for g in operator["gpus"]] == ["1652020012345", "1652020067890"], operator
    assert operator["nvidia_smi_reason"] is None and "Serial Number                         : 1652020067890" in operator["nvidia_smi_q"]
    # without the driver root, the same node has neither
    assert not plain["available"] and plain["nvidia_smi_q"] is None
    assert plain["nvidia_smi_reason"] == "nvidia-smi is not on the node (PATH, or driver_root's usr/bin)"
