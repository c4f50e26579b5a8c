# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the fleet's kubelet restart places. site.yml stops kubelet on at most
``gpuops_kubelet_restart_batch`` nodes at a time; a play's ``serial`` bounds one ``ansible-playbook``, but an AWX job run as N
slices is N of them, each deciding alone. So before a node's kubelet is stopped, its run takes one of the fleet's places, a
``coordination.k8s.io`` Lease ``gpuops-kubelet-restart-<i>`` (``leases.py``), and gives it back once kubelet runs again:
however many slices, jobs or controllers run, at most that many kubelets are stopped at once. A slice that dies keeps its
place until the Lease lapses (``hold_seconds``), then another run takes it.

A number is that many places; a percentage is of the cluster's GPU Nodes (``plan.gpu_fleet``: the fleet, never one slice's
share), at least one. Pure but for the Leases it is given."""

from __future__ import annotations

import math
import random
import re
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import leases
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError, ParameterError

PREFIX = "gpuops-kubelet-restart-"
KIND = "kubelet-restart"
LIMIT = re.compile(r"^(?:(?P<n>[1-9][0-9]{0,5})|(?P<p>[1-9][0-9]?|100)%)$")
MAX_PLACES = 1000


class NoPlace(GpuopsError):
    """No place came free within the wait (``holders``: who holds them)."""

    def __init__(self, identity, places, holders, waited):
        self.holders = holders
        super().__init__("%s: all %d of the fleet's kubelet restart places stayed taken for %d s (%s): no kubelet was stopped "
                         "here; raise gpuops_kubelet_restart_wait, or find the run that holds them (a dead run's lapse after "
                         "gpuops_kubelet_restart_hold seconds)" % (identity, places, waited, ", ".join(holders) or "none"))


def places(limit, fleet_size):
    """How many places ``limit`` (``5`` or ``10%``, as site.yml's ``gpuops_kubelet_restart_batch``) gives a fleet of
    ``fleet_size`` GPU Nodes."""
    found = LIMIT.match(str(limit).strip())
    if not found:
        raise ParameterError("limit", "must be a number of nodes (e.g. 5) or a percentage of the fleet (e.g. 10%%), got %r" % (limit,))
    if found.group("n"):
        return min(int(found.group("n")), MAX_PLACES)
    return min(MAX_PLACES, max(1, int(math.ceil(int(found.group("p")) * max(fleet_size, 0) / 100.0))))


def name(index):
    return "%s%d" % (PREFIX, index)


class Places:
    """``count`` places in ``lease_api``'s namespace (a ``leases.Leases``); ``hold`` one for ``identity`` (waiting for one to come
    free), ``give_back`` the one it holds."""

    def __init__(self, lease_api, count, clock=time.time, sleep=time.sleep, poll=2.0):
        self.leases, self.count, self.clock, self.sleep, self.poll = lease_api, count, clock, sleep, poll
        self.waited = 0.0

    def _read(self):
        """Every place, in one list call: ``{name: Lease or None}`` (None: not created yet; a place beyond ``count``, of a run
        with a larger limit, is not this run's to take)."""
        listed = self.leases.list(KIND)
        return dict((n, listed.get(n)) for n in (name(i) for i in range(self.count)))

    def hold(self, identity, seconds, wait):
        """The place's name ``identity`` now holds for ``seconds``: its own again (renewed) where it holds one, else the first
        free one; NoPlace where none came free within ``wait`` seconds."""
        started = self.clock()
        while True:
            now = self.clock()
            found = self._read()
            mine = [n for n, lease in sorted(found.items()) if leases.holder(lease) == identity]
            order = mine + [n for n, lease in sorted(found.items()) if n not in mine and leases.free(lease, now)]
            for place in order:
                written = self.leases.write(place, found[place], leases.held_spec(found[place], identity, seconds, now), kind=KIND)
                if written is not None:
                    self.waited = now - started
                    return place
            if now - started >= wait:
                raise NoPlace(identity, self.count, sorted(set(leases.holder(v) for v in found.values() if leases.holder(v))), now - started)
            # jittered, so the runs that wait do not ask together
            self.sleep(min(self.poll * (0.5 + random.random()), max(0.1, wait - (now - started))))

    def give_back(self, identity):
        """Every place ``identity`` holds made free, whatever the count (one write each; a lost race read again): the places
        given back."""
        given = []
        for dummy in range(5):
            found = self.leases.list(KIND)  # every place, whatever this run's limit
            held = [n for n, lease in sorted(found.items()) if leases.holder(lease) == identity]
            if not held:
                return given
            for place in held:
                old = leases.spec(found[place])
                freed = {"leaseDurationSeconds": old.get("leaseDurationSeconds") or 1, "leaseTransitions": old.get("leaseTransitions") or 0}
                if self.leases.write(place, found[place], freed, kind=KIND) is not None:
                    given.append(place)
        return given
