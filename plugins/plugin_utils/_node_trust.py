# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection (controller side): what a node returns never names a variable the controller acts on.

Any module's result may carry ``ansible_facts``. ansible-core puts each fact in the host's variables, where it outranks
the inventory's (facts come after inventory variables in Ansible's variable precedence). ansible-core removes from module
facts the names of its own connection variables (``ansible_host``, ``ansible_connection``, ``ansible_*_interpreter``:
``ansible.vars.clean.clean_facts``), but not a collection's: ``gpuops_node_name``, a role's variables, or kubernetes.core's
``ansible_kubectl_*`` (the server, kubeconfig and token of the ``gpuops.fleet.k8s_node`` connection) come through. A node
(root on it, or whatever writes its modules' output) could then rename itself after another node, change what the
controller does, or send the connection's credentials to a server it chooses.

The rule: under the collection's variable namespaces (``CONTROLLER_PREFIXES``, ``CONTROLLER_NAMES``), a node may return
only the collection's own node facts (``NODE_FACTS``). A host whose facts name any other such variable is refused by every
controller-side step of the collection (``refused``, ``refusal``), naming those facts; the other hosts go on. The facts are read from
the host's ``ansible_facts``, where ansible-core keeps every fact a module returned (without its ``ansible_`` prefix: so
``kubectl_`` stands for ``ansible_kubectl_``), and never from the merged variables, whose value may be the fact's.
"""

from __future__ import annotations

# the facts the collection's node modules set (gpu_uuid_facts, kubelet_checkpoint: gpuops_gpus; gpu_health_info and
# kubelet_checkpoint's health option: gpuops_gpu_health): data about the node itself
NODE_FACTS = ("gpuops_gpus", "gpuops_gpu_health")
# every variable the collection's plays, roles and plugins read begins so (tests/unit/plugins/plugin_utils/test_node_trust.py
# holds the roles' argument specs, the k8s_node connection's variables and the playbooks' variables against it); the
# names are as ansible_facts keeps them, without "ansible_"
CONTROLLER_PREFIXES = ("gpuops_", "checkpoint_guard_", "device_plugin_", "driver_installer_", "gpu_monitoring_", "gpu_remediation_",
                       "gpu_sharing_", "kubectl_", "k8s_", "awx_", "tower_")
CONTROLLER_NAMES = ("pipelining",)
# the longest list of names a refusal quotes
_QUOTED = 8


def refused(facts):
    """The names in ``facts`` (a host's ``ansible_facts``) that a node may not return, sorted; [] for a host that returned none."""
    if not hasattr(facts, "keys"):
        return []
    names = []
    for name in facts:
        text = str(name)
        if text in NODE_FACTS:
            continue
        if text in CONTROLLER_NAMES or text.startswith(CONTROLLER_PREFIXES):
            names.append(text)
    return sorted(names)


def reason(host, names):
    """The refusal's sentence for ``host`` whose facts hold ``names``."""
    shown = ", ".join(repr(n[:80]) for n in names[:_QUOTED]) + (" and %d more" % (len(names) - _QUOTED) if len(names) > _QUOTED else "")
    return ("host %s returned facts named as variables the controller acts on (%s): a node's identity and the controller's settings "
            "come from the inventory, never from what a node returns, so nothing is done with this host; find what on the node writes "
            "them (its modules' output, or a fact cache), then clear its facts (meta: clear_facts) or its fact cache" % (host, shown))


def refusal(host, facts):
    """The refusal's sentence where ``facts`` (``host``'s ``ansible_facts``) name a controller variable, else None."""
    names = refused(facts)
    return reason(host, names) if names else None


def facts_of(variables):
    """One host's ``ansible_facts`` from its variables (``hostvars[host]``), {} where it has none."""
    facts = variables.get("ansible_facts") if hasattr(variables, "get") else None
    return facts if hasattr(facts, "keys") else {}


def host_facts(hostvars, host):
    """A host's ``ansible_facts`` from the controller's ``hostvars`` ({} where it has none)."""
    try:
        found = hostvars.get(host) if hasattr(hostvars, "get") else None
    except Exception:  # pylint: disable=broad-exception-caught
        # HostVars raises for a host the inventory does not know
        found = None
    return facts_of(found)
