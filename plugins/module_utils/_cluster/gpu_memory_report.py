# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: GPU memory used vs allocated per pod, per GPU and per
node, from the gpu_monitoring role's recording rules in Prometheus (module ``gpu_memory_report``).

Pure: the module runs the instant queries of QUERIES (five per report, whatever the fleet's
size) and hands the results here. Field report 003's two views: "GPU APP" (memory per pod
against what it was given) and "GPU Node" (memory per GPU).
"""

from __future__ import annotations

import json
import math

from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import digits
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.tabwrite import tabwrite

GIB = float(1024 ** 3)
# name -> PromQL (the recording rules of roles/gpu_monitoring/templates/rules.yml.j2)
QUERIES = (
    ("pod_used", "namespace_pod_gpu:gpuops_gpu_memory_used_bytes:sum"),
    ("pod_shared", "namespace_pod:gpuops_gpu_memory_allocated_bytes:sum"),
    ("pod_gpus", "namespace_pod:gpuops_gpus_allocated:sum"),
    ("gpu_used", "node_gpu:gpuops_gpu_memory_used_bytes:max"),
    ("gpu_total", "node_gpu:gpuops_gpu_memory_total_bytes:max"),
)


class PrometheusError(GpuopsError):
    """Prometheus answered with an error, or not with what its HTTP API documents."""


def safe_url(url):
    """``url`` with any user information replaced: what a message may print."""
    text = str(url)
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rsplit("@", 1)[1]
    return "%s://%s%s%s" % (scheme, authority, slash, path)


def parse_response(body, expr):
    """The ``result`` of an instant query (``/api/v1/query``, resultType vector): ``[(labels, value)]``.

    Everything is checked against Prometheus' documented answer (docs/querying/api.md): a body
    that is not that raises PrometheusError naming the query, never a Python error. A sample
    whose value is not a finite number (NaN, +Inf: a ratio over zero) is left out.
    """
    try:
        doc = json.loads(body)
    except ValueError:
        raise PrometheusError("query %s: the answer is not JSON (is url Prometheus' base URL?): %r" % (expr, body[:120])) from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        error = doc.get("error") if isinstance(doc, dict) else None
        raise PrometheusError("query %s: Prometheus says %s" % (expr, error or "status %r" % (doc.get("status") if isinstance(doc, dict) else doc)))
    data = doc.get("data")
    if not isinstance(data, dict):
        raise PrometheusError("query %s: the answer's data is not an object" % expr)
    if data.get("resultType") != "vector":
        raise PrometheusError("query %s: expected a vector, got %r" % (expr, data.get("resultType")))
    result = data.get("result") or []
    if not isinstance(result, list):
        raise PrometheusError("query %s: the answer's result is not a list" % expr)
    samples = []
    for item in result:
        value = item.get("value") if isinstance(item, dict) else None
        labels = item.get("metric") if isinstance(item, dict) else None
        if not isinstance(labels, (dict, type(None))) or not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], str):
            raise PrometheusError("query %s: a sample is not {metric, value: [time, \"number\"]}: %.120r" % (expr, item))
        try:
            number = float(value[1])
        except ValueError:
            raise PrometheusError("query %s: a sample's value is not a number: %.40r" % (expr, value[1])) from None
        if math.isfinite(number):
            samples.append((dict((str(k), str(v)) for k, v in (labels or {}).items()), number))
    return samples


def _gib(value):
    return None if value is None else round(value / GIB, 2)


def _keep(labels, namespaces, nodes):
    return (not namespaces or labels.get("namespace") in namespaces) and (not nodes or labels.get("node") in nodes)


def report(results, namespaces=None, nodes=None):
    """``{"pods", "gpus", "nodes"}`` from the QUERIES' results (name -> [(labels, value)])."""
    gpu_total = dict((labels.get("uuid"), value) for labels, value in results.get("gpu_total", ()))
    pods = {}

    def pod(labels):
        key = (labels.get("namespace"), labels.get("pod"))
        return pods.setdefault(key, {"namespace": key[0], "pod": key[1], "node": labels.get("node"), "gpus": [],
                                     "used_gib": 0.0, "shared_allocated_gib": None, "whole_gpus": None, "allocated_gib": None})

    for labels, value in results.get("pod_used", ()):
        if _keep(labels, namespaces, nodes):
            entry = pod(labels)
            entry["gpus"].append({"gpu": labels.get("gpu"), "uuid": labels.get("uuid"), "used_gib": _gib(value)})
            entry["used_gib"] += value
    for labels, value in results.get("pod_shared", ()):
        if _keep(labels, namespaces, nodes):
            pod(labels)["shared_allocated_gib"] = _gib(value)
    for labels, value in results.get("pod_gpus", ()):
        if _keep(labels, namespaces, nodes):
            pod(labels)["whole_gpus"] = int(value)
    rows = []
    for key in sorted(pods, key=lambda k: (k[0] or "", k[1] or "")):
        entry = pods[key]
        used_bytes = entry["used_gib"]
        entry["used_gib"] = _gib(used_bytes)
        if entry["shared_allocated_gib"] is not None:
            entry["allocated_gib"] = entry["shared_allocated_gib"]
        elif entry["whole_gpus"] and entry["gpus"] and len(entry["gpus"]) == entry["whole_gpus"]:
            # whole GPUs: what it was given is the memory of the GPUs its processes run on
            entry["allocated_gib"] = _gib(sum(gpu_total.get(g["uuid"]) or 0 for g in entry["gpus"]))
        entry["percent"] = int(round(entry["used_gib"] / entry["allocated_gib"] * 100)) if entry["allocated_gib"] else None
        entry["over_allocated"] = bool(entry["shared_allocated_gib"] is not None and used_bytes > entry["shared_allocated_gib"] * GIB + 0.5)
        rows.append(entry)
    gpus = []
    used_by_uuid = dict((labels.get("uuid"), (labels, value)) for labels, value in results.get("gpu_used", ()))
    for labels, total in results.get("gpu_total", ()):
        if not _keep(labels, None, nodes):
            continue
        used = used_by_uuid.get(labels.get("uuid"), ({}, None))[1]
        gpus.append({"node": labels.get("node"), "gpu": labels.get("gpu"), "uuid": labels.get("uuid"), "used_gib": _gib(used),
                     "total_gib": _gib(total), "percent": int(round(used / total * 100)) if used is not None and total else None})
    gpus.sort(key=lambda g: (g["node"] or "", digits(str(g["gpu"])) or 0))
    by_node = {}
    for gpu in gpus:
        entry = by_node.setdefault(gpu["node"], {"node": gpu["node"], "gpus": 0, "used_gib": 0.0, "total_gib": 0.0})
        entry["gpus"] += 1
        entry["used_gib"] += gpu["used_gib"] or 0
        entry["total_gib"] += gpu["total_gib"] or 0
    node_rows = []
    for name in sorted(by_node):
        entry = by_node[name]
        entry["used_gib"], entry["total_gib"] = round(entry["used_gib"], 2), round(entry["total_gib"], 2)
        entry["percent"] = int(round(entry["used_gib"] / entry["total_gib"] * 100)) if entry["total_gib"] else None
        node_rows.append(entry)
    return {"pods": rows, "gpus": gpus, "nodes": node_rows}


def _num(value):
    return "-" if value is None else ("%.1f" % value)


def _pct(value):
    return "-" if value is None else "%d%%" % value


def table(doc):
    """The two views, as aligned text: GPU APP (per pod) and GPU Node (per GPU, then per node)."""
    buf = ["GPU APP\n", "NAMESPACE\tPOD\tNODE\tGPU\tUSED(GiB)\tALLOCATED(GiB)\tUSED/ALLOCATED\t\n"]
    for row in doc["pods"]:
        given = _num(row["allocated_gib"])
        if row["shared_allocated_gib"] is None and row["whole_gpus"]:
            given += " (%d GPU%s)" % (row["whole_gpus"], "" if row["whole_gpus"] == 1 else "s")
        share = "-" if row["percent"] is None else "%d%%%s" % (row["percent"], " OVER" if row["over_allocated"] else "")
        gpus = ",".join(g["gpu"] for g in row["gpus"]) or "-"
        cells = (row["namespace"], row["pod"], row["node"] or "-", gpus, _num(row["used_gib"]), given, share)
        buf.append("\t".join(cells) + "\t\n")
    buf.append("\nGPU Node\n")
    buf.append("NODE\tGPU\tUUID\tUSED(GiB)\tTOTAL(GiB)\tUSED%\t\n")
    for gpu in doc["gpus"]:
        cells = (gpu["node"], gpu["gpu"], gpu["uuid"], _num(gpu["used_gib"]), _num(gpu["total_gib"]), _pct(gpu["percent"]))
        buf.append("\t".join(cells) + "\t\n")
    for node in doc["nodes"]:
        cells = (node["node"], "all (%d)" % node["gpus"], "", _num(node["used_gib"]), _num(node["total_gib"]), _pct(node["percent"]))
        buf.append("\t".join(cells) + "\t\n")
    return tabwrite("".join(buf)).rstrip("\n")
