# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kernel-log reader of gpu_health_info: real NVRM line formats, the join by PCI bus ID, and hostile input."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import decision as hd
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import xid_catalog
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._node.health import kernel_log as kl

G0 = "GPU-6278628a-0ac1-641a-0b97-75ef410be003"
G1 = "GPU-11111111-2222-3333-4444-555555555555"
# (NVML's PCI bus ID, the driver's lines)
GPUS = [{"uuid": G0, "pci_bus_id": "00000000:3B:00.0"}, {"uuid": G1, "pci_bus_id": "00000000:07:00.0"}]
# Lines as the driver prints them: the XID docs, NVSentinel design 020, the issues quoted in the spec, and the
# lent H200's /dev/kmsg records (hack/real-gpu/h200-2026-11-26-health-probe.json) for the record format
KMSG = b"""3,355,648750,-;NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)
6,356,700000,-;NVRM: GPU at PCI:0000:3b:00: GPU-6278628a-0ac1-641a-0b97-75ef410be003
6,357,700001,-;NVRM: GPU at PCI:0000:07:00: GPU-11111111-2222-3333-4444-555555555555
4,358,1279435,c;NVRM: Persistence mode is deprecated and will be removed in a future release. Please use nvidia-persistenced instead.
3,400,5000000,-;NVRM: Xid (PCI:0000:07:00 GPU-I:05): 43, pid=20211, name=python3, Ch 00000008
3,401,6000000,-;NVRM: Xid (PCI:0000:3b:00): 119, pid=1582259, name=pt_main_thread, Timeout after 6s of waiting for RPC response from GPU1 GSP!.
 SUBSYSTEM=pci
 DEVICE=+pci:0000:3b:00.0
3,402,6000001,-;NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)
3,403,7000000,-;NVRM: Xid (PCI:0000:07:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
3,404,7000001,-;NVRM: GPU 0000:07:00.0: GPU has fallen off the bus.
"""


def parsed(data=KMSG, **kwargs):
    return kl.parse(kl.records_from_kmsg_text(data), **kwargs)


def test_real_line_formats_are_read():
    result = parsed()
    assert result["bus_uuid"] == {"0000:3b:00": G0, "0000:07:00": G1}
    assert [(x["code"], x["bus"], x["gpu_instance"], x["pid"], x["process"]) for x in result["xids"]] == [
        (43, "0000:07:00", 5, 20211, "python3"),
        (119, "0000:3b:00", None, 1582259, "pt_main_thread"),
        (154, "0000:3b:00", None, None, None),
        (79, "0000:07:00", None, None, "<unknown>"),
    ]
    assert result["xids"][2]["recovery_action"] == 1
    assert result["xids"][1]["usec"] == 6000000 and result["xids"][1]["bucket"] == "RESET_GPU"
    assert result["fallen_off"] == {"0000:07:00"}


def test_xids_join_their_gpu_by_bus_id_and_a_forged_bus_joins_none():
    data = KMSG + b"3,500,8000000,-;NVRM: Xid (PCI:0000:99:00): 48, pid=1, name=x, DBE on a bus no GPU has\n"
    gpus = [dict(g) for g in GPUS]
    unattributed = kl.attach(parsed(data), gpus)
    assert [x["code"] for x in gpus[0]["xids"]] == [119, 154]
    assert [x["code"] for x in gpus[1]["xids"]] == [43, 79]
    assert gpus[1]["fallen_off_bus"] and not gpus[0]["fallen_off_bus"]
    assert [(x["code"], x["bus"]) for x in unattributed] == [(48, "0000:99:00")]


def test_a_line_written_to_kmsg_by_a_process_is_not_the_kernels():
    # facility 1 (user) << 3 | level 3: what `echo ... > /dev/kmsg` gives
    forged = b"11,600,9000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, forged by a process\n"
    assert parsed(forged)["xids"] == []
    journal = "\n".join(json.dumps(e) for e in [
        {"MESSAGE": "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, forged", "SYSLOG_FACILITY": "1", "_TRANSPORT": "kernel",
         "__MONOTONIC_TIMESTAMP": "9"},
        {"MESSAGE": "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=x, real", "SYSLOG_FACILITY": "0", "_TRANSPORT": "kernel",
         "__MONOTONIC_TIMESTAMP": "10"},
    ])
    assert [(x["code"], x["usec"]) for x in kl.parse(kl.records_from_journal(journal))["xids"]] == [(13, 10)]


def test_an_xid_inside_another_lines_text_is_not_a_line():
    # a process name or message that carries an XID line's text: only a message that starts with NVRM: is read
    inner = b"3,700,1,-;foo: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    assert parsed(inner)["xids"] == []


def test_hostile_lines_never_crash_or_misattribute():
    huge = b"3,800,1,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=" + b"A" * 1000000 + b"\n"
    binary = b"3,801,2,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=1, name=\xff\xfe\x80, bad bytes\n"
    garbage = b"\x00\x01;;;,,,\nnot a record\n3,x,y,-;NVRM: Xid (PCI:0000:3b:00): 13\n"
    big_code = b"3,802,3,-;NVRM: Xid (PCI:0000:3b:00): 99999, pid=1\n"
    result = parsed(huge + binary + garbage + big_code)
    assert [x["code"] for x in result["xids"]] == [13, 31]
    assert all(len(x["line"]) <= kl.MAX_LINE_REPORTED for x in result["xids"])
    journal = json.dumps({"MESSAGE": list(b"NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=\xff, x"), "__MONOTONIC_TIMESTAMP": "5"})
    assert [x["code"] for x in kl.parse(kl.records_from_journal(journal + "\nnot json\n[1,2]\n"))["xids"]] == [13]


def test_xids_before_the_last_remediation_in_this_boot_are_not_counted(tmp_path):
    mark = tmp_path / "mark.json"
    mark.write_text(json.dumps({"boot_id": "b1", "usec": 6000000}))  # the first form: every GPU
    assert kl.read_marks("b1", str(mark)) == {"*": 6000000}
    result, gpus = parsed(), [dict(g) for g in GPUS]
    kl.attach(result, gpus, kl.read_marks("b1", str(mark)))
    assert [x["code"] for g in gpus for x in g["xids"]] == [154, 79] and result["ignored_before_mark"] == 2
    assert kl.read_marks("another-boot", str(mark)) == {}
    mark.write_text("{not json")
    assert kl.read_marks("b1", str(mark)) == {}


def test_a_mark_is_written_atomically_per_gpu_and_only_that_gpus_older_xids_are_dealt_with(tmp_path):
    """Issue 48, item 9: gpu_reset writes each reset GPU's mark (``write_mark``); the next read drops that GPU's XIDs logged
    up to it, and keeps the other GPUs' and the later ones. Another boot's marks are dropped at the next write."""
    mark = str(tmp_path / "health" / "last-remediation.json")
    kl.write_mark("b0", [G1], 1, mark)
    assert kl.write_mark("b1", [GPUS[0]["uuid"]], 6000000, mark) == {GPUS[0]["uuid"].lower(): 6000000}
    with open(mark) as handle:
        assert json.load(handle)["version"] == 2 and oct(os.stat(mark).st_mode & 0o777) == "0o644"
    gpus = [dict(g) for g in GPUS]
    result = parsed()
    kl.attach(result, gpus, kl.read_marks("b1", mark))
    assert [x["usec"] > 6000000 for x in gpus[0]["xids"]] == [True] * len(gpus[0]["xids"])
    assert gpus[0]["xids_before_mark"] == result["ignored_before_mark"] > 0 and "xids_before_mark" not in gpus[1]
    kl.write_mark("b1", [G1], 7000000, mark)
    assert kl.read_marks("b1", mark) == {GPUS[0]["uuid"].lower(): 6000000, G1.lower(): 7000000}


def test_a_lost_gpu_gets_the_one_bus_the_driver_named_that_no_readable_gpu_has():
    gpus = [dict(GPUS[0]), {"uuid": None, "pci_bus_id": None, "state": "lost"}]
    kl.attach(parsed(), gpus)
    assert (gpus[1]["uuid"], gpus[1]["uuid_source"]) == (G1, "kernel_log")
    assert [x["code"] for x in gpus[1]["xids"]] == [43, 79] and gpus[1]["fallen_off_bus"]


def test_dmesg_lines_are_read_with_their_time():
    result = parsed(b"[    6.000001] NVRM: Xid (PCI:0000:3b:00): 62, pid=7, name=x, 0000(0000)\n")
    assert [(x["code"], x["usec"]) for x in result["xids"]] == [(62, 6000001)]


@pytest.mark.parametrize("value", [{"9999": "RESET_GPU"}, {"abc": "RESET_GPU"}, {"109": "REBOOT_PLEASE"}, ["109"]])
def test_an_override_outside_the_catalog_names_the_option(value):
    with pytest.raises(ParameterError) as info:
        xid_catalog.check_overrides("xid_overrides", value)
    assert str(info.value).startswith("xid_overrides: ")


def test_overrides_from_a_survey_are_read_and_win():
    overrides = xid_catalog.check_overrides("xid_overrides", {"109": "IGNORE"})
    assert overrides == {109: "IGNORE"}
    assert parsed(b"3,1,1,-;NVRM: Xid (PCI:0000:3b:00): 109, pid=1\n", overrides=overrides)["xids"][0]["bucket"] == "IGNORE"


def test_every_bucket_is_decided_by_the_table_and_no_code_is_in_two():
    codes = [c for cs in xid_catalog.BUCKETS.values() for c in cs]
    assert len(codes) == len(set(codes))
    seen = {}
    for name in xid_catalog.BUCKET_NAMES:
        gpu = {"state": "ok", "recovery_action": {"source": "unsupported"}, "remapped_rows": {"supported": True},
               "xids": [{"code": 999, "bucket": name, "usec": 1}], "architecture": 8}
        seen[name] = hd.decide_gpu(gpu)["action"]
    assert seen == {
        "RESTART_APP": "observe", "IGNORE": "observe", "WORKFLOW_XID_45": "observe", "XID_154": "observe",
        "RESET_GPU": "reset", "WORKFLOW_XID_48": "reset", "WORKFLOW_NVLINK_ERR": "reset", "WORKFLOW_NVLINK5_ERR": "reset",
        "RESTART_BM": "reboot", "RESTART_VM": "reboot",
        "CHECK_MECHANICALS": "investigate", "UPDATE_SWFW": "investigate", "CHECK_UVM": "investigate", "UNKNOWN": "investigate",
    }


def xid_line(seq, code, usec, bus="3b"):
    return b"3,%d,%d,-;NVRM: Xid (PCI:0000:%s:00): %d, pid=%d, name=app, text\n" % (seq, usec, bus.encode(), code, 1000 + seq)


def test_a_flood_of_routine_xids_never_hides_a_later_xid_48_and_what_is_dropped_reaches_the_verdict():
    """Issue 48, item 11: the parser kept the first 200 XIDs per GPU, so 200 killed applications' XID 45s hid a later XID 48
    (the verdict observe, not reset). Now every XID that asks for an action is kept, and the newest routine ones."""
    data = b"".join(xid_line(i, 45, 1000 + i) for i in range(250)) + xid_line(999, 48, 900000)
    gpus = [dict(GPUS[0], state="ok", recovery_action={"value": None, "source": "unsupported"}, remapped_rows={"supported": True},
                 retired_pages={}, ecc={}, nvlink={})]
    kl.attach(kl.parse(kl.records_from_kmsg_text(data)), gpus)
    codes = [x["code"] for x in gpus[0]["xids"]]
    assert codes.count(48) == 1 and codes.count(45) == kl.MAX_XIDS_PER_GPU and gpus[0]["xids_dropped"] == 50
    assert gpus[0]["xids"][0]["usec"] == 1050  # the newest routine lines, in the log's order
    verdict = hd.decide_gpu(gpus[0])
    assert (verdict["action"], verdict["row"]) == ("reset", 11), verdict
    assert "50 more XID lines of this GPU were logged than kept" in verdict["reasons"][-1]


def test_a_saved_log_larger_than_the_cap_is_read_from_its_end_and_says_so(tmp_path, monkeypatch):
    """The file source read only the first 64 MiB, silently: an XID at the end of a larger log was missed. Now the last
    MAX_FILE bytes are read (here 4 KiB, the same code), and the reason says so."""
    path = tmp_path / "kern.log"
    path.write_bytes(b"".join(xid_line(i, 13, 100 + i) for i in range(200)) + xid_line(500, 79, 999999))
    monkeypatch.setattr(kl, "MAX_FILE", 4096)
    records, source, why = kl.read("file", None, str(path))
    found = kl.parse(records)["xids"]
    assert source == "file" and found[-1]["code"] == 79 and len(found) < 200
    assert why == "%s is %d bytes: only its last 4096 were read (the newest lines)" % (path, path.stat().st_size)
