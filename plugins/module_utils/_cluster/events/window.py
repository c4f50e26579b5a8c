# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the fault window of the event sources, pure but for its lock: GPU faults (a Node
watch's withheld GPUs, Alertmanager's fault alerts) gathered into one ``gpu_faults`` event per short window, each node at most
once per flap window, a node still unhealthy offered again with a capped backoff; reboots the same way (``node_reboots``).
One source owns it (``gpuops.fleet.gpu_nodes``, with its ``alertmanager`` option for the alerts); ``shared`` is the older
form's, two sources of one ruleset."""

from __future__ import annotations

import threading
import weakref

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events.kinds import GPU_FAULTS, THROTTLED
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events.nodes import limit, withheld
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError


class FaultWindow:
    """GPU faults gathered into one event per short window (a storm is one plan run, so the same-signal breaker sees its
    nodes together), and each node at most once per ``flap`` seconds (a flapping node runs once per window).

    ``add`` a ``gpu_unallocatable`` event; ``due()`` is when the window closes (``settle`` seconds after its first fault) or a
    node is offered again, whichever is first; ``flush(now)`` the ``gpu_faults`` event once it has closed: ``nodes``
    (``meta.hosts``: the playbook's limit), ``throttled`` (nodes of the window run less than ``flap`` seconds ago) and
    ``again`` (nodes offered again, with their attempt); ``gpu_faults_throttled`` where every node was; None before the window
    closes. ``kind`` names the event: ``node_reboots`` gathers the reboots (checkpoint_repair.yml).

    **No fault is lost, only delayed.** A node that ran and is still unhealthy (``still``: the Node watch sees a GPU withheld, or
    a fault alert of it still fires) is offered again in a later window: ``flap`` seconds (at least ``MIN_AGAIN``) after its
    run, then twice as long after each further run, at most ``again_max`` seconds (a run that keeps failing is never a loop).
    So a fault throttled within the flap window, and a run that failed (the API server restarting), are run again; a node
    healthy again is forgotten. ``again_max`` 0 offers nothing again."""

    MIN_AGAIN = 60

    def __init__(self, settle, flap, kind=GPU_FAULTS, again_max=3600):
        self.settle, self.flap, self.kind, self.again_max = settle, flap, kind, again_max
        self.opened, self.nodes, self.last_run = None, [], {}
        self.attempts = {}  # node -> its runs since it was last seen healthy
        self.firing = {}  # node -> the fingerprints of its fault alerts that fire (the alerts source's)
        # the GPU Nodes the ruleset's Node watch knows (its tracker's views, by name); None where no Node watch shares the window:
        # an alert names a node only where it is one of them (alerts.node_of)
        self.known = None
        self.watching = False  # a Node watch shares this window (``expect_watch``): the alerts wait for its first list
        self.opens = 0  # how many times a fault opened the window: what the watch compares to know its due time moved
        self.lock = threading.RLock()  # the sources of one ruleset share a window (``shared``): the Node watch runs in a thread

    def expect_watch(self):
        """A Node watch shares this window (said before it and a receiver start): until its first list, ``ready()`` is
        False, so the receiver answers alerts 503 (Alertmanager sends them again) rather than judge every node unknown."""
        with self.lock:
            self.watching = True

    def ready(self):
        """Whether an alert's node can be judged: no Node watch shares the window, or its first list has come."""
        with self.lock:
            return not self.watching or bool(self.known is not None and getattr(self.known, "listed", False))

    def add(self, event, now):
        node = event["gpuops"]["node"]
        with self.lock:
            if self.opened is None:
                self.opened = now
                self.opens += 1
            if node not in self.nodes:
                self.nodes.append(node)

    def alert(self, event):
        """A ``gpu_alert`` of a known node: a firing fault alert keeps its node unhealthy until it is resolved."""
        node, fingerprint = event["gpuops"].get("node"), event["gpuops"].get("fingerprint") or event["gpuops"].get("alert")
        if not node:
            return
        with self.lock:
            held = self.firing.setdefault(node, set())
            if event["gpuops"].get("fault"):
                held.add(fingerprint)
            elif event["gpuops"].get("status") == "resolved":
                held.discard(fingerprint)
            if not held:
                self.firing.pop(node, None)

    def still(self, node):
        """Whether ``node`` is still unhealthy: a GPU withheld in the Node watch's view, or a fault alert of it firing."""
        view = (self.known or {}).get(node)
        return bool(view and withheld(view)) or bool(self.firing.get(node))

    def _again_at(self, node):
        tries = self.attempts.get(node, 0)
        if not tries or not self.again_max or node not in self.last_run:
            return None
        return self.last_run[node] + min(max(self.flap, self.MIN_AGAIN) * 2 ** min(tries - 1, 20), max(self.again_max, self.flap))

    def handover(self, now, wall, most=2000):
        """``{node: [epoch, runs]}``: the nodes this window ran whose flap or backoff is not over (for a standby that takes
        over: events/leader.py), the latest ``most``."""
        horizon = max(self.flap, self.MIN_AGAIN, self.again_max)
        with self.lock:
            recent = sorted(((t, n) for n, t in self.last_run.items() if now - t < horizon), reverse=True)[:most]
            # whole seconds: the same runs give the same handover, so the leader writes it only when it changed
            return dict((n, [int(round(wall - (now - t))), max(1, self.attempts.get(n, 1))]) for t, n in recent)

    def seed(self, runs, now, wall):
        """The previous leader's ``handover``: its nodes count as run when it ran them (never run again within the flap
        window), offered again on the same backoff."""
        with self.lock:
            for node, (epoch, tries) in (runs or {}).items():
                at = now - max(0.0, wall - epoch)
                if at > self.last_run.get(node, -float("inf")):
                    self.last_run[node] = at
                    self.attempts[node] = max(self.attempts.get(node, 0), tries)

    def due(self):
        with self.lock:
            times = [self.opened + self.settle] if self.opened is not None else []
            times += [t for t in (self._again_at(n) for n in list(self.attempts)) if t is not None]
            return min(times) if times else None

    def flush(self, now, observed):
        with self.lock:
            self._again(now)
            return self._flush(now, observed)

    def _again(self, now):
        """The nodes due to be offered again, into the window where they are still unhealthy; forgotten where healthy again."""
        for node in list(self.attempts):
            at = self._again_at(node)
            if at is None or now < at:
                continue
            if not self.still(node):
                self.attempts.pop(node, None)
                continue
            if self.opened is None:
                self.opened = now - self.settle  # due now: the window closes at once
            if node not in self.nodes:
                self.nodes.append(node)

    def _flush(self, now, observed):
        if self.opened is None or now < self.opened + self.settle:
            return None
        due_again = set(n for n in self.nodes if (self._again_at(n) or float("inf")) <= now)
        run = [n for n in self.nodes if n in due_again or now - self.last_run.get(n, -float("inf")) >= self.flap]
        throttled = [n for n in self.nodes if n not in run]
        again = dict((n, self.attempts.get(n, 0) + 1) for n in run if n in due_again)
        for node in run:
            self.last_run[node] = now
            self.attempts[node] = self.attempts.get(node, 0) + 1
        for node in throttled:  # not lost: offered again when its time comes, if it is still unhealthy
            self.attempts.setdefault(node, 1)
        self.opened, self.nodes = None, []
        if not run:  # every node of the window ran less than ``flap`` seconds ago: said, offered again later
            return {"gpuops": {"kind": self.kind + THROTTLED, "nodes": [], "throttled": throttled, "window": self.settle,
                               "observed_at": observed}}
        return {"gpuops": {"kind": self.kind, "nodes": run, "throttled": throttled, "again": again, "window": self.settle,
                           "observed_at": observed}, "meta": {"hosts": limit(run)}}


_SHARED = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def shared(queue, settle, flap, retry_max=3600):
    """The fault window of the ruleset whose event queue is ``queue``: the Node watch and the alerts of one ruleset add to
    one window, so a GPU fault seen by both (the device plugin withheld it; an XID alert fired) runs once, and a storm seen
    by both is still one plan run. The sources must agree on ``settle_seconds`` and ``flap_seconds``.

    ansible-rulebook gives each source its own ``FilteredQueue`` around the ruleset's queue, as ``.queue``
    (ansible_rulebook/engine.py, 1.3.2): the ruleset's queue is the key."""
    queue = getattr(queue, "queue", queue)
    with _SHARED_LOCK:
        window = _SHARED.get(queue)
        if window is None:
            window = _SHARED[queue] = FaultWindow(settle, flap, again_max=retry_max)
        for key, mine, theirs in (("settle_seconds", settle, window.settle), ("flap_seconds", flap, window.flap),
                                  ("retry_max_seconds", retry_max, window.again_max)):
            if mine != theirs:
                raise ParameterError(key, "%s here, %s in another source of this ruleset: the sources of one ruleset share one fault "
                                     "window, give them the same %s" % (mine, theirs, key))
        return window


def backoff(attempt, cap):
    """Seconds to wait before reconnect ``attempt``: 0.5, 1, 2, 4, ... at most ``cap`` (a first retry soon: an API server that
    restarts is back in seconds, and every second of backoff delays a fault's event)."""
    return min(cap, 0.5 * 2 ** min(max(attempt, 1) - 1, 16))
