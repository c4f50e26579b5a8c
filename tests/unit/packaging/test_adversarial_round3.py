# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 48's adversarial pass over the surfaces a node or a tampered object feeds: the ledger ConfigMap, the kernel log
and the remediation mark, the exec stream's status, the approved plan. Seeded, so each run tries the same inputs; each
surface may answer only with its own typed error (LedgerError, ApprovalError) or a result, never another exception. The
plan's edge has its own pass (tests/unit/plugins/module_utils/_cluster/test_node_facts.py). The counts are the closing
note's figures."""

from __future__ import annotations

import json
import random

import pytest
from hostile_values import VALUES, mutations

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import approval
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import marks
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import plan as rp
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import decision as hd
from ansible_collections.gpuops.fleet.plugins.module_utils._node.health import kernel_log as kl
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _pod_stream as pod_stream

NOW = 1800000000


def _ledger():
    return {"version": 1, "paused": False,
            "breaker": {"state": "tripped", "reason": "same signal", "keys": ["xid:48"], "at": NOW - 10, "reset_reason": None, "reset_at": None},
            "entries": [{"node": "a", "gpus": ["GPU-1"], "action": "reset", "keys": ["xid:48"], "driver_version": "535", "at": NOW - 60,
                         "closed_at": None, "result": None, "run": "1"},
                        {"node": "b", "gpus": ["GPU-2"], "action": "reboot", "keys": [], "driver_version": None, "at": NOW - 99,
                         "closed_at": NOW - 50, "result": "rebooted", "run": None, "recover_seconds": 49}]}


def test_the_ledger_answers_every_tampered_configmap_with_a_ledger_or_a_ledger_error():
    tried = errors = 0
    rng = random.Random(48)
    docs = [doc for dummy, dummy2, doc in mutations(_ledger())]
    noise = ['{}[],:"0123456789aeflnrstu '[rng.randrange(26)] * rng.randint(1, 3) for dummy in range(30000)]
    texts = [json.dumps(d) for d in docs] + ["".join(noise[i * 60:i * 60 + rng.randint(0, 60)]) for i in range(500)]
    # a JSON number of 5,000 digits (json.loads refuses it past int()'s 4,300): a ledger that cannot be read, never an exception
    texts.append('{"version": 1, "breaker": {"state": "closed"}, "entries": [{"node": "a", "at": %s}]}' % ("9" * 5000))
    for text in texts:
        tried += 1
        try:
            ledger = ledgers.parse({"data": {ledgers.KEY: text}}, "ConfigMap ns/gpuops-remediation-ledger")
        except ledgers.LedgerError as exc:
            errors += 1
            assert str(exc).startswith("ConfigMap ns/gpuops-remediation-ledger"), exc
            continue
        # what reads a ledger: the plan's breakers, capacity and repeat rule, a release's entry, the write back
        rp._in_flight({}, ledger, NOW)
        marks.open_entry(ledger, "a")
        rp.plan([{"node": "a", "host": "a", "health": {}, "entries": []}], [], [], [], ledger, {}, NOW)
        try:
            ledgers.dump(ledger)
        except ledgers.LedgerError:
            errors += 1
    assert tried > 1000
    print("adversarial pass, the ledger: %d inputs, %d LedgerError, 0 other exceptions" % (tried, errors))


GPU = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"


def test_the_kernel_log_and_the_mark_read_any_bytes_without_an_exception(tmp_path):
    rng = random.Random(4848)
    pieces = [b"NVRM: Xid (PCI:0000:3b:00): ", b"48", b"13", b"154", b", pid=", b"'<unknown>'", b"123", b", name=", b"\xff\xfe",
              b"GPU recovery action changed from 0x0 (None) to 0x", b"1 (GPU Reset Required)", b"\n", b"3,", b",", b";", b"[ 12.5] ",
              b"NVRM: GPU at PCI:0000:3b:00: " + GPU.encode(), b" GPU-I:", b"\x00", b"9" * 30]
    tried = 0
    mark = tmp_path / "mark.json"
    for dummy in range(1500):
        data = b"".join(rng.choice(pieces) for dummy2 in range(rng.randint(0, 60)))
        tried += 1
        records = kl.records_from_kmsg_text(data) + kl.records_from_journal(data.decode("utf-8", "replace"))
        gpus = [{"uuid": GPU, "pci_bus_id": "00000000:3B:00.0", "state": "ok", "recovery_action": {"value": None, "source": "unsupported"},
                 "remapped_rows": {"supported": False}, "retired_pages": {}, "ecc": {}, "nvlink": {}}]
        mark.write_bytes(data[:200])
        kl.attach(kl.parse(records), gpus, kl.read_marks("b1", str(mark)))
        hd.decide_node({"available": True, "gpus": [dict(gpus[0], verdict=hd.decide_gpu(gpus[0]))]})
    for value in VALUES[1:]:
        tried += 1
        mark.write_text(json.dumps({"version": 2, "boot_id": "b1", "gpus": {GPU: value}}))
        assert all(isinstance(v, int) for v in kl.read_marks("b1", str(mark)).values())
    print("adversarial pass, the kernel log and the mark: %d inputs, 0 exceptions" % tried)


@pytest.mark.skipif(pod_stream.unsupported() is not None, reason=str(pod_stream.unsupported()))
def test_the_exec_streams_status_reads_any_frame_without_an_exception():
    rng = random.Random(484848)
    base = {"status": "Failure", "reason": "NonZeroExitCode", "message": "m", "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}
    frames = [json.dumps(doc).encode() for dummy, dummy2, doc in mutations(base)]
    frames += [bytes(rng.randrange(256) for dummy in range(rng.randint(0, 80))) for dummy2 in range(500)]
    for frame in frames:
        rc, why = pod_stream.exit_status(frame)
        assert rc is None or (isinstance(rc, int) and 0 <= rc <= 255), (frame, rc)
        assert rc is not None or why, frame
    print("adversarial pass, the exec stream's status: %d inputs, 0 exceptions" % len(frames))


def test_the_approved_plan_answers_every_tampered_pin_with_a_hold_or_an_approval_error():
    targets = [{"host": "h1", "node": "n1", "action": "reset", "step": "reset", "escalate": False,
                "row": {"gpus": [GPU], "targets": [GPU], "evictions": [{"pod": "ml/a", "uid": "u1", "evict": True}]}}]
    pin = approval.pin(targets, "remediate", NOW)
    tried = refused = 0
    for dummy, dummy2, doc in mutations(pin):
        for fixed in (False, True):  # as it came, and with a digest made to match (the checks past the digest)
            if fixed and isinstance(doc, dict):
                doc = dict(doc, digest=approval.digest(doc))
            tried += 1
            try:
                act, dummy = approval.hold(targets, doc, NOW)
            except approval.ApprovalError:
                refused += 1
                continue
            assert act in ([], targets)
    print("adversarial pass, the approved plan: %d inputs, %d refused whole, 0 other exceptions" % (tried, refused))
