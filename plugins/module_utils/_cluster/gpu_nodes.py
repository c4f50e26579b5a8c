# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: which of a cluster's Nodes are GPU nodes, and what
the inventory says of each (the ``gpuops.fleet.k8s_gpu_nodes`` inventory plugin's logic).

Pure: a Node as the API returns it (a dict) in, a flat summary out. A node is a GPU node when
one of its allocatable resources matches ``resources`` (shell patterns: ``nvidia.com/gpu``,
``nvidia.com/mig-*``, ``aliyun.com/gpu-mem``) with a non-zero quantity, or when the caller
selected it by label (``by_label``).
"""

from __future__ import annotations

import fnmatch
import re

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError

DEFAULT_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-*", "aliyun.com/gpu-mem")
# the GPU product: GPU feature discovery's label (GPU Operator), then gpushare's / cGPU's
PRODUCT_LABELS = ("nvidia.com/gpu.product", "aliyun.accelerator/nvidia_name")
# a label selector as kubectl takes it: key[=|==|!=]value, key in (..), !key, comma-separated
_SELECTOR = re.compile(r"^[A-Za-z0-9./_!=(),\s-]*$")


# names Ansible takes for the controller itself (ansible.constants.LOCALHOST, and the implicit localhost's):
# a Node so named would become that host, and a play of ``hosts: localhost`` would run on the node
RESERVED_NAMES = frozenset(("localhost", "localhost.localdomain", "localhost4", "localhost4.localdomain4", "localhost6",
                            "localhost6.localdomain6", "127.0.0.1", "::1", "0.0.0.0", "::"))


def reserved_name(name):
    """Why a Node's name cannot be an inventory host (a string naming the node and the fix), or None where it can."""
    text = str(name or "")
    lowered = text.lower().rstrip(".")
    if lowered in RESERVED_NAMES or lowered.startswith("127.") and lowered.replace(".", "").isdigit():
        return ("its name %r is one Ansible keeps for the controller (localhost), so its plays of hosts: localhost would go to "
                "the node; rename the Node, or reach it from another inventory source under another name" % text)
    if not text:
        return "it has no name"
    return None


class InventoryConfigError(GpuopsError):
    """A bad inventory source option (names the option and the fix)."""


def check_options(resources, label_selector):
    """Validate the source's options; raises InventoryConfigError naming the option."""
    if not isinstance(resources, (list, tuple)) or not resources or not all(isinstance(r, str) and r.strip() for r in resources):
        raise InventoryConfigError("gpu_resources must be a non-empty list of resource names or shell patterns "
                                   "(e.g. nvidia.com/gpu, nvidia.com/mig-*), got %r" % (resources,))
    if not isinstance(label_selector, str) or not _SELECTOR.match(label_selector):
        raise InventoryConfigError("label_selector must be a Kubernetes label selector such as 'nvidia.com/gpu.present=true', got %r" % (label_selector,))


def _quantity(value):
    """A resource quantity as an int (GPU resources are whole numbers); 0 when it is not one."""
    try:
        return int(str(value))
    except ValueError:
        return 0


def gpu_node(node, resources=DEFAULT_RESOURCES, by_label=False):
    """The inventory's summary of a Node, or None when it is not a GPU node."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    labels = meta.get("labels") or {}
    allocatable = status.get("allocatable") or {}
    quantities = dict((name, _quantity(value)) for name, value in allocatable.items())
    gpu = dict((name, n) for name, n in quantities.items() if n > 0 and any(fnmatch.fnmatchcase(name, pattern) for pattern in resources))
    if not gpu and not by_label:
        return None
    if quantities.get("aliyun.com/gpu-mem", 0) > 0:
        sharing = "gpushare"
    elif any(name.startswith("nvidia.com/mig-") for name in gpu):
        sharing = "mig"
    elif labels.get("nvidia.com/gpu.sharing-strategy") in ("time-slicing", "mps"):
        sharing = labels["nvidia.com/gpu.sharing-strategy"]
    else:
        sharing = "none"
    product = next((labels[key] for key in PRODUCT_LABELS if labels.get(key)), "unknown")
    addresses = dict((a.get("type"), a.get("address")) for a in status.get("addresses") or [])
    conditions = dict((c.get("type"), c.get("status")) for c in status.get("conditions") or [])
    return {
        "name": meta.get("name"),
        "gpu_resources": gpu,
        "gpu_count": quantities.get("nvidia.com/gpu", 0) or quantities.get("aliyun.com/gpu-count", 0),
        "product": product,
        "sharing": sharing,
        "cordoned": bool((node.get("spec") or {}).get("unschedulable")),
        "ready": conditions.get("Ready") == "True",
        "address": addresses.get("InternalIP") or addresses.get("Hostname"),
        "kubelet_version": (status.get("nodeInfo") or {}).get("kubeletVersion"),
    }


def gpu_nodes(nodes, resources=DEFAULT_RESOURCES, by_label=False):
    """The GPU nodes among ``nodes`` (Node dicts), sorted by name."""
    found = [summary for summary in (gpu_node(n, resources, by_label) for n in nodes) if summary is not None]
    return sorted(found, key=lambda s: s["name"])
