# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: switching nodes between whole GPUs and shared GPU memory
(module gpu_sharing_mode): the plan (``gpu_share.mode_plan``), the refusals, and the drain that
``drain: true`` asks for (``drain``: kubectl drain's rules, the cordon marked as ours)."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import drain
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import gpu_share as share
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import as_bool
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError, ParameterError

try:
    from kubernetes.client.api import core_v1_api
    from kubernetes.client.exceptions import ApiException
except ImportError:
    # AnsibleK8SModule reports a missing kubernetes library itself
    pass


class SwitchRefused(GpuopsError):
    """Nothing was changed: the switch would take GPUs from running pods, or the drain breaks kubectl's rules.

    ``result`` (the plan, by node) goes into the failure beside the message.
    """

    def __init__(self, message, rows):
        super().__init__(message)
        self.result = {"plan": rows}


def check_params(p):
    share.check_mode_params(p["label"], p["true_value"], p["false_value"])
    if p["drain_timeout"] <= 0:
        raise ParameterError("drain_timeout", "%d must be a positive number of seconds to wait for evicted pods" % p["drain_timeout"])
    return dict((name, as_bool("nodes.%s" % name, value)) for name, value in (p["nodes"] or {}).items())


def _apply(client, api, p, check_mode, desired):
    nodes = [client.sanitize_for_serialization(n) for n in api.list_node().items]
    pods = [client.sanitize_for_serialization(x) for x in api.list_pod_for_all_namespaces().items]
    rows = share.mode_plan(nodes, pods, desired, p["label"], p["true_value"], p["false_value"])
    refused = share.refusal(rows)
    if refused and not p["drain"]:
        raise SwitchRefused(refused, rows)
    evictions, cannot = drain.drain_plan(rows, pods, p["drain_force"], p["drain_delete_emptydir_data"])
    if cannot:
        raise SwitchRefused("refusing to drain, nothing was changed: %s" % "; ".join(cannot), rows)
    by_name = dict((n["metadata"]["name"], n) for n in nodes)
    leftover = [r["node"] for r in rows if drain.cordoned_by_us(by_name[r["node"]])]
    if check_mode:
        return rows, [e["pod"] for e in evictions], leftover, evictions
    if not any(r["change"] for r in rows) and not leftover:
        return rows, [], [], evictions

    def label_node(row):
        api.patch_node(row["node"], {"metadata": {"labels": {p["label"]: row["desired"]}}})

    evicted, uncordoned = drain.drain_and_switch(api, rows, by_name, evictions, label_node, drain.waiter(api), ApiException, p["drain_timeout"])
    return rows, evicted, [n for n in uncordoned if n in leftover], evictions


def switch(client, p, check_mode, api=None):
    """The module's result: label (and with ``drain``, cordon, evict, uncordon) the nodes named in ``p["nodes"]``."""
    desired = check_params(p)
    api = api or core_v1_api.CoreV1Api(client)
    rows, evicted, leftover, evictions = _apply(client, api, p, check_mode, desired)
    changes = [r for r in rows if r["change"]]
    switched = [{"node": r["node"], "retired": r["removes"]} for r in changes if r["removes"]]
    diff = {"before": "".join("%s: %s=%s\n" % (r["node"], p["label"], r["current"] if r["current"] is not None else "(unset)") for r in changes),
            "after": "".join("%s: %s=%s\n" % (r["node"], p["label"], r["desired"]) for r in changes)}
    verb = "would set" if check_mode else "set"
    msg = ("%s %s on %s" % (verb, p["label"], ", ".join("%s (%s)" % (r["node"], r["desired"]) for r in changes))) if changes else \
        "every node already has its sharing mode"
    if evicted:
        msg += "; %s %s" % ("would evict" if check_mode else "evicted", ", ".join(evicted))
    if leftover:
        msg += "; %s %s, cordoned by a run of ours that did not finish" % ("would uncordon" if check_mode else "uncordoned", ", ".join(leftover))
    notes = [{"pod": e["pod"], "note": e["note"]} for e in evictions if e["note"]]
    return dict(changed=bool(changes or leftover), plan=rows, switched=switched, evicted=evicted, eviction_notes=notes,
                finished_cordons=leftover, msg=msg, diff=diff)
