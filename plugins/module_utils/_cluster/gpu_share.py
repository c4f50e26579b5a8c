# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: GPU sharing (cGPU / gpushare, field report 003).

Pure functions over Node and Pod objects as the API serves them (dicts), for the modules
``gpu_share_info`` (``kubectl inspect cgpu`` for Ansible users) and ``gpu_sharing_mode`` (the
node label that switches a node between whole GPUs and shared GPU memory).

How the open-source parts account for shared GPU memory (AliyunContainerService
gpushare-device-plugin and gpushare-scheduler-extender, Apache-2.0):

* A sharing node advertises ``aliyun.com/gpu-mem`` (GiB, one fake device ``<uuid>-_-<n>`` per
  GiB of each GPU: pkg/gpu/nvidia/nvidia.go ``generateFakeDeviceID``) and
  ``aliyun.com/gpu-count``. ``kubectl inspect cgpu`` (cmd/inspect/nodeinfo.go) takes a node's
  total from allocatable ``aliyun.com/gpu-mem`` and each GPU's total as that divided by
  ``aliyun.com/gpu-count``.
* A pod's GiB is the sum of its containers' ``aliyun.com/gpu-mem`` limits (init containers do not
  count; cmd/inspect/podinfo.go ``gpuMemoryInPod``). Succeeded and Failed pods hold nothing.
* The extender, when it binds a pod, annotates it (pkg/utils/pod.go
  ``PatchPodAnnotationSpec``): ``ALIYUN_COM_GPU_MEM_IDX`` (the GPU index it chose),
  ``ALIYUN_COM_GPU_MEM_POD`` (the pod's GiB), ``ALIYUN_COM_GPU_MEM_DEV`` (the GPU's GiB),
  ``ALIYUN_COM_GPU_MEM_ASSIGNED=false`` and ``ALIYUN_COM_GPU_MEM_ASSUME_TIME`` (ns). The device
  plugin's ``Allocate`` (pkg/gpu/nvidia/allocate.go) finds the assumed pod, gives its containers
  the GPU of that index (``NVIDIA_VISIBLE_DEVICES``) and sets ``ALIYUN_COM_GPU_MEM_ASSIGNED=true``.
* The plugin ignores WHICH fake IDs kubelet picked (it only counts them), so on a node with
  several GPUs a pod's checkpointed ``<uuid>-_-<n>`` IDs may name any GPU. What the container
  really got is in the checkpoint's ``AllocResp`` (its ``NVIDIA_VISIBLE_DEVICES`` env).

Upstream's inspect counts a pod in a GPU's column as soon as it has an index annotation, and
drops pods whose index the node does not have from the per-GPU columns. Here every pod on a
sharing node lands in exactly one bucket: ``assigned`` (index annotation, ASSIGNED=true, the pod
past Pending: in its GPU's column), ``starting`` (the same, but the pod is still Pending, e.g.
ContainerCreating: its own column, with its GiB), ``assumed`` (index, but the plugin has not allocated it yet), ``pending``
(no usable index annotation: upstream's PENDING column), ``unknown_gpu`` (an index the node
does not have). The node's allocated total is every bucket (the scheduler holds that memory
either way); a GPU's column is its assigned pods only. Pods not yet scheduled are listed apart
and are in no total.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.pods import active
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.tabwrite import tabwrite
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import whole_quantity as whole
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._common.gpushare import (
    ANN_ASSIGNED, ANN_IDX, COUNT, GPUSHARE_ID, MEM, WHOLE_GPU, gpus_by_index, pct,
)

BUCKETS = ("assigned", "starting", "assumed", "pending", "unknown_gpu")


def _meta(obj):
    return obj.get("metadata") or {}


def _alloc(node):
    return (node.get("status") or {}).get("allocatable") or {}


def pod_gib(pod, resource=MEM):
    """The pod's ``resource`` (limits of its containers, init containers excluded, as upstream)."""
    total = 0
    for ctr in (pod.get("spec") or {}).get("containers") or ():
        total += whole(((ctr.get("resources") or {}).get("limits") or {}).get(resource))
    return total


def uses(pod, resource):
    """Does the pod ask for ``resource`` in any container (limits or requests, init containers too)?"""
    spec = pod.get("spec") or {}
    for ctr in list(spec.get("containers") or ()) + list(spec.get("initContainers") or ()):
        res = ctr.get("resources") or {}
        if whole((res.get("limits") or {}).get(resource)) or whole((res.get("requests") or {}).get(resource)):
            return True
    return False


def node_ip(node):
    """InternalIP (as ``kubectl inspect cgpu`` prints), else the first address, else ``unknown``."""
    addresses = (node.get("status") or {}).get("addresses") or []
    for addr in addresses:
        if addr.get("type") == "InternalIP":
            return addr.get("address")
    return addresses[0].get("address") if addresses else "unknown"


def pod_index(pod):
    """The GPU index of the ``ALIYUN_COM_GPU_MEM_IDX`` annotation, or None (missing, not a number, or -1)."""
    value = (_meta(pod).get("annotations") or {}).get(ANN_IDX)
    if value is None or not re.match(r"\A[0-9]+\Z", str(value).strip()):
        return None
    return int(str(value).strip())


def bucket(pod, gpu_count):
    """Which line a pod on a sharing node goes to (see the module docstring)."""
    index = pod_index(pod)
    if index is None:
        return "pending"
    if index >= gpu_count:
        return "unknown_gpu"
    assigned = str((_meta(pod).get("annotations") or {}).get(ANN_ASSIGNED, "")).strip().lower()
    if assigned != "true":
        return "assumed"
    # allocated, but its containers are not running yet (ContainerCreating, an image pull): not in its GPU's column
    return "starting" if (pod.get("status") or {}).get("phase") == "Pending" else "assigned"


def allocation(nodes, pods, label="cgpu", node_names=None):
    """``{"nodes": [...], "cluster": {...}, "unscheduled": [...]}`` for the sharing nodes among ``nodes``.

    A sharing node is one with allocatable ``aliyun.com/gpu-mem`` > 0 (upstream's
    ``isGPUSharingNode``). ``node_names`` limits the report to those nodes. Each pod record
    has ``namespace``, ``name``, ``uid``, ``gib``, ``gpu`` (the annotation's index or None) and
    ``state`` (a bucket, or ``unscheduled``).
    """
    wanted = set(node_names) if node_names else None
    by_node = {}
    unscheduled = []
    for pod in sorted(pods or (), key=lambda p: (_meta(p).get("namespace") or "", _meta(p).get("name") or "")):
        gib = pod_gib(pod)
        if gib <= 0 or not active(pod):
            continue
        node = (pod.get("spec") or {}).get("nodeName")
        record = {"namespace": _meta(pod).get("namespace"), "name": _meta(pod).get("name"), "uid": _meta(pod).get("uid"),
                  "gib": gib, "gpu": pod_index(pod), "node": node}
        if not node:
            record["state"] = "unscheduled"
            unscheduled.append(record)
        else:
            by_node.setdefault(node, []).append((pod, record))
    out_nodes = []
    for node in sorted(nodes or (), key=lambda n: _meta(n).get("name") or ""):
        name = _meta(node).get("name")
        total = whole(_alloc(node).get(MEM))
        if total <= 0 or (wanted is not None and name not in wanted):
            continue
        count = whole(_alloc(node).get(COUNT))
        per_gpu = total // count if count > 0 else 0
        gpus = [{"index": i, "allocated_gib": 0, "total_gib": per_gpu, "pods": []} for i in range(count)]
        buckets = dict((b, []) for b in BUCKETS[1:])
        records = []
        for pod, record in by_node.get(name, ()):
            record["state"] = bucket(pod, count)
            records.append(record)
            if record["state"] == "assigned":
                gpus[record["gpu"]]["allocated_gib"] += record["gib"]
                gpus[record["gpu"]]["pods"].append("%s/%s" % (record["namespace"], record["name"]))
            else:
                buckets[record["state"]].append(record)
        allocated = sum(r["gib"] for r in records)
        entry = {"name": name, "ip": node_ip(node), "mode": (_meta(node).get("labels") or {}).get(label),
                 "gpu_count": count, "total_gib": total, "allocated_gib": allocated, "percent": pct(allocated, total),
                 "gpus": gpus, "pods": records}
        for key, items in buckets.items():
            entry["%s_gib" % key] = sum(r["gib"] for r in items)
        out_nodes.append(entry)
    used = sum(n["allocated_gib"] for n in out_nodes)
    total = sum(n["total_gib"] for n in out_nodes)
    return {"nodes": out_nodes, "cluster": {"allocated_gib": used, "total_gib": total, "percent": pct(used, total)},
            "unscheduled": unscheduled}


def _extra_columns(report):
    """Which of the assumed/pending/unknown columns any node needs (a column only when some pod is there)."""
    return [b for b in BUCKETS[1:] if any(n["%s_gib" % b] for n in report["nodes"])]


_COLUMN_TITLE = {"starting": "STARTING", "assumed": "ASSUMED", "pending": "PENDING", "unknown_gpu": "UNKNOWN GPU"}
_DETAIL_TITLE = {"starting": "Starting", "assumed": "Assumed", "pending": "Pending", "unknown_gpu": "Unknown GPU"}


def summary_table(report):
    """``kubectl inspect cgpu``: one line per node, then the cluster's allocated/total."""
    nodes = report["nodes"]
    max_count = max([n["gpu_count"] for n in nodes] or [0])
    extra = _extra_columns(report)
    head = "NAME\tIPADDRESS\t" + "".join("GPU%d(Allocated/Total)\t" % i for i in range(max_count))
    head += "".join("%s(Allocated)\t" % _COLUMN_TITLE[b] for b in extra) + "GPU Memory(GiB)\n"
    buf = [head]
    line_len = 0
    for node in nodes:
        cells = ["%s\t%s\t" % (node["name"], node["ip"])]
        for i in range(max_count):
            gpu = node["gpus"][i] if i < len(node["gpus"]) else None
            cells.append("%d/%d\t" % (gpu["allocated_gib"], gpu["total_gib"]) if gpu else "0/0\t")
        cells.extend("%s\t" % (node["%s_gib" % b] or "") for b in extra)
        cells.append("%d/%d\n" % (node["allocated_gib"], node["total_gib"]))
        row = "".join(cells)
        buf.append(row)
        if not line_len:
            line_len = len(row) + 20  # upstream: the first row's length + 20
    buf.append("-" * (line_len or 70) + "\n")
    cluster = report["cluster"]
    buf.append("Allocated/Total GPU Memory In Cluster:\n")
    buf.append("%d/%d (%d%%)\t\n" % (cluster["allocated_gib"], cluster["total_gib"], cluster["percent"]))
    buf.extend(_unscheduled_lines(report))
    return tabwrite("".join(buf)).rstrip("\n")


def details_table(report):
    """``kubectl inspect cgpu -d``: per node, its pods with the GiB they hold on which GPU."""
    buf = []
    line_len = 0
    extra = _extra_columns(report)
    for node in report["nodes"]:
        if buf:
            buf.append("\n")
        buf.append("NAME:\t%s\nIPADDRESS:\t%s\n\n" % (node["name"], node["ip"]))
        node_extra = [b for b in extra if node["%s_gib" % b]]
        buf.append("NAME\tNAMESPACE\t" + "".join("GPU%d(Allocated)\t" % i for i in range(node["gpu_count"]))
                   + "".join("%s(Allocated)\t" % _DETAIL_TITLE[b] for b in node_extra) + "\n")
        rows = []
        for gpu in node["gpus"]:
            for record in (r for r in node["pods"] if r["state"] == "assigned" and r["gpu"] == gpu["index"]):
                rows.append(_detail_row(record, node, node_extra))
        for state in node_extra:
            for record in (r for r in node["pods"] if r["state"] == state):
                rows.append(_detail_row(record, node, node_extra))
        if not line_len:
            line_len = len("".join(rows)) + 10  # upstream: the first node's pod lines + 10
        buf.extend(rows)
        buf.append("Allocated :\t%d (%d%%)\t\n" % (node["allocated_gib"], node["percent"]))
        buf.append("Total :\t%d \t\n" % node["total_gib"])
        buf.append("-" * line_len + "\n")
    cluster = report["cluster"]
    buf.append("\nAllocated/Total GPU Memory In Cluster:\t%d/%d (%d%%)\t\n"
               % (cluster["allocated_gib"], cluster["total_gib"], cluster["percent"]))
    buf.extend(_unscheduled_lines(report))
    return tabwrite("".join(buf)).rstrip("\n")


def _detail_row(record, node, node_extra):
    cells = ["%s\t%s\t" % (record["name"], record["namespace"])]
    for i in range(node["gpu_count"]):
        cells.append("%d\t" % record["gib"] if record["state"] == "assigned" and record["gpu"] == i else "0\t")
    for state in node_extra:
        cells.append("%d\t" % record["gib"] if record["state"] == state else "0\t")
    return "".join(cells) + "\n"


def _unscheduled_lines(report):
    items = report["unscheduled"]
    if not items:
        return []
    return ["Not scheduled yet (in no total):\t%d GiB in %d pod%s: %s\t\n" % (
        sum(r["gib"] for r in items), len(items), "" if len(items) == 1 else "s",
        ", ".join("%s/%s" % (r["namespace"], r["name"]) for r in items))]


# -- the API against the node's truth: the checkpoint and the GPUs ------------------------------

def cross_check(node_name, records, gpus, entries):
    """Disagreements between the API (annotations), the checkpoint and the node's GPUs, for one node.

    ``records``: the node's pod records from allocation(); ``gpus``: gpu_uuid_facts' ``gpus``
    (``index``, ``uuid``); ``entries``: kubelet_checkpoint_info's ``pod_device_entries`` (with
    ``alloc_envs``). Findings (``kind``):

    * ``gpu_gone`` - a pod's checkpointed device IDs, or the GPU its container was given, name
      a GPU the node no longer has (the stale checkpoint of field reports 000/001, shared);
    * ``annotation_mismatch`` - the container was given one GPU (``NVIDIA_VISIBLE_DEVICES`` in the
      checkpoint's AllocResp) while the pod's annotation names another index;
    * ``unknown_gpu`` - the annotation names an index the node does not have.

    Checkpointed fake IDs on a present GPU are not compared with the annotation: kubelet picks
    them without regard to the GPU (see the module docstring); only AllocResp says which GPU.
    """
    by_index = gpus_by_index(gpus)
    present = set(by_index.values())
    by_uid = {}
    for entry in entries or ():
        if entry.get("resource_name") == MEM:
            by_uid.setdefault(entry.get("pod_uid"), []).append(entry)
    findings = []
    for record in records:
        pod = "%s/%s" % (record["namespace"], record["name"])
        index = record["gpu"]
        if index is not None and index not in by_index:
            findings.append({"node": node_name, "pod": pod, "kind": "unknown_gpu",
                             "detail": "its %s annotation names GPU %d; the node has GPU%s %s" % (
                                 ANN_IDX, index, "" if len(by_index) == 1 else "s",
                                 ", ".join(str(i) for i in sorted(by_index)) or "none")})
        for entry in by_uid.get(record["uid"], ()):
            where = "container %s" % entry.get("container_name")
            gone = sorted(set(m.group("uuid") for m in (GPUSHARE_ID.match(i) for i in entry.get("device_ids") or ()) if m) - present)
            if gone:
                findings.append({"node": node_name, "pod": pod, "kind": "gpu_gone",
                                 "detail": "%s: the checkpoint holds device IDs of %s, which the node no longer has" % (where, ", ".join(gone))})
            given = ((entry.get("alloc_envs") or {}).get("NVIDIA_VISIBLE_DEVICES") or "").strip()
            if not given or not given.startswith("GPU-"):
                continue
            if given not in present:
                if given not in gone:
                    findings.append({"node": node_name, "pod": pod, "kind": "gpu_gone",
                                     "detail": "%s was given %s, which the node no longer has" % (where, given)})
            elif index is not None and index in by_index and by_index[index] != given:
                given_index = [i for i, u in by_index.items() if u == given][0]
                findings.append({"node": node_name, "pod": pod, "kind": "annotation_mismatch",
                                 "detail": "%s was given GPU %d (%s); the pod's %s annotation says GPU %d (%s)" % (
                                     where, given_index, given, ANN_IDX, index, by_index[index])})
    return findings


# -- switching a node's mode --------------------------------------------------------------------

def check_mode_params(label, true_value, false_value):
    if not isinstance(label, str) or not re.match(r"\A([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z", label):
        raise ParameterError("label", "expected a Kubernetes label key such as cgpu, got %r" % (label,))
    for field, value in (("true_value", true_value), ("false_value", false_value)):
        if not isinstance(value, str) or not re.match(r"\A([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z", value) or len(value) > 63:
            raise ParameterError(field, "expected a Kubernetes label value such as true, got %r" % (value,))
    if true_value == false_value:
        raise ParameterError("false_value", "must differ from true_value (%r)" % true_value)


def mode_plan(nodes, pods, desired, label="cgpu", true_value="true", false_value="false"):
    """Per node of ``desired`` (name -> bool): the label change and the pods that block it.

    Switching to sharing removes ``nvidia.com/gpu`` from the node (the NVIDIA plugin's affinity
    no longer matches); switching back removes ``aliyun.com/gpu-mem``. A running pod that holds
    the resource being removed blocks the switch: its GPU allocation would be lost (kubelet's
    checkpoint keeps the registration only until the plugin is gone).
    """
    by_name = dict((_meta(n).get("name"), n) for n in nodes or ())
    missing = sorted(set(desired) - set(by_name))
    if missing:
        raise ParameterError("nodes", "no such node in the cluster: %s" % ", ".join(missing))
    rows = []
    for name in sorted(desired):
        want = desired[name]
        current = (_meta(by_name[name]).get("labels") or {}).get(label)
        value = true_value if want else false_value
        row = {"node": name, "label": label, "current": current, "desired": value, "sharing": want,
               "change": current != value, "removes": None, "blocking_pods": []}
        # a node is sharing while its label has the true value; anything else (absent, false) is whole GPUs
        if row["change"] and (current == true_value) != want:
            removed = WHOLE_GPU if want else MEM
            row["removes"] = removed
            row["blocking_pods"] = sorted("%s/%s" % (_meta(p).get("namespace"), _meta(p).get("name")) for p in pods or ()
                                          if (p.get("spec") or {}).get("nodeName") == name and active(p) and uses(p, removed)
                                          and _meta(p).get("deletionTimestamp") is None)
        rows.append(row)
    return rows


def refusal(rows):
    """The message that names every blocked node and its pods, or None."""
    blocked = [r for r in rows if r["blocking_pods"]]
    if not blocked:
        return None
    parts = ["%s (%s -> %s: %s still used by %s)" % (r["node"], r["current"] or "unset", r["desired"], r["removes"], ", ".join(r["blocking_pods"]))
             for r in blocked]
    return ("refusing to switch the GPU sharing mode of %d node%s whose pods use the resource being removed: %s. "
            "Move those pods off the node first, or set drain (gpu_sharing_drain: true) to evict them."
            % (len(blocked), "" if len(blocked) == 1 else "s", "; ".join(parts)))
