# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pause of a drained node for a reset (_cluster/remediation/pause.py): a terminating NVML client still counts; only a
drained node (the ledger's step) is paused, its previous labels kept in the ledger first; the unpause restores them."""

from __future__ import annotations

import pytest

from fake_core_api import NOW, WHERE, ApiError, FakeApi, params

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import pause, states
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import quarantine as q
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.session import QuarantineError, Session


def pod(name, labels=None, phase="Running", deleting=False):
    meta = {"name": name, "namespace": "ml", "uid": name, "labels": labels or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": "gpu-a"}, "status": {"phase": phase}}


def test_the_pause_waits_for_a_terminating_nvml_client_until_kubelet_removes_it():
    """A plugin pod the DaemonSet controller is deleting still runs its process (NVML held) until kubelet stops it: it is
    still there for the pause; an ended one is not. (The real kubelet node: the reset was refused "In use by another
    client" while the pause had taken the terminating pod for gone.)"""
    selectors = [{"name": "nvidia-device-plugin-ds"}]
    labels = {"name": "nvidia-device-plugin-ds"}
    assert pause.matching([pod("plugin", labels, deleting=True)], selectors) == ["ml/plugin"]
    assert pause.matching([pod("plugin", labels, phase="Succeeded")], selectors) == []
    assert pause.matching([pod("other", {"name": "x"})], selectors) == []


def paused(**kw):
    return dict(params(state="paused"), pause_labels={pause.MAINTENANCE_LABEL: "true"}, pause_pods=[], pause_timeout=5, **kw)


def test_only_a_drained_node_is_paused_and_its_previous_labels_go_to_the_ledger_first():
    api = FakeApi(ledgers.empty())
    with pytest.raises(QuarantineError, match="not quarantined and drained"):
        pause.pause(Session(api, paused(), False, ApiError, now=NOW))
    assert api.calls == []
    assert q.quarantine(Session(api, params(), False, ApiError, now=NOW))["step"] == states.DRAINED
    api.node["metadata"]["labels"][pause.MAINTENANCE_LABEL] = "false"  # a value of the node's own before the pause
    preview = pause.pause(Session(api, paused(), True, ApiError, now=NOW))
    assert preview["changed"] and "would label" in preview["msg"] and api.node["metadata"]["labels"][pause.MAINTENANCE_LABEL] == "false"
    calls = len(api.calls)
    done = pause.pause(Session(api, paused(), False, ApiError, now=NOW))
    assert done["changed"] and api.calls[calls:] == ["write ledger", "patch node"]  # the ledger first
    (entry,) = ledgers.parse(api.cm, WHERE)["entries"]
    assert entry["paused_labels"] == {pause.MAINTENANCE_LABEL: "false"}
    assert pause.pause(Session(api, paused(), False, ApiError, now=NOW))["changed"] is False
    back = pause.unpause(Session(api, params(state="unpaused"), False, ApiError))
    assert back["changed"] and api.node["metadata"]["labels"][pause.MAINTENANCE_LABEL] == "false"
    assert ledgers.parse(api.cm, WHERE)["entries"][0]["paused_labels"] is None
    assert pause.unpause(Session(api, params(state="unpaused"), False, ApiError))["changed"] is False
