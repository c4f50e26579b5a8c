# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin for gpuops.fleet.gpu_sharing_mode: when ``nodes`` is omitted, builds it from the
inventory (``gpu_sharing_enabled`` per host, else membership of ``sharing_group``) and names each
switched node's inventory host in the result, so the next play can repair its checkpoint."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.plugin_utils._host_facts_action import HostFactsAction, host_variables


def desired_modes(hostvars, groups, hosts_group, sharing_group):
    """``({node: sharing}, {node: host})`` from the inventory; the value is left for the module to check. A host whose
    facts name a controller variable (plugin_utils/_node_trust.py) is left out: its node is not switched."""
    nodes, hosts = {}, {}
    sharing = set(groups.get(sharing_group) or ())
    for host, found in host_variables(hostvars, groups.get(hosts_group), ("gpuops_node_name", "gpu_sharing_enabled")):
        if found.get("untrusted"):
            continue
        node = found.get("gpuops_node_name") or host
        value = found.get("gpu_sharing_enabled")
        nodes[node] = (host in sharing) if value is None else value
        hosts[node] = host
    return nodes, hosts


class ActionModule(HostFactsAction):
    MODULE = "gpuops.fleet.gpu_sharing_mode"

    def fill(self, args, task_vars):
        hosts = {}
        if args.get("nodes") is None:
            args["nodes"], hosts = desired_modes(task_vars.get("hostvars") or {}, task_vars.get("groups") or {},
                                                 args.get("hosts_group") or "gpu_nodes", args.get("sharing_group") or "gpu_sharing")
        return hosts

    def finish(self, result, context):
        for row in list(result.get("plan") or ()) + list(result.get("switched") or ()):
            if row.get("node") in context:
                row["host"] = context[row["node"]]
