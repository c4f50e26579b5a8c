# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the remediation's own metrics, pure (module gpu_remediation_metrics), in
Prometheus' text exposition format (version 0.0.4) for node_exporter's textfile collector.

From the ledger alone, the controller's record (each quarantine's start, step, result and seconds to release); never from
a Node, whose kubelet may write our annotation on it as easily as we do:

* ``gpuops_remediation_quarantined{k8s_node, action, step}`` 1 per node quarantined by us now (an open ledger entry);
* ``gpuops_remediation_quarantine_started_timestamp_seconds{k8s_node}``: when its open ledger entry began (the stuck-quarantine
  alert compares it with ``time()``, so a file written an hour ago still ages right);
* ``gpuops_remediation_outcomes{result}``: the closed entries the ledger keeps, per result (a gauge: the ledger is trimmed
  by size, so this is a window, not a counter);
* ``gpuops_remediation_release_seconds``: a histogram of quarantine-to-release seconds over those entries;
* ``gpuops_remediation_breaker_tripped``.

The text holds no time of its own (its file changes only when the remediation does; node_exporter's
``node_textfile_mtime_seconds`` says how old it is).

The node is the label ``k8s_node``: the scrape's own ``node`` label names the host whose node_exporter serves the file.
A label value is escaped as the format says (backslash, double quote, newline), so no value can add a line or a series; one
that cannot be written as UTF-8 (a lone surrogate, which the JSON escape ``\\ud800`` decodes to) is ``unreadable``, so one bad
entry never stops the file of every node.
"""

from __future__ import annotations

BUCKETS = (60, 300, 900, 1800, 3600, 7200, 21600, 86400)
PREFIX = "gpuops_remediation_"
UNREADABLE = "unreadable"


def _text(value):
    """A label's value as text, or ``unreadable`` where it cannot be written as UTF-8."""
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return UNREADABLE
    return text


def _label(value):
    return _text(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels):
    return "{%s}" % ",".join('%s="%s"' % (k, _label(v)) for k, v in sorted(labels.items())) if labels else ""


def _open(ledger):
    """``{node: (action, step, started)}`` of the ledger's open entries (the earliest where a node has two)."""
    found = {}
    for entry in ledger.get("entries") or ():
        if entry.get("closed_at") or entry.get("at") is None:
            continue
        name = entry["node"]
        if name not in found or entry["at"] < found[name][2]:
            found[name] = (entry.get("action") or "", entry.get("step") or "", entry["at"])
    return found


def render(ledger):
    """The exposition text (ends with a newline)."""
    lines = []

    def family(name, kind, helptext, samples):
        lines.append("# HELP %s%s %s" % (PREFIX, name, helptext))
        lines.append("# TYPE %s%s %s" % (PREFIX, name, kind))
        seen = set()
        for suffix, labels, value in samples:
            line = "%s%s%s%s" % (PREFIX, name, suffix, _labels(**labels))
            if line not in seen:  # two unreadable values are one series: node_exporter refuses a file that repeats one
                seen.add(line)
                lines.append("%s %s" % (line, _number(value)))

    quarantined = sorted(_open(ledger).items(), key=lambda item: _text(item[0]))
    family("quarantined", "gauge", "1 for each node quarantined by gpuops.fleet now, with its action and step.",
           [("", {"k8s_node": n, "action": a, "step": st}, 1) for n, (a, st, dummy) in quarantined])
    family("quarantine_started_timestamp_seconds", "gauge", "When the quarantine of each quarantined node began (its ledger entry).",
           [("", {"k8s_node": n}, at) for n, (dummy, dummy2, at) in quarantined])
    closed = [e for e in ledger.get("entries") or () if e.get("closed_at")]
    results = {}
    for entry in closed:
        result = _text(entry.get("result") or "unknown")
        results[result] = results.get(result, 0) + 1
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
