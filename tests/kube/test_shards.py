# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 60, item 3: a fleet split across activations by label_selector (shards), on a real API server with the real
ansible-rulebook (SIMULATED nodes and GPUs). Two activations of the shipped gpu_health.yml, one per shard (a rack label),
each watching only its shard's Nodes; a GPU fault in each shard at the same moment, and one place left in the fleet's cap.
Each activation runs the remediation for its own node; the cap counts the fleet the API shows and is checked again in the
ledger's own write, never the shard's share: exactly one node is quarantined, the other deferred and untouched."""

from __future__ import annotations

import contextlib
import time

from test_gpu_health_plan import G, OTHER, faulty
from test_gpu_health_rulebook import activation, node_vars, runs, wait_text
from test_gpu_quarantine import TAINT, ledger, node_state, remediation_fleet

SHARD = "gpuops.test/rack"


def test_two_shards_activations_keep_the_fleets_cap_one_node_quarantined_the_other_deferred(fleet, fake_lib_dir):
    f, name, dummy, dummy_uids, extra = remediation_fleet(fleet, fake_lib_dir, [
        {"name": "a", "gpus": G, "labels": {SHARD: "rack-a"}}, {"name": "b", "gpus": [OTHER[0]], "labels": {SHARD: "rack-b"}},
        {"name": "c", "gpus": [OTHER[1]], "labels": {SHARD: "rack-a"}}])
    other = f.nodes[1]["name"]
    fleet_label = ",".join("%s=%s" % kv for kv in f.label.items())
    # one place in the fleet's cap; the same signal on two nodes is no storm here (the breaker's own tests trip it)
    inventory = dict(node_vars(extra), gpuops_gpu_health_breaker_max_nodes=1, gpuops_gpu_health_same_signal_nodes=5,
                     gpuops_gpu_health_same_signal_percent=100, gpuops_gpu_health_breaker_percent=100)
    logs = {}
    with contextlib.ExitStack() as stack:
        for rack in ("rack-a", "rack-b"):
            logs[rack] = f.tmp / ("rulebook-%s.log" % rack)
            variables = {"inventory": inventory, "rulebook": {
                "gpuops_events_label_selector": "%s,%s=%s" % (fleet_label, SHARD, rack), "gpuops_events_settle_seconds": 2,
                "gpu_remediation_mode": "quarantine", "gpuops_events_report_dir": str(f.tmp / ("report-" + rack)),
                "gpuops_gpu_health_namespace": f.namespace}}
            stack.enter_context(activation(f, variables, logs[rack]))
        # each activation watches its shard only (its startup event counts the Nodes it watches)
        assert "'watched': 2" in logs["rack-a"].read_text() and "'watched': 1" in logs["rack-b"].read_text()
        started = time.monotonic()
        faulty(f, name, "recovery|0|1", "xid|0|79")
        faulty(f, other, "recovery|0|1", "xid|0|79")
        for rack in logs:
            assert wait_text(logs[rack], "PLAY RECAP", 300), logs[rack].read_text()[-3000:]
        seconds = time.monotonic() - started
        texts = dict((rack, logs[rack].read_text()) for rack in logs)
    # one run per shard, limited to that shard's node
    assert [runs(texts[r]) for r in ("rack-a", "rack-b")] == [1, 1], texts
    assert "ansible_rulebook.action.run_playbook - ERROR" not in texts["rack-a"] + texts["rack-b"]
    held = [n for n in (name, other) if TAINT in [t[0] for t in node_state(f, n)[3]]]
    assert len(held) == 1, held  # the fleet's one place, taken once across the shards
    opened = [e for e in ledger(f)["entries"] if not e["closed_at"]]
    assert [e["node"] for e in opened] == held
    left = [n for n in (name, other) if n not in held][0]
    unschedulable, record, marked, taints = node_state(f, left)
    assert not unschedulable and record is None and not marked and not taints
    # neither run failed: the shard that lost the place deferred its node (the plan's or the ledger write's cap)
    recaps = [line for text in texts.values() for line in text[text.index("PLAY RECAP"):].splitlines() if ": ok=" in line]
    assert recaps and all(" failed=0 " in line and " unreachable=0 " in line for line in recaps), recaps
    print("SHARDS: two activations, one fault each, one place: %s quarantined, %s deferred; both runs done %.1f s after the faults"
          % (held[0], left, seconds))
