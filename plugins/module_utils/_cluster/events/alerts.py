# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: Alertmanager's webhook notifications as GPU events, pure (``webhook.py`` serves
the HTTP side, run by the source ``gpuops.fleet.gpu_nodes`` with its ``alertmanager`` option, or ``gpuops.fleet.alertmanager``).

A notification is Alertmanager's webhook payload (version 4: ``status``, ``receiver``, ``groupLabels``, ``alerts``: each with
``status``, ``labels``, ``annotations``, ``startsAt``, ``endsAt``, ``fingerprint``; prometheus.io/docs/alerting/latest/
configuration/#webhook_config). Each alert becomes one ``gpu_alert`` event; its node is the first of ``node_labels`` the
alert carries (the gpu_monitoring rules' series carry ``node``, dcgm-exporter's ``Hostname``), only where it is a GPU Node
the ruleset's Node watch knows (``node_of``), so the rulebook limits the playbook to the inventory host of that Node (the
k8s_gpu_nodes inventory names hosts after their Nodes) and never to a pattern. A firing alert named in ``fault_alerts`` is a
GPU fault: the source adds it to the fault window the Node watch uses (window.FaultWindow), so an alert and the device
plugin's withheld GPU on the same node run once.

Everything an alert says is data: labels are bounded (count and length), never templated, and the request's headers
(the token) are never part of an event.
"""

from __future__ import annotations

import hmac

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import kinds, nodes
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events.options import FAULT_ALERTS, MAX_TEXT, NODE_LABELS, host_name, label_name
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError

MAX_LABELS = 64
MAX_ALERTS = 1000
__all__ = ("FAULT_ALERTS", "NODE_LABELS")


class PayloadError(GpuopsError):
    """A notification that is not Alertmanager's webhook payload (answered 400, nothing emitted)."""


def authorized(header, token):
    """Whether an ``Authorization`` header carries the token (``Bearer <token>``), compared in constant time."""
    if not isinstance(header, str) or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer "):].strip().encode("utf-8", "replace"), token.encode("utf-8"))


def _text(value, size=MAX_TEXT):
    return value[:size] if isinstance(value, str) else None


def _labels(alert):
    labels = alert.get("labels")
    if not isinstance(labels, dict):
        raise PayloadError("an alert without labels")
    return dict((k, _text(v)) for k, v in labels.items() if label_name(k) and isinstance(v, str))


def _bounded(labels, keep):
    """At most MAX_LABELS labels: ``keep`` (the alert's name, its node labels) first, then the others by name."""
    first = [k for k in keep if k in labels]
    rest = sorted(k for k in labels if k not in first)
    return dict((k, labels[k]) for k in (first + rest)[:MAX_LABELS])


def node_of(labels, node_labels, known=None):
    """``(node, unknown)``: the alert's node, the first of ``node_labels`` it carries, where it is a GPU Node the ruleset's Node
    watch knows (``known``: its names; None: no Node watch shares the ruleset, so no name is known) and a name an inventory
    host may have; else None and the value it named (bounded text, for the event), or None where it named none. A label's
    value is the exporter's word (dcgm-exporter's ``Hostname`` is written on the node itself): it never names a host the
    watch does not know, nor an Ansible pattern (``all``, ``ungrouped``) that would widen the playbook's limit."""
    for name in node_labels:
        value = labels.get(name)
        if value:
            if host_name(value) and known is not None and value in known:
                return value, None
            return None, value[:MAX_TEXT]
    return None, None


def events(payload, options, observed, known=None):
    """The ``gpu_alert`` events of one notification; PayloadError where it is not Alertmanager's payload. ``known``: the GPU
    Nodes' names the ruleset's Node watch knows (``node_of``)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("alerts"), list):
        raise PayloadError("not Alertmanager's webhook payload: a JSON object with an alerts list")
    if len(payload["alerts"]) > MAX_ALERTS:
        raise PayloadError("more than %d alerts in one notification (Alertmanager's max_alerts bounds it)" % MAX_ALERTS)
    out = []
    for alert in payload["alerts"]:
        if not isinstance(alert, dict):
            raise PayloadError("an alert that is not an object")
        labels = _labels(alert)
        name, status = labels.get("alertname"), alert.get("status")
        if status not in ("firing", "resolved"):
            raise PayloadError("an alert whose status is not firing or resolved")
        node, unknown = node_of(labels, options["node_labels"], known)
        event = {"gpuops": {"kind": kinds.GPU_ALERT, "alert": name, "status": status, "node": node, "unknown_node": unknown,
                            "labels": _bounded(labels, ["alertname"] + options["node_labels"]),
                            "fault": bool(node) and status == "firing" and name in options["fault_alerts"],
                            "starts_at": _text(alert.get("startsAt"), 64), "fingerprint": _text(alert.get("fingerprint"), 64),
                            "receiver": _text(payload.get("receiver")), "observed_at": observed}}
        if node:
            event["meta"] = {"hosts": nodes.limit([node])}
        out.append(event)
    return out
