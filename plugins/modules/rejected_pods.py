#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: rejected_pods
short_description: Bring back pods that kubelet rejected at admission, or that a gone GPU broke, on repaired GPU nodes
version_added: 0.2.0
description:
  - Finds the pods on the given nodes that kubelet rejected at admission (phase C(Failed), reason
    C(UnexpectedAdmissionError) by default), e.g. because a stale device checkpoint left kubelet without the GPUs
    it promised (kubernetes#116125). After the node is repaired they stay C(Failed).
  - A pod with a controller (an owner reference with C(controller=true), such as a ReplicaSet, StatefulSet, Job or
    DaemonSet) is deleted, so that its controller's own logic replaces it. The delete carries a UID precondition, so
    a pod recreated meanwhile under the same name (a StatefulSet's) is never deleted.
  - A bare pod is never recreated by anyone. It is listed with a command that recreates it from its own spec, and
    deleted only with O(bare_pods=delete).
  - Check mode lists what would be deleted and deletes nothing.
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
    support: none
  idempotent:
    support: full
    details: A second run finds nothing left to delete (bare pods are reported again until you recreate them).
options:
  nodes:
    description: Kubernetes node names to look at (the repaired nodes).
    type: list
    elements: str
    required: true
  reasons:
    description: Pod C(status.reason) values that mean "rejected at admission".
    type: list
    elements: str
    default: [UnexpectedAdmissionError]
  stale_pod_uids:
    description:
      - UIDs of the pods whose checkpoint entries named a GPU the node no longer has (the repair's
        C(affected_pods[].pod_uid); C(site.yml) passes them).
      - Such a pod that is still C(Running) or C(Pending) with a container waiting in C(CreateContainerError) or
        C(RunContainerError) is broken for good. A real kubelet (checked with v1.20.2) re-admits it from its checkpoint
        entry and reuses the gone GPU's cached allocation at every container start, so its container never starts
        again. It is brought back like a rejected pod (deleted when it has a controller, else reported).
      - A pod that fails to start for another reason, or whose UID is not listed here, is never touched.
    type: list
    elements: str
    default: []
  bare_pods:
    description:
      - What to do with rejected pods that have no controller. V(report) lists them with C(recreate_command);
        V(delete) deletes them (nothing recreates them then).
    type: str
    choices: [report, delete]
    default: report
requirements:
  - kubernetes (Python client)
seealso:
  - module: gpuops.fleet.kubelet_checkpoint
  - module: kubernetes.core.k8s_drain
"""

EXAMPLES = r"""
- name: Delete controller-owned pods that kubelet rejected on the repaired nodes; list the bare ones
  gpuops.fleet.rejected_pods:
    nodes: [gpu-node-7, gpu-node-9]
  register: rejected

- name: Show how to recreate the bare pods
  ansible.builtin.debug:
    msg: "{{ rejected.bare | map(attribute='recreate_command') | list }}"

- name: Also delete bare pods, with an explicit kubeconfig
  gpuops.fleet.rejected_pods:
    nodes: [gpu-node-7]
    bare_pods: delete
    kubeconfig: /etc/gpuops/kubeconfig
"""

RETURN = r"""
pods:
  description:
    - Every pod found to bring back on the nodes, with what was (or would be) done.
    - C(kind) is V(rejected) (Failed at admission) or V(gpu_gone) (Running or Pending, a container unable to start on
      a GPU the repair found gone); C(phase), C(reason) and C(message) are the pod's, or its waiting container's.
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: ml
      name: train-7d9c-abcde
      uid: 0c1d...
      node: gpu-node-7
      phase: Failed
      kind: rejected
      reason: UnexpectedAdmissionError
      message: "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 1, Available: 0"
      controller: {kind: ReplicaSet, name: train-7d9c, uid: 9a8b...}
      action: delete
      recreate_command: null
deleted:
  description: The pods deleted (C(namespace/name)); empty in check mode.
  returned: always
  type: list
  elements: str
  sample: [ml/train-7d9c-abcde]
bare:
  description: Pods to bring back that have no controller, with C(kind), C(recreate_command) and C(action) (V(report) or V(delete)).
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: ml
      name: notebook
      node: gpu-node-7
      kind: rejected
      action: report
      recreate_command: kubectl -n ml get pod notebook -o yaml | kubectl replace --force -f -
msg:
  description: One sentence on what was found and done.
  returned: always
  type: str
"""


from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import rejected_pods as rejected
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_module import api_client, k8s_module, run

try:
    from kubernetes.client.api import core_v1_api
    from kubernetes.client.exceptions import ApiException
    from kubernetes.client.models import V1DeleteOptions, V1Preconditions
except ImportError:
    # AnsibleK8SModule reports a missing kubernetes library itself
    pass


def main():
    module = k8s_module(dict(
        nodes=dict(type="list", elements="str", required=True),
        reasons=dict(type="list", elements="str", default=list(rejected.DEFAULT_REASONS)),
        bare_pods=dict(type="str", default="report", choices=list(rejected.BARE_POD_ACTIONS)),
        stale_pod_uids=dict(type="list", elements="str", default=[]),
    ))
    params = module.params

    def work():
        rejected.validate(params["nodes"], params["reasons"], params["bare_pods"], params["stale_pod_uids"])
        api = core_v1_api.CoreV1Api(api_client(module))
        pods = []
        for node in sorted(set(params["nodes"])):
            # Failed pods only, unless the repair named pods on a gone GPU (those are Running)
            selector = "spec.nodeName=%s" % node if params["stale_pod_uids"] else "spec.nodeName=%s,status.phase=Failed" % node
            listed = api.list_pod_for_all_namespaces(field_selector=selector)
            pods.extend(api.api_client.sanitize_for_serialization(p) for p in listed.items)
        rows = rejected.classify(pods, params["nodes"], params["reasons"], params["bare_pods"], params["stale_pod_uids"])
        deleted = []
        if not module.check_mode:
            for row in rows:
                if row["action"] != "delete":
                    continue
                body = V1DeleteOptions(preconditions=V1Preconditions(uid=row["uid"]))
                try:
                    api.delete_namespaced_pod(row["name"], row["namespace"], body=body)
                except ApiException as exc:
                    if exc.status not in (404, 409):  # gone already, or a new pod took the name
                        raise
                    row["action"] = "gone"
                    continue
                deleted.append("%s/%s" % (row["namespace"], row["name"]))
        return rows, deleted

    rows, deleted = run(module, work)
    module.exit_json(**rejected.summary(rows, deleted, module.check_mode))


if __name__ == "__main__":
    main()
