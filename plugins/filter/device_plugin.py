# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters the device_plugin role uses: settings, preflight, owners. The rollout and the
verification pod are the module daemonset_rollout.

The logic lives in ``module_utils/_device_plugin.py``; these wrappers turn its typed errors
into AnsibleFilterError once.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.module_utils._errors import GpuopsError
from ansible_collections.gpuops.fleet.plugins.module_utils import _device_plugin as dp


def _guard(fn):
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except GpuopsError as exc:
            raise AnsibleFilterError(str(exc))
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


@_guard
def device_plugin_settings(version, image, options):
    """Version facts, the image reference and the container's args/env for ``options``."""
    parsed = dp.parse_version(version)
    return {"version": parsed.as_dict(), "image": dp.image_reference(image, version),
            "container": dp.container_config(parsed, options), "options": dp.normalize_options(options)}


def _hosts(host_vars):
    if not isinstance(host_vars, list):
        raise AnsibleFilterError("device_plugin_preflight: expects the GPU hosts' variables as a list "
                                 "(groups[device_plugin_hosts_group] | map('extract', hostvars) | list)")
    return host_vars


def kubelet_facts_by_node(host_vars):
    """node name -> {kubelet_config_info result, host, gpu_uuids} from the GPU hosts' variables."""
    out = {}
    for hv in _hosts(host_vars):
        kubelet = hv.get("device_plugin_kubelet")
        if not kubelet:
            continue
        name = hv.get("device_plugin_node_name") or kubelet.get("node_name")
        gpus = ((hv.get("ansible_facts") or {}).get("gpuops_gpus") or {})
        entry = dict(kubelet)
        entry["host"] = hv.get("inventory_hostname")
        entry["gpu_uuids"] = [g.get("uuid") for g in gpus.get("gpus") or []] if gpus.get("available") else None
        out[name] = entry
    return out


@_guard
def device_plugin_preflight(nodes, settings, node_selector, host_vars):
    """Refuse versions or options that break under CPUManager static, per targeted node."""
    version = dp.parse_version(settings["version"]["text"])
    facts = kubelet_facts_by_node(host_vars)
    targets = dp.targeted_nodes(nodes, node_selector)
    result = dp.preflight(version, settings["options"], targets, facts, settings["container"].get("problems"))
    result["message"] = dp.format_problems(result["problems"])
    result["targets"] = targets
    result["facts"] = facts
    result["gpu_uuids"] = dict((node, entry["gpu_uuids"]) for node, entry in facts.items() if entry.get("gpu_uuids"))
    return result


@_guard
def device_plugin_owners(cluster_policies, daemonsets, namespace, name, nodes=None, node_selector=None):
    """Who else manages the device plugin (GPU Operator, Helm, another DaemonSet): ``problems`` and ``message``."""
    problems = dp.other_managers(cluster_policies, daemonsets, namespace, name, nodes, node_selector)
    return {"problems": problems, "message": dp.format_problems(problems)}


class FilterModule(object):
    def filters(self):
        return {
            "device_plugin_settings": device_plugin_settings,
            "device_plugin_preflight": device_plugin_preflight,
            "device_plugin_owners": device_plugin_owners,
        }
