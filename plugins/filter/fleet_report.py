# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters that render site.yml's fleet summary (rows built per node) as a table or Markdown."""

from __future__ import annotations

import json
import re

from collections.abc import Mapping


from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import node_facts
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import decision
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import as_bool
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _fleet_page as fleet_pages
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _role_specs as role_specs
from ansible_collections.gpuops.fleet.plugins.plugin_utils._tags import tags_run

COLUMNS = (
    ("node", "node"),
    ("gpus", "GPUs"),
    ("driver", "driver"),
    ("layout", "layout"),
    ("status", "checkpoint"),
    ("stale", "stale IDs"),
    ("action", "action"),
    ("kubelet", "kubelet"),
    ("backup", "backup"),
)
# shown only when the GPU workloads were audited (a cluster was configured: gpu_workload_audit)
WORKLOAD_COLUMN = ("workloads", "GPU workloads")
# shown when any node shares its GPUs' memory (gpu_share_info with a cluster, else the node's checkpoint)
SHARING_COLUMN = ("sharing", "GPU sharing")
# shown when Prometheus was read (gpu_memory_report, gpuops_prometheus_url)
MEMORY_COLUMN = ("gpu_memory", "GPU memory")
# shown when any node read its GPUs' health (gpu_health_info: site.yml with gpuops_gpu_health, playbooks/gpu_health.yml)
HEALTH_COLUMN = ("gpu_health", "GPU health")
NO_RESULT = "no result: the node failed or was unreachable"
REPAIR_ACTIONS = ("removed", "pruned")


def _ran(result):
    return isinstance(result, dict) and not result.get("skipped")


def _guard(installed, check_mode):
    """``installed`` where the guard's install (the plan task's guard_install) ran and left (or, in check mode, found)
    the guard in place: it self-tests every install that writes a file, so an install that succeeded is a guard that
    runs."""
    if not _ran(installed) or installed.get("failed") or (check_mode and installed.get("changed")):
        return "not installed"
    return "installed"


def _sharing(node_vars, k8s_name, result, gpu_share):
    """The node's shared GPU memory: from the cluster (gpu_share_info) when given, else from its checkpoint."""
    if isinstance(gpu_share, list):
        for item in gpu_share:
            if isinstance(item, dict) and item.get("name") == k8s_name:
                return {"source": "cluster", "shared": True, "mode": item.get("mode"), "allocated_gib": item.get("allocated_gib"),
                        "total_gib": item.get("total_gib"), "percent": item.get("percent")}
        # not a sharing node (it offers no aliyun.com/gpu-mem): whole GPUs
        return {"source": "cluster", "shared": False}
    shared = result.get("shared_memory")
    if isinstance(shared, dict):
        return {"source": "checkpoint", "allocated_gib": shared.get("allocated_gib"), "total_gib": shared.get("total_gib"),
                "percent": shared.get("percent"), "gpus_gone": sum(1 for g in shared.get("gpus") or () if g.get("index") is None),
                "unattributed_gib": shared.get("unattributed_gib") or 0}
    return None


def _plain(value):
    """A variable's value as plain dicts and lists: ansible-core 2.19+ hands templated containers over lazily, holding
    the templar, which the validator's deepcopy would copy (2.21 warns, rebuilding its plugin loaders)."""
    if isinstance(value, Mapping):
        return dict((key, _plain(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def role_argument_errors(nodes, hostvars, role, aliases=None, entry_point="main"):
    """What a role's argument spec (this collection's ``role``, its ``entry_point``) finds wrong in the variables the
    nodes' inventory, facts and extra vars give (``aliases`` maps an option to the variable a playbook sets it from),
    each distinct set of values checked once: ``[{"nodes": [...], "errors": [...], "msg": "..."}]``, empty when all
    pass. The errors are ansible-core's own (ArgumentSpecValidator, as the role's check). site.yml runs this once on the
    controller, where the role's own check was a task on every node (issue 36): a fleet whose nodes share their group
    variables is one set."""
    try:
        spec = role_specs.role_spec(role, entry_point)
    except role_specs.RoleSpecError as exc:
        raise AnsibleFilterError("gpuops.fleet._role_argument_errors: %s" % exc) from exc
    aliases = aliases or {}
    sets = {}
    for node in nodes or ():
        if node not in hostvars:  # no variables yet (ansible-playbook --syntax-check)
            continue
        node_vars = hostvars[node]
        given = {}
        for name in spec:
            source = aliases.get(name, name)
            if source in node_vars:
                given[name] = _plain(node_vars[source])
        key = json.dumps(given, sort_keys=True, default=repr)
        sets.setdefault(key, (given, []))[1].append(node)
    validator = ArgumentSpecValidator(dict(spec))
    found = {}
    for given, set_nodes in sets.values():
        errors = validator.validate(given, validate_role_argument_spec=True).error_messages
        if errors:
            found.setdefault(tuple(errors), []).extend(set_nodes)
    out = []
    for errors, set_nodes in found.items():
        set_nodes = sorted(set_nodes)
        named = ", ".join(set_nodes[:5]) + (", and %d more" % (len(set_nodes) - 5) if len(set_nodes) > 5 else "")
        out.append({"nodes": set_nodes, "errors": list(errors),
                    "msg": "%d node(s) (%s): %s" % (len(set_nodes), named, "; ".join(errors))})
    return out


def checkpoint_repair_nodes(nodes, hostvars, run_tags=None, skip_tags=None):
    """The nodes site.yml sends to its throttled repair play: the plan said ``repair_needed`` (the checkpoint must
    change, or a killed run left kubelet stopped), ``checkpoint_guard_reconcile_now`` is not false, and the plan (and
    the guard's install, in the same task) did not fail. Decided once on the controller (issue 36), not by a group_by task per node; none
    where the run's tags leave out ``checkpoint`` (the repair's tag), as that task's were."""
    if not tags_run(("checkpoint",), run_tags, skip_tags):
        return []
    chosen = []
    for node in nodes or ():
        if node not in hostvars:  # no variables yet (ansible-playbook --syntax-check): not planned, not chosen
            continue
        node_vars = hostvars[node]
        plan = node_vars.get("checkpoint_guard_plan")
        if not isinstance(plan, Mapping) or plan.get("failed") or plan.get("unreachable") or not plan.get("repair_needed"):
            continue
        try:
            now = as_bool("checkpoint_guard_reconcile_now", node_vars.get("checkpoint_guard_reconcile_now", True))
        except ParameterError as exc:
            raise AnsibleFilterError("gpuops.fleet._checkpoint_repair_nodes: node %s: %s" % (node, exc)) from exc
        if now:
            chosen.append(node)
    return chosen


def fleet_node_summary(node_vars, alive, repair_nodes=None, check_mode=False, workload_findings=None, gpu_share=None, gpu_memory=None):
    """One node's summary (``_node_summary``); a row that says so where what the node returned is not of the shape the
    modules return (its results are data about that node alone: they never stop the other nodes' rows)."""
    if not hasattr(node_vars, "get"):
        raise AnsibleFilterError("fleet_node_summary: expects a node's variables (hostvars[node]), got %s" % type(node_vars).__name__)
    try:
        return _node_summary(node_vars, alive, {"repair_nodes": repair_nodes, "check_mode": check_mode, "workload_findings": workload_findings,
                                                "gpu_share": gpu_share, "gpu_memory": gpu_memory})
    except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
        return {"node": str(node_vars.get("inventory_hostname")), "status": "bad_result",
                "msg": "this node's results are not of the shape the collection's modules return (%s: %s); its row is left out"
                       % (type(exc).__name__, str(exc)[:200])}


def _node_summary(node_vars, alive, run):
    """One node's summary from its variables (``hostvars[node]``), or None where the node left the run.

    Computed once on the controller for the whole fleet, instead of one set_fact task per node.
    ``alive``: the nodes still in the run; ``run``: what the run read beside the node (each may be None):
    ``repair_nodes``: those site.yml sent to the repair
    (in check mode, where the repair is not run again, their plan is their would-be repair);
    ``workload_findings``: gpu_workload_audit's ``by_node`` (Kubernetes node name -> findings),
    when the GPU workloads were audited; ``gpu_share``: gpu_share_info's ``nodes``, when a cluster
    was read (else a sharing node's row says what its own checkpoint holds); ``check_mode``, ``gpu_memory``.
    """
    repair_nodes, check_mode, workload_findings, gpu_share, gpu_memory = (
        run.get(k) for k in ("repair_nodes", "check_mode", "workload_findings", "gpu_share", "gpu_memory"))
    node = node_vars.get("inventory_hostname")
    if node not in (alive or ()):
        return None
    reconcile = node_vars.get("checkpoint_guard_reconcile")
    reconciled = _ran(reconcile)
    repaired = reconciled or (bool(check_mode) and node in (repair_nodes or ()))
    result = reconcile if reconciled else (node_vars.get("checkpoint_guard_plan") or {})
    facts = (node_vars.get("ansible_facts") or {}).get("gpuops_gpus") or {}
    action = result.get("action") or "none"
    kubelet = result.get("kubelet") or {}
    # the guard's install runs in the plan's task (kubelet_checkpoint's install_guard)
    installed = (node_vars.get("checkpoint_guard_plan") or {}).get("guard_install")
    summary = {
        "node": node,
        "simulated": str(node_vars.get("gpuops_lab", False)).lower() in ("true", "yes", "1", "on"),
        "gpus": facts.get("count"),
        "gpu_uuids": [gpu.get("uuid") for gpu in facts.get("gpus") or ()],
        "driver": facts.get("driver_version"),
        "inventory_reason": facts.get("reason"),
        "layout": result.get("layout"),
        "status": result.get("status") or "not_checked",
        "stale": result.get("stale") or {},
        "action": action if repaired or action == "skipped" else "none",
        "planned_action": action if not repaired and action in REPAIR_ACTIONS else None,
        "backup": result.get("backup_path"),
        "kubelet_restarted": bool(kubelet.get("restarted")),
        "kubelet_would_restart": bool(kubelet.get("would_restart")),
        # an earlier run was killed while kubelet was stopped: this run started it (or, planning, would)
        "kubelet_left_stopped": bool(kubelet.get("left_stopped_by_killed_run")),
        "kubelet_started": bool(kubelet.get("started")) and not kubelet.get("restarted"),
        "kubelet_down_seconds": kubelet.get("down_seconds"),
        "restart_batch": node_vars.get("gpuops_restart_batch"),
        "guard": _guard(installed, check_mode),
        "msg": result.get("msg") or "",
    }
    k8s_name = node_vars.get("gpuops_k8s_node_name") or node_vars.get("gpuops_node_name") or node
    if isinstance(workload_findings, dict):
        summary["workloads"] = int(workload_findings.get(k8s_name) or 0)
    sharing = _sharing(node_vars, k8s_name, node_vars.get("checkpoint_guard_plan") or {}, gpu_share)
    if sharing is not None:
        summary["sharing"] = sharing
    if isinstance(gpu_memory, list):
        found = [n for n in gpu_memory if isinstance(n, dict) and n.get("node") == k8s_name]
        summary["gpu_memory"] = dict((k, found[0].get(k)) for k in ("used_gib", "total_gib", "percent")) if found else None
    health = (node_vars.get("ansible_facts") or {}).get("gpuops_gpu_health")
    if isinstance(health, dict):
        summary["gpu_health"] = _health(health)
    return summary


def _health(health):
    """A node's GPU health for the report; ``unknown`` with the field named where its fact is not gpu_health_info's shape."""
    try:
        node_facts.check_health(health)
    except node_facts.FactsError as exc:
        return {"state": "unknown", "action": "none", "scope": None, "gpus": [], "reasons": [], "available": False,
                "reason": "its gpuops_gpu_health fact is not of the shape gpu_health_info returns (%s)" % exc}
    verdict = health.get("verdict") or {}
    return {"state": verdict.get("state") or "unknown", "action": verdict.get("action") or "none", "scope": verdict.get("scope"),
            "gpus": list(verdict.get("gpus") or ()), "reasons": list(verdict.get("reasons") or ()),
            "available": bool(health.get("available")), "reason": health.get("reason"),
            "gpu_detail": [_gpu_detail(gpu, bool(health.get("available"))) for gpu in health.get("gpus") or ()]}


def _gpu_detail(gpu, available):
    """One GPU of the node's health read, for the report's grid (the fleet page): its verdict, recovery action and XIDs."""
    verdict = gpu.get("verdict") if isinstance(gpu.get("verdict"), dict) else {}
    action = verdict.get("action") if isinstance(verdict.get("action"), str) else None
    recovery = gpu.get("recovery_action") if isinstance(gpu.get("recovery_action"), dict) else {}
    xids = ["%s %s" % (x.get("code"), x.get("mnemonic") or x.get("bucket") or "") for x in (gpu.get("xids") or ())[:10] if isinstance(x, dict)]
    return {"index": gpu.get("index"), "uuid": gpu.get("uuid"), "action": action or "none",
            "state": decision.state_of(action) if available and action else "unknown",
            "reasons": list(verdict.get("reasons") or ())[:5], "recovery": recovery.get("name"), "xids": [x.strip() for x in xids]}


def _health_text(value):
    if not value:
        return "-"
    if value["state"] in ("ok", "unknown"):
        return value["state"]
    gpus = ", ".join(g[:12] for g in value["gpus"])
    return "%s: %s%s" % (value["state"], value["action"], (" " + gpus) if gpus else "")


def gpu_health_row(node_vars):
    """One node's GPU health line for playbooks/gpu_health.yml's report, from its variables (``hostvars[node]``)."""
    if not hasattr(node_vars, "get"):
        raise AnsibleFilterError("gpu_health_row: expects a node's variables (hostvars[node]), got %s" % type(node_vars).__name__)
    node = node_vars.get("inventory_hostname")
    health = (node_vars.get("ansible_facts") or {}).get("gpuops_gpu_health")
    if not isinstance(health, dict):
        row = {"node": node, "state": "unknown", "action": "none", "scope": None, "gpus": [], "available": False,
               "reasons": [], "reason": "no health read: the node failed or was unreachable"}
    else:
        row = dict(_health(health), node=node)
    text = _health_text(row) if row["state"] != "unknown" else "unknown (%s)" % (row.get("reason") or "NVML not read")
    row["simulated"] = str(node_vars.get("gpuops_lab", False)).lower() in ("true", "yes", "1", "on")
    row["line"] = "%s: %s%s" % (node, text, " (SIMULATED GPUs)" if row["simulated"] else "")
    return row


def fleet_page(report, kind, title=None, generated_at=None, remediation=None):
    """The fleet at a glance: one self-contained HTML page (plugin_utils/_fleet_page.py) from a run's report: ``kind``
    ``gpu_health`` (gpu_health.yml's ``{'nodes', 'plan'}``; ``remediation``: gpu_remediation.yml's outcomes by node) or
    ``site`` (site.yml's fleet summary)."""
    try:
        if kind == "gpu_health":
            nodes = fleet_pages.health(report, remediation)
        elif kind == "site":
            nodes = fleet_pages.site(report)
        else:
            raise fleet_pages.PageError("kind must be gpu_health or site, got %r" % (kind,))
    except fleet_pages.PageError as exc:
        raise AnsibleFilterError("fleet_page: %s" % exc) from None
    source = {"gpu_health": "playbooks/gpu_health.yml", "site": "playbooks/site.yml"}[kind]
    return fleet_pages.render(nodes, title or "gpuops.fleet: %s" % source, generated_at or "", source)


def fleet_rows(summaries, nodes):
    """The report's rows: each node's summary (a row saying so where a node has none), restart batches numbered.

    ``summaries`` holds each node's summary (``fleet_node_summary``, or None) in the order of ``nodes``.
    A row's ``restart_batch`` is ``{hosts, offset}`` from site.yml's repair play; it becomes the
    batch's number (1 = first), in the order the batches ran.
    """
    if not isinstance(nodes, list) or not isinstance(summaries, list) or len(summaries) != len(nodes):
        raise AnsibleFilterError("fleet_rows: expects one summary (or None) per node of the list given")
    rows = []
    for node, summary in zip(nodes, summaries):
        if summary is None:
            rows.append({"node": node, "status": "no_result", "msg": NO_RESULT})
        elif not isinstance(summary, dict):
            raise AnsibleFilterError("fleet_rows: the summary of %s is a %s, not a dict" % (node, type(summary).__name__))
        else:
            rows.append(dict(summary))
    offsets = sorted(set(int(r["restart_batch"]["offset"]) for r in rows if isinstance(r.get("restart_batch"), dict)))
    for row in rows:
        batch = row.get("restart_batch")
        if isinstance(batch, dict):
            row["restart_batch"] = offsets.index(int(batch["offset"])) + 1
            row["restart_batch_hosts"] = list(batch.get("hosts") or ())
    return rows


def fleet_reports_merge(reports):
    """One fleet report from the reports of a sliced job's slices (each site.yml's ``fleet-summary.json``, with its ``job``):
    every slice's rows, sorted by node; ``slices`` names each slice (its job, its workflow job, its node count); a node
    two slices report is kept once, from the first, and named in ``conflicts`` (AWX gives each host to one slice: two
    reports of one node are two jobs, not two slices of one)."""
    if not isinstance(reports, list) or not all(isinstance(r, dict) for r in reports):
        raise AnsibleFilterError("fleet_reports_merge: expects a list of fleet reports (each a fleet-summary.json's mapping)")
    rows, slices, conflicts, seen = [], [], [], {}
    for index, report in enumerate(reports):
        nodes = report.get("nodes") if isinstance(report.get("nodes"), list) else []
        job = report.get("job") if isinstance(report.get("job"), dict) else {}
        slices.append({"job": job.get("awx_job_id"), "workflow_job": job.get("awx_workflow_job_id"), "nodes": len(nodes),
                       "check_mode": bool(report.get("check_mode"))})
        for row in nodes:
            node = row.get("node") if isinstance(row, dict) else None
            if not isinstance(node, str):
                raise AnsibleFilterError("fleet_reports_merge: report %d holds a row without a node name" % (index + 1))
            if node in seen:
                conflicts.append({"node": node, "slices": [seen[node], index + 1]})
                continue
            seen[node] = index + 1
            rows.append(row)
    rows.sort(key=lambda r: r["node"])
    modes = set(s["check_mode"] for s in slices)
    return {"check_mode": modes == {True}, "mixed_modes": len(modes) > 1, "nodes": rows, "slices": slices, "conflicts": conflicts}


def restart_batches(rows):
    """[(batch number, [nodes restarted in it])] in the order the batches ran."""
    batches = {}
    for row in rows:
        if row.get("kubelet_restarted") and row.get("restart_batch"):
            batches.setdefault(row["restart_batch"], []).append(str(row.get("node")))
    return [(number, sorted(batches[number])) for number in sorted(batches)]


def _kubelet_text(row):
    if row.get("kubelet_restarted"):
        down = row.get("kubelet_down_seconds")
        return "restarted%s%s" % (
            " (batch %s)" % row["restart_batch"] if row.get("restart_batch") else "",
            ", down %.1f s" % float(down) if down not in (None, "") else "",
        )
    if row.get("kubelet_would_restart"):
        return "would restart"
    if row.get("kubelet_started"):
        return "started (a killed run had left it stopped)"
    if row.get("kubelet_left_stopped"):
        return "left stopped by a killed run"
    return "-"


def _stale_text(stale):
    if not stale:
        return "-"
    count = sum(len(v or ()) for v in stale.values())
    first = sorted(v for values in stale.values() for v in values or ())[0]
    return first if count == 1 else "%d (%s, ...)" % (count, first)


def _columns(rows):
    return (COLUMNS + ((WORKLOAD_COLUMN,) if any("workloads" in r for r in rows) else ())
            + ((SHARING_COLUMN,) if any((r.get("sharing") or {}).get("shared", True) and r.get("sharing") for r in rows) else ())
            + ((MEMORY_COLUMN,) if any("gpu_memory" in r for r in rows) else ())
            + ((HEALTH_COLUMN,) if any("gpu_health" in r for r in rows) else ()))


def _sharing_text(value):
    if not value:
        return "-"
    if value.get("shared") is False:
        return "off (whole GPUs)"
    text = "%s/%s GiB (%s%%)" % (value.get("allocated_gib"), value.get("total_gib"), value.get("percent"))
    if value.get("source") == "cluster":
        return text + (" mode %s" % value["mode"] if value.get("mode") else "")
    notes = ["from checkpoint"]
    if value.get("gpus_gone"):
        notes.append("%d GPU gone" % value["gpus_gone"])
    if value.get("unattributed_gib"):
        notes.append("%s GiB unattributed" % value["unattributed_gib"])
    return "%s, %s" % (text, ", ".join(notes))


def _cell(row, key):
    value = row.get(key)
    if key == "workloads":
        return "-" if value is None else ("ok" if value == 0 else "%d finding(s)" % value)
    if key == "sharing":
        return _sharing_text(value)
    if key == "gpu_health":
        return _health_text(value)
    if key == "gpu_memory":
        return "-" if not value else "%s/%s GiB (%s%%)" % (value["used_gib"], value["total_gib"], value["percent"])
    if key == "gpus":
        if row.get("inventory_reason"):
            return "unknown"
        return "%s%s" % (value if value is not None else "-", " (simulated)" if row.get("simulated") else "")
    if key == "stale":
        return _stale_text(value)
    if key == "kubelet":
        return _kubelet_text(row)
    if key == "action" and row.get("planned_action") not in (None, "", "none", "skipped") and value in (None, "", "none"):
        return "planned: %s" % row["planned_action"]
    if value is None or value == "":
        return "-"
    return str(value)


def _rows(rows, name):
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise AnsibleFilterError("%s: expects a list of per-node summary dicts (fleet_node_summary), got %s" % (name, type(rows).__name__))
    return sorted(rows, key=lambda r: str(r.get("node", "")))


def _grid(rows):
    return [[_cell(r, key) for key, dummy in _columns(rows)] for r in rows]


def fleet_table(rows):
    """Fixed-width text table, one line per node, then the notes (reasons, messages)."""
    rows = _rows(rows, "fleet_table")
    header = [heading for dummy, heading in _columns(rows)]
    grid = _grid(rows)
    widths = [max(len(line[i]) for line in [header] + grid) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [header] + grid]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in rows:
        if r.get("msg"):
            lines.append("%s: %s" % (r.get("node"), r["msg"]))
    lines.extend(_batch_lines(rows))
    lines.extend(_sharing_lines(rows))
    return "\n".join(lines)


SHARING_NOTE = ("GPU sharing from checkpoint: node-derived (no cluster was read), from each node's kubelet checkpoint as read "
                "before any repair - the GiB of aliyun.com/gpu-mem the plugin gave containers per GPU; pods are known there by "
                "UID only. With a cluster configured, gpu_share_info's figures (kubectl inspect cgpu) are shown instead.")


def _sharing_lines(rows):
    return [SHARING_NOTE] if any((r.get("sharing") or {}).get("source") == "checkpoint" for r in rows) else []


def _batch_lines(rows):
    batches = restart_batches(rows)
    if not batches:
        return []
    return ["kubelet restarted on %d node(s), in %d batch(es): %s" % (
        sum(len(nodes) for dummy, nodes in batches), len(batches), "; ".join("batch %d: %s" % (n, ", ".join(nodes)) for n, nodes in batches)
    )]


# every character that can start Markdown or HTML structure inside a line (CommonMark's emphasis, code, links, images, raw
# HTML, entities, and GFM's strikethrough and table cells), each written backslash-escaped; a cell never starts a line, so
# "-", "+" and digits cannot start a list there
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#!|<>~&])")
# control characters, newlines included, and the Unicode line and paragraph separators: a cell stays one line of one row
_MD_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
# GFM's bare-URL autolinks begin so: the colon or the dot escaped, no link is made
_MD_AUTOLINK = re.compile(r"(?i)\b(https?|ftp)(:)(?=//)|\b(www)(\.)")


def _md(text):
    """Node-provided text as literal Markdown text: one line, no structure (a verdict or message a node wrote can add no heading,
    link, HTML or table cell to the report); bare-URL autolinks (GFM's ``http:``, ``www.``) broken by the escapes."""
    text = _MD_SPECIAL.sub(r"\\\1", _MD_CONTROL.sub(" ", str(text)))
    return _MD_AUTOLINK.sub(lambda m: "%s\\%s" % (m.group(1) or m.group(3), m.group(2) or m.group(4)), text)


def _md_code(text):
    """A GPU UUID or a path as an inline code span, where it can be one (no backtick, nothing outside the UUID and path
    alphabet); else escaped text."""
    if re.match(r"\A[A-Za-z0-9_./:@+=,-]{1,512}\Z", text):
        return "`%s`" % text
    return _md(text)


def fleet_markdown(rows, title="gpuops fleet summary"):
    """Markdown report: a table and per-node notes."""
    rows = _rows(rows, "fleet_markdown")
    out = ["# %s" % title, ""]
    if any(r.get("simulated") for r in rows):
        out += ["> Nodes marked (simulated) run on SIMULATED GPUs (lab fakes), not real hardware.", ""]
    columns = _columns(rows)
    out.append("| " + " | ".join(heading for dummy, heading in columns) + " |")
    out.append("|" + "---|" * len(columns))
    for line in _grid(rows):
        out.append("| " + " | ".join(_md_code(c) if c.startswith(("GPU-", "MIG-", "/")) else _md(c) for c in line) + " |")
    notes = [r for r in rows if r.get("msg")]
    if notes:
        out += ["", "## Notes", ""]
        out += ["- **%s**: %s" % (_md(str(r.get("node"))), _md(r["msg"])) for r in notes]
    batches = restart_batches(rows)
    if batches:
        out += ["", "## kubelet restarts", ""]
        out += ["- batch %d: %s" % (n, _md(", ".join(nodes))) for n, nodes in batches]
    if _sharing_lines(rows):
        out += ["", "## GPU sharing", "", _md(SHARING_NOTE)]
    return "\n".join(out) + "\n"


class FilterModule:
    def filters(self):
        return {"fleet_table": fleet_table, "fleet_markdown": fleet_markdown, "fleet_rows": fleet_rows, "fleet_node_summary": fleet_node_summary,
                "fleet_reports_merge": fleet_reports_merge,
                "gpu_health_row": gpu_health_row, "fleet_page": fleet_page, "_checkpoint_repair_nodes": checkpoint_repair_nodes,
                "_tags_run": tags_run,
                "_role_argument_errors": role_argument_errors}
