#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: daemonset_rollout
short_description: Roll a DaemonSet's pods to its current revision node by node, checking each node
version_added: 0.3.0
description:
  - For a DaemonSet with C(updateStrategy OnDelete) (the device plugin, the driver installer, the DCGM exporter),
    deletes the old pods of a batch of nodes together, then waits, with a watch and not a poll loop, until each node
    runs the pod of the DaemonSet's current revision and passes its checks. Stops once more than
    O(max_failed_nodes) nodes failed and returns one row per node.
  - A pod is current when its C(controller-revision-hash) label is the DaemonSet's current ControllerRevision (not
    when its image string matches). Nodes already current and Ready are skipped, so a second run changes nothing.
  - "Checks, per node: always, the new pod is Ready; optionally O(require_init_completed), an extended resource back
    to its value before (O(resource)), a line in a container's log (O(log_check)), and a verification pod run on
    the node (O(verify_pod)), whose termination message is handed back."
  - Check mode deletes nothing and returns the plan.
  - Runs on the controller against the cluster, with kubernetes.core's client and authentication options.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.k8s_auth_options
  - gpuops.fleet.daemonset
  - gpuops.fleet.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Nodes already on the current revision are skipped; a second run deletes nothing.
options:
  nodes:
    description:
      - The nodes to roll. Omitted, every node with a pod of the DaemonSet.
      - A node named here without a pod is waited for (the controller may be creating it); if none comes, it fails
        with a reason that says so. A node the cluster does not have fails the task at once, naming it.
      - An empty list is refused (it would roll nothing); omit the option to roll every node.
    type: list
    elements: str
  allow_rolling_update:
    description:
      - A DaemonSet whose C(updateStrategy) is C(RollingUpdate) (the API's default) is refused, because its controller
        replaces the pods itself and deleting them here would race it. V(true) rolls it anyway, node by node as asked.
      - Not needed with O(check_only) (nothing is deleted), nor in check mode with O(planned_template) (the play is about
        to apply a new template).
    type: bool
    default: false
    version_added: 0.3.0
  batch_size:
    description: Nodes whose old pods are deleted together.
    type: int
    default: 1
  max_failed_nodes:
    description: Failed nodes tolerated; one more stops the rollout (later nodes are reported V(not_started)).
    type: int
    default: 0
  pod_timeout:
    description: Seconds a batch waits for its new pods to be Ready.
    type: int
    default: 300
  resource_timeout:
    description: Seconds a batch waits for O(resource) to be allocatable again.
    type: int
    default: 120
  observe_timeout:
    description: Seconds to wait for the DaemonSet controller to observe the DaemonSet's current generation.
    type: int
    default: 60
  crashloop_restarts:
    description:
      - A container in C(CrashLoopBackOff) after this many restarts fails its node at once instead of at the end of
        O(pod_timeout) (it would restart forever).
    type: int
    default: 3
  require_init_completed:
    description: Also require every init container of the new pod to have terminated with exit code 0.
    type: bool
    default: false
  resource:
    description:
      - An extended resource (C(nvidia.com/gpu)) whose allocatable count must come back to the node's capacity, and
        capacity to at least its value before the rollout.
    type: str
  log_check:
    description: A line that must appear in a container's log of the new pod.
    type: dict
    suboptions:
      container:
        description: The container whose log is read (an init container's too).
        type: str
        required: true
      pattern:
        description:
          - A Python regular expression (multiline). The last match is returned in the row's C(log) (its first
            line, and its named groups, such as C((?P<version>...))).
        type: str
        required: true
      expect:
        description:
          - Named group to the value it must have, such as C({version - 535.104.05}); a different value fails the
            node, naming both.
        type: dict
  verify_pod:
    description:
      - A pod run on each node once its checks passed, then deleted. C(nodeName) and C(restartPolicy=Never) are set
        here; its name is O(verify_pod.name_prefix) and the node's name.
    type: dict
    suboptions:
      template:
        description: The Pod manifest (C(metadata), C(spec)).
        type: dict
        required: true
      namespace:
        description: Where it runs; the DaemonSet's namespace when omitted.
        type: str
      name_prefix:
        description: Prefix of its name.
        type: str
        default: gpuops-verify
      expected_gpus:
        description:
          - Node name to the GPU UUIDs the node has (from M(gpuops.fleet.gpu_uuid_facts)). When given, the pod's
            termination message must list exactly them (or O(verify_pod.requested) of them).
        type: dict
      requested:
        description: The pod asks for this many GPUs, not all of the node's.
        type: int
      must_see:
        description:
          - Node name to the GPU UUIDs the pod must be given (a remediated GPU). On such a node the pod asks for every
            GPU of O(verify_pod.resource) that no pod holds (allocatable less what the node's pods that have not ended
            ask for; kubelet gives a pod no GPU by name, and the remediated GPU is free once its pods were drained), and
            it passes when it Succeeded and saw each of them. No free GPU fails the node, naming them.
        type: dict
      resource:
        description:
          - The GPU resource whose limit in the first container is set to O(verify_pod.requested), or to the number
            of the node's GPUs in O(verify_pod.expected_gpus).
        type: str
        default: nvidia.com/gpu
      timeout:
        description: Seconds a batch waits for its verification pods to finish.
        type: int
        default: 300
  check_only:
    description:
      - Delete nothing anywhere; check each node (O(nodes)) with the pod of the DaemonSet it runs, current or not
        (its rows say V(ready) or V(failed)). For a verification pod on nodes repaired by other means.
    type: bool
    default: false
  verify_current:
    description:
      - Also run the checks on nodes already current (nothing is deleted there; their rows say V(ready)). For a
        DaemonSet just created, whose pods are all current from the start.
    type: bool
    default: false
  restart:
    description:
      - Recreate the pods on O(nodes) even where they are current, then run the checks. The NVIDIA device plugin marks a
        GPU Healthy again only in a new process (k8s-device-plugin#1014), so a GPU remediation recreates the node's plugin
        pod this way (the same deletion, wait, allocatable and verification pod as a rollout). Requires O(nodes).
    type: bool
    default: false
    version_added: 0.4.0
  planned_template:
    description:
      - In check mode, the pod template the DaemonSet would get (the dry-run result of the apply). When given, every
        pod is planned for replacement and the plan names this template's images.
    type: dict
  describe_container:
    description: The container whose image tags the plan shows (C(from -> to)); the first container when omitted.
    type: str
requirements:
  - kubernetes (Python client)
notes:
  - API calls per node, measured on the simulated fleet (C(benchmarks/device_plugin_rollout.py)) - one delete, one
    watch request of its Node (with O(resource)) and a share of one watch request per batch for the pods; a log check
    adds one read, a verification pod a create, a delete and its share of a watch.
seealso:
  - module: kubernetes.core.k8s_drain
  - module: gpuops.fleet.gpu_uuid_facts
"""

EXAMPLES = r"""
- name: Apply the device-plugin DaemonSet (updateStrategy OnDelete)
  kubernetes.core.k8s:
    state: present
    src: nvidia-device-plugin.yml

- name: Roll it node by node; each node must register its GPUs again
  gpuops.fleet.daemonset_rollout:
    namespace: kube-system
    name: nvidia-device-plugin-daemonset
    batch_size: 2
    max_failed_nodes: 0
    resource: nvidia.com/gpu
  register: rollout

- name: Driver installer - the installer's init container must log the driver version
  gpuops.fleet.daemonset_rollout:
    namespace: kube-system
    name: nvidia-driver-installer
    require_init_completed: true
    verify_current: true
    log_check:
      container: nvidia-driver-installer
      pattern: 'Verified installation of driver version (?P<version>[0-9.]+)'
"""

RETURN = r"""
rows:
  description: One row per node that was (or would be) rolled; nodes already current have none.
  returned: always
  type: list
  elements: dict
  sample:
    - node: gpu-node-7
      status: updated
      old_pod: nvidia-device-plugin-daemonset-x2k9d
      new_pod: nvidia-device-plugin-daemonset-7mqlp
      revision: 6d9f8c7b5
      seconds: 6.2
      reason: null
      gpus: 8/8
      verify: ok
      log: null
current:
  description: Nodes already on the current revision (skipped).
  returned: always
  type: list
  elements: str
updated:
  description: Nodes whose old pod was deleted and whose new pod passed.
  returned: always
  type: list
  elements: str
ready:
  description: Nodes where nothing was deleted and the current pod passed (a new DaemonSet, O(verify_current)).
  returned: always
  type: list
  elements: str
failed_nodes:
  description: Nodes that failed a check (not C(failed), which would fail the task; the task succeeds and the caller decides).
  returned: always
  type: list
  elements: str
not_started:
  description: Nodes left as they were because the rollout stopped.
  returned: always
  type: list
  elements: str
stopped:
  description: Whether more than O(max_failed_nodes) nodes failed.
  returned: always
  type: bool
batches:
  description: The planned batches (node names).
  returned: always
  type: list
  elements: list
lines:
  description: The rows as lines (C(node - status, GPUs a/c, verify ok (seconds) - reason)).
  returned: always
  type: list
  elements: str
plan:
  description: The plan as lines (C(batch N - node - from -> to (delete pod))).
  returned: always
  type: list
  elements: str
revision:
  description: The DaemonSet's current ControllerRevision (C(hash), C(number), C(name)); null in check mode with O(planned_template).
  returned: always
  type: dict
api_calls:
  description: Requests this module made to the API server.
  returned: always
  type: int
msg:
  description: One sentence on the outcome.
  returned: always
  type: str
"""

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_module import api_client, k8s_module, run
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.rollout import runner


ARGUMENT_SPEC = dict(
    namespace=dict(type="str", required=True),
    name=dict(type="str", required=True),
    nodes=dict(type="list", elements="str"),
    batch_size=dict(type="int", default=1),
    max_failed_nodes=dict(type="int", default=0),
    pod_timeout=dict(type="int", default=300),
    resource_timeout=dict(type="int", default=120),
    observe_timeout=dict(type="int", default=60),
    crashloop_restarts=dict(type="int", default=3),
    require_init_completed=dict(type="bool", default=False),
    resource=dict(type="str"),
    log_check=dict(type="dict", options=dict(container=dict(type="str", required=True), pattern=dict(type="str", required=True),
                                             expect=dict(type="dict"))),
    verify_pod=dict(type="dict", options=dict(
        template=dict(type="dict", required=True), namespace=dict(type="str"),
        name_prefix=dict(type="str", default="gpuops-verify"), expected_gpus=dict(type="dict"),
        requested=dict(type="int"), must_see=dict(type="dict"), resource=dict(type="str", default="nvidia.com/gpu"),
        timeout=dict(type="int", default=300))),
    verify_current=dict(type="bool", default=False),
    check_only=dict(type="bool", default=False),
    restart=dict(type="bool", default=False),
    planned_template=dict(type="dict"),
    describe_container=dict(type="str"),
    allow_rolling_update=dict(type="bool", default=False),
)


def main():
    module = k8s_module(ARGUMENT_SPEC)
    p = module.params
    made = []

    def work():
        runner.check_params(p)
        made.append(runner.DaemonSetApi(api_client(module), p, module.check_mode))
        return runner.roll(made[0], p, module.check_mode)

    module.exit_json(**run(module, work, extra=lambda: {"api_calls": made[0].api_calls if made else 0}))


if __name__ == "__main__":
    main()
