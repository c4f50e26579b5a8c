#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: cluster_access_info
short_description: Say where the controller's Kubernetes API access comes from, or stop naming what to set
version_added: 0.4.0
description:
  - The first task of each playbook of this collection that needs the Kubernetes API, before any node is touched.
  - Builds kubernetes.core's API client from the same options and environment the later tasks use (the options given,
    C(K8S_AUTH_*), the in-cluster ServiceAccount, C(KUBECONFIG) or C(~/.kube/config), in kubernetes.core's order), which
    reads the API server's version, and says where the access came from.
  - Where there is none, or it cannot be used, fails with a message that names what to set (C(gpuops_kubeconfig),
    C(K8S_AUTH_KUBECONFIG), the in-cluster ServiceAccount) and what runs without a cluster (O(without_cluster)),
    kubernetes.core's own words after it; never kubernetes.core's error alone.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.k8s_auth_options
  - gpuops.fleet.attributes
  - gpuops.fleet.attributes.info_module
options:
  needed_by:
    description: What needs the API, for the message (a playbook's name).
    type: str
    default: this playbook
  without_cluster:
    description: What runs without a cluster, for the message.
    type: str
    default: playbooks/gpu_health.yml reports the nodes' GPU health and playbooks/site.yml repairs kubelet's checkpoints over SSH
seealso:
  - module: gpuops.fleet.gpu_remediation_plan
"""

EXAMPLES = r"""
- name: The Kubernetes API this playbook needs (stops here, naming what to set)
  gpuops.fleet.cluster_access_info:
    kubeconfig: "{{ gpuops_kubeconfig | default(omit, true) }}"
    needed_by: playbooks/gpu_remediation.yml
"""

RETURN = r"""
source:
  description: Where the API access came from.
  returned: success
  type: str
  sample: K8S_AUTH_KUBECONFIG
kubeconfig:
  description: The kubeconfig file read, V(null) where none was (a host and token, the in-cluster ServiceAccount).
  returned: success
  type: str
  sample: /home/sre/.kube/config
"""

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import access

WITHOUT_CLUSTER = "playbooks/gpu_health.yml reports the nodes' GPU health and playbooks/site.yml repairs kubelet's checkpoints over SSH"
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_module import k8s_module


def main():
    import os  # pylint: disable=import-outside-toplevel

    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client  # pylint: disable=import-outside-toplevel

    module = k8s_module({"needed_by": {"type": "str", "default": "this playbook"}, "without_cluster": {"type": "str", "default": WITHOUT_CLUSTER}})
    params = module.params
    where, path = access.source(params, os.environ, os.path.exists)
    if where is None:
        module.fail_json(msg=access.message(params["needed_by"], params["without_cluster"], None))
    try:
        get_api_client(module=module)  # kubernetes.core's client: its config loaded, the API server's /version read
    except Exception as exc:  # noqa: BLE001 (a config kubernetes.core refuses, a server it cannot reach: both said, never a traceback)
        module.fail_json(msg=access.message(params["needed_by"], params["without_cluster"], where, exc))
    module.exit_json(changed=False, source=where, kubeconfig=path)


if __name__ == "__main__":
    main()
