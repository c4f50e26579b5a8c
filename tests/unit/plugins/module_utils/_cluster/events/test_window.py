# -*- coding: utf-8 -*-
"""The fault window (module_utils/_cluster/events/window.py): a storm is one event, a flapping node runs once per flap
window, no fault is lost (a node still unhealthy is offered again with a capped backoff), the reconnect backoff."""

from __future__ import annotations


from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import nodes
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import window as windows

T = "2026-11-29T10:00:00Z"


def _withheld(name, free):
    return {"name": name, "resource_version": str(free), "gpus": {"nvidia.com/gpu": [8, free]}, "boot_id": None, "ready": "True",
            "step": None, "quarantined": False}


def test_the_backoff_starts_soon_and_doubles_up_to_its_cap():
    """Issue 57, item 9: the first reconnect waited 2 s, then 4, 8, 16, 30: an API server back in 3 s delayed a fault's event by
    up to 30 s. It starts at half a second."""
    assert [windows.backoff(n, 30) for n in range(1, 10)] == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert windows.backoff(40, 5) == 5


def test_a_window_gathers_a_storm_into_one_event_and_runs_a_flapping_node_once_per_flap_window():
    window = windows.FaultWindow(settle=5, flap=600, again_max=0)  # nothing offered again (test_no_fault_is_lost_only_delayed)
    assert window.due() is None and window.flush(0, T) is None
    for i, name in enumerate(["n%02d" % i for i in range(20)]):
        window.add({"gpuops": {"node": name}}, 100 + i * 0.2)  # 20 nodes within 4 s
    window.add({"gpuops": {"node": "n00"}}, 104)  # a node counted once
    assert window.due() == 105 and window.flush(104.9, T) is None
    storm = window.flush(105, T)
    assert storm["gpuops"]["kind"] == "gpu_faults" and storm["gpuops"]["nodes"] == ["n%02d" % i for i in range(20)]
    assert storm["meta"]["hosts"] == storm["gpuops"]["nodes"] + ["localhost"] and storm["gpuops"]["throttled"] == []
    assert window.due() is None
    window.add({"gpuops": {"node": "n03"}}, 200)  # n03 flaps: within its flap window
    window.add({"gpuops": {"node": "x"}}, 201)
    again = window.flush(205, T)
    assert (again["gpuops"]["nodes"], again["gpuops"]["throttled"], again["meta"]["hosts"]) == (["x"], ["n03"], ["x", "localhost"])
    window.add({"gpuops": {"node": "x"}}, 300)
    only = window.flush(305, T)
    assert only["gpuops"]["kind"] == "gpu_faults_throttled" and "meta" not in only and only["gpuops"]["throttled"] == ["x"]
    window.add({"gpuops": {"node": "x"}}, 900)  # its flap window over: it runs again
    assert window.flush(905, T)["gpuops"]["nodes"] == ["x"]


def test_no_fault_is_lost_only_delayed_a_node_still_unhealthy_is_offered_again_with_a_capped_backoff():
    """Issue 57, item 9: a node's real fault within its flap window became gpu_faults_throttled, which no rule acts on, and was
    never offered again; a run that failed (the API server down) was never run again. Now a node still unhealthy (a GPU
    withheld in the watch's view, or a fault alert firing) is offered again: flap seconds after its run, then twice as long
    after each run, at most retry_max_seconds; a node healthy again is forgotten."""
    views = {"a": _withheld("a", 8), "b": _withheld("b", 7)}
    window = windows.FaultWindow(settle=5, flap=600, again_max=2400)
    window.known = views
    window.alert({"gpuops": {"kind": "gpu_alert", "node": "a", "fault": True, "status": "firing", "fingerprint": "f1", "alert": "GPUXidErrors"}})
    window.add({"gpuops": {"node": "a"}}, 0)  # an alert runs a (its GPUs not withheld yet)
    assert window.flush(5, T)["gpuops"]["nodes"] == ["a"]
    views["a"] = _withheld("a", 7)  # a's real fault, 100 s later: within its flap window
    window.add({"gpuops": {"node": "a"}}, 100)
    window.add({"gpuops": {"node": "b"}}, 100)  # b loses a GPU; its run will fail (the API server is down)
    first = window.flush(105, T)
    assert (first["gpuops"]["nodes"], first["gpuops"]["throttled"]) == (["b"], ["a"])
    assert window.due() == 605  # a, when its flap window ends
    again = window.flush(605, T)
    assert (again["gpuops"]["kind"], again["gpuops"]["nodes"], again["gpuops"]["again"]) == ("gpu_faults", ["a"], {"a": 2})
    assert again["meta"]["hosts"] == ["a", "localhost"]
    assert window.due() == 705  # b: its run at 105 did nothing (it failed), its GPU is still withheld
    assert window.flush(705, T)["gpuops"]["again"] == {"b": 2}
    # each further run waits twice as long (600, 1,200, 2,400), at most retry_max_seconds (2,400): never a loop
    times = []
    now = 705
    for dummy in range(8):
        now = window.due()
        batch = window.flush(now, T)
        times.append((now, batch["gpuops"]["nodes"]))
    assert [t for t, nodes in times if "b" in nodes][:3] == [705 + 1200, 705 + 1200 + 2400, 705 + 1200 + 4800]
    # healthy again: forgotten (no event), and the window has nothing due for it
    views["a"], views["b"] = _withheld("a", 8), _withheld("b", 8)
    window.alert({"gpuops": {"kind": "gpu_alert", "node": "a", "fault": False, "status": "resolved", "fingerprint": "f1"}})
    for dummy in range(3):
        due = window.due()
        if due is None:
            break
        assert window.flush(due, T) is None
    assert window.due() is None and window.attempts == {}


def test_a_firing_fault_alert_keeps_its_node_offered_again_until_it_is_resolved():
    window = windows.FaultWindow(settle=5, flap=600)
    window.known = {"c": _withheld("c", 8)}  # the plugin withholds nothing: only the alert says c is faulty
    fired = {"gpuops": {"kind": "gpu_alert", "node": "c", "fault": True, "status": "firing", "fingerprint": "f9", "alert": "GPUXidErrors"}}
    window.alert(fired)
    window.add(fired, 0)
    assert window.flush(5, T)["gpuops"]["nodes"] == ["c"]
    assert window.flush(605, T)["gpuops"]["again"] == {"c": 2}
    window.alert(dict(fired, gpuops=dict(fired["gpuops"], fault=False, status="resolved")))
    assert window.flush(window.due(), T) is None and window.due() is None


def test_a_window_a_node_watch_shares_is_ready_only_after_its_first_list():
    window = windows.FaultWindow(5, 600)
    assert window.ready()  # no Node watch: the alerts source alone
    window.expect_watch()
    assert not window.ready()
    window.known = nodes.Tracker()
    assert not window.ready()
    window.known.start([], "1", "T")
    assert window.ready()
