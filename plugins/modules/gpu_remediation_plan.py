#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_remediation_plan
short_description: Plan what to do about faulty GPUs across the fleet, with breakers that keep one false signal from touching it
version_added: 0.4.0
description:
  - Read-only by default. From each GPU host's M(gpuops.fleet.gpu_health_info) facts and its kubelet checkpoint
    (M(gpuops.fleet.kubelet_checkpoint_info)), which the action plugin collects from O(hosts_group), and the cluster's
    Nodes, Pods, PodDisruptionBudgets and ledger ConfigMap, says per node the action (V(none), V(observe), V(reset),
    V(investigate), V(reboot), V(replace)), its scope (V(gpu) or V(node)), the GPUs, the pods it evicts, and what
    blocks it.
  - The pod to GPU map comes from kubelet's own checkpoint, for every device ID form (whole GPUs, C(::n)
    time-slicing, MIG, gpushare C(-_-n), indexes), and is cross-checked with the GPUs' NVML processes. A pod on a target
    GPU that kubelet did not give it, or a host process there, blocks the action and is named.
  - Evictions follow C(kubectl drain)'s rules; a PodDisruptionBudget whose C(status.disruptionsAllowed) is 0 is named
    as a blocker.
  - Breakers. At most O(max_nodes_per_run) nodes per run, and at most max(O(breaker_min_nodes),
    O(breaker_percent)% of the GPU nodes in scope) quarantined at once (O(breaker_max_nodes) at most). The GPU nodes in
    scope are every Node the API shows with a GPU resource in its capacity (or the label C(nvidia.com/gpu.present=true)),
    with the run's hosts, never the run's C(--limit) alone, so an event-driven run limited to one node, a scheduled run and
    an AWX slice get the same cap. In flight are the ledger's open entries whose Node carries the quarantine's taint (or
    opened in the last 10 minutes), never a Node's own annotation, which its kubelet may write. One signal
    key with one driver version on min(O(same_signal_nodes), max(2, O(same_signal_percent)% of scope)) nodes or more,
    this run and the ledger's last O(breaker_window) seconds together, is a fleet event that trips the breaker and
    fails the task. A tripped breaker (kept in the ledger with O(record=true)) refuses every later run until
    O(breaker_reset=true) with O(breaker_reset_reason).
  - The same GPU remediated O(repeat_gpu) times in 24 hours, or the node O(repeat_node) times in 7 days, is
    V(replace) (an RMA report), never another automatic action.
  - Nothing here acts on a node. The plan is what a later step carries out.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.k8s_auth_options
  - gpuops.fleet.attributes
attributes:
  check_mode:
    support: full
    details:
      - The plan is the same; the ledger is never written.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - The ledger is written only when the breaker trips or is reset.
options:
  hosts:
    description:
      - One item per GPU host, with C(host), C(node) (the Kubernetes node name), C(health) (its C(gpuops_gpu_health)
        fact) and C(entries) (its checkpoint's C(pod_device_entries)).
      - The action plugin fills it from O(hosts_group)'s hosts when it is not given.
    type: list
    elements: dict
  hosts_group:
    description: The inventory group whose hosts' facts the action plugin collects.
    type: str
    default: gpu_nodes
  namespace:
    description: Namespace of the ledger ConfigMap C(gpuops-remediation-ledger).
    type: str
    default: gpuops-system
  record:
    description:
      - Write the ledger when the breaker trips, so that it stays tripped for later runs. V(false) reports the trip
        without writing anything.
    type: bool
    default: false
  breaker_reset:
    description: Close a tripped breaker. Needs O(breaker_reset_reason); XIDs logged before the reset no longer count.
    type: bool
    default: false
  breaker_reset_reason:
    description: Why the breaker may close. Kept in the ledger.
    type: str
  max_nodes_per_run:
    description: How many nodes one run plans to act on.
    type: int
    default: 1
  batch:
    description:
      - How many planned nodes share a batch (the remediation acts on the first batch, so how many nodes one run acts on).
      - A node our quarantine holds at a waiting step (V(awaiting_pods), V(drain_blocked)) takes no place in it - every run
        offers it (batch 1, with C(waiting)) and goes on to the next faulty node. It still counts in the fleet's cap.
    type: int
    default: 1
  breaker_percent:
    description: Percent of the GPU nodes in scope that may be quarantined at once.
    type: int
    default: 10
  breaker_min_nodes:
    description: Nodes that may be quarantined at once however small the fleet.
    type: int
    default: 1
  breaker_max_nodes:
    description: Nodes that may be quarantined at once however large the fleet. Not set means no absolute cap.
    type: int
  same_signal_nodes:
    description: Nodes with one signal key and driver version that make a fleet event.
    type: int
    default: 3
  same_signal_percent:
    description: Percent of the GPU nodes in scope with one signal key and driver version that make a fleet event.
    type: int
    default: 5
  breaker_window:
    description: Seconds of the ledger's history counted with this run for the same-signal breaker.
    type: int
    default: 3600
  repeat_gpu:
    description: Remediations of one GPU in 24 hours that make it an RMA candidate (V(replace)). V(0) turns the rule off.
    type: int
    default: 3
  repeat_node:
    description: Remediations of one node in 7 days that make it an RMA candidate (V(replace)). V(0) turns the rule off.
    type: int
    default: 5
  drain_force:
    description: Plan to evict pods without a controller (C(kubectl drain --force)).
    type: bool
    default: false
  drain_delete_emptydir_data:
    description: Plan to evict pods with C(emptyDir) volumes (C(kubectl drain --delete-emptydir-data)).
    type: bool
    default: false
  eviction_modes:
    description:
      - The eviction modes per namespace, as M(gpuops.fleet.gpu_quarantine)'s O(gpuops.fleet.gpu_quarantine#module:eviction_modes)
        (the first matching glob wins, C('*') last). Each planned eviction carries its pod's C(mode), C(timeout_minutes),
        C(mode_by) (the rule or annotation that chose it) and C(system); a pod whose annotation
        C(gpuops.fleet/eviction-mode) asks for a harsher mode, or for none there is, is a blocker (C(kind=eviction_mode)) that
        keeps its node out of the plan, named.
      - A rule that is not one (a mode that does not exist, a pattern that is not a glob of namespace names, no C('*') last)
        fails the task naming it, before anything is read.
    type: list
    elements: raw
    version_added: 0.4.0
  system_namespaces:
    description: The namespaces whose pods are never evicted, a regular expression, as M(gpuops.fleet.gpu_quarantine)'s.
    type: str
    version_added: 0.4.0
notes:
  - Reads Nodes, Pods and PodDisruptionBudgets (C(policy/v1), or C(policy/v1beta1) on servers before 1.21) in all namespaces,
    and the ledger ConfigMap; writes only that ConfigMap, and only as described under O(record) and O(breaker_reset).
seealso:
  - module: gpuops.fleet.gpu_health_info
  - module: gpuops.fleet.kubelet_checkpoint_info
"""

EXAMPLES = r"""
- name: Plan (report only)
  gpuops.fleet.gpu_remediation_plan:
    hosts_group: gpu_nodes
  register: plan

- name: Show the plan
  ansible.builtin.debug:
    msg: "{{ plan.table }}"

- name: Close a tripped breaker after the cause was fixed
  gpuops.fleet.gpu_remediation_plan:
    breaker_reset: true
    breaker_reset_reason: "driver 580.65 rolled back on the whole pool (INC-1234)"
"""

RETURN = r"""
nodes:
  description:
    - One item per host, with C(node), C(host), C(state) (V(unknown), V(ok), V(attention), V(faulty)), C(action), C(scope),
      C(row) (the decision table's), C(gpus), C(targets) (a reset's GPUs with the NVLink peers it includes), C(reasons),
      C(signals), C(keys) (those the same-signal breaker counts), C(driver_version), C(evictions) (C(pod), C(uid),
      C(reason), C(evict), C(note), C(pdb)), C(blockers) (C(kind) V(pdb), V(not_evictable), V(outside_accounting),
      V(host_process) or V(foreign_pod) (the node's checkpoint names a pod that runs on another node), with C(detail)),
      C(batch) (planned; C(waiting) names the waiting step of a node that takes no batch place) or C(deferred_reason)
      (V(fleet_event), V(breaker_tripped), V(deferred_capacity), V(blocked),
      V(gpu_busy), V(cancelled_by_operator) - an operator cancelled the node's last remediation, for the same signal).
    - Each eviction also carries its C(mode), C(timeout_minutes), C(mode_by), C(system), C(mode_error) and C(job) (the
      multi-pod job it belongs to); a blocker may also be V(eviction_mode) (a pod's annotation asks for a harsher mode).
    - A host is V(unknown), planned for nothing, with the reason, where its facts name a variable the controller acts on
      (C(gpuops_node_name), a role's variables, C(ansible_kubectl_*); a node's identity comes from the inventory, never
      from what it returns), where another host names the same node, or where its facts are not of the shape
      M(gpuops.fleet.gpu_health_info) and M(gpuops.fleet.kubelet_checkpoint_info) return (the first field that is not is
      named); the other hosts are planned as if it were not there. Row 17 (V(observe), never planned) also carries
      C(plugin_unhealthy), the Node's C(nvidia.com/) resources whose allocatable is below capacity while NVML is clean
      (the device plugin withholds a GPU; its pod's restart is the remedy).
  returned: always
  type: list
  elements: dict
breaker:
  description: The breaker after this run (C(state), C(reason), C(keys), C(at), C(reset_reason), C(reset_at)).
  returned: always
  type: dict
signal_groups:
  description: The signal keys on enough nodes to be a fleet event (C(key), C(driver_version), C(nodes)).
  returned: always
  type: list
  elements: dict
table:
  description: The plan as a text table, one line per node.
  returned: always
  type: str
summary:
  description: Nodes per action, and how many are planned, deferred and unknown.
  returned: always
  type: dict
capacity:
  description:
    - The capacity breaker's C(cap), the nodes C(in_flight) (quarantined by us) and the C(room) this run had.
    - C(stale_open_entries) names the nodes whose ledger entry is open while the node carries no taint of ours, for
      more than 10 minutes (a run killed between the two writes, a cancel not yet recorded); they do not count as in flight.
    - C(waiting) names the nodes in flight at a waiting step (V(awaiting_pods), V(drain_blocked)) - they count in the cap
      and take no place in the batch.
  returned: when the breaker is closed
  type: dict
scope:
  description: The GPU nodes in scope the breakers' percentages are of (the API's GPU Nodes with the run's hosts).
  returned: always
  type: int
  version_added: 0.4.0
settings:
  description: The thresholds the plan used.
  returned: always
  type: dict
same_signal_threshold:
  description: How many nodes with one signal key and driver version made a fleet event in this run.
  returned: always
  type: int
ledger_written:
  description: Whether the ledger ConfigMap was written (or, in check mode, would have been).
  returned: always
  type: bool
ledger_invalid:
  description:
    - The ledger's entries this collection did not write as they stand (a field of another type, a time that is not a
      finite number), each with its index and the field; they count for nothing (no breaker, no repeat, no node's
      release waits on them) and are kept as they are until the ledger is trimmed.
  returned: always
  type: list
  elements: str
  version_added: 0.4.0
"""

import time

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import eviction
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import plan as rp
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_module import api_client, k8s_module, run
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_watch import ApiException, listed
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import dns_name
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

try:
    from kubernetes.client.api import core_v1_api
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ResourceNotFoundError
except ImportError:
    # AnsibleK8SModule reports a missing kubernetes library itself
    pass

SETTINGS = rp.SETTINGS.names()  # the plan's settings: their argument spec and checks are the table's (_cluster/remediation/plan.py)


def _hosts(items):
    out = []
    for i, item in enumerate(items or ()):
        if not isinstance(item, dict) or not (item.get("node") or item.get("host")):
            raise ParameterError("hosts[%d]" % i, "expected a dict with host, node, health and entries, got %r" % (item,))
        node = item.get("node") or item.get("host")
        if not isinstance(node, str) or not isinstance(item.get("host", node), str):
            raise ParameterError("hosts[%d].node" % i, "the host's and its node's names must be strings (gpuops_node_name in the inventory), "
                                 "got %s" % type(node).__name__)
        out.append(dict(item, node=node))
    return out


def _slim_node(node):
    """A Node without the images kubelet lists in its status (most of a Node's bytes; the plan reads none of them)."""
    status = node.get("status")
    if isinstance(status, dict):
        status.pop("images", None)
    return node


def _pods_of(api):
    """``pods(node)``: the pods on ``node`` (a field selector; a name that is no Node name, none), ``pods(None)`` every pod."""
    def pods(node):
        if node is None:
            return listed(api.list_pod_for_all_namespaces)
        if not dns_name(node):
            return []
        return listed(api.list_pod_for_all_namespaces, field_selector="spec.nodeName=%s" % node)
    return pods


def _pdbs(client):
    """PodDisruptionBudgets of every namespace: policy/v1, or policy/v1beta1 on a server before 1.21 (discovery says which)."""
    dynamic = DynamicClient(client)
    for version in ("policy/v1", "policy/v1beta1"):
        try:
            resource = dynamic.resources.get(api_version=version, kind="PodDisruptionBudget")
        except ResourceNotFoundError:
            continue
        return resource.get().to_dict().get("items") or []
    return []


def main():
    module = k8s_module(dict(
        hosts=dict(type="list", elements="dict"),
        hosts_group=dict(type="str", default="gpu_nodes"),
        namespace=dict(type="str", default="gpuops-system"),
        record=dict(type="bool", default=False),
        breaker_reset=dict(type="bool", default=False),
        breaker_reset_reason=dict(type="str"),
        eviction_modes=dict(type="list", elements="raw"),
        system_namespaces=dict(type="str"),
        **rp.SETTINGS.argument_spec()
    ))
    p = module.params

    def work():
        settings = rp.check_settings(dict((k, p[k]) for k in SETTINGS))
        reset = rp.check_reset(p["breaker_reset"], p["breaker_reset_reason"])
        policy = eviction.check_policy(p["eviction_modes"], p["system_namespaces"])
        hosts = _hosts(p["hosts"])
        client = api_client(module)
        api = core_v1_api.CoreV1Api(client)
        ledger, current = ledgers.read(api, p["namespace"], ApiException)
        now = int(time.time())
        reset = reset and ledger["breaker"].get("state") == "tripped"  # closing a closed breaker changes nothing
        if reset:
            ledger = ledgers.reset(ledger, p["breaker_reset_reason"].strip(), now)
        # the pods are asked for only on the nodes a row acts on (plan._Pods): k calls for k faulty nodes, whatever the fleet
        result = rp.plan(hosts, listed(api.list_node, slim=_slim_node), _pods_of(api), _pdbs(client), ledger, settings, now, policy)
        write = reset or (p["record"] and result.get("tripped_now"))
        if write and not module.check_mode:
            ledger = dict(ledger, breaker=result["breaker"])
            ledgers.write(api, p["namespace"], ledger, current, ApiException)
        result["ledger_written"] = bool(write)
        result["ledger_invalid"] = ["entry %d: %s" % (bad["index"], bad["problem"]) for bad in ledger.get("invalid") or ()]
        result.pop("tripped_now", None)
        return result

    result = run(module, work)
    msg = "%d node%s: %s" % (len(result["nodes"]), "" if len(result["nodes"]) == 1 else "s",
                             ", ".join("%d %s" % (n, a) for a, n in sorted(result["summary"].items()) if n))
    if result.get("refused"):
        module.fail_json(msg="%s; %s" % (result["refused"], msg), changed=result["ledger_written"], **dict(
            (k, v) for k, v in result.items() if k not in ("refused",)))
    module.exit_json(changed=result["ledger_written"], msg=msg, **result)


if __name__ == "__main__":
    main()
