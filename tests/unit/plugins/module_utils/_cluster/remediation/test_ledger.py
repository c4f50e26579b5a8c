# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation ledger under bad data and at its size (issue 48, items 6 and 7).

A tampered ledger: the top level and the breaker are read strictly (LedgerError naming the ConfigMap, never a raw
exception), one entry of another shape is reported and counts for nothing, and never stops another node's quarantine or
release. The size: trimmed by bytes (oldest closed first), never an open entry, what a node puts in bounded, and the
ledger written before the node is touched (a ledger that cannot be written leaves the node as it was). The real API
server's 1 MiB: tests/kube/test_gpu_quarantine.py."""

from __future__ import annotations

import json

import pytest

from fake_core_api import GOOD, NOW, WHERE, ApiError, FakeApi, G, configmap, params

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import quarantine as q
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import marks, release
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.session import Session
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import plan as rp


def closed(i, node="old", gpus=G):
    return {"node": "%s-%d" % (node, i), "gpus": list(gpus), "action": "reset", "keys": ["recovery:1"], "driver_version": "535.104.05",
            "at": NOW - 100000 + i, "closed_at": NOW - 99000 + i, "result": "recovered", "run": "job-%d" % i, "recover_seconds": 1000}


# an entry's field of another shape: the entry is reported, never raised, never stops node b's
ENTRY_SHAPES = [
    ("node", None), ("node", 7), ("node", ["a"]), ("node", ""), ("node", "n" * 300),
    ("gpus", "GPU-1"), ("gpus", [1]), ("gpus", {"a": 1}), ("gpus", ["g"] * 65),
    ("action", 5), ("action", ["reset"]),
    ("keys", "xid:48"), ("keys", [None]), ("keys", [{"k": 1}]),
    ("driver_version", 535), ("driver_version", ["535"]), ("driver_version", "d" * 300),
    ("at", float("nan")), ("at", float("inf")), ("at", "1800000000"), ("at", None), ("at", True), ("at", 10 ** 30), ("at", [1]),
    ("closed_at", float("nan")), ("closed_at", "yes"), ("closed_at", {}),
    ("result", 1), ("run", 1), ("recover_seconds", float("-inf")), ("escalated_from", 3),
]


@pytest.mark.parametrize("field,value", ENTRY_SHAPES, ids=["%s=%r" % (f, v)[:40] for f, v in ENTRY_SHAPES])
def test_an_entry_of_another_shape_is_reported_and_never_stops_another_nodes_plan_quarantine_or_release(field, value):
    bad = dict(GOOD, node="a")
    if value is None and field != "node" and field != "at":
        bad.pop(field)
    else:
        bad[field] = value
    ledger = ledgers.parse(configmap(dict(ledgers.empty(), entries=[bad, GOOD])), WHERE)
    assert ledger["entries"] == [GOOD] and [i["index"] for i in ledger["invalid"]] == [0], ledger["invalid"]
    assert ledger["invalid"][0]["problem"].startswith(field) or ledger["invalid"][0]["problem"].startswith("node"), ledger["invalid"]
    # the plan's breakers and repeat rule read it; b's open entry counts; a's does not
    assert rp._in_flight({}, ledger, NOW) == ({"b"}, set())
    # b's release finds and closes its entry; a's finds none (the bad entry stays as it was, reported)
    assert marks.open_entry(ledger, "b") == GOOD and marks.open_entry(ledger, "a") is None
    again = ledgers.parse({"data": ledgers.dump(ledger)}, WHERE)  # written back: the bad entry kept as it was
    assert again["entries"] == [GOOD] and len(again["invalid"]) == 1


@pytest.mark.parametrize("text", [
    "[]", '{"version": 2}', '{"version": 1}', '{"version": 1, "breaker": []}', '{"version": 1, "breaker": {"state": "open"}}',
    '{"version": 1, "breaker": {"state": "tripped", "at": NaN}}', '{"version": 1, "breaker": {"state": "tripped", "keys": "xid:48"}}',
    '{"version": 1, "breaker": {"state": "closed", "reset_at": "now"}}', '{"version": 1, "breaker": {"state": "closed", "reason": 1}}',
    '{"version": 1, "breaker": {"state": "closed"}, "entries": {}}', '{"version": 1, "breaker": {"state": "closed"}, "paused": "no"}',
    "{" * 100000, "not json",
])
def test_a_ledger_whose_top_level_or_breaker_cannot_be_read_is_a_ledger_error_naming_the_configmap(text):
    with pytest.raises(ledgers.LedgerError) as failed:
        ledgers.parse({"data": {ledgers.KEY: text}}, WHERE)
    assert str(failed.value).startswith(WHERE)


def test_the_ledger_is_trimmed_by_size_oldest_closed_first_and_an_open_entry_is_never_dropped():
    """1,830 closed 8-GPU entries are about the ConfigMap's 1 MiB: with the new open entry the ledger is written under
    MAX_BYTES, the oldest closed entries gone, the open ones (old and new) kept."""
    entries = [closed(i) for i in range(1830)]
    entries.insert(5, dict(closed(5, node="open"), closed_at=None, result=None))  # an old entry still open
    ledger = dict(ledgers.empty(), entries=entries + [dict(GOOD)])
    full = len(json.dumps(dict(ledger, entries=entries), separators=(",", ":")))
    assert full > 1024 * 1024 - 100000, full
    data = ledgers.dump(ledger, WHERE)
    back = ledgers.parse({"data": data}, WHERE)
    assert len(data[ledgers.KEY]) <= ledgers.MAX_BYTES
    nodes = [e["node"] for e in back["entries"]]
    assert "open-5" in nodes and nodes[-1] == "b" and "old-1829" in nodes and "old-0" not in nodes
    assert nodes == sorted(nodes, key=lambda n: [e["at"] for e in entries + [GOOD] if e["node"] == n][0])


def test_open_entries_alone_that_do_not_fit_are_an_error_naming_the_configmap_and_its_size():
    entries = [dict(closed(i, node="open"), closed_at=None) for i in range(2000)]
    with pytest.raises(ledgers.LedgerError) as failed:
        ledgers.dump(dict(ledgers.empty(), entries=entries), "ns/gpuops-remediation-ledger")
    assert "ConfigMap ns/gpuops-remediation-ledger: the ledger would hold" in str(failed.value) and "2000 open entries" in str(failed.value)


def test_what_a_node_puts_in_an_entry_is_bounded():
    entry = ledgers.bounded_entry({"node": "a", "driver_version": "5" * 10000, "keys": ["k%d" % i + "x" * 1000 for i in range(1000)],
                                   "gpus": G * 20, "run": "r" * 1000, "at": NOW})
    assert len(entry["driver_version"]) == ledgers.MAX_DRIVER and len(entry["keys"]) == ledgers.MAX_KEYS
    assert all(len(k) == ledgers.MAX_TEXT for k in entry["keys"]) and len(entry["gpus"]) == ledgers.MAX_GPUS and len(entry["run"]) == 128
    assert len(json.dumps(entry)) < 16 * 1024


def test_a_ledger_the_api_refuses_leaves_the_node_unchanged_on_quarantine_and_on_release():
    """Before: the node was cordoned and tainted, then the ledger's write failed with a bare 422; a release removed the
    node's marks, then failed, leaving its entry open for ever. Now the ledger comes first."""
    api = FakeApi(ledgers.empty(), refuse=(422, "Unprocessable Entity"))
    with pytest.raises(ledgers.LedgerError) as failed:
        q.quarantine(Session(api, params(), False, ApiError, now=NOW))
    assert "ConfigMap ns/gpuops-remediation-ledger: the API server refused the ledger (422 Unprocessable Entity) of" in str(failed.value)
    assert api.calls == ["write ledger"] and api.node["spec"] == {} and api.node["metadata"]["annotations"] == {}

    api.refuse = None
    done = q.quarantine(Session(api, params(), False, ApiError, now=NOW))
    assert done["step"] == "drained" and api.node["spec"]["unschedulable"] and api.calls[1:3] == ["write ledger", "patch node"]
    api.refuse, api.calls = (422, "Unprocessable Entity"), []
    with pytest.raises(ledgers.LedgerError):
        release.release(Session(api, params(state="released"), False, ApiError, now=NOW + 60))
    assert api.calls == ["write ledger"] and api.node["spec"]["unschedulable"], "the node stays quarantined, as the ledger says"
    api.refuse = None
    released = release.release(Session(api, params(state="released"), False, ApiError, now=NOW + 60))
    entry = ledgers.parse(api.cm, WHERE)["entries"][-1]
    assert released["changed"] and (entry["closed_at"], entry["recover_seconds"]) == (NOW + 60, 60) and not api.node["spec"]["unschedulable"]


def test_another_runs_write_in_between_is_read_and_applied_again():
    api = FakeApi(dict(ledgers.empty(), entries=[dict(GOOD)]), conflicts=2)
    q.quarantine(Session(api, params(), False, ApiError, now=NOW))
    assert api.calls[:4] == ["write ledger", "write ledger", "write ledger", "patch node"]
    assert [e["node"] for e in ledgers.parse(api.cm, WHERE)["entries"]] == ["b", "a"]
    api = FakeApi(ledgers.empty(), conflicts=5)
    with pytest.raises(ledgers.LedgerError, match="another run wrote the ledger at each of 3 attempts"):
        q.quarantine(Session(api, params(), False, ApiError, now=NOW))
    assert "patch node" not in api.calls
