# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The event source gpuops.fleet.gpu_nodes' entry point, as ansible-rulebook runs it: its events on the queue, a bad option
named, and with its alertmanager option the receiver beside the watch, one fault window owned by the source. The watch itself
is tests/unit/plugins/module_utils/_cluster/events/test_watch.py's."""

from __future__ import annotations

import asyncio

import pytest


import eda_source

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import nodes
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import window as windows
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import options as source_options
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

pytest.importorskip("kubernetes")


def test_the_entry_point_puts_events_on_the_queue_and_names_a_bad_option(monkeypatch):
    module = eda_source.load()

    def follow(options, emit, stop, window=None):
        assert isinstance(window, windows.FaultWindow)  # the ruleset's window (windows.shared)
        emit({"gpuops": {"kind": "startup", "nodes": []}})

    monkeypatch.setattr(module, "follow", follow)

    async def go(args):
        queue = asyncio.Queue()
        await module.main(queue, args)
        return queue.get_nowait()

    assert asyncio.run(go({}))["gpuops"]["kind"] == "startup"
    with pytest.raises(ParameterError) as err:
        asyncio.run(go({"heartbeat": "never"}))
    assert err.value.field == "heartbeat"


def _free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _post(port, token, body):
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request("http://127.0.0.1:%d/alerts" % port, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + token})
    for dummy in range(100):  # the receiver starts beside the watch; as Alertmanager, a 5xx is sent again (it waits for the list)
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return answer.status
        except urllib.error.URLError as exc:
            if isinstance(exc, urllib.error.HTTPError):
                exc.close()
                if exc.code < 500:
                    return exc.code
            import time
            time.sleep(0.1)
    raise AssertionError("the receiver never listened on %d" % port)


def test_one_source_runs_the_watch_and_the_receiver_with_one_window_it_owns(monkeypatch):
    """Issue 58, item 3: gpu_nodes' alertmanager option runs the receiver beside the Node watch, one fault window owned by the
    source (never the ruleset's, which leans on ansible-rulebook's FilteredQueue): an alert for a GPU Node the watch knows is a
    gpu_alert event and joins the watch's window, whose gpu_faults names the node once."""
    module = eda_source.load("gpuops_gpu_nodes_one_source")
    seen = {}

    def follow(options, emit, stop, client=None, clock=None, window=None):
        seen["window"], seen["options"], seen["ready_before_list"] = window, options, window.ready()
        window.known = nodes.Tracker()  # the GPU Nodes the watch lists, as watch.follow does
        window.known.start([{"metadata": {"name": "gpu-a", "resourceVersion": "1"},
                             "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}}], "1", "T")
        stop.wait(30)

    monkeypatch.setattr(module, "follow", follow)
    port, token = _free_port(), "t0ken-0123456789abcdef"
    alert = {"status": "firing", "labels": {"alertname": "GPUXidErrors", "node": "gpu-a", "xid": "79"}, "annotations": {},
             "startsAt": "2026-12-06T10:00:00Z", "fingerprint": "f1"}

    async def go():
        queue = asyncio.Queue()
        task = asyncio.ensure_future(module.main(queue, {"settle_seconds": 1, "alertmanager": {"port": str(port), "token": token}}))
        status = await asyncio.to_thread(_post, port, token, {"alerts": [alert]})
        events = []
        while not [e for e in events if e["gpuops"]["kind"] == "gpu_faults"]:
            events.append(await asyncio.wait_for(queue.get(), 10))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return status, events, queue

    status, events, queue = asyncio.run(go())
    assert status == 202
    assert [e["gpuops"]["kind"] for e in events] == ["gpu_alert", "gpu_faults"]
    assert events[1]["gpuops"]["nodes"] == ["gpu-a"] and events[1]["meta"]["hosts"] == ["gpu-a", "localhost"]
    assert seen["options"]["alertmanager"]["settle_seconds"] == 1  # the receiver's window options are the source's
    assert seen["ready_before_list"] is False  # the alerts wait for the watch's first list (answered 503 before it)
    assert queue not in windows._SHARED and seen["window"] not in windows._SHARED.values()  # pylint: disable=protected-access


def test_the_receivers_options_are_checked_inside_the_sources_and_named_so():
    with pytest.raises(ParameterError) as err:
        source_options.check_nodes({"alertmanager": {"token": "t" * 20, "port": "x"}})
    assert err.value.field == "alertmanager.port"
    with pytest.raises(ParameterError) as err:
        source_options.check_nodes({"alertmanager": {"token": "t" * 20, "settle_seconds": 3}})
    assert err.value.field == "alertmanager.settle_seconds" and "beside alertmanager" in err.value.reason
    with pytest.raises(ParameterError) as err:
        source_options.check_nodes({"alertmanager": {"port": 5000}})
    assert err.value.field == "alertmanager.token" and "t" * 20 not in str(err.value)
    with pytest.raises(ParameterError) as err:
        source_options.check_nodes({"alertmanager": "on"})
    assert err.value.field == "alertmanager"
    off = source_options.check_nodes({"alertmanager": {"enabled": "false", "token": "", "token_file": ""}})
    assert off["alertmanager"]["enabled"] is False
    on = source_options.check_nodes({"settle_seconds": "7", "alertmanager": {"enabled": "true", "token": "t" * 20, "token_file": ""}})
    assert on["alertmanager"]["token"] == "t" * 20 and on["alertmanager"]["settle_seconds"] == 7 and on["alertmanager"]["port"] == 5000


@pytest.mark.parametrize("layout", ["checkout", "installed"])
def test_the_quick_look_runs_from_a_git_checkout_and_from_an_installed_collection(tmp_path, layout):
    """Issue 59, item 5: ``python extensions/eda/plugins/event_source/gpu_nodes.py ~/.kube/config`` failed from a git checkout
    (No module named 'ansible_collections.gpuops'). Run with no PYTHONPATH and another working directory, as a newcomer would:
    it gets as far as the kubeconfig, which it names in one line, never a traceback."""
    import os
    import shutil
    import subprocess
    import sys

    root = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 3))
    if layout == "installed":  # a copy where ansible-galaxy installs it
        top = tmp_path / "collections" / "ansible_collections" / "gpuops" / "fleet"
        shutil.copytree(os.path.join(root, "plugins"), str(top / "plugins"))
        shutil.copytree(os.path.join(root, "extensions", "eda"), str(top / "extensions" / "eda"))
        source = top / "extensions" / "eda" / "plugins" / "event_source" / "gpu_nodes.py"
    else:
        source = os.path.join(root, "extensions", "eda", "plugins", "event_source", "gpu_nodes.py")
    env = dict((k, v) for k, v in os.environ.items() if k not in ("PYTHONPATH", "ANSIBLE_COLLECTIONS_PATH"))
    proc = subprocess.run([sys.executable, str(source), str(tmp_path / "no-kubeconfig")], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and "ModuleNotFoundError" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.startswith("gpu_nodes: ") and "kube-config" in proc.stderr, proc.stderr[-2000:]
