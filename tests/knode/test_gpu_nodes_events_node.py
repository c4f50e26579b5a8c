# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The event source gpuops.fleet.gpu_nodes on a REAL kubelet v1.20.2 node (SIMULATED GPUs: fake NVML, a fake device
plugin), as the API user gpuops granted exactly docs/rbac/gpu-nodes-events.yml (nodes list and watch; the control plane
runs RBAC; the ledger's ConfigMap get, in the test's namespace). A critical XID goes through the fake NVML; the plugin's
health loop marks the GPU Unhealthy; the real kubelet
lowers the node's allocatable; the source emits gpu_unallocatable for that node, once. The time from the fault (the XID
written) to the event is printed and kept in out/knode-gpu-events.json (issue 50's figure; not asserted: tests are not
timed)."""

from __future__ import annotations

import json
import os
import threading
import time

import fakenode
import eda_source
import realnode
from realnode import wait

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import options as source_options

GPUS = ["GPU-4d4d4d4d-4444-4444-8444-00000000004d", "GPU-5e5e5e5e-5555-4555-8555-00000000005e"]


def test_a_critical_xid_reaches_the_source_as_one_gpu_unallocatable_event_with_list_and_watch_alone(real_node):
    node = real_node
    node.up(GPUS, health=True)
    node.wait_allocatable(2, timeout=60)
    node.namespace("gpuops-events")  # the Role that reads the ledger is namespaced (the ledger's namespace)
    realnode.grant(node.cluster, "gpu-nodes-events.yml", "gpuops-events")
    offset = node.cluster.audit_offset()
    options = source_options.check_nodes({"kubeconfig": os.path.join(node.cluster.workdir, "role.kubeconfig"), "heartbeat": 5,
                                          "ledger_namespace": "gpuops-events", "due_seconds": 2})
    events, stop = [], threading.Event()
    thread = threading.Thread(target=eda_source.load().follow, args=(options, events.append, stop), daemon=True)
    thread.start()
    try:
        start = wait(lambda: [e for e in events if e["gpuops"]["kind"] == "startup"], "the startup event", timeout=30)[0]["gpuops"]
        assert start["nodes"] == [] and start["watched"] >= 1  # the real node, healthy
        faulted = time.monotonic()
        fakenode.append_config(node.nvml_config, fakenode.xid(1, 48))  # double-bit ECC on GPU 1: critical for the plugin
        lost = wait(lambda: [e["gpuops"] for e in events if e["gpuops"]["kind"] == "gpu_unallocatable"], "the event", timeout=60)
        seconds = time.monotonic() - faulted
        assert lost[0]["node"] == realnode.NAME
        assert lost[0]["changed"] == {realnode.RESOURCE: {"before": 2, "after": 1, "capacity": 2}}
        time.sleep(options["heartbeat"] + 1)  # kubelet's status updates go on: no second event for the same state
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive()
    assert [e["gpuops"]["kind"] for e in events if e["gpuops"]["kind"] != "heartbeat"] == ["startup", "gpu_unallocatable", "gpu_faults"]
    # the fault's window (settle_seconds, default 5) ran the node once: the playbook's limit is the node and the controller
    faults = [e for e in events if e["gpuops"]["kind"] == "gpu_faults"]
    assert (faults[0]["gpuops"]["nodes"], faults[0]["meta"]["hosts"]) == ([realnode.NAME], [realnode.NAME, "localhost"])
    calls = realnode.api_calls(node.cluster, offset)
    # kubernetes.core's client asks the discovery endpoints where its cache (~/.kube/cache) is cold: a fresh machine does
    # RBAC: nothing else is granted, nothing else is asked; the ledger (no remediation waits here: it is not there) every due_seconds
    assert set(calls) <= {"list nodes", "watch nodes", "get discovery", "get configmaps"}, calls
    assert "get configmaps" in calls and not [e for e in events if e["gpuops"].get("due_error")]  # granted: read, no error
    print("fault (XID written) to gpu_unallocatable event on the real kubelet node: %.2f s" % seconds)
    os.makedirs(os.path.join(realnode.ROOT, "out"), exist_ok=True)
    with open(os.path.join(realnode.ROOT, "out", "knode-gpu-events.json"), "w") as handle:  # the closing note's figure
        json.dump({"seconds": {"XID written to the gpu_unallocatable event": round(seconds, 2)}, "api_calls": calls}, handle, indent=1,
                  sort_keys=True)
