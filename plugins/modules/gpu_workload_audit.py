#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_workload_audit
short_description: Find GPU pods that reach the driver the unsafe way (privileged, swapped mounts, host /dev)
version_added: 0.3.0
description:
  - Read-only. For every pod that requests an NVIDIA resource (O(resource_prefixes)), or mounts the driver's install
    dir (O(install_dir)) or C(/dev/nvidia*) from the host, reports each container's findings, each with the exact fix.
  - "C(privileged) - the container runs C(privileged: true)."
  - C(swapped_mount) - a directory of the install dir is mounted where another belongs (the host's C(.../nvidia/bin) on
    C(/usr/local/nvidia/lib64), field report 004); C(misplaced_mount) - it is mounted outside O(container_dir).
  - C(ld_library_path) - C(LD_LIBRARY_PATH) does not hold C(<container_dir>/lib64).
  - C(dev_mounted) - the host's whole C(/dev) is mounted; C(device_node_mounted) - a C(/dev/nvidia*) node is mounted by
    hostPath, past the device plugin.
  - Pods carrying any label set of O(ignore_pods_with_labels) (the driver installer itself) are skipped.
  - Runs on the controller against the cluster, with kubernetes.core's client and authentication options.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.k8s_auth_options
  - gpuops.fleet.attributes
  - gpuops.fleet.attributes.info_module
options:
  namespaces:
    description: Namespaces to audit; every namespace when omitted.
    type: list
    elements: str
  install_dir:
    description: The host directory the driver installer put the driver in.
    type: str
    default: /home/kubernetes/bin/nvidia
  container_dir:
    description: Where workloads must see it.
    type: str
    default: /usr/local/nvidia
  resource_prefixes:
    description: Resource name prefixes that mean "this container asks for a GPU".
    type: list
    elements: str
    default: [nvidia.com/]
  ignore_pods_with_labels:
    description: Pods carrying every label of one of these maps are not audited.
    type: list
    elements: dict
    default: [{k8s-app: nvidia-driver-installer}]
requirements:
  - kubernetes (Python client)
seealso:
  - module: gpuops.fleet.daemonset_rollout
"""

EXAMPLES = r"""
- name: Audit every GPU pod
  gpuops.fleet.gpu_workload_audit:
  register: audit

- name: Show the fixes
  ansible.builtin.debug:
    msg: "{{ audit.pods | selectattr('findings') | list }}"
"""

RETURN = r"""
pods:
  description: Every GPU-related pod, with its findings (empty for a clean pod).
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: ml
      name: train-0
      node: gpu-node-7
      findings:
        - container: train
          kind: swapped_mount
          detail: mounts the host's /home/kubernetes/bin/nvidia/bin at /usr/local/nvidia/lib64
          fix: mount /home/kubernetes/bin/nvidia/bin at /usr/local/nvidia/bin, or the whole dir read-only at /usr/local/nvidia
by_node:
  description: Node name to the number of findings of its pods.
  returned: always
  type: dict
findings:
  description: Number of findings in all.
  returned: always
  type: int
clean:
  description: Whether no pod has a finding.
  returned: always
  type: bool
msg:
  description: One sentence on what was found.
  returned: always
  type: str
"""

import copy

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import workload_audit as audit
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_module import api_client, k8s_module, run

try:
    from kubernetes.client.api import core_v1_api
except ImportError:
    # AnsibleK8SModule reports a missing kubernetes library itself
    pass


def main():
    module = k8s_module(dict(
        namespaces=dict(type="list", elements="str"),
        install_dir=dict(type="str", default="/home/kubernetes/bin/nvidia"),
        container_dir=dict(type="str", default="/usr/local/nvidia"),
        resource_prefixes=dict(type="list", elements="str", default=["nvidia.com/"]),
        ignore_pods_with_labels=dict(type="list", elements="dict", default=copy.deepcopy(audit.DEFAULT_IGNORE)),
    ))
    p = module.params

    def work():
        audit.check_params(p["install_dir"], p["container_dir"], p["resource_prefixes"], p["ignore_pods_with_labels"])
        client = api_client(module)
        api = core_v1_api.CoreV1Api(client)
        listed = []
        if p["namespaces"]:
            for namespace in sorted(set(p["namespaces"])):
                listed.extend(api.list_namespaced_pod(namespace).items)
        else:
            listed = api.list_pod_for_all_namespaces().items
        pods = [client.sanitize_for_serialization(pod) for pod in listed]
        return audit.audit(pods, p["install_dir"], p["container_dir"], p["resource_prefixes"], p["ignore_pods_with_labels"])

    module.exit_json(changed=False, **run(module, work))


if __name__ == "__main__":
    main()
