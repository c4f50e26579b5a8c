# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: k8s_gpu_nodes
short_description: A Kubernetes cluster's GPU nodes, read through the API
version_added: 0.3.0
author: gpuops.fleet maintainers (@gpuops)
description:
  - Lists the cluster's Nodes with kubernetes.core's client and authentication options (one C(list nodes) call per
    refresh) and makes a host of each GPU node, named as the Node.
  - A GPU node has a non-zero allocatable resource matching O(gpu_resources) (C(nvidia.com/gpu), C(nvidia.com/mig-*),
    C(aliyun.com/gpu-mem) by default). With O(label_selector) only the nodes it selects are read, and each of them is
    taken whatever its resources (for nodes whose plugin is not running yet).
  - Every host is in the group C(gpu_nodes) (the group C(playbooks/site.yml) runs on), and in
    C(gpu_product_<product>) (the C(nvidia.com/gpu.product) label of GPU feature discovery, else
    C(aliyun.accelerator/nvidia_name), else C(unknown)), C(gpu_sharing_<mode>) (C(gpushare) with
    C(aliyun.com/gpu-mem), C(mig) with C(nvidia.com/mig-*), C(time-slicing) or C(mps) from the
    C(nvidia.com/gpu.sharing-strategy) label, else C(none)), and C(gpu_cordoned) or C(gpu_schedulable). Group names
    are sanitized as Ansible's own inventory plugins sanitize them.
  - Host variables C(gpuops_node_name) (the Node's name, which C(site.yml) uses for the node's pods),
    C(gpuops_gpu_count), C(gpuops_gpu_resources), C(gpuops_gpu_product), C(gpuops_gpu_sharing),
    C(gpuops_node_cordoned), C(gpuops_node_ready), C(gpuops_kubelet_version), and C(ansible_host) (the Node's
    InternalIP) unless O(set_ansible_host=false).
  - How Ansible reaches the nodes is yours to set (O(compose), group_vars). The nodes' C(ansible_connection) is not set
    here.
  - The usual C(compose), C(groups), C(keyed_groups) and inventory cache options apply.
  - Every value read from the cluster (names, labels, addresses, C(nodeInfo)) is marked unsafe, so Ansible never
    templates it. A node's kubelet writes its own Node status, and a template written there stays text.
  - A Node whose name Ansible keeps for the controller (C(localhost), C(127.0.0.1), C(::1), and the other loopback
    names) is left out with a warning naming it, so that it cannot take over the controller's plays.
extends_documentation_fragment:
  - constructed
  - inventory_cache
options:
  plugin:
    description: This plugin's name.
    required: true
    choices: [gpuops.fleet.k8s_gpu_nodes]
  gpu_resources:
    description: Allocatable resource names, or shell patterns of them, that make a node a GPU node.
    type: list
    elements: str
    default: [nvidia.com/gpu, nvidia.com/mig-*, aliyun.com/gpu-mem]
  label_selector:
    description:
      - A label selector (as C(kubectl get nodes -l) takes it). Only the nodes it selects are read, and each is a GPU
        node whatever its allocatable resources.
    type: str
    default: ""
  node_connection:
    description:
      - How Ansible reaches the nodes. V(ssh) sets nothing (Ansible's default, or your C(compose)).
      - V(k8s_node) sets C(ansible_connection=gpuops.fleet.k8s_node), through the API alone (a short-lived node pod per
        node per run, no SSH), and hands the connection this source's O(kubeconfig) and O(context) when given.
    type: str
    choices: [ssh, k8s_node]
    default: ssh
  set_ansible_host:
    description: Set C(ansible_host) to the Node's InternalIP.
    type: bool
    default: true
  kubeconfig:
    description:
      - Path to a kubeconfig file, or its content as a dictionary. Else kubernetes.core's lookup (E(K8S_AUTH_KUBECONFIG),
        then C(~/.kube/config), then the in-cluster service account).
    type: raw
    env:
      - name: K8S_AUTH_KUBECONFIG
  context:
    description: The kubeconfig context to use.
    type: str
    env:
      - name: K8S_AUTH_CONTEXT
  host:
    description: The API server's URL (with O(api_key), instead of a kubeconfig).
    type: str
    env:
      - name: K8S_AUTH_HOST
  api_key:
    description: A bearer token for O(host). Never printed.
    type: str
    env:
      - name: K8S_AUTH_API_KEY
  validate_certs:
    description: Verify the API server's certificate.
    type: bool
    aliases: [verify_ssl]
    env:
      - name: K8S_AUTH_VERIFY_SSL
  ca_cert:
    description: The CA certificate that signed the API server's certificate.
    type: path
    aliases: [ssl_ca_cert]
    env:
      - name: K8S_AUTH_SSL_CA_CERT
requirements:
  - kubernetes (Python client)
  - kubernetes.core
"""

EXAMPLES = r"""
# gpu.k8s_gpu_nodes.yml; then: ansible-inventory -i gpu.k8s_gpu_nodes.yml --graph
# (plugin: gpuops.fleet.k8s_gpu_nodes alone takes every GPU node, with kubernetes.core's usual kubeconfig lookup)
# Here: only the nodes GPU feature discovery labelled, cached for an hour, a group per product, a login user.
plugin: gpuops.fleet.k8s_gpu_nodes
label_selector: nvidia.com/gpu.present=true
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/gpuops/inventory
cache_timeout: 3600
keyed_groups:
  - key: gpuops_gpu_product
    prefix: product
compose:
  ansible_user: "'ubuntu'"
"""

import json

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible.utils.display import Display
from ansible.utils.unsafe_proxy import wrap_var

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import gpu_nodes as selection

try:
    from kubernetes.client import CoreV1Api
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException
    IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover - depends on the controller's packages
    IMPORT_ERROR = exc

AUTH_OPTIONS = ("kubeconfig", "context", "host", "api_key", "validate_certs", "ca_cert")
display = Display()


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    NAME = "gpuops.fleet.k8s_gpu_nodes"

    def verify_file(self, path):
        return super().verify_file(path) and path.endswith(("k8s_gpu_nodes.yml", "k8s_gpu_nodes.yaml"))

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        resources = self.get_option("gpu_resources")
        selector = self.get_option("label_selector")
        try:
            selection.check_options(resources, selector)
        except selection.InventoryConfigError as exc:
            raise AnsibleParserError("%s: %s" % (path, exc)) from None
        key = self.get_cache_key(path)
        use_cache = self.get_option("cache") and cache
        nodes = None
        if use_cache:
            try:
                nodes = self._cache[key]
            except KeyError:
                nodes = None
        if nodes is None:
            nodes = self._fetch(resources, selector)
            if self.get_option("cache"):
                self._cache[key] = nodes
        self._populate(nodes)

    def _fetch(self, resources, selector):
        if IMPORT_ERROR is not None:
            raise AnsibleParserError("gpuops.fleet.k8s_gpu_nodes needs kubernetes.core and the kubernetes Python client: %s" % IMPORT_ERROR)
        auth = dict((name, value) for name, value in ((name, self.get_option(name)) for name in AUTH_OPTIONS) if value is not None)
        try:
            client = get_api_client(**auth).client.client
            listed = CoreV1Api(client).list_node(label_selector=selector or None, _preload_content=False)
            items = json.loads(listed.data).get("items") or []
        except CoreException as exc:
            raise AnsibleParserError("gpuops.fleet.k8s_gpu_nodes: %s" % exc) from None
        except Exception as exc:  # the API's errors: name the call, never the credentials
            status = getattr(exc, "status", None)
            reason = getattr(exc, "reason", None) or type(exc).__name__
            raise AnsibleParserError("gpuops.fleet.k8s_gpu_nodes: listing nodes failed (%s%s); check the kubeconfig or "
                                     "host/api_key options and that the identity may list nodes" % (reason, " %s" % status if status else "")) from None
        return selection.gpu_nodes(items, resources, by_label=bool(selector))

    def _populate(self, nodes):
        strict = self.get_option("strict")
        self.inventory.add_group("gpu_nodes")
        for node in nodes:
            reserved = selection.reserved_name(node["name"])
            if reserved:
                display.warning("gpuops.fleet.k8s_gpu_nodes: Node %r left out of the inventory: %s" % (str(node["name"]), reserved))
                continue
            # everything below came from the cluster (a node's kubelet writes its own status): data, never a template
            node = wrap_var(node)
            host = node["name"]
            self.inventory.add_host(host, group="gpu_nodes")
            hostvars = {
                "gpuops_node_name": host,
                "gpuops_gpu_count": node["gpu_count"],
                "gpuops_gpu_resources": node["gpu_resources"],
                "gpuops_gpu_product": node["product"],
                "gpuops_gpu_sharing": node["sharing"],
                "gpuops_node_cordoned": node["cordoned"],
                "gpuops_node_ready": node["ready"],
                "gpuops_kubelet_version": node["kubelet_version"],
            }
            if self.get_option("set_ansible_host") and node["address"]:
                hostvars["ansible_host"] = node["address"]
            if self.get_option("node_connection") == "k8s_node":
                hostvars["ansible_connection"] = "gpuops.fleet.k8s_node"
                for option, var in (("kubeconfig", "ansible_kubectl_kubeconfig"), ("context", "ansible_kubectl_context")):
                    if isinstance(self.get_option(option), str) and self.get_option(option):
                        hostvars[var] = self.get_option(option)
            for name, value in hostvars.items():
                self.inventory.set_variable(host, name, value)
            for group in ("gpu_product_" + node["product"], "gpu_sharing_" + node["sharing"], "gpu_cordoned" if node["cordoned"] else "gpu_schedulable"):
                group = self._sanitize_group_name(group)
                self.inventory.add_group(group)
                self.inventory.add_child(group, host)
            variables = self.inventory.get_host(host).get_vars()
            self._set_composite_vars(self.get_option("compose"), variables, host, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), variables, host, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), variables, host, strict=strict)
