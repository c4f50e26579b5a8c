# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The approval pins the plan (issue 48, item 3): the act job acts only on the approved nodes whose fresh plan agrees, and
refuses the others naming the difference; a tampered, malformed or stale approved plan acts on nothing. Through the role's
filter too: an approved plan that arrives from AWX (a mapping; the maximum age as a survey's string)."""

from __future__ import annotations

import copy
import json
import time

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.filter.remediation import remediation_targets
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import approval

G = ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0", "GPU-11111111-2222-3333-4444-555555555555"]
NOW = 1800000000


def row(node, action="reset", gpus=(G[0],), evictions=(("ml/a", "u1"),)):
    return {"node": node, "host": "h-" + node, "action": action, "batch": 1, "gpus": list(gpus), "targets": list(gpus),
            "evictions": [{"pod": p, "uid": u, "evict": True} for p, u in evictions]}


def targets(*rows):
    return remediation_targets({"nodes": list(rows)}, "remediate", ["reset", "reboot"])


def approved(*rows, at=NOW):
    return approval.pin(targets(*rows)["act"], "remediate", at)


def test_the_pin_is_what_the_run_would_do_with_a_digest_and_round_trips_through_json():
    pin = approved(row("n1"), row("n2", gpus=G[1:], evictions=()))
    assert [(n["host"], n["node"], n["action"], n["step"], n["gpus"], n["evictions"]) for n in pin["nodes"]] == [
        ("h-n1", "n1", "reset", "reset", [G[0]], [{"pod": "ml/a", "uid": "u1"}]), ("h-n2", "n2", "reset", "reset", [G[1]], [])]
    assert len(pin["digest"]) == 64 and pin["at"] == NOW
    act, refused = approval.hold(targets(row("n1"))["act"], json.loads(json.dumps(pin)), NOW + 3600)
    assert [t["node"] for t in act] == ["n1"] and refused == []


@pytest.mark.parametrize("fresh, why", [
    (row("n1", gpus=(G[1],)), 'gpus ["%s"], approved ["%s"]' % (G[1], G[0])),
    (row("n1", action="reboot"), 'action "reboot", approved "reset"'),
    (row("n1", evictions=(("ml/a", "u1"), ("ml/b", "u2"))), "it would evict ml/b (UID u2), which the approval did not name"),
    (row("n1", evictions=(("ml/a", "u9"),)), "it would evict ml/a (UID u9), which the approval did not name"),
    (row("victim"), "not in the approved plan (approved: n1, n2)"),
])
def test_a_node_whose_fresh_plan_differs_from_the_approved_one_is_refused_naming_the_difference(fresh, why):
    """The node acted on must be the one approved, for the same GPUs, with no pod the person did not see evicted."""
    act, refused = approval.hold(targets(fresh, row("n2", gpus=(G[1],)))["act"], approved(row("n1"), row("n2", gpus=(G[1],))), NOW)
    assert [t["node"] for t in act] == ["n2"] and len(refused) == 1 and why in refused[0]["why"], refused


def test_fewer_pods_to_evict_than_approved_agree():
    act, refused = approval.hold(targets(row("n1", evictions=()))["act"], approved(row("n1")), NOW)
    assert [t["node"] for t in act] == ["n1"] and refused == []


def tampered(pin):
    pin = copy.deepcopy(pin)
    pin["nodes"][0]["node"] = "victim"
    return pin


@pytest.mark.parametrize("change, says", [
    (tampered, "its digest does not match its content"),
    (lambda p: dict(p, at=NOW - 100000), "planned 100000 s ago, more than gpu_remediation_approval_max_age (90000 s)"),
    (lambda p: dict(p, at=NOW + 4000), "planned 4000 s in the future"),
    (lambda p: "a string", "expected the plan job's gpuops_approved_plan (a mapping), got str"),
    (lambda p: dict(p, version=2), "not an approved plan of this collection"),
    (lambda p: dict(p, nodes="n1"), "not an approved plan of this collection"),
])
def test_an_approved_plan_that_cannot_be_used_acts_on_nothing(change, says):
    pin = change(approved(row("n1")))
    if isinstance(pin, dict) and change is not tampered and "digest" in pin:
        pin["digest"] = approval.digest(pin)  # a consistent digest: the other checks must refuse it
    with pytest.raises(approval.ApprovalError, match=says.replace("(", "\\(").replace(")", "\\)")):
        approval.hold(targets(row("n1"))["act"], pin, NOW, 90000)


def test_the_roles_filter_holds_the_fresh_plan_to_the_approved_one_and_can_require_it():
    pin = approved(row("n1"), at=time.time())  # the filter's clock is the controller's
    got = remediation_targets({"nodes": [row("n1", gpus=(G[1],)), row("n2")]}, "remediate", ["reset"], pin, "90000")
    assert got["act"] == [] and got["by_host"] == {}
    assert [(s["node"], s["why"].split(":")[0]) for s in got["skipped"]] == [("n1", "refused"), ("n2", "refused")]
    assert remediation_targets({"nodes": [row("n1")]}, "remediate", ["reset", "reboot"], pin)["by_host"].keys() == {"h-n1"}
    with pytest.raises(AnsibleFilterError, match="gpu_remediation_require_approval: this run acts only on an approved plan"):
        remediation_targets({"nodes": [row("n1")]}, "remediate", ["reset"], None, None, "true")
    with pytest.raises(AnsibleFilterError, match="gpu_remediation_approval_max_age"):
        remediation_targets({"nodes": [row("n1")]}, "remediate", ["reset"], pin, "a day")
    assert remediation_targets({"nodes": [row("n1")]}, "report", ["reset"], None, None, True)["act"] == []
