# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the Node watch of the event source ``gpuops.fleet.gpu_nodes``: list, then watch
the GPU Nodes through the Kubernetes API (``k8s_watch``), each list and notification through the tracker (``nodes.py``), each
event out; the GPU faults into the fault window (``window.py``), the reboots into their own. Runs in a thread (the
kubernetes client blocks); a lost connection is backed off, then listed again (a list emits exactly what changed while
away)."""

from __future__ import annotations

import time

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import k8s_watch
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import due as dues
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import kinds, nodes
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import window as windows

AUTH = ("kubeconfig", "context", "host", "api_key", "validate_certs", "ca_cert")


_NOW = [None, None]  # the second and its text: a watch event's observed_at, formatted once a second, not once an event


def _now():
    second = int(time.time())
    if _NOW[0] != second:
        _NOW[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))]
    return _NOW[1]


class _Listener:
    """The watch's listener: each list and notification through the tracker, each event onto the queue; the GPU faults
    also into the window (``window``, a window.FaultWindow, or None)."""

    def __init__(self, tracker, emit, window=None, clock=time.monotonic, reboots=None):
        self.tracker, self.emit, self.window, self.clock, self.reboots = tracker, emit, window, clock, reboots

    def listed(self, items, resource_version, first):
        if first:
            start = self.tracker.start(items, resource_version, _now())
            self.emit(start)
            for bad in start["gpuops"]["nodes"]:  # a restarted activation acts on the GPUs withheld now
                if self.window is not None and nodes.withheld(self.tracker.views[bad["node"]]):
                    self.window.add({"gpuops": {"node": bad["node"]}}, self.clock())
        else:
            self._each(self.tracker.relist(items, resource_version, _now()))

    def event(self, kind, obj):
        self._each(self.tracker.apply(kind, obj, _now()))

    def _each(self, events):
        for event in events:
            self.emit(event)
            if self.window is not None and event["gpuops"]["kind"] == kinds.GPU_UNALLOCATABLE:
                self.window.add(event, self.clock())
            # a reboot of ours (the remediation's node_reboot step: the node carries our taint, which its kubelet can neither
            # write nor lift; never our annotation, which it may write to hide its reboot) is the remediation's to verify
            elif self.reboots is not None and event["gpuops"]["kind"] == kinds.NODE_REBOOTED and not self.tracker.views[event["gpuops"]["node"]]["quarantined"]:
                self.reboots.add(event, self.clock())


def client_of(options):
    """The API client kubernetes.core builds from the source's connection options."""
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client

    auth = dict((k, options[k]) for k in AUTH if options.get(k) is not None)
    return get_api_client(**auth).client.client


def _checker(options, api):
    """The waiting remediations' check (due.py), or None where ``due_seconds`` is 0."""
    from kubernetes.client.exceptions import ApiException

    if not options["due_seconds"]:
        return None
    return dues.Checker(api, options["ledger_namespace"], ApiException, options["retry_max_seconds"])


def _heartbeat(tracker, checker):
    """The heartbeat event, with ``due_error`` where the last check of the waiting remediations could not read the API."""
    event = tracker.heartbeat(_now())
    if checker is not None and checker.error:
        event["gpuops"]["due_error"] = checker.error
    return event


def follow(options, emit, stop, client=None, clock=time.monotonic, window=None):
    """List, then watch until ``stop`` is set; every event through ``emit`` (runs in a thread). ``window``: the ruleset's
    fault window (window.shared), else one of its own. Every ``due_seconds`` the waiting remediations are checked
    (due.py: ``remediation_due``)."""
    from kubernetes.client import CoreV1Api

    client = client or client_of(options)
    checker = _checker(options, CoreV1Api(client))
    tracker = nodes.Tracker(options["gpu_resources"], by_label=bool(options["label_selector"]))
    kwargs = {"allow_watch_bookmarks": True}
    if options["label_selector"]:
        kwargs["label_selector"] = options["label_selector"]
    # the tracker keeps the views; the list comes 250 Nodes a call, each Node reduced to what a view reads
    watcher = k8s_watch.Watcher(CoreV1Api(client).list_node, _clock=clock, _keep=False, _page=250, _slim=nodes.slim, **kwargs)
    window = window or windows.FaultWindow(options["settle_seconds"], options["flap_seconds"], again_max=options["retry_max_seconds"])
    window.known = tracker  # the alerts of the ruleset name a node only where this watch knows it as a GPU Node (its views now)
    reboots = windows.FaultWindow(options["settle_seconds"], options["flap_seconds"], kind=kinds.NODE_REBOOTS, again_max=0)
    watcher.listener = _Listener(tracker, emit, window, clock, reboots)
    attempt, relist, beat = 0, True, clock() + options["heartbeat"]
    check_at = clock() + (options["due_seconds"] or 0)
    while not stop.is_set():
        try:
            if relist:
                watcher.list()
                relist = False
            due = (window.due(), reboots.due())
            until = min([beat, clock() + options["watch_seconds"]] + [d for d in due if d is not None] + ([check_at] if checker else []))
            # back at once when an event opens a window, so it closes settle_seconds later, not at the next heartbeat (only an
            # opening moves a window's due time between two flushes: a counter, not the due times computed at every event)
            opens = (window.opens, reboots.opens)
            watcher.wait(lambda dummy, opens=opens: stop.is_set() or (window.opens, reboots.opens) != opens, until)
            attempt = 0
            for batch in (window.flush(clock(), _now()), reboots.flush(clock(), _now())):
                if batch:
                    emit(batch)
            if checker is not None and clock() >= check_at:
                for event in checker.check(tracker.views, time.time(), _now()):
                    emit(event)
                check_at = clock() + options["due_seconds"]
            if clock() >= beat:
                emit(_heartbeat(tracker, checker))
                beat = clock() + options["heartbeat"]
        except Exception as exc:  # the API server gone, a connection reset: back off, then list again and diff
            attempt += 1
            relist = True
            emit({"gpuops": {"kind": kinds.HEARTBEAT, "watched": len(tracker.views), "resource_version": tracker.resource_version,
                             "observed_at": _now(), "error": "%s: %s" % (type(exc).__name__, str(exc)[:200]), "reconnect_in":
                             windows.backoff(attempt, options["backoff_max"])}})
            stop.wait(windows.backoff(attempt, options["backoff_max"]))
