# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU health decision table (``_common/health_decision.py``) against the table written out here.

``expected`` restates ``../shared/specs/gpu-health.md`` B4, with the departures the module documents (NVML
before the log), as plainly as it can be said; the matrix runs every XID of the spec's U1 test against every
recovery-action value (and "unsupported"), every remap state and every GPU state."""

from __future__ import annotations

import itertools

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import decision as hd
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import xid_catalog

XIDS = (None, 13, 31, 43, 45, 48, 63, 64, 74, 79, 94, 95, 109, 119, 120, 154)
RECOVERY = (None, 0, 1, 2, 3, 4, 5, 6, 7)  # None: field 230 not supported by the driver
REMAP = ("clean", "pending", "failure")
STATES = ("ok", "lost", "reset_required")
UUID = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"


def gpu(xid=None, recovery=None, remap="clean", state="ok", xid154_to=1, **more):
    xids = []
    if xid is not None:
        xids.append({"code": xid, "bucket": xid_catalog.bucket(xid), "usec": 5000000})
    record = {
        "uuid": UUID, "index": 0, "state": state, "architecture": 7,
        "recovery_action": {"value": recovery, "source": "unsupported" if recovery is None else "nvml_field"},
        "remapped_rows": {"supported": True, "pending": remap == "pending", "failure": remap == "failure"},
        "retired_pages": {"supported": True, "pending": False},
        "ecc": {"volatile_dbe": 0},
        "nvlink": {"links": []},
        "xids": xids,
    }
    if xid == 154 and recovery is None:  # what gpu_health does with the last XID 154 line when field 230 is unsupported
        record["recovery_action"] = {"value": xid154_to, "source": "xid154_log"}
    record.update(more)
    return record


def expected(xid, recovery, remap, state):
    """(action, row) by the table, first match wins."""
    if state == "lost":
        return "reboot", 2
    if remap == "failure":
        return "replace", 3
    if state == "reset_required":
        return "reset", 5
    field_read = recovery is not None
    if recovery is None and xid == 154:
        recovery = 1  # the line said "to 0x1 (GPU Reset Required)"
    if recovery is not None:
        by_value = {2: ("reboot", 4), 7: ("reboot", 4), 1: ("reset", 5), 4: ("reset", 6), 3: ("reset", 7), 6: ("reset", 8),
                    5: ("investigate", 9)}
        if recovery in by_value:
            return by_value[recovery]
    if not field_read and xid is not None:
        if xid == 79:
            return "reboot", 2
        if xid in (64, 95, 109, 119, 120):  # the catalog's RESET_GPU among the matrix's XIDs
            return "reset", 10
        if xid == 48:
            return "reset", 11
        if xid == 74:
            return "reset", 12
    if remap == "pending":
        return "reset", 16
    if xid is not None:
        return "observe", 18
    return "none", 0


@pytest.mark.parametrize("xid,recovery,remap,state", list(itertools.product(XIDS, RECOVERY, REMAP, STATES)))
def test_the_table_gives_each_combination_its_row(xid, recovery, remap, state):
    verdict = hd.decide_gpu(gpu(xid, recovery, remap, state))
    assert (verdict["action"], verdict["row"]) == expected(xid, recovery, remap, state), verdict
    assert verdict["scope"] == {"reboot": "node", "replace": "node", "investigate": "node", "reset": "gpu"}.get(verdict["action"])


def test_field_230_wins_over_an_xid_bucket():
    # XID 119 (RESET_GPU) since boot, but NVML says NONE now: a reset already cleared it
    assert hd.decide_gpu(gpu(119, recovery=0))["action"] == "observe"
    # the same XID with the field unsupported: the bucket decides
    assert hd.decide_gpu(gpu(119, recovery=None))["action"] == "reset"
    # XID 13 (RESTART_APP) but NVML says reboot: the field decides
    assert (hd.decide_gpu(gpu(13, recovery=2))["action"], hd.decide_gpu(gpu(13, recovery=2))["row"]) == ("reboot", 4)


def test_xid_154_text_is_read_only_where_field_230_is_unsupported():
    with_field = gpu(154, recovery=0)
    with_field["xids"][0]["recovery_action"] = 2
    assert hd.decide_gpu(with_field)["action"] == "observe"  # the field (NONE) wins
    assert hd.decide_gpu(gpu(154, recovery=None, xid154_to=2))["row"] == 4


def test_a_node_whose_nvml_cannot_be_read_gets_no_verdict():
    verdict = hd.decide_node({"available": False, "reason": "NVML initialisation failed: Unknown Error", "gpus": [gpu(79, state="lost")]})
    assert (verdict["state"], verdict["action"], verdict["row"]) == ("unknown", "none", 1)
    assert "Unknown Error" in verdict["reasons"][0]


def test_an_unreadable_gpu_gets_no_verdict_and_the_others_still_do():
    bad = gpu(state="unreadable", error="nvmlDeviceGetUUID: Unknown Error")
    good = gpu(recovery=1, uuid="GPU-11111111-2222-3333-4444-555555555555")
    assert hd.decide_gpu(bad)["action"] == "none"
    node = hd.decide_node({"available": True, "gpus": [bad, good]})
    assert (node["action"], node["gpus"]) == ("reset", ["GPU-11111111-2222-3333-4444-555555555555"])


def test_the_node_takes_its_most_severe_gpu_and_names_it():
    other = "GPU-11111111-2222-3333-4444-555555555555"
    node = hd.decide_node({"available": True, "gpus": [gpu(recovery=1), gpu(remap="failure", uuid=other)]})
    assert (node["state"], node["action"], node["scope"], node["gpus"]) == ("faulty", "replace", "node", [other])
    assert set(s["gpu"] for s in node["signals"]) == {UUID, other}


def test_fewer_gpus_than_expected_is_a_reboot():
    node = hd.decide_node({"available": True, "gpus": [gpu()], "gpus_seen": 7, "gpus_expected": 8})
    assert (node["action"], node["row"]) == ("reboot", 2)
    assert [s["key"] for s in node["signals"]] == ["count_mismatch"]


def test_fabric_manager_down_on_an_nvswitch_node_is_investigated():
    node = hd.decide_node({"available": True, "gpus": [gpu()], "nvswitch": True, "fabric_manager": "failed"})
    assert (node["action"], node["row"]) == ("investigate", 15)
    assert hd.decide_node({"available": True, "gpus": [gpu()], "nvswitch": False, "fabric_manager": None})["action"] == "none"


def test_a_pending_remap_asks_for_a_reset_that_never_evicts():
    verdict = hd.decide_gpu(gpu(remap="pending", recovery=0))
    assert (verdict["action"], verdict["row"], verdict.get("opportunistic")) == ("reset", 16, True)


def test_xid_31_twice_within_a_day_on_one_gpu_is_investigated_and_not_once_or_a_day_apart():
    day = hd.DAY_USEC
    twice = gpu(recovery=0, xids=[{"code": 31, "bucket": "RESTART_APP", "usec": 10, "pid": 100},
                                  {"code": 31, "bucket": "RESTART_APP", "usec": 20, "pid": 200}])
    apart = gpu(recovery=0, xids=[{"code": 31, "bucket": "RESTART_APP", "usec": 10, "pid": 100},
                                  {"code": 31, "bucket": "RESTART_APP", "usec": 10 + day + 1, "pid": 200}])
    assert hd.decide_gpu(twice)["action"] == "investigate"
    assert hd.decide_gpu(apart)["action"] == "observe"


@pytest.mark.parametrize("code", [13, 31])
def test_one_application_crash_logged_as_a_burst_of_lines_is_one_fault_and_no_node_action(code):
    """Issue 48, item 10: the driver logs one fault as several lines of the same GPU, code and PID, microseconds apart (XID
    13's SM warp exception, global exception and ESR). Counted by lines that was 'XID 13 repeated on this GPU within 24 h':
    investigate, a node-scoped cordon and taint, where NVIDIA's catalog says RESTART_APP. A second crash (another process,
    or the same one later than the window) is a second fault."""
    burst = [{"code": code, "bucket": "RESTART_APP", "usec": 5000000 + i * 7, "pid": 4242} for i in range(3)]
    verdict = hd.decide_gpu(gpu(recovery=0, xids=burst))
    assert (verdict["action"], verdict["scope"]) == ("observe", None), verdict
    assert [s["value"] for s in verdict["signals"] if s["kind"] == "xid"] == [1]  # one fault, three lines
    other = burst + [{"code": code, "bucket": "RESTART_APP", "usec": 9000000, "pid": 777}]
    assert hd.decide_gpu(gpu(recovery=0, xids=other))["action"] == "investigate"
    later = burst + [{"code": code, "bucket": "RESTART_APP", "usec": 5000014 + hd.FAULT_WINDOW_USEC + 1, "pid": 4242}]
    assert hd.decide_gpu(gpu(recovery=0, xids=later))["action"] == "investigate"


def test_an_unknown_xid_is_a_question_for_a_person():
    verdict = hd.decide_gpu(gpu(recovery=None, xids=[{"code": 170, "bucket": xid_catalog.bucket(170), "usec": 1}]))
    assert (verdict["action"], verdict["row"]) == ("investigate", 14)


def test_nvlink_inactive_resets_with_peers_and_before_ampere_reboots():
    links = {"links": [{"link": 0, "active": False}]}
    assert hd.decide_gpu(gpu(recovery=0, nvlink=links))["peers"] is True
    assert hd.decide_gpu(gpu(recovery=0, nvlink=links, architecture=5))["action"] == "reboot"


def test_temperature_at_the_shutdown_threshold_is_investigated():
    assert hd.decide_gpu(gpu(recovery=0, temperature={"current": 92, "shutdown": 92}))["action"] == "investigate"
    assert hd.decide_gpu(gpu(recovery=0, temperature={"current": 91, "shutdown": 92}))["action"] == "none"
