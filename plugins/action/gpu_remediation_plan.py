# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin for gpuops.fleet.gpu_remediation_plan: hands the module what the GPU hosts of
``hosts_group`` read about themselves (their gpuops_gpu_health fact and their kubelet checkpoint's
entries, which live in their variables on the controller)."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.plugin_utils._host_facts_action import HostFactsAction, host_variables


def health_rows(hostvars, hosts):
    """``[{host, node, health, entries[, untrusted]}]``: a host that read no health still gets a row (the plan says unknown),
    and so does a host whose facts name a controller variable (``untrusted``: the plan says unknown, and why)."""
    out = []
    for host, found in host_variables(hostvars, hosts, ("gpu_health_checkpoint", "gpuops_node_name")):
        if found.get("untrusted"):
            out.append({"host": host, "node": host, "health": {}, "entries": [], "untrusted": found["untrusted"]})
            continue
        info = found.get("gpu_health_checkpoint") or {}
        out.append({"host": host, "node": found.get("gpuops_node_name") or host, "health": found["health"],
                    "entries": [] if info.get("error") else info.get("pod_device_entries") or []})
    return out


class ActionModule(HostFactsAction):
    MODULE = "gpuops.fleet.gpu_remediation_plan"

    def fill(self, args, task_vars):
        if args.get("hosts") is None:
            args["hosts"] = health_rows(*self.group_hosts(args, task_vars))
