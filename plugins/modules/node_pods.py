#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: node_pods
short_description: Delete this run's node pod of the gpuops.fleet.k8s_node connection
version_added: 0.3.0
description:
  - Deletes the node pod that the C(gpuops.fleet.k8s_node) connection made for this run on the host's node, and
    waits until it is gone. Use it at the end of a play, delegated to each node (C(site.yml)'s last play does).
  - An action, run on the controller through the host's connection (kubectl, with the host's auth options); it
    never starts a node pod. On a host whose connection is not C(gpuops.fleet.k8s_node) it does nothing.
  - It reports no change and says in RV(deleted) whether it deleted a pod. The pod is the transport this run made for
    itself, so deleting it leaves the cluster as the run found it, and a run whose tasks changed nothing has no change
    on any host of its recap, C(localhost) included.
  - A run that does not get here (killed, or stopped by C(max_fail_percentage)) leaves pods that stop by themselves
    after C(gpuops_node_pod_idle) seconds; the next run on the node deletes them before it starts its own.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.attributes
options:
  state:
    description: Only V(absent).
    type: str
    choices: [absent]
    default: absent
attributes:
  check_mode:
    support: full
    details:
      - Check mode says whether the pod exists and deletes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Delete the run's node pods, also of the nodes that failed a task
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Node pods of this run deleted
      gpuops.fleet.node_pods:
        state: absent
      delegate_to: "{{ item }}"
      loop: "{{ groups['gpu_nodes'] | default([]) }}"
"""

RETURN = r"""
pod:
  description: The node pod's name, or null where the host's connection makes none.
  returned: always
  type: str
namespace:
  description: Its namespace.
  returned: when the connection is gpuops.fleet.k8s_node
  type: str
deleted:
  description: Whether this run's node pod was deleted (false in check mode, and where there was none).
  returned: when the connection is gpuops.fleet.k8s_node
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(state=dict(type="str", choices=["absent"], default="absent")), supports_check_mode=True)
    module.fail_json(msg="gpuops.fleet.node_pods is an action: it runs on the controller through the gpuops.fleet.k8s_node connection")


if __name__ == "__main__":
    main()
