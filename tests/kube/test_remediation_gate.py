# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gate before the release and the RMA evidence, through playbooks/gpu_remediation.yml in remediate mode on a real API
server (SIMULATED nodes and GPUs): a node with DCGM (the fake dcgmi on its PATH) whose diagnostic fails on the reset GPU is
not released - it stays quarantined, its report needs_human names the failing test and the gate that ran, and carries the
evidence a ticket asks for (each GPU's serial and board part number from the fake NVML, this boot's XIDs from a /dev/kmsg-
format kernel log, nvidia-smi -q), under the size cap, with nothing of the kernel log but the driver's XID lines."""

from __future__ import annotations

import json
import os

import fakenode
from test_gpu_health_plan import G
from test_gpu_quarantine import ledger, node_state, remediation_fleet
from test_gpu_quarantine import report as node_report

SECRET = "token=eyJhbGciOiJSUzI1NiIsImtpZCI6IkSIMULATED"


def test_a_failing_dcgm_diagnostic_keeps_the_node_quarantined_with_its_rma_evidence(fleet, fake_lib_dir):
    f, name, dummy, dummy2, extra = remediation_fleet(fleet, fake_lib_dir)
    cfg = f.tmp / "nodes" / name / "fake_nvml.cfg"
    with open(str(cfg), "a") as handle:
        handle.write("board|0|1652020012345|692-2G506-0200-002\nboard|1|1652020012346|692-2G506-0200-002\n"
                     "board|2|1652020012347|692-2G506-0200-002\n"
                     "dcgm_fail|0|GPU Memory|Memory errors detected on GPU 0 (SIMULATED)|83\n")
    kmsg = f.tmp / "nodes" / name / "kmsg"
    kmsg.write_text("6,100,700000,-;NVRM: GPU at PCI:0000:00:07: %s\n" % G[0]
                    + "4,120,800000,-;audit: kubelet started with %s\n" % SECRET
                    + "3,200,5000000,-;NVRM: Xid (PCI:0000:00:07): 13, pid=4242, name=python, Graphics SM Warp Exception\n"
                    + "3,201,5000001,-;NVRM: Xid (PCI:0000:00:07): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)\n")
    env = dict(f.hosts[name]["checkpoint_guard_environment"])
    env["PATH"] = fakenode.dcgm_dir(str(f.tmp / "dcgm")) + os.pathsep + env["PATH"]
    f.set_host_vars(name, checkpoint_guard_environment=env, gpuops_gpu_health_kernel_log="file", gpuops_gpu_health_kernel_log_path=str(kmsg))

    rc, run = f.play(dict(extra, gpu_remediation_mode="remediate", gpu_remediation_evidence_max_bytes=65536), playbook="gpu_remediation.yml")
    assert rc != 0, "the run went on past a failed diagnostic"
    # the reset ran (the recovery action is gone), then DCGM's level 2 diagnostic on GPU 0 only, which failed: not released
    assert "recovery|0|1" not in cfg.read_text()
    with open(str(cfg) + ".dcgmi-runs") as handle:
        assert handle.read().splitlines() == ["diag -r 2 -i 0 -j"]
    unschedulable, record, marked, taints = node_state(f, name)
    assert unschedulable and record is not None and taints, "the node was released"
    assert not [e for e in ledger(f)["entries"] if e["node"] == name][-1]["closed_at"]
    report = node_report(f, name)
    assert (report["outcome"], report["failed_step"], report["gate"]) == ("needs_human", "diag", "dcgm"), report
    assert "GPU Memory (Hardware) on GPU 0 (%s): Memory errors detected on GPU 0 (SIMULATED) (error 83)" % G[0] in report["error"]
    evidence = report["evidence"]
    assert report["evidence_error"] is None and evidence["bytes"] <= 65536 and not evidence["truncated"]
    assert [(g["uuid"], g["serial"], g["board_part_number"], g["target"]) for g in evidence["gpus"]] == [
        (G[0], "1652020012345", "692-2G506-0200-002", True), (G[1], "1652020012346", "692-2G506-0200-002", False),
        (G[2], "1652020012347", "692-2G506-0200-002", False)]
    assert [(x["code"], x["line"][:30]) for x in evidence["xids"]] == [
        (13, "NVRM: Xid (PCI:0000:00:07): 13"), (154, "NVRM: Xid (PCI:0000:00:07): 15")]
    assert "Serial Number                         : 1652020012345" in evidence["nvidia_smi_q"]
    assert evidence["bug_report"] == {"skipped": "not allowed (bug_report: false)"}
    assert SECRET not in json.dumps(report)
