# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpuops.fleet.gpu_nodes: an ansible-rulebook event source of the GPU Nodes' health.

It lists the GPU Nodes, then watches them from the list's resourceVersion (bookmarks on), and puts typed events on the
rulebook's queue, each under the key ``gpuops``: ``startup`` (once per start: every node unhealthy now), ``gpu_unallocatable``
and ``gpu_restored`` (a GPU resource's allocatable below, or back towards, its capacity: the device plugin marked a GPU
Unhealthy or Healthy), ``node_rebooted`` (a new bootID), ``node_not_ready`` and ``node_ready``, ``remediation_step`` (our
quarantine annotation's step), ``node_removed``, and ``heartbeat`` (every ``heartbeat`` seconds). Each carries the node,
what changed (before and after), the resourceVersion and the time observed, and ``meta.hosts`` (the node: ansible-rulebook
limits a playbook to it). ``gpu_faults`` gathers the GPU faults of a short window (``settle_seconds``, 5) into one event
(``nodes``, ``meta.hosts``: one plan run for a storm), each node at most once per ``flap_seconds`` (600; a node of the window
run more recently is ``throttled``; ``gpu_faults_throttled`` where all were). The window is the ruleset's: the alerts of
``gpuops.fleet.alertmanager`` in the same ruleset add to it, so one fault seen by both runs once. ``node_reboots`` gathers
the ``node_rebooted`` events the same way (a rack that power-cycles is one checkpoint run, checkpoint_repair.yml), less the
nodes our remediation rebooted (they carry its taint: the remediation verifies them).

A watch that ends is resumed from the last resourceVersion; ``410 Gone`` makes it list again, and so does a reconnect after
an error (capped backoff, ``backoff_max``); a list emits exactly what changed while away, as every event is a change of
the node's state, never a notification as such (module_utils/_cluster/node_events.py), so none is emitted twice.

Options: DOCUMENTATION below, as ansible.eda declares its sources' (the docs site's "Event sources" page is written
from it, hack/eda_docs.py); a bad option fails the source, naming it.

Example::

    sources:
      - gpuops.fleet.gpu_nodes:
          label_selector: nvidia.com/gpu.present=true
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
short_description: Typed events of the GPU Nodes' health, from a watch of the Kubernetes API
description:
  - Lists the GPU Nodes, then watches them from the list's resourceVersion (bookmarks on), and puts typed events on the
    rulebook's queue, each under the key C(gpuops) with C(kind), the node, what changed (before and after), the
    resourceVersion and the time observed, and C(meta.hosts) (the node; ansible-rulebook limits a playbook to it).
  - "Kinds: C(startup) (once per start: every node unhealthy now), C(gpu_unallocatable) and C(gpu_restored) (a GPU resource's
    allocatable below, or back towards, its capacity), C(node_rebooted) (a new bootID), C(node_not_ready), C(node_ready),
    C(remediation_step) (the step our quarantine's annotation shows), C(node_removed), C(node_unreadable) (a Node whose
    data could not be read: that node only, the watch goes on) and C(heartbeat)."
  - C(gpu_faults) gathers the GPU faults of a short window (O(settle_seconds)) into one event for all its nodes, each node
    at most once per O(flap_seconds) (C(gpu_faults_throttled) where all were); a node still unhealthy after its window is
    offered again with a capped backoff (O(retry_max_seconds)). The window is the ruleset's, shared with
    M(gpuops.fleet.alertmanager)'s alerts. C(node_reboots) gathers reboots the same way, less the nodes our remediation
    rebooted (they carry its taint).
  - A watch that ends is resumed; C(410 Gone) and a reconnect after an error list again (capped backoff, O(backoff_max));
    a list emits exactly what changed while away, so no event is emitted twice.
  - It needs C(list) and C(watch) on nodes, nothing else (docs/rbac/gpu-nodes-events.yml). A bad option fails the source,
    naming it.
options:
  kubeconfig:
    description: Path of a kubeconfig file; none of the connection options, the in-cluster ServiceAccount or C(~/.kube/config).
    type: str
  context:
    description: The kubeconfig's context.
    type: str
  host:
    description: The API server's URL.
    type: str
  api_key:
    description: A bearer token for the API server.
    type: str
  validate_certs:
    description: Whether the API server's certificate is verified.
    type: bool
    default: true
  ca_cert:
    description: Path of the CA bundle that signs the API server's certificate.
    type: str
  gpu_resources:
    description: The GPU resources of a Node's capacity and allocatable (names or shell patterns; a comma-separated string too).
    type: list
    elements: str
    default: [nvidia.com/gpu, nvidia.com/mig-*, aliyun.com/gpu-mem]
  label_selector:
    description: A label selector of the Nodes to watch.
    type: str
    default: ""
  heartbeat:
    description: Seconds between C(heartbeat) events (1 to 3600).
    type: int
    default: 60
  backoff_max:
    description: The cap, in seconds, of the backoff between reconnects (1 to 600); the first retries are soon.
    type: int
    default: 30
  watch_seconds:
    description: Seconds a watch request lasts before it is resumed (10 to 1800).
    type: int
    default: 300
  settle_seconds:
    description: Seconds the fault window gathers faults before one C(gpu_faults) event (1 to 300); shared by the ruleset's sources.
    type: int
    default: 5
  flap_seconds:
    description: Seconds a node of a C(gpu_faults) event is not offered again (0 to 86400); shared by the ruleset's sources.
    type: int
    default: 600
  retry_max_seconds:
    description:
      - The cap, in seconds, of the backoff with which a node still unhealthy after its flap window is offered again (0 to
        86400; 0, never again); shared by the ruleset's sources.
    type: int
    default: 3600
"""

EXAMPLES = r"""
- name: GPU faults of the GPU Nodes, one playbook run per storm
  hosts: all
  sources:
    - gpuops.fleet.gpu_nodes:
        label_selector: nvidia.com/gpu.present=true
        settle_seconds: 5
  rules:
    - name: Remediate the faulty GPU nodes
      condition: event.gpuops.kind == "gpu_faults"
      action:
        run_playbook:
          name: gpuops.fleet.gpu_remediation
"""

import asyncio
import os
import sys
import threading
import time


def _import():
    """The collection's code: from the installed collections, else from the tree this file is in (ansible-rulebook loads
    a source by its path: the folder that holds ansible_collections/ is seven folders above this file's)."""
    try:
        from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import k8s_watch, node_events
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.abspath(os.path.join(here, *[os.pardir] * 7)))
        from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import k8s_watch, node_events
    return k8s_watch, node_events


k8s_watch, node_events = _import()
AUTH = ("kubeconfig", "context", "host", "api_key", "validate_certs", "ca_cert")


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class _Listener:
    """The watch's listener: each list and notification through the tracker, each event onto the queue; the GPU faults
    also into the window (``window``, a node_events.FaultWindow, or None)."""

    def __init__(self, tracker, emit, window=None, clock=time.monotonic, reboots=None):
        self.tracker, self.emit, self.window, self.clock, self.reboots = tracker, emit, window, clock, reboots

    def listed(self, items, resource_version, first):
        if first:
            start = self.tracker.start(items, resource_version, _now())
            self.emit(start)
            for bad in start["gpuops"]["nodes"]:  # a restarted activation acts on the GPUs withheld now
                if self.window is not None and node_events.withheld(self.tracker.views[bad["node"]]):
                    self.window.add({"gpuops": {"node": bad["node"]}}, self.clock())
        else:
            self._each(self.tracker.relist(items, resource_version, _now()))

    def event(self, kind, obj):
        self._each(self.tracker.apply(kind, obj, _now()))

    def _each(self, events):
        for event in events:
            self.emit(event)
            if self.window is not None and event["gpuops"]["kind"] == node_events.GPU_UNALLOCATABLE:
                self.window.add(event, self.clock())
            # a reboot of ours (the remediation's node_reboot step: the node carries our taint, which its kubelet can neither
            # write nor lift; never our annotation, which it may write to hide its reboot) is the remediation's to verify
            elif self.reboots is not None and event["gpuops"]["kind"] == node_events.NODE_REBOOTED and not self.tracker.views[event["gpuops"]["node"]]["quarantined"]:
                self.reboots.add(event, self.clock())


def _client(options):
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client

    auth = dict((k, options[k]) for k in AUTH if options.get(k) is not None)
    return get_api_client(**auth).client.client


def follow(options, emit, stop, client=None, clock=time.monotonic, window=None):
    """List, then watch until ``stop`` is set; every event through ``emit`` (runs in a thread). ``window``: the ruleset's
    fault window (node_events.shared), else one of its own."""
    from kubernetes.client import CoreV1Api

    client = client or _client(options)
    tracker = node_events.Tracker(options["gpu_resources"], by_label=bool(options["label_selector"]))
    kwargs = {"allow_watch_bookmarks": True}
    if options["label_selector"]:
        kwargs["label_selector"] = options["label_selector"]
    # the tracker keeps the views; the list comes 250 Nodes a call, each Node reduced to what a view reads
    watcher = k8s_watch.Watcher(CoreV1Api(client).list_node, _clock=clock, _keep=False, _page=250, _slim=node_events.slim, **kwargs)
    window = window or node_events.FaultWindow(options["settle_seconds"], options["flap_seconds"], again_max=options["retry_max_seconds"])
    window.known = tracker  # the alerts of the ruleset name a node only where this watch knows it as a GPU Node (its views now)
    reboots = node_events.FaultWindow(options["settle_seconds"], options["flap_seconds"], kind=node_events.NODE_REBOOTS, again_max=0)
    watcher.listener = _Listener(tracker, emit, window, clock, reboots)
    attempt, relist, beat = 0, True, clock() + options["heartbeat"]
    while not stop.is_set():
        try:
            if relist:
                watcher.list()
                relist = False
            due = (window.due(), reboots.due())
            until = min([beat, clock() + options["watch_seconds"]] + [d for d in due if d is not None])
            # back at once when an event opens a window, so it closes settle_seconds later, not at the next heartbeat
            watcher.wait(lambda dummy, due=due: stop.is_set() or (window.due(), reboots.due()) != due, until)
            attempt = 0
            for batch in (window.flush(clock(), _now()), reboots.flush(clock(), _now())):
                if batch:
                    emit(batch)
            if clock() >= beat:
                emit(tracker.heartbeat(_now()))
                beat = clock() + options["heartbeat"]
        except Exception as exc:  # the API server gone, a connection reset: back off, then list again and diff
            attempt += 1
            relist = True
            emit({"gpuops": {"kind": node_events.HEARTBEAT, "watched": len(tracker.views), "resource_version": tracker.resource_version,
                             "observed_at": _now(), "error": "%s: %s" % (type(exc).__name__, str(exc)[:200]), "reconnect_in":
                             node_events.backoff(attempt, options["backoff_max"])}})
            stop.wait(node_events.backoff(attempt, options["backoff_max"]))


async def main(queue, args):
    """ansible-rulebook's entry point."""
    options = node_events.check_options(args)
    window = node_events.shared(queue, options["settle_seconds"], options["flap_seconds"], options["retry_max_seconds"])
    loop = asyncio.get_running_loop()
    stop = threading.Event()

    def emit(event):
        asyncio.run_coroutine_threadsafe(queue.put(event), loop).result(timeout=60)

    try:
        await asyncio.to_thread(follow, options, emit, stop, window=window)
    finally:
        stop.set()


if __name__ == "__main__":
    # a quick look without ansible-rulebook: print the events (python gpu_nodes.py [kubeconfig])

    class _Print:
        async def put(self, event):
            print(event, flush=True)

    asyncio.run(main(_Print(), {"kubeconfig": sys.argv[1]} if len(sys.argv) > 1 else {}))
