#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_share_info
short_description: Shared GPU memory per GPU, node and cluster (kubectl inspect cgpu), checked against the nodes' checkpoints
version_added: 0.3.0
description:
  - Read-only. For every node that offers C(aliyun.com/gpu-mem) (a GPU sharing node - cGPU, gpushare), reports the GiB
    allocated and the total per GPU and per node, and the cluster's total with its percentage, as C(kubectl inspect cgpu)
    of AliyunContainerService's gpushare-device-plugin does, and a RV(table) laid out like its output (plain, or C(-d)
    with O(details)).
  - A node's total is its allocatable C(aliyun.com/gpu-mem), each GPU's that divided by C(aliyun.com/gpu-count). A pod
    holds the sum of its containers' C(aliyun.com/gpu-mem) limits; Succeeded and Failed pods hold nothing.
  - Each pod of a sharing node is counted once, in its own line. C(assigned) (the extender's
    C(ALIYUN_COM_GPU_MEM_IDX) annotation and the plugin's C(ALIYUN_COM_GPU_MEM_ASSIGNED=true)) in its GPU's column;
    C(assumed) (bound by the extender, not yet allocated by the plugin), C(pending) (no usable index annotation) and
    C(unknown_gpu) (an index the node does not have) in columns of their own, never in a GPU's. The node's allocated
    total is all of them. Pods not scheduled yet are listed apart and are in no total.
  - With O(node_truth) (the nodes' M(gpuops.fleet.gpu_uuid_facts) and M(gpuops.fleet.kubelet_checkpoint_info) results,
    which the action plugin collects from O(hosts_group) when not given), each pod's allocation in the node's kubelet
    checkpoint is compared with its annotation and the node's GPUs, see RV(findings).
  - Runs on the controller against the cluster, with kubernetes.core's client and authentication options.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.k8s_auth_options
  - gpuops.fleet.attributes
  - gpuops.fleet.attributes.info_module
options:
  nodes:
    description: Report only these nodes (Kubernetes node names); every sharing node when omitted.
    type: list
    elements: str
  details:
    description: Lay RV(table) out as C(kubectl inspect cgpu -d) (the pods of each node, with the GiB they hold on which GPU).
    type: bool
    default: false
  label:
    description: The node label that holds a node's sharing mode (reported as RV(nodes[].mode)).
    type: str
    default: cgpu
  node_truth:
    description:
      - Per GPU node, what the node itself says. Each item has C(node) (the Kubernetes node name), C(gpus) (C(gpus) of
        M(gpuops.fleet.gpu_uuid_facts), with C(index) and C(uuid)) and C(pod_device_entries) (of
        M(gpuops.fleet.kubelet_checkpoint_info)).
      - When omitted, the action plugin builds it from the hosts of O(hosts_group) that have C(ansible_facts.gpuops_gpus)
        and a registered C(gpu_sharing_checkpoint_info); their Kubernetes node name is C(gpuops_node_name), else the
        inventory name.
    type: list
    elements: dict
  hosts_group:
    description: The inventory group whose hosts' facts make O(node_truth) when it is omitted.
    type: str
    default: gpu_nodes
requirements:
  - kubernetes (Python client)
seealso:
  - module: gpuops.fleet.kubelet_checkpoint_info
  - module: gpuops.fleet.gpu_uuid_facts
  - module: gpuops.fleet.gpu_sharing_mode
  - name: gpushare-device-plugin's kubectl-inspect-cgpu
    description: The plugin whose output RV(table) reproduces.
    link: https://github.com/AliyunContainerService/gpushare-device-plugin/tree/master/cmd/inspect
"""

EXAMPLES = r"""
- name: Shared GPU memory in the cluster (kubectl inspect cgpu)
  gpuops.fleet.gpu_share_info:
  register: share

- name: Show it as the plugin would
  ansible.builtin.debug:
    msg: "{{ share.table.splitlines() }}"

- name: Per pod, and checked against each node's kubelet checkpoint
  gpuops.fleet.gpu_share_info:
    details: true
    hosts_group: gpu_nodes
  register: share

- name: Fail on a pod whose GPU is gone or whose annotation names another GPU
  ansible.builtin.assert:
    that: share.findings | length == 0
    fail_msg: "{{ share.findings | map(attribute='detail') | list }}"
"""

RETURN = r"""
nodes:
  description: One item per sharing node, in name order.
  returned: always
  type: list
  elements: dict
  sample:
    - name: cn-hangzhou.192.168.2.167
      ip: 192.168.2.167
      mode: "true"
      gpu_count: 1
      total_gib: 15
      allocated_gib: 8
      percent: 53
      gpus: [{index: 0, allocated_gib: 8, total_gib: 15, pods: [default/app-3g-v1-0, default/app-3g-v1-1]}]
      starting_gib: 0
      assumed_gib: 0
      pending_gib: 0
      unknown_gpu_gib: 0
      pods:
        - {namespace: default, name: app-3g-v1-0, uid: 1f0c..., gib: 4, gpu: 0, node: cn-hangzhou.192.168.2.167, state: assigned}
  contains:
    mode:
      description: The node's O(label) value (V(null) when unset).
      type: str
    pods:
      description:
        - The node's pods that hold shared GPU memory, with C(state) C(assigned), C(starting) (allocated a GPU but still
          C(Pending), e.g. C(ContainerCreating), in its own column and never in the GPU's), C(assumed), C(pending) or
          C(unknown_gpu).
      type: list
      elements: dict
cluster:
  description: C(allocated_gib), C(total_gib) and C(percent) (truncated, as the plugin prints it) over the reported nodes.
  returned: always
  type: dict
  sample: {allocated_gib: 8, total_gib: 15, percent: 53}
unscheduled:
  description: Pods asking for C(aliyun.com/gpu-mem) that are not scheduled yet (in no total).
  returned: always
  type: list
  elements: dict
table:
  description: The report laid out as C(kubectl inspect cgpu) (or C(-d) with O(details)), without trailing spaces.
  returned: always
  type: str
  sample: |-
    NAME                       IPADDRESS      GPU0(Allocated/Total)  GPU Memory(GiB)
    cn-hangzhou.192.168.2.167  192.168.2.167  8/15                   8/15
    ----------------------------------------------------------------------
    Allocated/Total GPU Memory In Cluster:
    8/15 (53%)
findings:
  description:
    - Disagreements between the API, the nodes' kubelet checkpoints and their GPUs (only for nodes in O(node_truth)).
    - C(gpu_gone) - a pod's checkpointed C(<uuid>-_-<n>) device IDs, or the GPU its container was given
      (C(NVIDIA_VISIBLE_DEVICES) in the checkpoint's AllocResp), name a GPU the node no longer has.
    - C(annotation_mismatch) - the container was given another GPU than the pod's C(ALIYUN_COM_GPU_MEM_IDX) names.
    - C(unknown_gpu) - the annotation names an index the node does not have.
  returned: always
  type: list
  elements: dict
  sample:
    - {node: gpu-a, pod: ml/train-0, kind: annotation_mismatch,
       detail: "container train was given GPU 1 (GPU-1b7d...); the pod's ALIYUN_COM_GPU_MEM_IDX annotation says GPU 0 (GPU-0650...)"}
checked_nodes:
  description: The nodes whose checkpoint was compared (those of O(node_truth) that are sharing nodes).
  returned: always
  type: list
  elements: str
msg:
  description: One sentence on the cluster's allocation and the findings.
  returned: always
  type: str
"""

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import gpu_share as share
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_module import api_client, k8s_module, run

try:
    from kubernetes.client.api import core_v1_api
except ImportError:
    # AnsibleK8SModule reports a missing kubernetes library itself
    pass


def _truth(items):
    out = {}
    for i, item in enumerate(items or ()):
        if not isinstance(item, dict) or not item.get("node"):
            raise ParameterError("node_truth[%d]" % i, "expected a dict with node, gpus and pod_device_entries, got %r" % (item,))
        out[item["node"]] = item
    return out


def main():
    module = k8s_module(dict(
        nodes=dict(type="list", elements="str"),
        details=dict(type="bool", default=False),
        label=dict(type="str", default="cgpu"),
        node_truth=dict(type="list", elements="dict"),
        hosts_group=dict(type="str", default="gpu_nodes"),
    ))
    p = module.params

    def work():
        truth = _truth(p["node_truth"])
        client = api_client(module)
        api = core_v1_api.CoreV1Api(client)
        nodes = [client.sanitize_for_serialization(n) for n in api.list_node().items]
        pods = [client.sanitize_for_serialization(n) for n in api.list_pod_for_all_namespaces().items]
        report = share.allocation(nodes, pods, label=p["label"], node_names=p["nodes"])
        findings, checked = [], []
        for node in report["nodes"]:
            if node["name"] in truth:
                checked.append(node["name"])
                item = truth[node["name"]]
                findings.extend(share.cross_check(node["name"], node["pods"], item.get("gpus"), item.get("pod_device_entries")))
        return report, findings, checked

    report, findings, checked = run(module, work)
    table = share.details_table(report) if p["details"] else share.summary_table(report)
    cluster = report["cluster"]
    msg = "%d/%d GiB of shared GPU memory allocated (%d%%) on %d node%s" % (
        cluster["allocated_gib"], cluster["total_gib"], cluster["percent"], len(report["nodes"]), "" if len(report["nodes"]) == 1 else "s")
    if checked:
        msg += "; %d finding%s on %d checked node%s" % (len(findings), "" if len(findings) == 1 else "s", len(checked), "" if len(checked) == 1 else "s")
    module.exit_json(changed=False, table=table, findings=findings, checked_nodes=checked, msg=msg, **report)


if __name__ == "__main__":
    main()
