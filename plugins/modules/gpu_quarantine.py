#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_quarantine
short_description: Quarantine a node for a faulty GPU (cordon, taint, drain only that GPU's pods), or release it
version_added: 0.4.0
description:
  - O(state=quarantined) takes a node out of scheduling for a GPU remediation and drains it, in one patch and then the
    evictions. First it opens an entry in the remediation ledger ConfigMap, which the breakers of
    M(gpuops.fleet.gpu_remediation_plan) count as in flight; where the ledger cannot be written (it would pass its size,
    900 KiB, with open entries alone; the API refuses it), the task fails naming the ConfigMap and its size, and the node
    is not changed. Then it cordons the node with the mark C(gpuops.fleet/cordoned-for-gpu-health) (a node someone else
    cordoned keeps their cordon, and it stays theirs), adds the taint C(gpuops.fleet/gpu-unhealthy=<GPU>:NoSchedule) and
    writes the annotation C(gpuops.fleet/gpu-remediation) (the GPUs, action, scope, step and start).
  - The ledger's open entry is the quarantine's record, the truth about what was done and where it stands (its step,
    whether this module cordoned the node, the labels a pause changed and their previous values, the boot ID at quarantine);
    the ConfigMap sits in O(namespace), which no kubelet may write. The annotation mirrors it for people and is never read
    back, since a node's kubelet may write its own annotations, C(spec.unschedulable) and conditions; a node that writes the
    annotation on itself neither skips, cancels nor steers its quarantine. Give every state the same O(namespace).
  - An operator cancels a quarantine by removing its taint (C(kubectl taint node <node> gpuops.fleet/gpu-unhealthy-)), which
    only a cluster user can do (NodeRestriction refuses a kubelet's change of its taints); the next O(state=quarantined)
    closes the entry C(cancelled_by_operator), takes off what is ours and evicts nothing. An uncordon alone cancels nothing
    (a kubelet may uncordon itself); it is reported (RV(uncordoned_while_quarantined)) and the quarantine holds.
  - The ledger is trimmed by size, the oldest closed entries first; an entry holds at most 64 characters of the node's
    driver version and 32 of its signal keys. An entry of the ledger this collection did not write as it stands is
    reported by M(gpuops.fleet.gpu_remediation_plan) and counts for nothing.
  - The drain follows C(kubectl drain)'s rules and uses the Eviction API (C(policy/v1), else C(policy/v1beta1) on a server
    before 1.22), retrying a PodDisruptionBudget's refusal every 5 s until O(drain_timeout). With O(scope=gpu) (a reset)
    only the pods the plan mapped to the target GPUs are evicted, each by its UID, so pods on the node's other GPUs keep
    running; with O(scope=node) every pod on the node but DaemonSet and mirror pods.
  - A PodDisruptionBudget that still refuses at O(drain_timeout) leaves the node quarantined at step C(drain_blocked) and
    fails the task, so no reset or reboot runs while the GPU's pods do. A killed run leaves its ledger entry; the next run
    for the same GPUs resumes from it. A run on a node already quarantined and drained changes nothing.
  - Refused before any change, naming the cause - a node already in a remediation for other GPUs or another action, a
    blocker of the plan no drain ends (a pod that uses the GPU outside kubelet's accounting, a host process), a pod
    C(kubectl drain) would not evict (no controller without O(drain_force), C(emptyDir) without
    O(drain_delete_emptydir_data)).
  - O(state=paused) and O(state=unpaused) take NVML's clients (the device plugin, dcgm-exporter) off a quarantined node
    for a reset and bring them back, by node labels their DaemonSets exclude (see O(pause_labels)). The labels' previous
    values are kept in the ledger entry before the labels change; O(state=unpaused) and the release restore those keys only.
  - O(state=released) closes the node's ledger entry with O(result) and its seconds from quarantine to release, then
    removes only what this module added, as the entry says (the taint, the annotation, the cordon where the entry says this
    module set it, and a pause's labels, restored); where the ledger cannot be written, the node stays quarantined.
  - Check mode reports the cordon, taint and evictions and writes nothing.
  - Runs on the controller against the cluster, with kubernetes.core's client and authentication options.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.k8s_auth_options
  - gpuops.fleet.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  state:
    description:
      - V(quarantined) to cordon, taint and drain; V(released) to undo what this module added.
      - V(paused) (a quarantined node) to set O(pause_labels) and wait until no pod of O(pause_pods) runs on the node, so
        nothing holds NVML for a reset; V(unpaused) to put the labels back as they were, which brings those pods back
        (a new device-plugin process is what marks a GPU Healthy again). V(released) also undoes a pause.
      - V(unclaimed) gives up this run's O(claim) on the node (the role does, whatever happened to the node, once it is done
        with it); another run's claim is left. It changes nothing else.
    type: str
    choices: [quarantined, paused, unpaused, released, unclaimed]
    required: true
  pause_labels:
    description:
      - With O(state=paused), the node labels that take NVML's clients off the node. The collection's device_plugin and
        gpu_monitoring DaemonSets exclude C(gpuops.fleet/gpu-maintenance=true); on GPU Operator nodes use its
        C(nvidia.com/gpu.deploy.device-plugin=false) and C(nvidia.com/gpu.deploy.dcgm-exporter=false). Their previous
        values are kept and restored.
    type: dict
    default: {gpuops.fleet/gpu-maintenance: "true"}
  pause_pods:
    description: With O(state=paused), the C(matchLabels) of the pods that must be gone from the node (any one matching).
    type: list
    elements: dict
    default: [{name: nvidia-device-plugin-ds}, {name: gpushare-device-plugin-ds}, {app.kubernetes.io/name: dcgm-exporter}]
  pause_timeout:
    description: With O(state=paused), seconds to wait for those pods to be gone.
    type: int
    default: 300
  plan:
    description:
      - One node's row of M(gpuops.fleet.gpu_remediation_plan)'s RV(gpuops.fleet.gpu_remediation_plan#module:nodes). It
        fills O(node), O(gpus), O(action), O(scope), O(evictions), O(blockers), O(keys) and O(driver_version) where they
        are not given.
    type: dict
  node:
    description: The Kubernetes node (a DNS-1123 subdomain). Required, here or in O(plan).
    type: str
  gpus:
    description: The target GPUs' UUIDs. Required for O(scope=gpu).
    type: list
    elements: str
  action:
    description: The planned action (V(reset), V(reboot), V(replace), V(investigate)). Required with O(state=quarantined).
    type: str
  scope:
    description: V(gpu) for a reset, V(node) for the others; derived from O(action) when not given, refused when it disagrees.
    type: str
  evictions:
    description:
      - With O(scope=gpu), the pods to evict, as the plan's evictions (C(pod) as namespace/name and C(uid)) or namespace/name
        strings. A pod no longer there, or there with another UID, is already gone.
    type: list
    elements: raw
  blockers:
    description: The plan's blockers; any but a PodDisruptionBudget's refuses the quarantine.
    type: list
    elements: dict
  keys:
    description: The signal keys recorded in the ledger entry (the same-signal breaker counts them).
    type: list
    elements: str
  driver_version:
    description: The node's driver version, recorded in the ledger entry.
    type: str
  run:
    description: An identifier of this run (an AWX job ID), recorded in the annotation and the ledger.
    type: str
  claim:
    description:
      - This run's claim on the node (any identifier unique to the run; the C(gpuops.fleet.gpu_remediation) role makes one per
        run). A write of the node's ledger entry takes it, for O(claim_seconds); another run that would write the entry while
        the claim is live is refused before it writes anything (RV(claimed_by)) and leaves the node to the claim's run. A run
        that stops for the node (V(awaiting_pods), V(drain_blocked)) gives it up; a dead run's claim ends by itself.
      - With it, the plan row's C(guard) (the fleet's cap, the nodes it counted in flight, the same-signal threshold and
        window) is checked again where the run opens the node's entry, in the same write - a place a concurrent run took, or
        a signal a concurrent run saw on other nodes, refuses the node (RV(deferred)), and a same signal trips the breaker.
      - Without it, nothing is claimed (as before).
    type: str
    version_added: 0.4.0
  claim_seconds:
    description: How long a claim holds (a remediation's drain, reset or reboot and verification), in seconds.
    type: int
    default: 3600
    version_added: 0.4.0
  escalate:
    description:
      - With O(state=quarantined) and O(action=reboot), widen a node quarantined for a V(reset) of the same GPUs (the reset
        failed) to a reboot's quarantine - every pod but DaemonSet and mirror pods is drained - keeping its start, cordon
        mark and ledger entry (whose action becomes V(reboot), with C(escalated_from)). Without it such a node is refused.
    type: bool
    default: false
  result:
    description: With O(state=released), the outcome recorded in the ledger entry.
    type: str
    choices: [recovered, rebooted, replaced, needs_human, rma_candidate, cancelled]
    default: recovered
  namespace:
    description: The namespace of the ledger ConfigMap C(gpuops-remediation-ledger), the quarantine's record; the same for every state.
    type: str
    default: gpuops-system
  drain_timeout:
    description: Seconds to wait for the evicted pods to be gone, and for PodDisruptionBudgets to allow them. Must be positive.
    type: int
    default: 300
  drain_force:
    description: Evict pods that no controller recreates (bare pods), as C(kubectl drain --force).
    type: bool
    default: false
  drain_delete_emptydir_data:
    description: Evict pods with C(emptyDir) volumes, whose data is lost, as C(kubectl drain --delete-emptydir-data).
    type: bool
    default: false
  eviction_modes:
    description:
      - How the pods of each namespace leave a faulty GPU, a list of C({namespace, mode, timeout_minutes}); the first rule
        whose C(namespace) glob matches the pod's namespace wins, and the last rule's C(namespace) must be V(*).
      - C(mode=immediate) evicts through the Eviction API now. C(mode=allow_completion) never evicts - the pod runs to its
        end, the node stays quarantined at step C(awaiting_pods) and the reset waits; a later run goes on once it is gone.
        C(mode=delete_after_timeout) evicts (the Eviction API, so a PodDisruptionBudget still counts) once the node's
        quarantine, the ledger's entry, is C(timeout_minutes) old.
      - A pod may make its mode gentler, never harsher, with the annotation C(gpuops.fleet/eviction-mode) (V(allow_completion),
        V(delete_after_timeout:<minutes>), V(immediate)); a harsher one, or one that is not a mode, refuses the quarantine
        before anything changes, naming the pod.
      - Unset, every namespace is V(immediate).
    type: list
    elements: raw
    version_added: 0.4.0
  system_namespaces:
    description:
      - A regular expression searched in a pod's namespace (anchor it, as NVSentinel's C(systemNamespaces)); a pod there is
        never evicted. On a target GPU it blocks the reset (the node waits at C(awaiting_pods), the pod named); on a
        node-scoped quarantine it is left as a DaemonSet's pod is. An empty string names none.
      - 'Unset: C(^(kube-system|kube-public|kube-node-lease|gpu-operator|nvidia-gpu-operator|network-operator|nvsentinel|gpuops-system)$).'
    type: str
    version_added: 0.4.0
notes:
  - Needs C(get), C(patch) on nodes, C(get), C(patch) on C(nodes/status) (the C(GPUHealthy) condition), C(list), C(watch) on
    pods, C(create) on C(pods/eviction), and C(get), C(create), C(update) on the ledger ConfigMap in O(namespace)
    (C(docs/rbac/gpu-remediation-condition.yml)).
  - An operator who takes the taint off a node this module quarantined cancels its remediation - the next
    O(state=quarantined) closes the ledger's entry as C(cancelled_by_operator), removes only what this module added, sets the
    condition C(Unknown) and evicts nothing; M(gpuops.fleet.gpu_remediation_plan) then leaves the node alone for the same
    signal. An uncordon alone cancels nothing (a node's kubelet may uncordon itself).
  - The condition is the node's own status too - its kubelet may write C(GPUHealthy) as it likes - so it is said for people
    and other tools, and never read back.
  - The Node condition C(GPUHealthy) (through the status subresource) says why a node is out - C(False) with the signal as
    its reason and the GPUs in its message while quarantined, C(True) on release. Kubelet's status updates patch only their
    own conditions, so it stays.
requirements:
  - kubernetes (Python client)
seealso:
  - module: gpuops.fleet.gpu_remediation_plan
  - module: gpuops.fleet.gpu_health_info
"""

EXAMPLES = r"""
- name: Plan
  gpuops.fleet.gpu_remediation_plan:
  register: plan

- name: Quarantine the planned nodes (only the faulty GPU's pods are evicted for a reset)
  gpuops.fleet.gpu_quarantine:
    state: quarantined
    plan: "{{ item }}"
    run: "{{ tower_job_id | default(omit) }}"
  loop: "{{ plan.nodes | selectattr('batch', 'equalto', 1) | list }}"
  loop_control:
    label: "{{ item.node }}"

- name: Release a node once its GPU verified healthy
  gpuops.fleet.gpu_quarantine:
    state: released
    node: gpu-node-7
    result: recovered
"""

RETURN = r"""
node:
  description: The node.
  returned: always
  type: str
step:
  description:
    - With O(state=quarantined), where the quarantine stands - V(drained); V(awaiting_pods), the pods of RV(waiting_for) still
      run on the target GPUs (their eviction modes keep them); V(cancelled_by_operator); or V(drain_blocked) in a failure.
  returned: state is quarantined
  type: str
stops:
  description:
    - With O(state=quarantined), whether a run stops for the node at RV(step) without failing (V(awaiting_pods),
      V(cancelled_by_operator)); the remediation's states and their moves are declared once, in the collection's guide.
  returned: state is quarantined
  type: bool
  version_added: 0.4.0
claimed_by:
  description:
    - With O(claim), the claim of another run that holds the node (C(run), C(until)); this run wrote nothing and RV(stops) is
      true. Null otherwise.
  returned: state is quarantined
  type: dict
  version_added: 0.4.0
deferred:
  description:
    - With O(claim), why the node was not opened though the plan chose it - V(deferred_capacity) (a concurrent run took the
      fleet's last place) or V(fleet_event) (the same signal on other nodes a concurrent run opened; the breaker tripped);
      nothing of the node was changed and RV(stops) is true. Null otherwise.
  returned: state is quarantined
  type: str
  version_added: 0.4.0
waiting_for:
  description:
    - The pods the quarantine waits for, each with C(pod), C(uid), C(mode) (V(allow_completion), V(delete_after_timeout) or
      V(system)), C(why), C(age_seconds) (since the pod started) and C(job).
  returned: state is quarantined
  type: list
  elements: dict
  version_added: 0.4.0
jobs:
  description:
    - The multi-pod jobs of the pods evicted or waited for (a Job, an indexed Job, a JobSet, a Kubeflow PyTorchJob or MPIJob
      by their documented labels), each with C(kind), C(name), C(namespace), C(index), C(affected) (its pods this
      quarantine evicts or waits for) and C(pods) (every pod of the job, with its node and phase) - one worker's eviction
      costs the whole job.
  returned: state is quarantined
  type: list
  elements: dict
  version_added: 0.4.0
fault_age_seconds:
  description: Seconds since the node's ledger entry opened (the fault's age that C(delete_after_timeout) counts).
  returned: state is quarantined
  type: int
  version_added: 0.4.0
condition_error:
  description:
    - Why the Node condition C(GPUHealthy) could not be written (no C(patch) on C(nodes/status)), or null. It never stops
      a quarantine, a cancel or a release - the taint says a node is out, the condition why - and the task warns.
  returned: when the condition was to change
  type: str
  version_added: 0.4.0
cancelled_by_operator:
  description: What an operator undid by hand (the taint removed), where the remediation was cancelled.
  returned: step is cancelled_by_operator
  type: str
  version_added: 0.4.0
evicted:
  description: The pods evicted (or that would be, in check mode).
  returned: state is quarantined
  type: list
  elements: str
already_gone:
  description: Pods of the plan no longer on the node (or there with another UID).
  returned: state is quarantined
  type: list
  elements: str
left_on_node:
  description: With O(scope=node), the DaemonSet and mirror pods left running, as C(kubectl drain) leaves them.
  returned: state is quarantined
  type: list
  elements: dict
eviction_notes:
  description: The evicted pods that lose something (no controller recreates them, or their emptyDir data).
  returned: state is quarantined
  type: list
  elements: dict
foreign_cordon:
  description: The node was cordoned by someone else; that cordon stays.
  returned: always
  type: bool
uncordoned_while_quarantined:
  description:
    - Where the node is schedulable again while its quarantine holds (its own kubelet, or a cluster user, uncordoned it), what
      that means and how to cancel; null otherwise. An uncordon alone cancels nothing.
  returned: state is quarantined
  type: str
  version_added: 0.4.0
resumed_from:
  description: The step an earlier, unfinished run left in the ledger entry.
  returned: state is quarantined
  type: str
escalated_from:
  description: With O(escalate), the action the quarantine was widened from (V(reset)); null otherwise.
  returned: state is quarantined
  type: str
boot_id:
  description: The Node's C(status.nodeInfo.bootID) now.
  returned: state is quarantined
  type: str
boot_id_at_quarantine:
  description:
    - The Node's bootID when it was first quarantined (kept in the ledger entry, so a run killed after a reboot still
      knows it). Give it to M(gpuops.fleet.node_reboot) as its O(gpuops.fleet.node_reboot#module:previous_boot_id); where
      it differs from RV(boot_id), the node has rebooted since.
  returned: state is quarantined
  type: str
previous_labels:
  description: With O(state=paused), the pause labels' values before the pause (null where the node had none).
  returned: state is paused
  type: dict
restored_labels:
  description: With O(state=unpaused) or O(state=released), the labels put back (null removes one).
  returned: state is unpaused or released
  type: dict
at:
  description: When the module acted (the controller's clock, UTC); the run's fleet page shows it in the node's timeline.
  returned: always
  type: str
  sample: "2026-12-06T21:40:12Z"
  version_added: 0.4.0
recover_seconds:
  description: With O(state=released), seconds from the ledger entry's quarantine to this release.
  returned: state is released
  type: int
msg:
  description: What changed, or would.
  returned: always
  type: str
"""

import time

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import pause, quarantine, release, session
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_module import api_client, k8s_module, run
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_watch import ApiException

try:
    from kubernetes.client.api import core_v1_api
except ImportError:
    # AnsibleK8SModule reports a missing kubernetes library itself
    pass

ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=["quarantined", "paused", "unpaused", "released", "unclaimed"], required=True),
    pause_labels=dict(type="dict", default={pause.MAINTENANCE_LABEL: "true"}),
    pause_pods=dict(type="list", elements="dict",
                    default=[{"name": "nvidia-device-plugin-ds"}, {"name": "gpushare-device-plugin-ds"}, {"app.kubernetes.io/name": "dcgm-exporter"}]),
    pause_timeout=dict(type="int", default=300),
    plan=dict(type="dict"),
    node=dict(type="str"),
    gpus=dict(type="list", elements="str"),
    action=dict(type="str"),
    scope=dict(type="str"),
    evictions=dict(type="list", elements="raw"),
    blockers=dict(type="list", elements="dict"),
    keys=dict(type="list", elements="str", no_log=False),
    driver_version=dict(type="str"),
    run=dict(type="str"),
    claim=dict(type="str", no_log=False),
    claim_seconds=dict(type="int", default=3600),
    escalate=dict(type="bool", default=False),
    result=dict(type="str", choices=list(quarantine.RESULTS), default="recovered"),
    namespace=dict(type="str", default="gpuops-system"),
    drain_timeout=dict(type="int", default=300),
    drain_force=dict(type="bool", default=False),
    drain_delete_emptydir_data=dict(type="bool", default=False),
    eviction_modes=dict(type="list", elements="raw"),
    system_namespaces=dict(type="str"),
)


def main():
    module = k8s_module(ARGUMENT_SPEC)

    def work():
        p = quarantine.check_params(module.params)
        client = api_client(module)
        api = core_v1_api.CoreV1Api(client)
        step = {"quarantined": quarantine.quarantine, "paused": pause.pause, "unpaused": pause.unpause,
                "released": release.release, "unclaimed": session.unclaim}[p["state"]]
        # a QuarantineError's result (where the node stands) comes back beside its message (k8s_watch.failure)
        return step(session.Session(api, p, module.check_mode, ApiException))

    result = run(module, work)
    result["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if result.get("condition_error"):
        module.warn(result["condition_error"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
