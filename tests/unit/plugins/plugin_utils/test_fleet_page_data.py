# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet page's data (issue 61, item 3): what each report's row becomes, and the page's one rule for a node's text (its
JSON can never end the element that holds it). The page in a real browser: tests/lab/test_fleet_page_browser.py."""

from __future__ import annotations

import json
import re

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import outcome
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _fleet_page as pages

GPU = {"index": 1, "uuid": "GPU-b", "state": "faulty", "action": "reset", "reasons": ["recovery action GPU_RESET"], "recovery": "GPU_RESET",
       "xids": ["119 GSP RPC Timeout"]}


def _data(html):
    found = re.search(r'<script type="application/json" id="fleet-data">(.*?)</script>', html, re.S)
    return json.loads(found.group(1))


def test_a_health_row_becomes_its_gpus_cells_and_the_plan_and_remediation_say_the_nodes_state():
    rows = [{"node": "a", "state": "faulty", "action": "reset", "line": "a: faulty", "gpu_detail": [dict(GPU, index=0, state="ok", action="none"), GPU]},
            {"node": "b", "state": "unknown", "action": "none", "reason": "nvml: NVIDIA driver is not loaded", "gpu_detail": []},
            {"node": "c", "state": "faulty", "action": "reset", "gpus": ["GPU-c0"], "reasons": ["GPU-c0: recovery action GPU_RESET"]},
            {"node": "d", "state": "faulty", "action": "reset", "gpu_detail": [GPU]}]
    plan = {"nodes": [{"node": "a", "action": "reset", "batch": 1}, {"node": "d", "action": "reset", "deferred_reason": "deferred_capacity"}]}
    done = {"a": {"state": "released", "timeline": [{"step": "quarantine (1 pods evicted)", "at": "T1"}, {"step": "release", "at": "T2"}]}}
    nodes = dict((n["node"], n) for n in pages.health({"nodes": rows, "plan": plan}, done))
    assert [(c["gpu"], c["state"]) for c in nodes["a"]["gpus"]] == [("0", "ok"), ("1", "released")]  # the remediated GPU only
    assert nodes["a"]["state"] == "released" and [t["at"] for t in nodes["a"]["timeline"]] == ["T1", "T2"]
    assert nodes["b"]["gpus"] == [{"gpu": "-", "uuid": "", "state": "unknown", "action": "none", "reasons": ["nvml: NVIDIA driver is not loaded"],
                                   "xids": [], "recovery": ""}]  # a node whose GPUs were not read is still in the grid
    assert [(c["uuid"], c["state"]) for c in nodes["c"]["gpus"]] == [("GPU-c0", "faulty")]  # an older row: the GPUs its verdict names
    assert nodes["d"]["state"] == "deferred" and "deferred_capacity" in nodes["d"]["details"][1]
    with pytest.raises(pages.PageError):
        pages.health({"rows": []})


def test_a_site_row_is_its_checkpoints_state_on_each_gpu():
    summary = {"nodes": [{"node": "r", "status": "stale", "action": "pruned", "gpu_uuids": ["GPU-1", "GPU-2"]},
                         {"node": "s", "status": "stale", "action": "none", "planned_action": "pruned", "gpu_uuids": ["GPU-3"]},
                         {"node": "u", "status": "up_to_date", "action": "none", "gpu_uuids": []},
                         {"node": "x", "status": "no_result", "msg": "unreachable"}]}
    nodes = dict((n["node"], n) for n in pages.site(summary))
    assert [c["state"] for c in nodes["r"]["gpus"]] == ["repaired", "repaired"]
    assert nodes["s"]["state"] == "stale" and nodes["s"]["action"] == "pruned"  # check mode: what it would do
    assert nodes["u"]["gpus"][0]["state"] == "up_to_date" and nodes["x"]["state"] == "no_result"
    planned = dict((n["node"], n) for n in pages.site(dict(summary, check_mode=True)))
    assert planned["r"]["state"] == "stale" and planned["r"]["action"] == "pruned"  # check mode: the repair it would make


def test_no_text_can_end_the_data_element_and_every_text_is_cut():
    hostile = "</script><script>alert(1)</script><!--" + "&" * 10
    html = pages.render(pages.health({"nodes": [{"node": hostile, "state": "faulty", "reasons": ["x" * 1000], "gpu_detail": [GPU]}]}),
                        hostile, hostile, "playbooks/gpu_health.yml")
    assert html.count("</script>") == 2 and "<!--" not in html.split('id="fleet-data">')[1].split("</script>")[0]
    data = _data(html)
    assert data["nodes"][0]["node"] == hostile and data["title"] == hostile  # the text itself, as data
    assert "<title>&lt;/script&gt;&lt;script&gt;" in html
    long = pages.health({"nodes": [{"node": "n" * 1000, "reasons": ["x" * 1000]}]})[0]
    assert len(long["node"]) == pages.MAX_TEXT and long["node"].endswith("...")
    assert [s["state"] for s in data["legend"] if s["used"]] == ["faulty"]


def test_a_remediated_nodes_line_on_the_page_follows_its_stages():
    target = {"node": "n", "host": "n", "row": {}, "action": "reset"}
    released = outcome.page(target, {"quarantine": {"step": "drained", "evicted": ["ns/p"], "at": "T1"}, "reset": {"changed": True},
                                     "release": {"result": "recovered", "at": "T3"}}, None)
    assert released["state"] == "released"
    assert released["timeline"] == [{"step": "quarantine (1 pods evicted)", "at": "T1"}, {"step": "reset", "at": ""}, {"step": "release", "at": "T3"}]
    held = outcome.page(target, {"quarantine": {"at": "T1"}, "reset": {"failed": True, "msg": "busy"}},
                        {"outcome": "needs_human", "next": "look"})
    assert (held["state"], held["outcome"], held["timeline"][-1]["step"]) == ("held", "needs_human", "reset failed")
    assert outcome.page(target, {"quarantine": {"deferred": "deferred_capacity", "at": "T1"}}, None)["state"] == "deferred"
    assert outcome.page(target, {"quarantine": {"claimed_by": "run 7"}}, None)["state"] is None
    assert outcome.page(target, {"quarantine": {"step": "drained", "at": "T1"}}, None)["state"] == "quarantined"
    assert outcome.page(target, {}, None)["state"] is None
