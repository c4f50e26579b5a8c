# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: one acting activation of a rulebook. Two activations of ``gpuops.fleet.gpu_nodes``
(an HA pair, or a restarted activation while the old process still runs) elect a leader on one ``coordination.k8s.io`` Lease,
as Kubernetes' controllers elect theirs (client-go ``tools/leaderelection``: the holder renews every ``renew_seconds``; a
candidate takes the Lease once it has seen the record unchanged for ``lease_seconds`` of its own clock, so the candidates'
clocks need not agree; a leader that cannot renew within its renew deadline stops acting). Only the leader watches, emits
and receives alerts; a standby waits. A leader that stops gives the Lease up, so its standby takes over at once; one that
dies is replaced within ``lease_seconds`` plus one ``renew_seconds``.

**No window twice.** At a renewal after they changed, the leader writes the nodes its fault window ran lately (``handover``: the node, when,
how many runs) into the Lease's annotation; a new leader seeds its window with them, so it never runs again, within the
flap window, a window the old leader ran (a node still unhealthy is offered again on the window's own backoff, as it
would have been). The new leader begins with the startup event (its first list). Pure but for ``Leases``."""

from __future__ import annotations

import json
import math
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import leases
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError

HANDOVER = "gpuops.fleet/window-runs"
KIND = "leader"
MAX_HANDOVER = 2000  # nodes: about 60 KiB of JSON, within a Lease's annotations (256 KiB)


class LeaderLost(GpuopsError):
    """The leader could not renew within its deadline, or another took the Lease: the source ends (its activation is
    restarted, then a standby)."""


class Elector:
    """One candidate ``identity`` for the Lease ``name`` (``lease_api``: a ``leases.Leases``). ``step(handover)`` tries once
    (take, or renew with ``handover`` written) and returns whether it leads; ``handed`` is what the previous leader wrote,
    read when this one took the Lease; ``give_up()`` frees it."""

    def __init__(self, lease_api, name, identity, lease_seconds=10, renew_seconds=2, clocks=(time.monotonic, time.time)):
        self.leases, self.name, self.identity = lease_api, name, identity
        self.lease_seconds, self.renew_seconds = lease_seconds, renew_seconds
        self.clock, self.wall = clocks  # this candidate's own clock (its observations), and the wall clock (the Lease's times)
        self.deadline = max(renew_seconds, lease_seconds * 2.0 / 3.0)  # client-go's RenewDeadline: 10 s of a 15 s lease
        self.observed = (None, None)  # the record's resourceVersion and when this candidate saw it change
        self.leading, self.renewed, self.handed, self.error = False, None, None, None

    def step(self, handover=None):
        now = self.clock()
        try:
            lease = self.leases.read(self.name)
            rv = ((lease or {}).get("metadata") or {}).get("resourceVersion")
            if rv != self.observed[0]:
                self.observed = (rv, now)
            holder = leases.holder(lease)
            mine = holder == self.identity
            if mine or holder is None or lease is None or now >= self.observed[1] + self.lease_seconds:
                annotations = {HANDOVER: json.dumps(handover, sort_keys=True, separators=(",", ":"))} if handover is not None else None
                written = self.leases.write(self.name, lease, leases.held_spec(lease, self.identity, self.lease_seconds, self.wall()),
                                            annotations=annotations, kind=KIND)
                if written is not None:
                    if not self.leading:
                        self.handed = read_handover(lease) if not mine else None
                    self.leading, self.renewed, self.error = True, now, None
                    self.observed = (((written.get("metadata") or {}).get("resourceVersion")), now)
                    return True
                if self.leading:  # another write came first: another candidate holds it now
                    self.leading = False
                    raise LeaderLost("%s: another activation took the Lease %s" % (self.identity, self.name))
            elif self.leading:
                self.leading = False
                raise LeaderLost("%s: the Lease %s is held by %s" % (self.identity, self.name, holder))
        except LeaderLost:
            raise
        except Exception as exc:  # the API away: a leader keeps leading until its renew deadline
            self.error = "%s: %s" % (type(exc).__name__, str(exc)[:200])
            if self.leading and now - self.renewed >= self.deadline:
                self.leading = False
                raise LeaderLost("%s: the Lease %s was not renewed for %.0f s (%s)" % (self.identity, self.name, now - self.renewed, self.error)) from None
        return self.leading

    def give_up(self):
        """A leader that stops frees the Lease (its standby takes it at once); anything else does nothing."""
        if not self.leading:
            return False
        self.leading = False
        try:
            lease = self.leases.read(self.name)
            if leases.holder(lease) != self.identity:
                return False
            return self.leases.write(self.name, lease, {"leaseDurationSeconds": 1, "leaseTransitions": leases.spec(lease).get("leaseTransitions") or 0},
                                     kind=KIND) is not None
        except Exception:  # noqa: BLE001 (stopping: the Lease lapses by itself)
            return False


def read_handover(lease):
    """The previous leader's ``{node: [epoch, runs]}`` from the Lease's annotation; what is not that shape is left out."""
    text = (((lease or {}).get("metadata") or {}).get("annotations") or {}).get(HANDOVER)
    try:
        found = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    if not isinstance(found, dict):
        return None
    out = {}
    for node, value in list(found.items())[:MAX_HANDOVER]:
        if (isinstance(node, str) and len(node) <= 253 and isinstance(value, list) and len(value) == 2
                and isinstance(value[0], (int, float)) and math.isfinite(value[0]) and isinstance(value[1], int) and 0 < value[1] < 1000):
            out[node] = [float(value[0]), value[1]]
    return out
