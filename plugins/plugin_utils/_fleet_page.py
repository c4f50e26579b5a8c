# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the fleet at a glance, one self-contained HTML page written beside a run's JSON
and Markdown reports (gpu_health.yml, gpu_remediation.yml, site.yml): a grid of nodes by GPUs, each cell coloured by its
state with a legend, sort and filter, a cell's reasons, XIDs and recovery action on hover and click, each remediated node's
timeline. No network: no external script, style sheet or font, so it opens from AWX's artifacts or a file share.

Every text of the page's data is a node's or a run's data, never markup: the data travels as JSON inside a
``<script type="application/json">`` element with ``<``, ``>`` and ``&`` written as JSON escapes (no text can close that
element), and the page's script puts each text into the document as text (``textContent``, ``title``), never as HTML.
"""

from __future__ import annotations

import html
import json

# state -> (legend label, colour): the one place a state and its colour are declared; the page's legend comes from here
STATES = (
    ("ok", "healthy", "#2e7d32"),
    ("attention", "attention: observe", "#f9a825"),
    ("faulty", "faulty: an action is planned", "#c62828"),
    ("unknown", "unknown: not read (never faulty)", "#9e9e9e"),
    ("quarantined", "quarantined: remediation in progress", "#6a1b9a"),
    ("released", "remediated and released", "#1565c0"),
    ("held", "held: RMA candidate or needs a human", "#ad1457"),
    ("deferred", "deferred: the fleet's cap or a breaker", "#ef6c00"),
    ("up_to_date", "checkpoint up to date", "#43a047"),
    ("repaired", "checkpoint repaired", "#1e88e5"),
    ("stale", "checkpoint stale (to repair)", "#e53935"),
    ("corrupt", "checkpoint corrupt", "#8e24aa"),
    ("no_result", "no result (failed or unreachable)", "#616161"),
)
COLOURS = dict((state, colour) for state, dummy, colour in STATES)
MAX_TEXT = 300  # a text of the page (a reason, a node's name): longer is cut, with "..." (a node's text is its own data)
MAX_ITEMS = 20  # reasons, XIDs, timeline steps per cell or node


class PageError(ValueError):
    """A report the page cannot be built from (not the collection's report shape)."""


def _text(value):
    text = value if isinstance(value, str) else ("" if value is None else json.dumps(value, sort_keys=True, default=str))
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 3] + "..."


def _texts(values):
    return [_text(v) for v in list(values or ())[:MAX_ITEMS]] if isinstance(values, (list, tuple)) else []


def _state(value):
    return value if value in COLOURS else "unknown"


def _gpu_cells(row):
    """A gpu_health.yml row's GPUs: its ``gpu_detail`` (each GPU's verdict), else the GPUs its verdict names."""
    cells = []
    detail = row.get("gpu_detail")
    if isinstance(detail, list):
        for gpu in detail[:64]:
            gpu = gpu if isinstance(gpu, dict) else {}
            cells.append({"gpu": _text(gpu.get("index")), "uuid": _text(gpu.get("uuid")), "state": _state(gpu.get("state")),
                          "action": _text(gpu.get("action") or "none"), "reasons": _texts(gpu.get("reasons")),
                          "xids": _texts(gpu.get("xids")), "recovery": _text(gpu.get("recovery"))})
        return cells
    for i, uuid in enumerate(_texts(row.get("gpus"))):
        cells.append({"gpu": str(i), "uuid": uuid, "state": _state(row.get("state")), "action": _text(row.get("action")),
                      "reasons": [r for r in _texts(row.get("reasons")) if uuid in r] or _texts(row.get("reasons")),
                      "xids": [], "recovery": ""})
    return cells


def _plan_rows(plan):
    rows = (plan or {}).get("nodes") if isinstance(plan, dict) else None
    return dict((r.get("node"), r) for r in rows or () if isinstance(r, dict) and isinstance(r.get("node"), str))


def health(report, remediation=None):
    """The page's data from gpu_health.yml's report (``{'nodes': rows, 'plan': plan}``) and, for gpu_remediation.yml,
    ``remediation``: ``{node: {'state': quarantined|released|held|deferred, 'timeline': [{'step', 'at'}], 'outcome',
    'next'}}``."""
    if not isinstance(report, dict) or not isinstance(report.get("nodes"), list):
        raise PageError("expects gpu_health.yml's report: a mapping whose 'nodes' is its list of rows")
    plan = _plan_rows(report.get("plan"))
    remediation = remediation if isinstance(remediation, dict) else {}
    nodes = []
    for row in report["nodes"]:
        row = row if isinstance(row, dict) else {}
        name = _text(row.get("node"))
        planned = plan.get(row.get("node")) or {}
        done = remediation.get(row.get("node")) if isinstance(remediation.get(row.get("node")), dict) else {}
        state = _state(done.get("state") or ("deferred" if planned.get("deferred_reason") else row.get("state")))
        chosen = dict((k, planned[k]) for k in ("action", "batch", "deferred_reason") if planned.get(k) is not None)
        details = [_text(row.get("line"))] + (["plan: %s" % _text(chosen)] if planned else [])
        if done.get("outcome"):
            details.append("outcome: %s; next: %s" % (_text(done.get("outcome")), _text(done.get("next"))))
        # a node whose GPUs were not read is one cell of its own state, so every node of the report is in the grid
        cells = _gpu_cells(row) or [{"gpu": "-", "uuid": "", "state": _state(row.get("state")), "action": _text(row.get("action") or "none"),
                                     "reasons": _texts([row.get("reason")] if row.get("reason") else row.get("reasons")), "xids": [], "recovery": ""}]
        if done.get("state"):  # the remediated GPUs take the remediation's state; the node's others keep their verdict
            for cell in cells:
                if cell["state"] != "ok":
                    cell["state"] = state
        nodes.append({"node": name, "state": state, "action": _text(planned.get("action") or row.get("action") or "none"),
                      "gpus": cells, "details": details, "simulated": bool(row.get("simulated")),
                      "timeline": [{"step": _text(t.get("step")), "at": _text(t.get("at"))} for t in (done.get("timeline") or ())[:MAX_ITEMS]
                                   if isinstance(t, dict)]})
    return nodes


def site(summary):
    """The page's data from site.yml's fleet summary (``fleet-summary.json``): each node's checkpoint state, for each of its
    GPUs (``gpu_uuids``: the UUIDs it reported; a node without them is one cell); in check mode (``check_mode``) a node to
    repair stays ``stale`` or ``corrupt``, its action what the repair would do."""
    if not isinstance(summary, dict) or not isinstance(summary.get("nodes"), list):
        raise PageError("expects site.yml's fleet summary: a mapping whose 'nodes' is its list of rows")
    nodes = []
    for row in summary["nodes"]:
        row = row if isinstance(row, dict) else {}
        status, action = row.get("status"), row.get("action")
        shown = _text(row.get("planned_action") if action in (None, "none") and row.get("planned_action") else action or "none")
        if action not in (None, "none", "skipped") and not summary.get("check_mode"):  # in check mode: what it would do
            state = "repaired"
        elif status in ("up_to_date", "stale", "corrupt"):
            state = status
        else:
            state = "no_result" if status in ("no_result", "bad_result") else "unknown"
        uuids = _texts(row.get("gpu_uuids")) or [""]
        reasons = _texts([row.get("msg") or row.get("inventory_reason")]) if (row.get("msg") or row.get("inventory_reason")) else []
        stale = row.get("stale") if isinstance(row.get("stale"), dict) else {}
        details = ["checkpoint: %s" % _text(status), "action: %s" % shown]
        details += ["stale %s: %s" % (_text(resource), ", ".join(_texts(ids))) for resource, ids in list(stale.items())[:MAX_ITEMS]]
        nodes.append({"node": _text(row.get("node")), "state": state, "action": shown,
                      "gpus": [{"gpu": str(i), "uuid": u, "state": state, "action": _text(status), "reasons": reasons, "xids": [],
                                "recovery": ""} for i, u in enumerate(uuids)],
                      "details": details + reasons, "simulated": bool(row.get("simulated")), "timeline": []})
    return nodes


def render(nodes, title, generated_at, source):
    """The page: ``nodes`` (``health`` or ``site``) as JSON in the page, drawn by its own script."""
    used = set(n["state"] for n in nodes) | set(c["state"] for n in nodes for c in n["gpus"])
    data = {"title": _text(title), "generated_at": _text(generated_at), "source": _text(source), "nodes": nodes,
            "legend": [{"state": s, "label": label, "colour": colour, "used": s in used} for s, label, colour in STATES]}
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    # no text can end the data's element or open another: the JSON escapes of <, > and &
    text = text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return _PAGE.replace("@@TITLE@@", html.escape(data["title"])).replace("@@DATA@@", text)


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@@TITLE@@</title>
<style>
body{font:13px/1.4 system-ui,sans-serif;margin:12px;color:#212121}
h1{font-size:18px;margin:0 0 4px}
#meta{color:#616161;margin-bottom:8px}
#controls{display:flex;gap:8px;flex-wrap:wrap;align-items:center;margin-bottom:8px}
#legend{display:flex;gap:10px;flex-wrap:wrap;margin-bottom:8px}
.key{display:inline-flex;align-items:center;gap:4px}
.sw{width:12px;height:12px;border-radius:2px;display:inline-block}
table{border-collapse:collapse}
td,th{padding:1px 4px;text-align:left;white-space:nowrap}
th{position:sticky;top:0;background:#fafafa}
td.name{max-width:28em;overflow:hidden;text-overflow:ellipsis}
.cell{width:18px;height:14px;border-radius:2px;cursor:pointer;display:inline-block}
#detail{position:fixed;right:12px;top:12px;width:30em;max-height:90vh;overflow:auto;background:#fff;border:1px solid #bdbdbd;
padding:8px;display:none;white-space:pre-wrap;word-break:break-all}
.timeline{color:#424242}
</style></head>
<body>
<h1 id="title"></h1>
<div id="meta"></div>
<div id="legend"></div>
<div id="controls">
<label>node <input id="f-node" type="search" placeholder="name contains"></label>
<label>state <select id="f-state"><option value="">any</option></select></label>
<label>action <select id="f-action"><option value="">any</option></select></label>
<label>sort <select id="sort"><option value="node">node</option><option value="state">state</option><option value="action">action</option></select></label>
<span id="count"></span>
</div>
<table><thead><tr id="head"></tr></thead><tbody id="rows"></tbody></table>
<div id="detail"></div>
<script type="application/json" id="fleet-data">@@DATA@@</script>
<script>
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("fleet-data").textContent);
  var colour = {}, order = {};
  function el(tag, text, cls) { var e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; }
  document.getElementById("title").textContent = data.title;
  var simulated = data.nodes.filter(function (n) { return n.simulated; }).length;
  document.getElementById("meta").textContent = data.source + ", " + data.generated_at + ", " + data.nodes.length + " nodes" +
    (simulated ? " (SIMULATED GPUs on " + simulated + ")" : "");
  var legend = document.getElementById("legend"), fState = document.getElementById("f-state"), fAction = document.getElementById("f-action");
  data.legend.forEach(function (item, i) {
    colour[item.state] = item.colour; order[item.state] = i;
    var key = el("span", undefined, "key"), sw = el("span", undefined, "sw");
    sw.style.background = item.colour; key.appendChild(sw); key.appendChild(el("span", item.label));
    key.setAttribute("data-state", item.state); if (item.used) legend.appendChild(key);
  });
  var states = {}, actions = {}, width = 0;
  data.nodes.forEach(function (n) { states[n.state] = 1; actions[n.action] = 1; width = Math.max(width, n.gpus.length); });
  Object.keys(states).sort().forEach(function (s) { var o = el("option", s); o.value = s; fState.appendChild(o); });
  Object.keys(actions).sort().forEach(function (s) { var o = el("option", s); o.value = s; fAction.appendChild(o); });
  var head = document.getElementById("head");
  ["node", "state", "action"].forEach(function (h) { head.appendChild(el("th", h)); });
  for (var g = 0; g < width; g++) head.appendChild(el("th", "GPU " + g));
  head.appendChild(el("th", "timeline"));
  var detail = document.getElementById("detail");
  function show(n, c) {
    var lines = ["node: " + n.node, "state: " + n.state + ", action: " + n.action].concat(n.details);
    if (c) lines = lines.concat(["", "GPU " + c.gpu + " " + c.uuid, "state: " + c.state + ", action: " + c.action,
      "recovery action: " + (c.recovery || "-"), "XIDs: " + (c.xids.join(", ") || "-"), "reasons:"], c.reasons.map(function (r) { return "  " + r; }));
    if (n.timeline.length) lines = lines.concat(["", "timeline:"], n.timeline.map(function (t) { return "  " + t.at + "  " + t.step; }));
    detail.textContent = lines.join("\\n"); detail.style.display = "block";
  }
  detail.addEventListener("click", function () { detail.style.display = "none"; });
  var rows = data.nodes.map(function (n) {
    var tr = el("tr"); tr.setAttribute("data-node", n.node); tr.setAttribute("data-state", n.state);
    tr.appendChild(el("td", n.node, "name")); tr.appendChild(el("td", n.state)); tr.appendChild(el("td", n.action));
    for (var i = 0; i < width; i++) {
      var td = el("td"), c = n.gpus[i];
      if (c) {
        var cell = el("span", undefined, "cell"); cell.style.background = colour[c.state] || "#9e9e9e";
        cell.title = n.node + " GPU " + c.gpu + ": " + c.state + (c.reasons.length ? "\\n" + c.reasons.join("\\n") : "");
        cell.setAttribute("data-gpu", c.gpu); cell.setAttribute("data-state", c.state);
        cell.addEventListener("click", show.bind(null, n, c)); td.appendChild(cell);
      }
      tr.appendChild(td);
    }
    tr.appendChild(el("td", n.timeline.map(function (t) { return t.step + " " + t.at; }).join(" \\u2192 "), "timeline"));
    tr.cells[0].addEventListener("click", show.bind(null, n, null));
    return {tr: tr, n: n};
  });
  var body = document.getElementById("rows"), fNode = document.getElementById("f-node"), sort = document.getElementById("sort");
  function draw() {
    var text = fNode.value.toLowerCase(), s = fState.value, a = fAction.value, key = sort.value, shown = 0;
    var list = rows.slice().sort(function (x, y) {
      var p = key === "state" ? (order[x.n.state] || 0) - (order[y.n.state] || 0)
        : key === "action" ? (x.n.action < y.n.action ? -1 : x.n.action > y.n.action ? 1 : 0) : 0;
      return p || (x.n.node < y.n.node ? -1 : x.n.node > y.n.node ? 1 : 0);
    });
    var frag = document.createDocumentFragment();
    list.forEach(function (r) {
      var ok = (!text || r.n.node.toLowerCase().indexOf(text) >= 0) && (!s || r.n.state === s) && (!a || r.n.action === a);
      r.tr.style.display = ok ? "" : "none"; if (ok) shown++; frag.appendChild(r.tr);
    });
    body.appendChild(frag);
    document.getElementById("count").textContent = shown + " of " + rows.length + " nodes";
  }
  [fNode, fState, fAction, sort].forEach(function (c) { c.addEventListener("input", draw); c.addEventListener("change", draw); });
  draw();
  document.body.setAttribute("data-ready", "1");
})();
</script>
</body></html>
"""
