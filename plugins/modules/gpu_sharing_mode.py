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
  - The drain follows C(kubectl drain)'s rules, for every blocking pod, before anything changes. A mirror pod (a static
    pod) is never evicted and a DaemonSet's pod is not (its controller would start it again), so the switch is refused,
    naming them. A pod without a controller (nothing recreates it) is refused unless O(drain_force); a pod with an
    C(emptyDir) volume unless O(drain_delete_emptydir_data).
  - The cordon carries the annotation C(gpuops.fleet/cordoned-for-sharing-switch). A run killed between the cordon and the
    uncordon leaves it; the next run finishes the switch and uncordons the node, or uncordons it when the switch is no
    longer wanted (RV(finished_cordons)). A cordon someone else set is left in place.
  - Returns RV(switched), the nodes whose resource changed. Their kubelet checkpoint still registers the removed
    resource, stale by construction; hand them to M(gpuops.fleet.kubelet_checkpoint) with its C(retired_resources)
    option.
  - Idempotent; check mode returns the plan and changes nothing; diff mode shows each label change.
  - When O(nodes) is omitted, the action plugin builds it from O(hosts_group)'s inventory, see O(nodes).
  - Runs on the controller against the cluster, with kubernetes.core's client and authentication options.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.k8s_auth_options
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
    description:
      - Seconds to wait for the evicted pods of all switched nodes to be gone (and for a PodDisruptionBudget to allow them).
        Must be positive.
    type: int
    default: 300
  drain_force:
    description:
      - With O(drain), evict pods that no controller recreates (bare pods), as C(kubectl drain --force). They are gone for
        good; each is listed in RV(eviction_notes).
    type: bool
    default: false
  drain_delete_emptydir_data:
    description: With O(drain), evict pods with C(emptyDir) volumes, whose data is lost, as C(kubectl drain --delete-emptydir-data).
    type: bool
    default: false
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
finished_cordons:
  description: Nodes a run of this module cordoned and did not uncordon (it was killed), uncordoned now (or that would be).
  returned: always
  type: list
  elements: str
  sample: [gpu-node-3]
eviction_notes:
  description: The evicted pods that lose something, with what (no controller recreates them, or their emptyDir data).
  returned: always
  type: list
  elements: dict
  sample: [{pod: ml/notebook, note: "no controller, nothing recreates it (drain_force)"}]
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

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import sharing_mode
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_module import api_client, k8s_module, run

ARGUMENT_SPEC = dict(
    nodes=dict(type="dict"),
    hosts_group=dict(type="str", default="gpu_nodes"),
    sharing_group=dict(type="str", default="gpu_sharing"),
    label=dict(type="str", default="cgpu"),
    true_value=dict(type="str", default="true"),
    false_value=dict(type="str", default="false"),
    drain=dict(type="bool", default=False),
    drain_timeout=dict(type="int", default=300),
    drain_force=dict(type="bool", default=False),
    drain_delete_emptydir_data=dict(type="bool", default=False),
)


def main():
    module = k8s_module(ARGUMENT_SPEC)
    module.exit_json(**run(module, lambda: sharing_mode.switch(api_client(module), module.params, module.check_mode)))


if __name__ == "__main__":
    main()
