# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the event sources' options, each declared once as a row of a settings table
(``_common/settings.py``): ``NODES`` (``gpuops.fleet.gpu_nodes``), ``ALERTS`` (``gpuops.fleet.alertmanager``, and the
``alertmanager`` option of ``gpu_nodes``), the fault window's ``WINDOW`` rows in both. A rulebook's template gives a string:
each value is coerced to its row's type first (``coerce``), then checked by the row. The sources' DOCUMENTATION is held to
these tables by a test. The checks of the names an event may carry (``dns_name``, ``host_name``) are here too: an event's
node is data from a Node or an alert, never a pattern."""

from __future__ import annotations

import re

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.gpu_nodes import DEFAULT_RESOURCES
from ansible_collections.gpuops.fleet.plugins.module_utils._common import settings
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import as_bool, dns_label, dns_name
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._common.settings import boolean, coerce, row, whole

__all__ = ("DEFAULT_RESOURCES", "dns_name")  # the GPU resources a GPU Node has (gpu_nodes.py: the inventory's, declared there)
# the gpu_monitoring role's rules (roles/gpu_monitoring/templates/rules.yml.j2) that say a GPU is faulty
FAULT_ALERTS = ("GPUXidErrors", "GPURecoveryActionRequired", "GPURowRemapFailure", "GPULost")
NODE_LABELS = ("node", "Hostname", "kubernetes_node")
MIN_TOKEN = 16
MAX_TEXT = 256
_SELECTOR = re.compile(r"\A[A-Za-z0-9_./!=,() -]{0,1024}\Z")
_PATH = re.compile(r"\A/[A-Za-z0-9._~/-]{0,127}\Z")
_LABEL = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
_HOST = re.compile(r"\A[A-Za-z0-9.:-]{1,253}\Z")
# what a playbook's --limit (ansible-rulebook joins meta.hosts into it) takes for more than one host, though DNS-1123 allows it
PATTERN_WORDS = ("all", "ungrouped")


def host_name(name):
    """Whether ``name`` may name one inventory host in ``meta.hosts``: a Kubernetes name that is no Ansible pattern word (``all``,
    ``ungrouped``: a --limit of it is every host)."""
    return dns_name(name) and name not in PATTERN_WORDS


def label_name(name):
    """Whether ``name`` is a Prometheus label or alert name."""
    return isinstance(name, str) and bool(_LABEL.match(name))


# checks of a row (settings.py: each returns None, or why the value is refused)
def _text(value):
    return None if isinstance(value, str) and "\x00" not in value else "a string, got %s" % type(value).__name__


def _resources(value):
    if isinstance(value, list) and value and all(isinstance(r, str) and r and len(r) <= MAX_TEXT for r in value):
        return None
    return "a non-empty list of resource names or shell patterns (nvidia.com/gpu, nvidia.com/mig-*), got %r" % (value,)


def _selector(value):
    if isinstance(value, str) and _SELECTOR.match(value):
        return None
    return "a Kubernetes label selector such as 'nvidia.com/gpu.present=true', got %r" % (value,)


def _names(value):
    if isinstance(value, list) and value and all(label_name(v) for v in value):
        return None
    return "a non-empty list of Prometheus label or alert names, got %r" % (value,)


def _listen(value):
    return None if isinstance(value, str) and _HOST.match(value) else "an address to listen on (127.0.0.1, 0.0.0.0, ::), got %r" % (value,)


PROBES = ("/healthz", "/readyz")  # the receiver's own GET paths (webhook.py)


def _namespace(value):
    return None if dns_label(value) else "a namespace's name (a DNS-1123 label), got %r" % (value,)


def _url_path(value):
    if isinstance(value, str) and value in PROBES:
        return "a URL path other than the receiver's probes (%s), such as /alerts, got %r" % (", ".join(PROBES), value)
    return None if isinstance(value, str) and _PATH.match(value) else "a URL path such as /alerts, got %r" % (value,)


def _absolute(value):
    if isinstance(value, str) and value.startswith("/") and "\x00" not in value:
        return None
    return "an absolute path, got %r" % (value,)


def _secret(value):
    return None if isinstance(value, str) else "a string, got %s" % type(value).__name__  # never the value: it is a secret


def _leader_mapping(value):
    if isinstance(value, dict):
        return None
    return "the leader election's options (enabled, lease, namespace, identity, lease_seconds, renew_seconds), a dict, got %s" % (
        type(value).__name__)


def _mapping(value):
    return None if isinstance(value, dict) else "the options of gpuops.fleet.alertmanager (a dict), got %s" % type(value).__name__


# the fault window's: the sources that share a window (two sources of one ruleset) must agree on them
WINDOW = (row("settle_seconds", "int", 5, check=whole(1, 300)), row("flap_seconds", "int", 600, check=whole(0, 86400)),
          row("retry_max_seconds", "int", 3600, check=whole(0, 86400)))
# the API connection's, as the k8s_gpu_nodes inventory and kubernetes.core take them
CONNECTION = (row("kubeconfig", "str", None, check=_text), row("context", "str", None, check=_text), row("host", "str", None, check=_text),
              row("api_key", "str", None, check=_secret), row("validate_certs", "bool", True, check=boolean),
              row("ca_cert", "str", None, check=_text))
NODES = settings.Table(*(CONNECTION + (
    row("gpu_resources", "list", list(DEFAULT_RESOURCES), elements="str", check=_resources),
    row("label_selector", "str", "", check=_selector),
    row("heartbeat", "int", 60, check=whole(1, 3600)),
    row("backoff_max", "int", 30, check=whole(1, 600)),
    row("watch_seconds", "int", 300, check=whole(10, 1800)),
    # every remediation finishes on its own (due.py): the ledger's namespace, and how often its waiting nodes are checked
    row("ledger_namespace", "str", "gpuops-system", check=_namespace),
    row("due_seconds", "int", 30, check=whole(0, 3600))) + WINDOW + (
    row("alertmanager", "dict", None, check=_mapping),
    row("leader_election", "dict", None, check=_leader_mapping))))


def _dns(value):
    return None if dns_name(value) else "a Kubernetes object name (DNS-1123), got %r" % (value,)


def _identity(value):
    return None if isinstance(value, str) and _HOST.match(value) or value is None else "1 to 253 letters, digits, '.', ':' or '-', got %r" % (value,)


# one acting activation (events/leader.py): the Lease, its namespace (default the ledger's), who this one is (default its
# host name and process id), and client-go's timing
LEADER = settings.Table(
    row("enabled", "bool", True, check=boolean),
    row("lease", "str", "gpuops-events-leader", check=_dns),
    row("namespace", "str", None, check=lambda v: None if v is None else _namespace(v)),
    row("identity", "str", None, check=_identity),
    row("lease_seconds", "int", 10, check=whole(3, 300)),
    row("renew_seconds", "int", 2, check=whole(1, 60)))
ALERTS = settings.Table(*((
    row("host", "str", "127.0.0.1", check=_listen),
    row("port", "int", 5000, check=whole(1, 65535)),
    row("path", "str", "/alerts", check=_url_path),
    row("token", "str", None, check=_secret),
    row("token_file", "str", None, check=_absolute),
    row("node_labels", "list", list(NODE_LABELS), elements="str", check=_names),
    row("fault_alerts", "list", list(FAULT_ALERTS), elements="str", check=_names),
    row("max_bytes", "int", 1048576, check=whole(1024, 67108864)),
    row("read_timeout", "int", 10, check=whole(1, 300)),
    row("max_connections", "int", 256, check=whole(8, 4096)),
    row("certfile", "str", None, check=_absolute),
    row("keyfile", "str", None, check=_absolute)) + WINDOW + (
    row("enabled", "bool", True, check=boolean),)))
WINDOW_NAMES = tuple(r["name"] for r in WINDOW)


def _check(table, args, source):
    if args is not None and not isinstance(args, dict):
        raise ParameterError(source, "the source's options are a dict, got %s" % type(args).__name__)
    for key in args or {}:
        if key not in table.by_name:
            raise ParameterError(str(key), "is not an option of gpuops.fleet.%s (known: %s)" % (source, ", ".join(sorted(table.by_name))))
    # an option with no default given as "" or None is not given (a rulebook's ``| default('')``: a token_file unused); one
    # with a default given no value is refused, never silently its default
    given = dict((k, v) for k, v in (args or {}).items() if not (v in ("", None) and table.by_name[k]["default"] is None))
    for key, value in given.items():
        if value is None:
            raise ParameterError(key, "is given no value: leave it out for its default (%r), or give one" % (table.by_name[key]["default"],))
    return table.check_all(given, coerce=coerce)


# the rulebook variable each option is set from in the shipped rulebooks (extensions/eda/rulebooks; test_options holds this
# to them): a bad value is named by the variable the user set too, not only by the source's option
RULEBOOK_VARIABLES = {
    "label_selector": "gpuops_events_label_selector", "settle_seconds": "gpuops_events_settle_seconds",
    "flap_seconds": "gpuops_events_flap_seconds", "backoff_max": "gpuops_events_backoff_max",
    "retry_max_seconds": "gpuops_events_retry_max_seconds", "ledger_namespace": "gpuops_gpu_health_namespace",
    "due_seconds": "gpuops_events_due_seconds", "alertmanager.enabled": "gpuops_alerts_enabled",
    "alertmanager.host": "gpuops_alerts_host", "alertmanager.port": "gpuops_alerts_port", "alertmanager.token": "gpuops_alerts_token",
    "alertmanager.token_file": "gpuops_alerts_token_file", "leader_election.enabled": "gpuops_events_leader_election",
    "leader_election.lease": "gpuops_events_leader_lease"}


def check_nodes(args, read=None):
    """``gpuops.fleet.gpu_nodes``' options, checked and completed; ParameterError names the option, and the rulebook variable
    the shipped rulebooks set it from. Its ``alertmanager`` option is the receiver's options (``check_alerts``), with the
    fault window's from this source (one window)."""
    try:
        return _check_nodes(args, read)
    except ParameterError as exc:
        variable = RULEBOOK_VARIABLES.get(exc.field)
        if variable is None:
            raise
        raise ParameterError(exc.field, "%s (the shipped rulebooks set it from the rulebook variable %s)" % (exc.reason, variable)) from None


def _check_nodes(args, read):
    out = _check(NODES, args, "gpu_nodes")
    if out["leader_election"] is not None:
        try:
            leader = _check(LEADER, out["leader_election"], "gpu_nodes leader_election")
        except ParameterError as exc:
            raise ParameterError("leader_election.%s" % exc.field, exc.reason) from None
        if leader["renew_seconds"] * 2 > leader["lease_seconds"]:
            raise ParameterError("leader_election.renew_seconds", "at most half of lease_seconds (%d), so a leader renews twice "
                                 "before its Lease could lapse, got %d" % (leader["lease_seconds"], leader["renew_seconds"]))
        leader["namespace"] = leader["namespace"] or out["ledger_namespace"]
        out["leader_election"] = leader if leader["enabled"] else None
    if out["alertmanager"] is not None:
        given = [k for k in WINDOW_NAMES if k in out["alertmanager"]]
        if given:
            raise ParameterError("alertmanager.%s" % given[0], "the fault window's options are the source's own: set %s beside "
                                 "alertmanager, not inside it" % given[0])
        try:
            out["alertmanager"] = check_alerts(dict(out["alertmanager"], **dict((k, out[k]) for k in WINDOW_NAMES)), read)
        except ParameterError as exc:
            raise ParameterError("alertmanager.%s" % exc.field, exc.reason) from None
    return out


def check_alerts(args, read=None):
    """``gpuops.fleet.alertmanager``'s options, checked and completed; ParameterError names the option. ``read(path)`` reads
    a file (the token's); the token never appears in a message."""
    if isinstance(args, dict) and "enabled" in args and not as_bool("enabled", args["enabled"]):
        return dict(ALERTS.defaults(), **dict(args, enabled=False))  # switched off: nothing else is read
    out = _check(ALERTS, args, "alertmanager")
    out["token"] = _token(out, read)
    if bool(out["certfile"]) != bool(out["keyfile"]):
        raise ParameterError("certfile" if not out["certfile"] else "keyfile", "certfile and keyfile go together (TLS), or neither")
    return out


def _token(out, read):
    token, path = out["token"], out["token_file"]
    if token and path:
        raise ParameterError("token", "give token or token_file, not both")
    if path:
        if read is None:
            raise ParameterError("token_file", "cannot be read here")
        try:
            token = read(path).strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ParameterError("token_file", "cannot be read: %s" % type(exc).__name__) from None
    if not isinstance(token, str) or len(token) < MIN_TOKEN or any(c.isspace() or not c.isprintable() for c in token):
        got = "none" if not token else "%d unfit characters" % len(token)  # never the token itself in the message
        raise ParameterError("token_file" if path else "token", "the bearer token Alertmanager sends (http_config.authorization): at "
                             "least %d printable characters, no spaces; got %s" % (MIN_TOKEN, got))
    return token
