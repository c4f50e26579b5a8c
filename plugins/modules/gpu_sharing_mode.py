#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_sharing_mode
short_description: Switch GPU nodes between whole GPUs (nvidia.com/gpu) and shared GPU memory (aliyun.com/gpu-mem) by their label
version_added: 0.3.0
description:
  - Sets each node's sharing label (O(label), default C(cgpu)) to O(true_value) or O(false_value). A node labelled
    C(cgpu=true) runs the gpushare device plugin and offers C(aliyun.com/gpu-mem); any other value (or none) runs the
    NVIDIA device plugin and offers C(nvidia.com/gpu) (the two DaemonSets' node affinities, see the
    C(gpuops.fleet.gpu_sharing) role).
  - Switching is disruptive. A switch that would remove a resource some running pod on the node holds is refused,
    naming every such node and pod, before anything changes; unless O(drain), which cordons the node, evicts those pods
    (the Eviction API, so PodDisruptionBudgets are respected), waits until they are gone, changes the label and uncordons
    the node (only if it was not cordoned before).
  - Returns RV(switched), the nodes whose resource changed. Their kubelet checkpoint still registers the removed
    resource, stale by construction; hand them to M(gpuops.fleet.kubelet_checkpoint) with its C(retired_resources)
    option.
  - Idempotent; check mode returns the plan and changes nothing; diff mode shows each label change.
  - When O(nodes) is omitted, the action plugin builds it from O(hosts_group)'s inventory, see O(nodes).
  - Runs on the controller against the cluster, with kubernetes.core's client and authentication options.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gpuops.fleet.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
options:
  nodes:
    description:
      - Kubernetes node name to whether it shares its GPUs (V(true)) or offers them whole (V(false)). Strings such as
        V("true") (a survey, C(-e)) are accepted.
      - When omitted, the action plugin reads each host of O(hosts_group) - C(gpu_sharing_enabled) when the host sets it,
        else whether the host is in O(sharing_group) - and names it by C(gpuops_node_name), else its inventory name.
    type: dict
  hosts_group:
    description: The inventory group whose hosts make O(nodes) when it is omitted.
    type: str
    default: gpu_nodes
  sharing_group:
    description: Hosts in this inventory group share their GPUs unless they set C(gpu_sharing_enabled) (when O(nodes) is omitted).
    type: str
    default: gpu_sharing
  label:
    description: The node label that holds the mode.
    type: str
    default: cgpu
  true_value:
    description: The label value of a sharing node.
    type: str
    default: "true"
  false_value:
    description: The label value of a node that offers whole GPUs.
    type: str
    default: "false"
  drain:
    description: Evict the pods that hold the resource being removed instead of refusing (see the description).
    type: bool
    default: false
  drain_timeout:
    description: Seconds to wait for the evicted pods of all switched nodes to be gone (and for a PodDisruptionBudget to allow them).
    type: int
    default: 300
requirements:
  - kubernetes (Python client)
seealso:
  - module: gpuops.fleet.gpu_share_info
  - module: gpuops.fleet.kubelet_checkpoint
"""

EXAMPLES = r"""
- name: gpu-node-3 shares its GPUs, gpu-node-4 offers them whole (refused while pods use what would be removed)
  gpuops.fleet.gpu_sharing_mode:
    nodes:
      gpu-node-3: true
      gpu-node-4: false
  register: sharing

- name: From the inventory (gpu_sharing_enabled per host, or the gpu_sharing group), evicting what blocks a switch
  gpuops.fleet.gpu_sharing_mode:
    drain: true
  register: sharing
"""

RETURN = r"""
plan:
  description: One row per node, in name order.
  returned: always
  type: list
  elements: dict
  sample:
    - {node: gpu-node-3, label: cgpu, current: null, desired: "true", sharing: true, change: true,
       removes: nvidia.com/gpu, blocking_pods: [ml/train-0], host: gpu-node-3}
  contains:
    host:
      description: The node's inventory name, when the action plugin built O(nodes) from the inventory.
      type: str
switched:
  description:
    - The nodes whose resource changed (or would, in check mode), with C(retired) (the resource removed), and C(host)
      (its inventory name) when the action plugin built O(nodes) from the inventory.
  returned: always
  type: list
  elements: dict
  sample: [{node: gpu-node-3, host: gpu-node-3, retired: nvidia.com/gpu}]
evicted:
  description: The pods evicted (or that would be, in check mode) with O(drain).
  returned: always
  type: list
  elements: str
msg:
  description: What changed, or would.
  returned: always
  type: str
"""

import time

from ansible_collections.gpuops.fleet.plugins.module_utils import _gpu_share as share
from ansible_collections.gpuops.fleet.plugins.module_utils._checks import as_bool
from ansible_collections.gpuops.fleet.plugins.module_utils._errors import GpuopsError
from ansible_collections.gpuops.fleet.plugins.module_utils._k8s_module import api_client, k8s_module, run
from ansible_collections.gpuops.fleet.plugins.module_utils._k8s_watch import Watcher

try:
    from kubernetes.client.api import core_v1_api
    from kubernetes.client.exceptions import ApiException
except ImportError:
    # AnsibleK8SModule reports a missing kubernetes library itself
    pass

# kubectl drain retries an eviction a PodDisruptionBudget refuses (429) every 5 s
EVICTION_RETRY_SECONDS = 5


class SharingError(GpuopsError):
    """The switch could not be completed (an eviction refused or too slow)."""


def _evict(api, namespace, name, deadline):
    # policy/v1 Eviction from Kubernetes 1.22; the API servers before serve policy/v1beta1 only
    for version in ("policy/v1", "policy/v1beta1"):
        body = {"apiVersion": version, "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        while True:
            try:
                api.create_namespaced_pod_eviction(name, namespace, body)
                return
            except ApiException as exc:
                if exc.status == 404 and "not found" in str(exc.body or "").lower() and "pods" in str(exc.body or ""):
                    return  # already gone
                if exc.status == 429 and time.monotonic() < deadline:
                    time.sleep(EVICTION_RETRY_SECONDS)  # a PodDisruptionBudget says not yet
                    continue
                if exc.status == 429:
                    raise SharingError("evicting %s/%s: a PodDisruptionBudget still refuses it after drain_timeout" % (namespace, name))
                if exc.status in (400, 404, 415, 422) and version == "policy/v1":
                    break  # this API server does not know policy/v1 Eviction
                raise


def _cordon(api, node, value):
    api.patch_node(node, {"spec": {"unschedulable": value}})


def drain_and_switch(client, api, rows, nodes_by_name, p):
    """Cordon, evict the blocking pods, wait for them to be gone, label, uncordon; per node."""
    deadline = time.monotonic() + p["drain_timeout"]
    evicted = []
    for row in rows:
        if not row["change"]:
            continue
        was_cordoned = bool((nodes_by_name[row["node"]].get("spec") or {}).get("unschedulable"))
        if row["blocking_pods"]:
            if not was_cordoned:
                _cordon(api, row["node"], True)
            try:
                for item in row["blocking_pods"]:
                    namespace, name = item.split("/", 1)
                    _evict(api, namespace, name, deadline)
                    evicted.append(item)
                pods = Watcher(client, api.list_pod_for_all_namespaces, field_selector="spec.nodeName=%s" % row["node"])
                blocking = set(row["blocking_pods"])
                gone = pods.wait(lambda w: not any("%s/%s" % k in blocking for k in w.objects), deadline)
                if not gone:
                    left = sorted("%s/%s" % k for k in pods.objects if "%s/%s" % k in blocking)
                    raise SharingError("node %s: evicted pods still there after drain_timeout: %s" % (row["node"], ", ".join(left)))
                _label(api, row, p)
            finally:
                if not was_cordoned:
                    _cordon(api, row["node"], False)
        else:
            _label(api, row, p)
    return evicted


def _label(api, row, p):
    api.patch_node(row["node"], {"metadata": {"labels": {p["label"]: row["desired"]}}})


def main():
    module = k8s_module(dict(
        nodes=dict(type="dict"),
        hosts_group=dict(type="str", default="gpu_nodes"),
        sharing_group=dict(type="str", default="gpu_sharing"),
        label=dict(type="str", default="cgpu"),
        true_value=dict(type="str", default="true"),
        false_value=dict(type="str", default="false"),
        drain=dict(type="bool", default=False),
        drain_timeout=dict(type="int", default=300),
    ))
    p = module.params

    def work():
        share.check_mode_params(p["label"], p["true_value"], p["false_value"])
        desired = dict((name, as_bool("nodes.%s" % name, value)) for name, value in (p["nodes"] or {}).items())
        client = api_client(module)
        api = core_v1_api.CoreV1Api(client)
        nodes = [client.sanitize_for_serialization(n) for n in api.list_node().items]
        pods = [client.sanitize_for_serialization(x) for x in api.list_pod_for_all_namespaces().items]
        rows = share.mode_plan(nodes, pods, desired, p["label"], p["true_value"], p["false_value"])
        refused = share.refusal(rows)
        if refused and not p["drain"]:
            module.fail_json(msg=refused, plan=rows)
        evicted = []
        if module.check_mode:
            evicted = [pod for row in rows for pod in row["blocking_pods"]]
        elif any(r["change"] for r in rows):
            evicted = drain_and_switch(client, api, rows, dict((n["metadata"]["name"], n) for n in nodes), p)
        return rows, evicted

    rows, evicted = run(module, work)
    changes = [r for r in rows if r["change"]]
    switched = [{"node": r["node"], "retired": r["removes"]} for r in changes if r["removes"]]
    diff = {"before": "".join("%s: %s=%s\n" % (r["node"], p["label"], r["current"] if r["current"] is not None else "(unset)") for r in changes),
            "after": "".join("%s: %s=%s\n" % (r["node"], p["label"], r["desired"]) for r in changes)}
    verb = "would set" if module.check_mode else "set"
    msg = ("%s %s on %s" % (verb, p["label"], ", ".join("%s (%s)" % (r["node"], r["desired"]) for r in changes))) if changes else \
        "every node already has its sharing mode"
    if evicted:
        msg += "; %s %s" % ("would evict" if module.check_mode else "evicted", ", ".join(evicted))
    module.exit_json(changed=bool(changes), plan=rows, switched=switched, evicted=evicted, msg=msg, diff=diff)


if __name__ == "__main__":
    main()
