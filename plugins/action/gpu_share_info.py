# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin for gpuops.fleet.gpu_share_info: hands the module what the GPU hosts of
``hosts_group`` said about themselves (their GPUs and kubelet checkpoint, which live in their
variables on the controller), so the role passes no hostvars through a filter."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.plugin_utils._host_facts_action import HostFactsAction, host_variables


def node_truth(hostvars, hosts):
    """``[{node, gpus, pod_device_entries}]`` of the hosts that read both their GPUs and their checkpoint."""
    out = []
    for host, found in host_variables(hostvars, hosts, ("gpu_sharing_checkpoint_info", "gpuops_node_name")):
        gpus = found["gpus"]
        info = found.get("gpu_sharing_checkpoint_info") or {}
        # a node whose GPUs could not be read, or whose checkpoint did not decode, is not compared
        if gpus.get("available") is False or not gpus.get("gpus") or info.get("error") or not info.get("exists"):
            continue
        out.append({"node": found.get("gpuops_node_name") or host,
                    "gpus": [{"index": g.get("index"), "uuid": g.get("uuid")} for g in gpus["gpus"]],
                    "pod_device_entries": info.get("pod_device_entries") or []})
    return out


class ActionModule(HostFactsAction):
    MODULE = "gpuops.fleet.gpu_share_info"

    def fill(self, args, task_vars):
        if args.get("node_truth") is None:
            args["node_truth"] = node_truth(*self.group_hosts(args, task_vars))
