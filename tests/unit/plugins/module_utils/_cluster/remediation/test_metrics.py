# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation's own metrics (pure): from the ledger alone, never from a Node's annotation (which the node may write);
one value that cannot be written as UTF-8 is that series' ``unreadable``, and the file is written for every other node.
Prometheus reads the text for real in tests/prometheus."""

from __future__ import annotations

import json

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import metrics

NOW = 1800000000


def _ledger(*entries):
    return dict(ledgers.empty(), entries=list(entries))


def test_the_quarantined_nodes_come_from_the_ledgers_open_entries():
    text = metrics.render(_ledger({"node": "a", "action": "reset", "step": "drained", "at": NOW - 60, "closed_at": None},
                                  {"node": "b", "action": "reset", "at": NOW - 900, "closed_at": NOW - 800, "result": "recovered",
                                   "recover_seconds": 100}))
    assert 'gpuops_remediation_quarantined{action="reset",k8s_node="a",step="drained"} 1' in text
    assert 'gpuops_remediation_quarantine_started_timestamp_seconds{k8s_node="a"} %d' % (NOW - 60) in text
    assert 'k8s_node="b"' not in text and 'gpuops_remediation_outcomes{result="recovered"} 1' in text


def test_a_value_that_is_no_utf8_is_unreadable_and_every_other_series_is_written():
    """Issue 57, item 12: a lone surrogate (JSON's escaped "\\ud800") failed the whole file: no textfile for any node."""
    ledger = ledgers.parse({"data": {ledgers.KEY: json.dumps(_ledger(
        {"node": "a", "action": "reset", "step": "drained", "at": NOW - 60, "closed_at": None},
        {"node": "\ud800x", "action": "reset", "step": "drained", "at": NOW - 50, "closed_at": None},
        {"node": "\ud801y", "action": "reset", "step": "drained", "at": NOW - 40, "closed_at": None},
        {"node": "c", "action": "reset", "at": NOW - 90, "closed_at": NOW - 30, "result": "\ud800", "recover_seconds": 60}))}}, "cm")
    text = metrics.render(ledger)
    text.encode("utf-8")  # the file can be written
    assert 'k8s_node="a"' in text and text.count('k8s_node="unreadable",step="drained"') == 1  # two such: one series, never repeated
    assert 'gpuops_remediation_outcomes{result="unreadable"} 1' in text
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(lines) == len(set(line.rsplit(" ", 1)[0] for line in lines))  # no series twice (node_exporter refuses the file)
