# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the base of the action plugins of the controller-side modules.

``ControllerAction``: a module that runs on the controller against the cluster, for the task's host (delegated to
localhost, or on it), is refused where that host's facts name a variable the controller acts on (``_node_trust``): a
node's facts never choose what the controller does. ``HostFactsAction`` also hands the module what the GPU hosts'
variables say (those live on the controller, not on the target), so roles pass no hostvars through a filter; a host
whose facts a node may not have returned is left out, with the reason."""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible.plugins.action.normal import ActionModule as NormalAction

from ansible_collections.gpuops.fleet.plugins.plugin_utils import _node_trust

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
    for ``hosts``, in order: only the ``names`` (of HOST_VARIABLES) a host has, never its other variables.

    A host whose facts name a variable the controller acts on (``_node_trust``) gets only ``{"untrusted": why}``: none
    of its variables or facts, whose values its node may have chosen."""
    unknown = sorted(set(names) - set(HOST_VARIABLES))
    if unknown:
        raise ValueError("not a declared host variable (HOST_VARIABLES): %s" % ", ".join(unknown))
    rows = []
    for host in hosts or ():
        found = hostvars.get(host) or {}
        facts = _node_trust.facts_of(found)
        why = _node_trust.refusal(host, facts)
        if why:
            rows.append((host, {"untrusted": why, "gpus": {}, "health": {}}))
            continue
        values = dict((name, found.get(name)) for name in names if name in found)
        values["gpus"] = facts.get("gpuops_gpus") or {}
        values["health"] = facts.get("gpuops_gpu_health") or {}
        rows.append((host, values))
    return rows


class ControllerAction(NormalAction):
    """ansible-core's ``normal`` action (how it runs any module), unless the task's host returned facts named as controller
    variables: then nothing runs and the task fails, naming them."""

    def refusal(self, result, task_vars):
        """``result`` failed with the reason where the task's host is refused; else None."""
        host = task_vars.get("inventory_hostname")
        names = _node_trust.refused(task_vars.get("ansible_facts"))
        if not names:
            return None
        result.update(failed=True, changed=False, refused_facts=names, msg=_node_trust.reason(host, names))
        return result

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        return self.refusal({}, task_vars) or super().run(tmp, task_vars)


class HostFactsAction(ControllerAction):
    """Runs ``MODULE`` with its arguments completed by ``fill`` and its result finished by ``finish``."""

    MODULE = None
    _requires_connection = False
    _supports_async = False

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
        result = ActionBase.run(self, tmp, task_vars)
        if self.refusal(result, task_vars):
            return result
        args = dict(self._task.args)
        context = self.fill(args, task_vars)
        result.update(self._execute_module(module_name=self.MODULE, module_args=args, task_vars=task_vars))
        self.finish(result, context)
        return result
