# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: ``coordination.k8s.io/v1`` Leases, the one way our controllers share a place
with an expiry (as Kubernetes' own controllers elect their leader: client-go ``tools/leaderelection``'s
``resourcelock.LeaseLock``). A Lease is held by ``spec.holderIdentity`` for ``spec.leaseDurationSeconds`` after its
``spec.renewTime``; it is taken or given up by a write at the resourceVersion read (the API server answers 409 to a
write that another holder's came before), so two takers cannot both win it. A holder that dies stops renewing, and the
Lease lapses by itself.

Two users: the fleet's kubelet restart places (``restart_slots.py``: N Leases, one per place) and the event source's
leader (``events/leader.py``: one Lease, renewed every few seconds). Pure but for ``Leases``, which reads and writes
through the API."""

from __future__ import annotations

import calendar
import re
import time

KIND_LABEL = "gpuops.fleet/lease"  # which of our uses a Lease serves (kubelet-restart, leader)
MICRO = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def micro(epoch):
    """An epoch as the API's MicroTime (RFC 3339 with microseconds, UTC)."""
    whole = int(epoch)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + ".%06dZ" % int(round((epoch - whole) * 1e6) % 1000000)


def parse_micro(text):
    """The epoch a MicroTime (or RFC 3339 time) names, or None where it is not one."""
    found = MICRO.match(text) if isinstance(text, str) else None
    if not found:
        return None
    parts = [int(x) for x in found.groups()[:6]]
    epoch = calendar.timegm((parts[0], parts[1], parts[2], parts[3], parts[4], parts[5], 0, 0, 0))
    if found.group(7):
        epoch += int(found.group(7)[:6].ljust(6, "0")) / 1e6
    zone = found.group(8)
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        epoch -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return epoch


def spec(lease):
    return (lease or {}).get("spec") or {}


def holder(lease):
    """The Lease's holder, or None where it is free (no holder, or an empty one)."""
    return spec(lease).get("holderIdentity") or None


def expires(lease):
    """When the Lease's hold ends (its renewTime plus its duration), or None where it is free or its times cannot be read
    (then it counts as lapsed)."""
    renewed = parse_micro(spec(lease).get("renewTime"))
    duration = spec(lease).get("leaseDurationSeconds")
    if holder(lease) is None or renewed is None or not isinstance(duration, int):
        return None
    return renewed + duration


def free(lease, now):
    """Whether the Lease may be taken at ``now`` (epoch): no holder, or its hold has lapsed."""
    end = expires(lease)
    return end is None or end <= now


def held_spec(lease, identity, seconds, now):
    """The spec of ``lease`` held by ``identity`` for ``seconds`` from ``now``: renewed where it holds it already, else taken
    (acquireTime now, one more transition)."""
    old = spec(lease)
    mine = holder(lease) == identity
    return {"holderIdentity": identity, "leaseDurationSeconds": int(seconds),
            "acquireTime": old.get("acquireTime") if mine and old.get("acquireTime") else micro(now), "renewTime": micro(now),
            "leaseTransitions": int(old.get("leaseTransitions") or 0) + (0 if mine else 1)}


class Leases:
    """The Leases of one namespace through the API (``api``: a ``CoordinationV1Api``); a lost race (409) is None, never an
    error; other API errors are raised (``api_exception``)."""

    def __init__(self, api, namespace, api_exception):
        self.api, self.namespace, self.api_exception = api, namespace, api_exception
        self.calls = 0

    def read(self, name):
        """The Lease as a dict (the API's JSON), or None where there is none."""
        self.calls += 1
        try:
            lease = self.api.read_namespaced_lease(name, self.namespace)
        except self.api_exception as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise
        return self.api.api_client.sanitize_for_serialization(lease)

    def list(self, kind):
        """``{name: Lease}``: the namespace's Leases of ``kind`` (our label ``gpuops.fleet/lease``), in one call."""
        self.calls += 1
        found = self.api.list_namespaced_lease(self.namespace, label_selector="%s=%s" % (KIND_LABEL, kind))
        serial = self.api.api_client.sanitize_for_serialization
        return dict((item.metadata.name, serial(item)) for item in found.items)

    def write(self, name, lease, new_spec, annotations=None, kind=None):
        """``name`` with ``new_spec`` (and ``annotations`` merged), written at ``lease``'s resourceVersion (created where
        ``lease`` is None, labelled with ``kind``): the Lease written, or None where another write came first (409: read
        again, decide again)."""
        self.calls += 1
        labels = {"app.kubernetes.io/managed-by": "gpuops.fleet"}
        if kind:
            labels[KIND_LABEL] = kind
        metadata = {"name": name, "namespace": self.namespace, "labels": labels}
        if lease is not None:
            metadata["resourceVersion"] = (lease.get("metadata") or {}).get("resourceVersion")
            metadata["annotations"] = dict((lease.get("metadata") or {}).get("annotations") or {})
            metadata["labels"] = dict((lease.get("metadata") or {}).get("labels") or {}, **labels)
        if annotations:
            metadata.setdefault("annotations", {}).update(annotations)
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": new_spec}
        try:
            if lease is None:
                written = self.api.create_namespaced_lease(self.namespace, body)
            else:
                written = self.api.replace_namespaced_lease(name, self.namespace, body)
        except self.api_exception as exc:
            if getattr(exc, "status", None) == 409:
                return None
            raise
        return self.api.api_client.sanitize_for_serialization(written)
