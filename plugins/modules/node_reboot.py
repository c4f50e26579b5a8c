#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: node_reboot
short_description: Wait, through the Kubernetes API alone, until a node has rebooted and is Ready
version_added: 0.4.0
description:
  - Proves a reboot by the Node object alone, so it works where the only way to a node is the API (a managed cluster
    without SSH, the C(gpuops.fleet.k8s_node) connection) - the Node's C(status.nodeInfo.bootID) must differ from
    O(previous_boot_id), and its C(Ready) condition must be C(True) in the same status. kubelet reports the kernel's
    C(/proc/sys/kernel/random/boot_id) there, a new random ID at every boot.
  - It does not reboot the node. The reboot itself is a detached command on the node (the role
    C(gpuops.fleet.gpu_remediation) runs C(systemd-run --on-active=5 systemctl reboot) over the node's own connection, so
    the command returns before the node goes down); this module then watches the one Node until it is back.
  - Fails, naming what it saw, when the bootID has not changed within O(timeout) (the node did not reboot) or the node
    rebooted but is not C(Ready).
  - Changes nothing, and reports C(changed=false); check mode reads the Node once and does not wait.
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
options:
  node:
    description: The Kubernetes node (a DNS-1123 subdomain).
    type: str
    required: true
  previous_boot_id:
    description:
      - The Node's C(status.nodeInfo.bootID) before the reboot. M(gpuops.fleet.gpu_quarantine) returns the one it saw
        when it quarantined the node (RV(gpuops.fleet.gpu_quarantine#module:boot_id_at_quarantine)), which also holds
        when a killed run is run again.
    type: str
    required: true
  timeout:
    description: Seconds to wait for the new bootID and C(Ready).
    type: int
    default: 1800
seealso:
  - module: gpuops.fleet.gpu_quarantine
  - module: ansible.builtin.reboot
"""

EXAMPLES = r"""
- name: Reboot the node, detached, over its own connection (SSH or gpuops.fleet.k8s_node)
  ansible.builtin.command:
    argv: [systemd-run, --on-active=5, --unit=gpuops-fleet-reboot, systemctl, reboot]
  changed_when: true

- name: Wait until the Node reports a new boot and is Ready
  gpuops.fleet.node_reboot:
    node: gpu-node-17
    previous_boot_id: "{{ quarantine.boot_id_at_quarantine }}"
    timeout: 1800
  delegate_to: localhost
"""

RETURN = r"""
node:
  description: The node.
  returned: always
  type: str
previous_boot_id:
  description: O(previous_boot_id).
  returned: always
  type: str
boot_id:
  description: The Node's bootID when the module ended.
  returned: always
  type: str
  sample: 6b3c0d6e-4a1b-4f9e-9c41-5d0f5a3f0c2e
rebooted:
  description: Whether the bootID differs from O(previous_boot_id).
  returned: always
  type: bool
ready:
  description: Whether the Node's Ready condition is True.
  returned: always
  type: bool
seconds:
  description: Seconds the module waited.
  returned: when it waited
  type: int
api_calls:
  description: API requests the wait made (one list, then watch requests).
  returned: when it waited
  type: int
msg:
  description: What it saw.
  returned: always
  type: str
"""

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import node_reboot
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_module import api_client, k8s_module, run

try:
    from kubernetes.client.api import core_v1_api
except ImportError:
    # AnsibleK8SModule reports a missing kubernetes library itself
    pass

ARGUMENT_SPEC = dict(
    node=dict(type="str", required=True),
    previous_boot_id=dict(type="str", required=True),
    timeout=dict(type="int", default=1800),
)


def main():
    module = k8s_module(ARGUMENT_SPEC)

    def work():
        p = node_reboot.check_params(module.params)
        client = api_client(module)
        # a NodeRebootError's result (what was seen) comes back beside its message (k8s_watch.failure)
        return node_reboot.wait_rebooted(core_v1_api.CoreV1Api(client), p, module.check_mode)

    module.exit_json(**run(module, work))


if __name__ == "__main__":
    main()
