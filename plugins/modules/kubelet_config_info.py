#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: kubelet_config_info
short_description: Read kubelet's effective CPUManager policy on a node
version_added: 0.2.0
description:
  - Finds kubelet's command-line flags (the running kubelet's C(/proc/<pid>/cmdline); when kubelet is not running,
    kubeadm's C(/var/lib/kubelet/kubeadm-flags.env) plus C(/etc/default/kubelet) or C(/etc/sysconfig/kubelet)) and
    its KubeletConfiguration file (C(--config)), and returns the effective C(cpuManagerPolicy).
  - A C(--cpu-manager-policy) flag wins over the config file, as in kubelet; with neither, the policy is kubelet's
    default V(none).
  - When nothing can be found or a file cannot be read, RV(error) says why and RV(cpu_manager_policy) is
    V(null); the module does not fail, so that a caller such as the P(gpuops.fleet.device_plugin#role) role's
    preflight can refuse to act on an unknown node.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.attributes
  - gpuops.fleet.attributes.info_module
options:
  root:
    description:
      - Root of the node's file system; paths in flags are read below it. The running-process lookup is only done
        for V(/).
    type: path
    default: /
  cmdline:
    description: kubelet's arguments, replacing the lookup of its flags (for nodes that start kubelet another way).
    type: list
    elements: str
  config_path:
    description: kubelet's config file, replacing its C(--config) flag.
    type: path
  hostname:
    description: The host name kubelet would use when C(--hostname-override) is unset; defaults to the node's.
    type: str
seealso:
  - module: gpuops.fleet.gpu_uuid_facts
  - name: Kubernetes CPU management policies
    description: What the V(static) policy does to containers' cpusets.
    link: https://kubernetes.io/docs/tasks/administer-cluster/cpu-management-policies/
"""

EXAMPLES = r"""
- name: Read kubelet's CPUManager policy
  gpuops.fleet.kubelet_config_info:
  register: kubelet_config

- name: Warn about nodes with exclusive CPUs
  ansible.builtin.debug:
    msg: "{{ kubelet_config.node_name }} pins CPUs ({{ kubelet_config.source }})"
  when: kubelet_config.cpu_manager_policy == 'static'

- name: A node that starts kubelet with its own flags
  gpuops.fleet.kubelet_config_info:
    cmdline: [--config=/etc/kubernetes/kubelet.yaml, --cpu-manager-policy=static]
"""

RETURN = r"""
cpu_manager_policy:
  description: The effective policy (V(none) or V(static)), V(null) when it could not be determined.
  returned: always
  type: str
  sample: static
source:
  description: Where the policy came from.
  returned: always
  type: str
  sample: "config file /var/lib/kubelet/config.yaml"
flags_from:
  description: Where kubelet's flags were read, V(null) when nowhere.
  returned: always
  type: str
  sample: "running kubelet (pid 1234)"
config_path:
  description: The KubeletConfiguration file that was read, V(null) when none.
  returned: always
  type: str
  sample: /var/lib/kubelet/config.yaml
flags:
  description: The flags that matter here (C(config), C(cpu-manager-policy), C(hostname-override), C(root-dir),
    C(feature-gates), C(reserved-cpus)).
  returned: always
  type: dict
  sample: {"config": "/var/lib/kubelet/config.yaml"}
node_name:
  description: The Node name kubelet registers (C(--hostname-override), else the lower-cased host name).
  returned: always
  type: str
  sample: gpu-node-07
error:
  description: Why the policy is unknown, V(null) when it is known.
  returned: always
  type: str
  sample: "kubelet's config file /var/lib/kubelet/config.yaml does not exist"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._node import edge, hostroot, kubelet_config


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/"),
            cmdline=dict(type="list", elements="str"),
            config_path=dict(type="path"),
            hostname=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    # root is a host path, also from the node pod beside a host without python3 (hostroot)
    result = edge.run(module, lambda: kubelet_config.read_on_node(root=params["root"], cmdline=params["cmdline"],
                                                                  config_path=params["config_path"], hostname=params["hostname"]))
    module.exit_json(changed=False, **hostroot.to_host(result))


if __name__ == "__main__":
    main()
