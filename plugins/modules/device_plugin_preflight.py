#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: device_plugin_preflight
short_description: Refuse an NVIDIA device-plugin version or option set that breaks a node, or a plugin someone else manages
version_added: 0.3.0
description:
  - Read-only, on the controller against the cluster (kubernetes.core's client and authentication options). The
    checks of the P(gpuops.fleet.device_plugin#role) role before it changes anything, in one task.
  - Settings - the version (by release history - the 1.0.0-betaN tags predate v0.6.0), the image reference, the options;
    the container's C(args)/C(env) for that version.
  - Per node the DaemonSet targets (O(node_selector)) - kubelet's C(cpuManagerPolicy) from that node's facts; a version
    or option set that loses C(/dev/nvidia*) under V(static) is refused naming the node, as is a node whose policy is
    unknown and an option the version does not have (naming every targeted node).
  - Other managers - the GPU Operator (a ClusterPolicy with its device plugin enabled), Helm or the operator owning the
    DaemonSet, another plugin DaemonSet on the same nodes. Refused unless O(take_over).
  - An existing DaemonSet whose selector differs from O(selector_labels) is refused (a selector is immutable).
  - The action plugin of the same name collects O(kubelet_facts) from the variables of the hosts in O(hosts_group)
    (C(device_plugin_kubelet) from M(gpuops.fleet.kubelet_config_info), C(ansible_facts.gpuops_gpus), and the host
    variable C(device_plugin_node_name)), so a role needs no filter for it.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.k8s_auth_options
  - gpuops.fleet.daemonset
  - gpuops.fleet.attributes
  - gpuops.fleet.attributes.info_module
options:
  version:
    description: The plugin's image tag (C(v0.17.1), C(1.0.0-beta6)).
    type: str
    required: true
  image:
    description: The image repository, without tag or digest.
    type: str
    required: true
  options:
    description:
      - Plugin options - C(pass_device_specs), C(device_id_strategy), C(device_list_strategy), C(mig_strategy),
        C(fail_on_init_error). Booleans may be strings (C(-e), surveys).
    type: dict
    default: {}
  node_selector:
    description: The DaemonSet's nodeSelector.
    type: dict
    default: {}
  selector_labels:
    description: The DaemonSet's C(spec.selector.matchLabels).
    type: dict
    required: true
  hosts_group:
    description:
      - (action plugin) The inventory group whose hosts' variables give O(kubelet_facts). Ignored when O(kubelet_facts)
        is given.
    type: str
    default: gpu_nodes
  kubelet_facts:
    description:
      - Node name to that node's C(kubelet_config_info) result, with C(gpu_uuids). The action plugin fills it from
        O(hosts_group).
    type: dict
  take_over:
    description: Proceed (with warnings in C(taken_over)) where another manager owns the plugin.
    type: bool
    default: false
requirements:
  - kubernetes (Python client)
seealso:
  - module: gpuops.fleet.daemonset_rollout
  - module: gpuops.fleet.kubelet_config_info
"""

EXAMPLES = r"""
- name: Would v0.17.1 with device specs be safe on every targeted node, and is the plugin ours to change?
  gpuops.fleet.device_plugin_preflight:
    version: v0.17.1
    image: nvcr.io/nvidia/k8s-device-plugin
    options: {pass_device_specs: true}
    namespace: kube-system
    name: nvidia-device-plugin-daemonset
    selector_labels: {name: nvidia-device-plugin-ds}
    hosts_group: gpu_nodes
  register: preflight
"""

RETURN = r"""
settings:
  description: C(version) facts, the C(image) reference, the C(container)'s C(args) and C(env), the normalized C(options).
  returned: success
  type: dict
targets:
  description: The nodes the DaemonSet's nodeSelector picks.
  returned: success
  type: list
  elements: str
gpu_uuids:
  description: Node name to its GPU UUIDs (from the hosts' C(gpu_uuid_facts)), for verification pods.
  returned: success
  type: dict
nodes:
  description: Per targeted node, its C(cpu_manager_policy) and where it came from.
  returned: success
  type: list
  elements: dict
risks:
  description: What is allowed but risky (C(pass_device_specs) false).
  returned: success
  type: list
  elements: str
taken_over:
  description: The other managers proceeded past with O(take_over), one line each.
  returned: success
  type: list
  elements: str
msg:
  description: What was refused, one line per problem with its fix; or that nothing was.
  returned: always
  type: str
"""


from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import device_plugin as dp
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_module import api_client, k8s_module, run

try:
    from kubernetes.client.api import apps_v1_api, core_v1_api, custom_objects_api
    from kubernetes.client.exceptions import ApiException
except ImportError:
    # AnsibleK8SModule reports a missing kubernetes library itself
    pass


def read_cluster(client, namespace, name):
    """Nodes, ClusterPolicies (none where the GPU Operator's CRD is absent), every DaemonSet, ours (or None)."""
    core, apps = core_v1_api.CoreV1Api(client), apps_v1_api.AppsV1Api(client)
    plain = client.sanitize_for_serialization
    nodes = [plain(n) for n in core.list_node().items]
    try:
        policies = custom_objects_api.CustomObjectsApi(client).list_cluster_custom_object("nvidia.com", "v1", "clusterpolicies")["items"]
    except ApiException as exc:
        if exc.status != 404:
            raise
        policies = []
    daemonsets = [plain(d) for d in apps.list_daemon_set_for_all_namespaces().items]
    ours = [d for d in daemonsets if (d["metadata"].get("namespace"), d["metadata"].get("name")) == (namespace, name)]
    return nodes, policies, daemonsets, ours[0] if ours else None


def main():
    module = k8s_module(dict(
        version=dict(type="str", required=True),
        image=dict(type="str", required=True),
        options=dict(type="dict", default={}),
        node_selector=dict(type="dict", default={}),
        namespace=dict(type="str", required=True),
        name=dict(type="str", required=True),
        selector_labels=dict(type="dict", required=True),
        hosts_group=dict(type="str", default="gpu_nodes"),
        kubelet_facts=dict(type="dict"),
        take_over=dict(type="bool", default=False),
    ))
    p = module.params

    def work():
        version = dp.parse_version(p["version"])
        settings = {"version": version.as_dict(), "image": dp.image_reference(p["image"], p["version"]),
                    "container": dp.container_config(version, p["options"]), "options": dp.normalize_options(p["options"])}
        nodes, policies, daemonsets, existing = read_cluster(api_client(module), p["namespace"], p["name"])
        return settings, dp.full_preflight(version, settings, nodes, p["node_selector"], p["kubelet_facts"] or {}, policies, daemonsets,
                                           p["namespace"], p["name"], p["selector_labels"], existing, p["take_over"])

    settings, result = run(module, work)
    for line in result["taken_over"]:
        module.warn("device_plugin_take_over: proceeding past %s" % line)
    module.exit_json(changed=False, settings=settings, **result)


if __name__ == "__main__":
    main()
