# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every remediation finishes on its own (module_utils/_cluster/events/due.py): a node our quarantine holds at a waiting step
is offered again (remediation_due) when its wait is over, from the ledger and the API's pods, never from what the node
writes of itself; each offer is backed off; a node released or cancelled is forgotten. Issue 59, item 2; the real API
server's side is tests/kube/test_eviction_modes.py's."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import due as dues
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers

NOW = 1_800_000_000


def pod(name, uid, phase="Running", namespace="ml"):
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid}, "status": {"phase": phase}}


def entry(node="a", step="awaiting_pods", waiting=None, at=NOW - 600, **more):
    found = {"node": node, "gpus": [], "action": "reset", "at": at, "closed_at": None, "step": step,
             "waiting_for": waiting if waiting is not None else [{"pod": "ml/train-0", "uid": "u0", "due_at": None}]}
    found.update(more)
    return found


def ledger(*entries):
    return dict(ledgers.empty(), entries=list(entries))


def views(*quarantined, others=()):
    found = dict((n, {"name": n, "quarantined": True}) for n in quarantined)
    found.update((n, {"name": n, "quarantined": False}) for n in others)
    return found


def check(due, the_ledger, the_views, pods, now=NOW):
    asked = []

    def pods_of(node):
        asked.append(node)
        return pods.get(node, [])

    return [(e["gpuops"]["node"], e["gpuops"]["why"], e["gpuops"]["attempt"]) for e in due.check(the_ledger, the_views, pods_of, now, "t")], asked


def test_an_awaiting_pods_node_is_due_once_its_pods_are_gone_and_not_before():
    due = dues.Due()
    running = {"a": [pod("train-0", "u0")]}
    assert check(due, ledger(entry()), views("a"), running) == ([], ["a"])
    # the pod ended (Succeeded): the node is offered, once; then backed off (a run that failed is offered again later)
    ended = {"a": [pod("train-0", "u0", phase="Succeeded")]}
    assert check(due, ledger(entry()), views("a"), ended)[0] == [("a", "pods_gone", 1)]
    assert check(due, ledger(entry()), views("a"), ended, NOW + 59)[0] == []
    assert check(due, ledger(entry()), views("a"), ended, NOW + 60)[0] == [("a", "pods_gone", 2)]
    assert check(due, ledger(entry()), views("a"), ended, NOW + 60 + 119)[0] == []  # twice as long after each offer
    assert check(due, ledger(entry()), views("a"), ended, NOW + 60 + 120)[0] == [("a", "pods_gone", 3)]
    # a pod of the same name recreated (another UID) is not the one waited for; one being deleted still holds the GPU
    assert check(dues.Due(), ledger(entry()), views("a"), {"a": [pod("train-0", "u9")]})[0] == [("a", "pods_gone", 1)]
    deleting = pod("train-0", "u0")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-06T10:00:00Z"
    assert check(dues.Due(), ledger(entry()), views("a"), {"a": [deleting]})[0] == []


def test_a_delete_after_timeout_pod_makes_the_node_due_when_its_time_comes():
    waiting = [{"pod": "ml/train-0", "uid": "u0", "due_at": None}, {"pod": "ml/sweep-0", "uid": "u1", "due_at": NOW + 30}]
    pods = {"a": [pod("train-0", "u0"), pod("sweep-0", "u1")]}
    due = dues.Due()
    assert check(due, ledger(entry(waiting=waiting)), views("a"), pods)[0] == []
    assert check(due, ledger(entry(waiting=waiting)), views("a"), pods, NOW + 30)[0] == [("a", "deadline", 1)]


def test_a_blocked_drain_is_retried_a_minute_after_it_was_blocked_then_backed_off_up_to_the_cap():
    due = dues.Due(retry_max=100)
    blocked = ledger(entry(step="drain_blocked", waiting=[], blocked_at=NOW))
    assert check(due, blocked, views("a"), {}, NOW + 59) == ([], [])  # no pod is asked for a blocked drain
    assert check(due, blocked, views("a"), {}, NOW + 60)[0] == [("a", "drain_retry", 1)]
    assert check(due, blocked, views("a"), {}, NOW + 60 + 60)[0] == [("a", "drain_retry", 2)]
    assert check(due, blocked, views("a"), {}, NOW + 120 + 100)[0] == [("a", "drain_retry", 3)]  # the cap: 100 s, not 120
    assert check(due, blocked, views("a"), {}, NOW + 220 + 100)[0] == [("a", "drain_retry", 4)]


@pytest.mark.parametrize("the_ledger, the_views, why", [
    (ledger(entry(step="drained")), views("a"), "a step no one waits at (the run's own)"),
    (ledger(entry(closed_at=NOW - 5)), views("a"), "a closed entry (released, cancelled)"),
    (ledger(entry()), views(others=("a",)), "our taint is off the node (an operator's cancel: the quarantine's to record)"),
    (ledger(entry()), views(), "a node the watch does not see"),
    (ledger(), views("a"), "no entry: the node's own annotation says awaiting_pods, which is never read here"),
])
def test_no_offer_where_no_remediation_of_ours_waits(the_ledger, the_views, why):
    assert check(dues.Due(), the_ledger, the_views, {"a": []}) == ([], []), why


def test_a_node_released_is_forgotten_and_a_new_quarantine_starts_its_backoff_afresh():
    due = dues.Due()
    gone = {"a": []}
    assert check(due, ledger(entry()), views("a"), gone)[0] == [("a", "pods_gone", 1)]
    assert check(due, ledger(entry(closed_at=NOW)), views("a"), gone, NOW + 1)[0] == [] and due.offered == {}
    assert check(due, ledger(entry(at=NOW + 2)), views("a"), gone, NOW + 3)[0] == [("a", "pods_gone", 1)]


def test_an_entry_that_names_no_pod_is_offered_and_backed_off():
    """An awaiting_pods entry written before entries kept their pods: a run looks (it finds the pods itself)."""
    due = dues.Due()
    assert check(due, ledger(entry(waiting=[])), views("a"), {"a": [pod("x", "u5")]})[0] == [("a", "pods_gone", 1)]
    assert check(due, ledger(entry(waiting=[])), views("a"), {"a": [pod("x", "u5")]}, NOW + 10)[0] == []


def test_the_checker_reads_the_ledger_and_the_nodes_pods_and_says_an_error_without_raising():
    class Api:
        def __init__(self, fail=None):
            self.fail, self.asked = fail, []
            self.api_client = self

        @staticmethod
        def sanitize_for_serialization(obj):
            return obj

        def read_namespaced_config_map(self, name, namespace):
            self.asked.append(("ledger", name, namespace))
            if self.fail:
                raise self.fail
            return {"data": {ledgers.KEY: ledgers.dump(ledger(entry()))[ledgers.KEY]}}

        def list_pod_for_all_namespaces(self, field_selector):
            self.asked.append(("pods", field_selector))
            return type("Pods", (), {"items": []})()

    api = Api()
    checker = dues.Checker(api, "gpuops-system", KeyError)
    found = checker.check(views("a"), NOW, "t")
    assert [e["gpuops"]["kind"] for e in found] == ["remediation_due"] and found[0]["meta"]["hosts"] == ["a", "localhost"]
    assert api.asked == [("ledger", ledgers.NAME, "gpuops-system"), ("pods", "spec.nodeName=a")] and checker.error is None
    refused = dues.Checker(Api(fail=RuntimeError("403 Forbidden")), "gpuops-system", KeyError)
    assert refused.check(views("a"), NOW, "t") == [] and refused.error == "RuntimeError: 403 Forbidden"


def test_our_taint_on_nodes_and_no_ledger_where_the_source_looks_is_said():
    """A rulebook given another ledger_namespace than the playbooks' would offer nothing, silently: said in the heartbeat."""

    class Missing(Exception):
        status = 404

    class Api:
        api_client = None

        def read_namespaced_config_map(self, name, namespace):
            raise Missing()

    checker = dues.Checker(Api(), "gpuops-system", Missing)
    assert checker.check(views("a"), NOW, "t") == [] and "no ledger gpuops-remediation-ledger in gpuops-system" in checker.error
    assert checker.check(views(others=("a",)), NOW, "t") == [] and checker.error is None  # nothing of ours anywhere: nothing to say
