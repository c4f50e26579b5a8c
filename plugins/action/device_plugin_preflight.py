# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin for gpuops.fleet.device_plugin_preflight: hands the module the kubelet facts of
the hosts in ``hosts_group`` (their variables live on the controller, not on the target), so
the role passes no hostvars through a filter."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.device_plugin import kubelet_facts_by_node
from ansible_collections.gpuops.fleet.plugins.plugin_utils._host_facts_action import HostFactsAction, host_variables


class ActionModule(HostFactsAction):
    MODULE = "gpuops.fleet.device_plugin_preflight"

    def fill(self, args, task_vars):
        if args.get("kubelet_facts") is None:
            hostvars, hosts = self.group_hosts(args, task_vars)
            # only what the check reads, never the hosts' other variables
            args["kubelet_facts"] = kubelet_facts_by_node(host_variables(hostvars, hosts, ("device_plugin_kubelet", "device_plugin_node_name")))
