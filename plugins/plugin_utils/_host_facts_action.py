# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the base of the action plugins that hand a
controller-side module what the GPU hosts' variables say (those live on the controller, not on
the target), so roles pass no hostvars through a filter."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

# Every variable an action plugin reads from the GPU hosts, and who sets it: a role's ``register:`` on
# the node (tests/unit/roles/test_entry_points.py finds each in its task file) or the user's inventory.
HOST_VARIABLES = {
    "device_plugin_kubelet": "register: roles/device_plugin/tasks/node_facts.yml",
    "gpu_sharing_checkpoint_info": "register: roles/gpu_sharing/tasks/node_truth.yml",
    "gpu_health_checkpoint": "register: playbooks/gpu_health.yml",
    "device_plugin_node_name": "inventory",
    "gpuops_node_name": "inventory",
    "gpu_sharing_enabled": "inventory",
}


def host_variables(hostvars, hosts, names):
    """``[(host, {name: value, "gpus": its gpuops_gpus fact or {}, "health": its gpuops_gpu_health fact or {}})]``
    for ``hosts``, in order: only the ``names`` (of HOST_VARIABLES) a host has, never its other variables."""
    unknown = sorted(set(names) - set(HOST_VARIABLES))
    if unknown:
        raise ValueError("not a declared host variable (HOST_VARIABLES): %s" % ", ".join(unknown))
    rows = []
    for host in hosts or ():
        found = hostvars.get(host) or {}
        values = dict((name, found.get(name)) for name in names if name in found)
        facts = found.get("ansible_facts") or {}
        values["gpus"] = facts.get("gpuops_gpus") or {}
        values["health"] = facts.get("gpuops_gpu_health") or {}
        rows.append((host, values))
    return rows


class HostFactsAction(ActionBase):
    """Runs ``MODULE`` with its arguments completed by ``fill`` and its result finished by ``finish``."""

    MODULE = None
    _requires_connection = False

    def fill(self, args, task_vars):
        """Complete ``args`` from ``task_vars`` (hostvars, groups); returns what ``finish`` needs."""
        return None

    @staticmethod
    def group_hosts(args, task_vars):
        """``(hostvars, hosts)``: the controller's view of the hosts of the task's ``hosts_group`` (default gpu_nodes)."""
        group = args.get("hosts_group") or "gpu_nodes"
        return task_vars.get("hostvars") or {}, (task_vars.get("groups") or {}).get(group) or []

    def finish(self, result, context):
        """Adjust the module's ``result`` with ``context`` (what ``fill`` returned)."""

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        context = self.fill(args, task_vars)
        result.update(self._execute_module(module_name=self.MODULE, module_args=args, task_vars=task_vars))
        self.finish(result, context)
        return result
