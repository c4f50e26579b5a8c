# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the remediation's own metrics, pure (module gpu_remediation_metrics), in
Prometheus' text exposition format (version 0.0.4) for node_exporter's textfile collector.

From the ledger (the controller's record: each quarantine's start, result and seconds to release) and the Nodes (our
annotation's step, which says where a quarantined node stands now):

* ``gpuops_remediation_quarantined{k8s_node, action, step}`` 1 per node quarantined by us now;
* ``gpuops_remediation_quarantine_started_timestamp_seconds{k8s_node}``: when its open ledger entry began (the stuck-quarantine
  alert compares it with ``time()``, so a file written an hour ago still ages right);
* ``gpuops_remediation_outcomes{result}``: the closed entries the ledger keeps, per result (a gauge: the ledger is trimmed
  by size, so this is a window, not a counter);
* ``gpuops_remediation_release_seconds``: a histogram of quarantine-to-release seconds over those entries;
* ``gpuops_remediation_breaker_tripped``.

The text holds no time of its own (its file changes only when the remediation does; node_exporter's
``node_textfile_mtime_seconds`` says how old it is).

The node is the label ``k8s_node``: the scrape's own ``node`` label names the host whose node_exporter serves the file.
Node names are label values from the API; a label value is escaped as the format says (backslash, double quote, newline),
so no name can add a line or a series.
"""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import quarantine

BUCKETS = (60, 300, 900, 1800, 3600, 7200, 21600, 86400)
PREFIX = "gpuops_remediation_"


def _label(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels):
    return "{%s}" % ",".join('%s="%s"' % (k, _label(v)) for k, v in sorted(labels.items())) if labels else ""


def _step(node):
    """Our annotation's record (``quarantine.annotation``, the quarantine's own strict read), ``{"step": "unreadable"}`` for
    one it would refuse, None for none."""
    try:
        return quarantine.annotation(node)
    except quarantine.QuarantineError:
        return {"step": "unreadable"}


def render(ledger, nodes):
    """The exposition text (ends with a newline)."""
    lines = []

    def family(name, kind, helptext, samples):
        lines.append("# HELP %s%s %s" % (PREFIX, name, helptext))
        lines.append("# TYPE %s%s %s" % (PREFIX, name, kind))
        for suffix, labels, value in samples:
            lines.append("%s%s%s%s %s" % (PREFIX, name, suffix, _labels(**labels), _number(value)))

    open_at = {}
    for entry in ledger.get("entries") or ():
        if not entry.get("closed_at") and entry.get("at") is not None:
            open_at[entry["node"]] = min(entry["at"], open_at.get(entry["node"], entry["at"]))
    quarantined = []
    for node in nodes or ():
        record = _step(node)
        if record is None:
            continue
        name = (node.get("metadata") or {}).get("name")
        quarantined.append((name, record))
    quarantined.sort(key=lambda q: str(q[0]))
    family("quarantined", "gauge", "1 for each node quarantined by gpuops.fleet now, with its action and step.",
           [("", {"k8s_node": n, "action": str(r.get("action") or ""), "step": str(r.get("step") or "")}, 1) for n, r in quarantined])
    started = []
    for name, record in quarantined:
        at = open_at.get(name, record.get("started"))
        if isinstance(at, (int, float)) and not isinstance(at, bool):
            started.append(("", {"k8s_node": name}, at))
    family("quarantine_started_timestamp_seconds", "gauge", "When the quarantine of each quarantined node began (its ledger entry).",
           started)
    closed = [e for e in ledger.get("entries") or () if e.get("closed_at")]
    results = {}
    for entry in closed:
        results[str(entry.get("result") or "unknown")] = results.get(str(entry.get("result") or "unknown"), 0) + 1
    family("outcomes", "gauge", "The closed remediations the ledger keeps, per result.", [("", {"result": r}, n) for r, n in sorted(results.items())])
    seconds = [e["recover_seconds"] for e in closed if isinstance(e.get("recover_seconds"), (int, float)) and not isinstance(e["recover_seconds"], bool)]
    samples = [("_bucket", {"le": str(b)}, sum(1 for s in seconds if s <= b)) for b in BUCKETS]
    samples += [("_bucket", {"le": "+Inf"}, len(seconds)), ("_sum", {}, sum(seconds)), ("_count", {}, len(seconds))]
    family("release_seconds", "histogram", "Seconds from quarantine to release of the released remediations the ledger keeps.", samples)
    tripped = 1 if (ledger.get("breaker") or {}).get("state") == "tripped" else 0
    family("breaker_tripped", "gauge", "1 while the remediation breaker is tripped (no node is planned until it is reset).", [("", {}, tripped)])
    return "\n".join(lines) + "\n"


def _number(value):
    if isinstance(value, float) and value.is_integer():
        return "%d" % value
    return str(value)
