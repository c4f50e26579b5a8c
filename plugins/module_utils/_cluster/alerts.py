# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: Alertmanager's webhook notifications as GPU events, pure (the event source
``gpuops.fleet.alertmanager`` serves the HTTP side; ``extensions/eda/plugins/event_source/alertmanager.py``).

A notification is Alertmanager's webhook payload (version 4: ``status``, ``receiver``, ``groupLabels``, ``alerts``: each with
``status``, ``labels``, ``annotations``, ``startsAt``, ``endsAt``, ``fingerprint``; prometheus.io/docs/alerting/latest/
configuration/#webhook_config). Each alert becomes one ``gpu_alert`` event; its node is the first of ``node_labels`` the
alert carries (the gpu_monitoring rules' series carry ``node``, dcgm-exporter's ``Hostname``), only where it is a GPU Node
the ruleset's Node watch knows (``node_of``), so the rulebook limits the playbook to the inventory host of that Node (the
k8s_gpu_nodes inventory names hosts after their Nodes) and never to a pattern. A firing alert named in ``fault_alerts`` is a
GPU fault: the source adds it to the fault window the Node watch uses (node_events.FaultWindow), so an alert and the device
plugin's withheld GPU on the same node run once.

Everything an alert says is data: labels are bounded (count and length), never templated, and the request's headers
(the token) are never part of an event.
"""

from __future__ import annotations

import hmac
import re

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import node_events
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import as_bool
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError, ParameterError

# the gpu_monitoring role's rules (roles/gpu_monitoring/templates/rules.yml.j2) that say a GPU is faulty
FAULT_ALERTS = ("GPUXidErrors", "GPURecoveryActionRequired", "GPURowRemapFailure", "GPULost")
NODE_LABELS = ("node", "Hostname", "kubernetes_node")
MIN_TOKEN = 16
MAX_LABELS = 64
MAX_ALERTS = 1000
_PATH = re.compile(r"\A/[A-Za-z0-9._~/-]{0,127}\Z")
_LABEL = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
_HOST = re.compile(r"\A[A-Za-z0-9.:-]{1,253}\Z")


class PayloadError(GpuopsError):
    """A notification that is not Alertmanager's webhook payload (answered 400, nothing emitted)."""


def check_options(args, read=None):
    """The source's options, checked and completed; ParameterError names the option. ``read(path)`` reads a file (the
    token's)."""
    out = {"host": "127.0.0.1", "port": 5000, "path": "/alerts", "token": None, "token_file": None, "certfile": None, "keyfile": None,
           "node_labels": list(NODE_LABELS), "fault_alerts": list(FAULT_ALERTS), "max_bytes": 1048576,
           "settle_seconds": 5, "flap_seconds": 600, "retry_max_seconds": 3600, "enabled": True, "read_timeout": 10,
           "max_connections": 256}
    for key, value in (args or {}).items():
        if key not in out:
            raise ParameterError(str(key), "is not an option of gpuops.fleet.alertmanager (known: %s)" % ", ".join(sorted(out)))
        out[key] = value
    out["enabled"] = as_bool("enabled", out["enabled"])
    if not out["enabled"]:
        return out
    for key, low, high in (("port", 1, 65535), ("max_bytes", 1024, 67108864), ("settle_seconds", 1, 300), ("flap_seconds", 0, 86400),
                           ("read_timeout", 1, 300), ("max_connections", 8, 4096), ("retry_max_seconds", 0, 86400)):
        out[key] = node_events.whole(key, out[key], low, high)
    if not isinstance(out["host"], str) or not _HOST.match(out["host"]):
        raise ParameterError("host", "an address to listen on (127.0.0.1, 0.0.0.0, ::), got %r" % (out["host"],))
    if not isinstance(out["path"], str) or not _PATH.match(out["path"]):
        raise ParameterError("path", "a URL path such as /alerts, got %r" % (out["path"],))
    for key in ("node_labels", "fault_alerts"):
        out[key] = _names(key, out[key])
    out["token"] = _token(out, read)
    if bool(out["certfile"]) != bool(out["keyfile"]):
        raise ParameterError("certfile" if not out["certfile"] else "keyfile", "certfile and keyfile go together (TLS), or neither")
    for key in ("certfile", "keyfile"):
        if out[key] is not None and (not isinstance(out[key], str) or not out[key].startswith("/") or "\x00" in out[key]):
            raise ParameterError(key, "an absolute path, got %r" % (out[key],))
    return out


def _names(key, value):
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and _LABEL.match(v) for v in value):
        raise ParameterError(key, "a non-empty list of Prometheus label or alert names, got %r" % (value,))
    return value


def _token(out, read):
    token, path = out["token"], out["token_file"]
    if token and path:
        raise ParameterError("token", "give token or token_file, not both")
    if path:
        if not isinstance(path, str) or not path.startswith("/") or read is None:
            raise ParameterError("token_file", "an absolute path, got %r" % (path,))
        try:
            token = read(path).strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ParameterError("token_file", "cannot be read: %s" % type(exc).__name__) from None
    if not isinstance(token, str) or len(token) < MIN_TOKEN or any(c.isspace() or not c.isprintable() for c in token):
        got = "none" if not token else "%d unfit characters" % len(token)  # never the token itself in the message
        raise ParameterError("token_file" if path else "token", "the bearer token Alertmanager sends (http_config.authorization): at "
                             "least %d printable characters, no spaces; got %s" % (MIN_TOKEN, got))
    return token


def authorized(header, token):
    """Whether an ``Authorization`` header carries the token (``Bearer <token>``), compared in constant time."""
    if not isinstance(header, str) or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer "):].strip().encode("utf-8", "replace"), token.encode("utf-8"))


def _text(value, size=node_events.MAX_TEXT):
    return value[:size] if isinstance(value, str) else None


def _labels(alert):
    labels = alert.get("labels")
    if not isinstance(labels, dict):
        raise PayloadError("an alert without labels")
    return dict((k, _text(v)) for k, v in labels.items() if isinstance(k, str) and _LABEL.match(k) and isinstance(v, str))


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
            if node_events.host_name(value) and known is not None and value in known:
                return value, None
            return None, value[:node_events.MAX_TEXT]
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
        event = {"gpuops": {"kind": node_events.GPU_ALERT, "alert": name, "status": status, "node": node, "unknown_node": unknown,
                            "labels": _bounded(labels, ["alertname"] + options["node_labels"]),
                            "fault": bool(node) and status == "firing" and name in options["fault_alerts"],
                            "starts_at": _text(alert.get("startsAt"), 64), "fingerprint": _text(alert.get("fingerprint"), 64),
                            "receiver": _text(payload.get("receiver")), "observed_at": observed}}
        if node:
            event["meta"] = {"hosts": node_events.limit([node])}
        out.append(event)
    return out
