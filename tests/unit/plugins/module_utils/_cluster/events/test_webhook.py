# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Alertmanager's webhook served on loopback (module_utils/_cluster/events/webhook.py): only the bearer token gets in, a
request that is not Alertmanager's payload or too large emits nothing, no header reaches an event, the fault alerts of a
window are one gpu_faults event."""

from __future__ import annotations

import asyncio
import json


from alertmanager_client import KNOWN, TOKEN, alert, get, post

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import nodes
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import options as source_options
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import webhook
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import window as windows


def run(script, window=None, **args):
    """Serve the source on a free port; ``script(port)`` runs in a thread (urllib); returns the events. ``window``: the
    fault window (one whose Node watch knows KNOWN, else)."""
    options = source_options.check_alerts(dict({"token": TOKEN, "port": 1, "settle_seconds": 1}, **args))
    events = []

    async def go():
        loop = asyncio.get_running_loop()
        port = loop.create_future()
        if window is None:
            shared = windows.FaultWindow(options["settle_seconds"], options["flap_seconds"])
            shared.known = KNOWN  # the GPU Nodes the ruleset's Node watch knows
        else:
            shared = window

        async def emit(event):
            events.append(event)

        server = asyncio.ensure_future(webhook.serve(dict(options, port=0), emit, shared, ready=port.set_result))
        try:
            result = await asyncio.to_thread(script, await asyncio.wait_for(port, 10))
            await asyncio.sleep(1.3)  # the window closes
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
        return result

    return asyncio.run(go()), events


def test_only_the_token_gets_in_and_no_header_reaches_an_event():
    def script(port):
        return [post(port, {"alerts": [alert("gpu-a")]}, token=None), post(port, {"alerts": [alert("gpu-a")]}, token="wrong-token-0123456789"),
                post(port, {"alerts": [alert("gpu-a")]}, path="/other"), post(port, {"alerts": [alert("gpu-a")]})]

    statuses, events = run(script)
    assert statuses[:2] == [401, 401] and statuses[2] in (404, 405) and statuses[3] == 202
    kinds = [e["gpuops"]["kind"] for e in events]
    assert kinds == ["gpu_alert", "gpu_faults"]
    assert events[1]["gpuops"]["nodes"] == ["gpu-a"] and events[1]["meta"]["hosts"] == ["gpu-a", "localhost"]
    assert TOKEN not in json.dumps(events) and "Authorization" not in json.dumps(events)


def test_what_is_not_a_payload_or_too_large_emits_nothing():
    def script(port):
        return [post(port, b"not json"), post(port, {"alerts": "x"}), post(port, b"[" * 100000 + b"]" * 100000),
                post(port, {"alerts": [alert("gpu-a")] * 10, "pad": "x" * 2048})]

    statuses, events = run(script)
    assert statuses == [400, 400, 400, 202]  # a JSON nested past Python's recursion limit is refused, not a server error
    statuses, events = run(script, max_bytes=2048)
    assert statuses == [400, 400, 413, 413]
    assert events == []


def test_a_storm_of_alerts_is_one_window_and_resolved_or_other_alerts_are_no_fault():
    def script(port):
        out = [post(port, {"alerts": [alert("gpu-%d" % n)]}) for n in range(20)]
        out.append(post(port, {"alerts": [alert("gpu-x", status="resolved"), alert("gpu-y", name="GPUMemoryWaste")]}))
        return out

    statuses, events = run(script)
    assert set(statuses) == {202}
    faults = [e for e in events if e["gpuops"]["kind"] == "gpu_faults"]
    assert len(faults) == 1 and faults[0]["gpuops"]["nodes"] == ["gpu-%d" % n for n in range(20)]
    assert len([e for e in events if e["gpuops"]["kind"] == "gpu_alert"]) == 22


def test_before_the_node_watchs_first_list_an_alert_is_answered_503_and_taken_once_it_has_listed():
    """The race CI found (stop 64): the receiver listened before the Node watch had listed, so Alertmanager's first
    notification judged every node unknown and its fault was an event of no node, lost until repeat_interval (hours). Now
    the alerts wait: 503 (a status Alertmanager's webhook retries: notify/util.go, Retrier.Check) until the first list,
    ``/readyz`` says which, ``/healthz`` stays a liveness probe."""
    window = windows.FaultWindow(1, 600)
    window.expect_watch()  # gpu_nodes' main, before its watch and its receiver start
    tracker = nodes.Tracker()
    window.known = tracker  # watch.follow, before its first list

    def script(port):
        before = [post(port, {"alerts": [alert("gpu-a")]}), get(port, "/readyz"), get(port, "/healthz")]
        gpus = {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}
        tracker.start([{"metadata": {"name": "gpu-a", "resourceVersion": "1"}, "status": gpus}], "1", "T")
        return before + [get(port, "/readyz"), post(port, {"alerts": [alert("gpu-a")]})]

    answers, events = run(script, window=window)
    assert answers[0] == 503 and answers[1][0] == 503 and "not listed" in answers[1][1] and answers[2] == (200, "up")
    assert answers[3] == (200, "ready") and answers[4] == 202
    assert [(e["gpuops"]["kind"], e["gpuops"].get("node")) for e in events] == [("gpu_alert", "gpu-a"), ("gpu_faults", None)]
    assert events[1]["gpuops"]["nodes"] == ["gpu-a"]


def test_without_a_node_watch_the_receiver_is_ready_at_once():
    window = windows.FaultWindow(1, 600)  # gpuops.fleet.alertmanager alone: no Node watch shares its window

    def script(port):
        return [get(port, "/readyz"), post(port, {"alerts": [alert("gpu-a")]})]

    answers, events = run(script, window=window)
    assert answers == [(200, "ready"), 202]
    assert events[0]["gpuops"]["node"] is None and events[0]["gpuops"]["unknown_node"] == "gpu-a"
