# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters that render site.yml's fleet summary (rows built per node) as a table or Markdown."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

COLUMNS = (
    ("node", "node"),
    ("gpus", "GPUs"),
    ("driver", "driver"),
    ("layout", "layout"),
    ("status", "checkpoint"),
    ("stale", "stale IDs"),
    ("action", "action"),
    ("backup", "backup"),
)


def _stale_text(stale):
    if not stale:
        return "-"
    count = sum(len(v or ()) for v in stale.values())
    first = sorted(v for values in stale.values() for v in values or ())[0]
    return first if count == 1 else "%d (%s, ...)" % (count, first)


def _cell(row, key):
    value = row.get(key)
    if key == "gpus":
        if row.get("inventory_reason"):
            return "unknown"
        return "%s%s" % (value if value is not None else "-", " (simulated)" if row.get("simulated") else "")
    if key == "stale":
        return _stale_text(value)
    if value is None or value == "":
        return "-"
    return str(value)


def _rows(rows, name):
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise AnsibleFilterError("%s: expects a list of per-node summary dicts (gpuops_node_summary), got %s" % (name, type(rows).__name__))
    return sorted(rows, key=lambda r: str(r.get("node", "")))


def _grid(rows):
    return [[_cell(r, key) for key, dummy in COLUMNS] for r in rows]


def fleet_table(rows):
    """Fixed-width text table, one line per node, then the notes (reasons, messages)."""
    rows = _rows(rows, "fleet_table")
    header = [heading for dummy, heading in COLUMNS]
    grid = _grid(rows)
    widths = [max(len(line[i]) for line in [header] + grid) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [header] + grid]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in rows:
        if r.get("msg"):
            lines.append("%s: %s" % (r.get("node"), r["msg"]))
    return "\n".join(lines)


def _md(text):
    return text.replace("|", "\\|")


def fleet_markdown(rows, title="gpuops fleet summary"):
    """Markdown report: a table and per-node notes."""
    rows = _rows(rows, "fleet_markdown")
    out = ["# %s" % title, ""]
    if any(r.get("simulated") for r in rows):
        out += ["> Nodes marked (simulated) run on SIMULATED GPUs (lab fakes), not real hardware.", ""]
    out.append("| " + " | ".join(heading for dummy, heading in COLUMNS) + " |")
    out.append("|" + "---|" * len(COLUMNS))
    for line in _grid(rows):
        out.append("| " + " | ".join("`%s`" % _md(c) if c.startswith(("GPU-", "MIG-", "/")) else _md(c) for c in line) + " |")
    notes = [r for r in rows if r.get("msg")]
    if notes:
        out += ["", "## Notes", ""]
        out += ["- **%s**: %s" % (_md(str(r.get("node"))), _md(r["msg"])) for r in notes]
    return "\n".join(out) + "\n"


class FilterModule(object):
    def filters(self):
        return {"fleet_table": fleet_table, "fleet_markdown": fleet_markdown}
