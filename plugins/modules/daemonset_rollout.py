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
  - kubernetes.core.k8s_auth_options
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

import time

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import rollout as rollout
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_module import api_client, k8s_module, run
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_watch import Watcher

try:
    from kubernetes.client.api import apps_v1_api, core_v1_api
    from kubernetes.client.exceptions import ApiException
except ImportError:
    # AnsibleK8SModule reports a missing kubernetes library itself
    pass


class Rollout(object):
    """The cluster side: reads, deletes, and the watches the waits ride on."""

    def __init__(self, client, params, check_mode):
        self.client = client
        self.core = core_v1_api.CoreV1Api(client)
        self.apps = apps_v1_api.AppsV1Api(client)
        self.p = params
        self.check_mode = check_mode
        self.calls = 0
        self.watchers = []

    def watcher(self, list_fn, *args, **kwargs):
        self.watchers.append(Watcher(self.client, list_fn, *args, **kwargs))
        return self.watchers[-1]

    @property
    def api_calls(self):
        return self.calls + sum(w.calls for w in self.watchers)

    def daemonset(self):
        namespace, name = self.p["namespace"], self.p["name"]
        watch = self.watcher(self.apps.list_namespaced_daemon_set, namespace, field_selector="metadata.name=%s" % name)
        found = watch.list()
        if not found:
            return None
        if not rollout.observed(found[0]) and not self.check_mode:
            ok = watch.wait(lambda w: any(rollout.observed(d) for d in w.values()), time.monotonic() + self.p["observe_timeout"])
            if not ok:
                raise rollout.RolloutError("the DaemonSet controller did not observe %s/%s's generation within %d s (observe_timeout)"
                                           % (namespace, name, self.p["observe_timeout"]))
        return watch.values()[0]

    def revision(self, daemonset, selector):
        self.calls += 1
        listed = self.apps.list_namespaced_controller_revision(self.p["namespace"], label_selector=selector)
        revisions = [self.client.sanitize_for_serialization(r) for r in listed.items]
        return rollout.current_revision(daemonset, revisions)

    def node_watch(self, name):
        """A watch of one Node that starts with its current state (one request, no list).

        resourceVersion "0" starts the watch with a synthetic ADDED event for the object as the
        API server's watch cache has it now; the state from the start of the rollout (allocatable
        from before the old pod was deleted) is never what is checked.
        """
        watch = self.watcher(self.core.list_node, field_selector="metadata.name=%s" % name)
        watch.resource_version = "0"
        return watch

    def nodes(self):
        self.calls += 1
        return [self.client.sanitize_for_serialization(n) for n in self.core.list_node().items]

    def delete(self, namespace, name):
        self.calls += 1
        try:
            self.core.delete_namespaced_pod(name, namespace)
        except ApiException as exc:
            if exc.status != 404:  # already gone: the wait finds its successor
                raise

    def log(self, namespace, pod, container):
        self.calls += 1
        return self.core.read_namespaced_pod_log(pod, namespace, container=container)


def _pods_of(daemonset, watch, node):
    uid = (daemonset.get("metadata") or {}).get("uid")
    return [p for p in watch.values() if (p.get("spec") or {}).get("nodeName") == node and rollout.owned_by(p, uid)]


def _new_pod(daemonset, watch, node, revision_hash):
    """The node's live pod of the DaemonSet on ``revision_hash`` (None: any live pod)."""
    for pod in _pods_of(daemonset, watch, node):
        if (revision_hash is None or rollout.pod_is_current(pod, revision_hash)) and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            return pod
    return None


def run_batch(cluster, daemonset, revision_hash, batch, rows, pods, before):
    """Delete a batch's old pods, then wait for and check each node. Fills ``rows`` (by node)."""
    p = cluster.p
    started = time.monotonic()
    for step in batch:
        for name in step["old_pods"]:
            cluster.delete(p["namespace"], name)
    pending = [s["node"] for s in batch]

    checking = set(s["node"] for s in batch if s["action"] == "check")

    def state(node):
        pod = _new_pod(daemonset, pods, node, None if node in checking else revision_hash)
        if pod is None:
            return {"name": None, "ready": False, "done": False, "failed": False,
                    "reason": "no pod of the DaemonSet%s on the node (does the DaemonSet select it?)"
                              % ("" if node in checking else " at its current revision")}
        return rollout.pod_state(pod, p["require_init_completed"], p["crashloop_restarts"])

    pods.wait(lambda w: all(state(n)["done"] for n in pending), time.monotonic() + p["pod_timeout"])
    for node in pending:
        row, now = rows[node], state(node)
        row.update(new_pod=now["name"], revision=revision_hash)
        if not now["ready"]:
            row.update(status="failed", reason="the %s pod is not Ready%s (%s)" % (
                "node's" if node in checking else "new", "" if now["failed"] else " after %d s" % p["pod_timeout"], now["reason"]))
    pending = [n for n in pending if rows[n]["status"] != "failed"]

    if p["resource"] and pending:
        resource = p["resource"]
        deadline = time.monotonic() + p["resource_timeout"]
        for node in pending:
            watch = cluster.node_watch(node)
            watch.wait(lambda w, node=node: rollout.node_resource(w.objects.get((None, node)), resource, before.get(node))["ok"], deadline)
            check = rollout.node_resource(watch.objects.get((None, node)), resource, before.get(node))
            rows[node]["gpus"] = check["text"]
            if not check["ok"]:
                rows[node].update(status="failed", reason=check["reason"])
        pending = [n for n in pending if rows[n]["status"] != "failed"]

    if p["log_check"] and pending:
        expect = p["log_check"]["expect"]
        pattern = rollout.check_pattern("log_check.pattern", p["log_check"]["pattern"], expect)
        for node in pending:
            try:
                text = cluster.log(p["namespace"], rows[node]["new_pod"], p["log_check"]["container"])
            except ApiException as exc:
                rows[node].update(status="failed", reason="reading the log of %s in %s failed: %s %s"
                                  % (p["log_check"]["container"], rows[node]["new_pod"], exc.status, exc.reason))
                continue
            check = rollout.log_check(text, pattern, expect)
            rows[node]["log"] = {"line": check["line"], "groups": check["groups"]}
            if not check["ok"]:
                rows[node].update(status="failed", reason="%s's log: %s" % (p["log_check"]["container"], check["reason"]))
        pending = [n for n in pending if rows[n]["status"] != "failed"]

    if p["verify_pod"] and pending:
        verify(cluster, daemonset, pending, rows)
    for step in batch:
        row = rows[step["node"]]
        row["seconds"] = round(time.monotonic() - started, 1)
        if row["status"] == "not_started":
            row["status"] = "updated" if step["action"] == "replace" else "ready"


def verify(cluster, daemonset, pending, rows):
    """A verification pod per node of the batch: create, watch until finished, compare, delete, watch gone."""
    spec = cluster.p["verify_pod"]
    namespace = spec.get("namespace") or cluster.p["namespace"]
    run = "%x" % int(time.time() * 1000)
    label = "gpuops.fleet/verify-run"
    watch = cluster.watcher(cluster.core.list_namespaced_pod, namespace, label_selector="%s=%s" % (label, run))
    watch.list()
    names = {}
    expected = spec.get("expected_gpus")
    for node in pending:
        name = ("%s-%s" % (spec["name_prefix"], node))[:253].rstrip("-.")
        gpus = spec.get("requested")
        if gpus is None and expected is not None:
            gpus = len(expected.get(node) or ()) or None
        body = rollout.verify_pod(spec["template"], node, name, gpus, spec["resource"])
        body["metadata"].setdefault("labels", {})[label] = run
        cluster.calls += 1
        cluster.core.create_namespaced_pod(namespace, body)
        names[node] = name

    def finished(w):
        return all(((w.objects.get((namespace, n)) or {}).get("status") or {}).get("phase") in ("Succeeded", "Failed")
                   for n in names.values())

    watch.wait(finished, time.monotonic() + spec["timeout"])
    for node, name in names.items():
        pod = watch.objects.get((namespace, name))
        result = rollout.verify_result(pod, (expected or {}).get(node, []) if expected is not None else None, spec.get("requested"))
        rows[node]["verify"] = "ok" if result["ok"] else "failed"
        rows[node]["verify_message"] = result.get("message")
        rows[node]["verify_seen"] = result.get("seen")
        if not result["ok"]:
            rows[node].update(status="failed", reason=result["reason"] or "verification pod did not finish in %d s" % spec["timeout"])
    for name in names.values():
        cluster.delete(namespace, name)
    watch.wait(lambda w: not any((namespace, n) in w.objects for n in names.values()), time.monotonic() + spec["timeout"])


def main():
    module = k8s_module(dict(
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
            requested=dict(type="int"), resource=dict(type="str", default="nvidia.com/gpu"),
            timeout=dict(type="int", default=300))),
        verify_current=dict(type="bool", default=False),
        check_only=dict(type="bool", default=False),
        planned_template=dict(type="dict"),
        describe_container=dict(type="str"),
        allow_rolling_update=dict(type="bool", default=False),
    ))
    p = module.params
    made = []

    def work():
        rollout.check_int("max_failed_nodes", p["max_failed_nodes"], 0)
        if p["nodes"] is not None and not p["nodes"]:
            raise ParameterError("nodes", "is empty, so nothing would be rolled: name the nodes, or omit nodes to roll every node with a pod of the DaemonSet")
        for field in ("pod_timeout", "resource_timeout", "observe_timeout", "crashloop_restarts"):
            rollout.check_int(field, p[field], 1)
        if p["log_check"]:
            rollout.check_pattern("log_check.pattern", p["log_check"]["pattern"], p["log_check"]["expect"])
        made.append(Rollout(api_client(module), p, module.check_mode))
        return roll(made[0], p, module.check_mode)

    module.exit_json(**run(module, work, extra=lambda: {"api_calls": made[0].api_calls if made else 0}))


def roll(cluster, p, check_mode):
    daemonset = cluster.daemonset()
    if daemonset is None:
        if check_mode and p["planned_template"]:
            daemonset = {"metadata": {"namespace": p["namespace"], "name": p["name"]}, "spec": {"template": p["planned_template"]}}
            empty = rollout.plan(daemonset, None, [], p["nodes"] or [], p["batch_size"])
            out = rollout.summary([], empty, False, p["max_failed_nodes"], True)
            out.update(changed=True, plan=["CHECK MODE: nothing is deleted", "the DaemonSet would be created; its pods are not rolled"],
                       lines=[], revision=None, api_calls=cluster.api_calls)
            return out
        raise rollout.RolloutError("DaemonSet %s/%s not found" % (p["namespace"], p["name"]))
    selector = rollout.selector_string(((daemonset.get("spec") or {}).get("selector") or {}).get("matchLabels"))
    planned = check_mode and p["planned_template"]
    strategy = ((daemonset.get("spec") or {}).get("updateStrategy") or {}).get("type") or "RollingUpdate"
    if strategy != "OnDelete" and not (p["allow_rolling_update"] or p["check_only"] or planned):
        raise rollout.RolloutError(
            "DaemonSet %s/%s has updateStrategy %s: its controller replaces the pods itself, and deleting them here would race it. "
            "Set updateStrategy OnDelete (the collection's roles do), or allow_rolling_update: true" % (p["namespace"], p["name"], strategy))
    revision = None if planned else cluster.revision(daemonset, selector)
    if planned:
        daemonset = dict(daemonset, spec=dict(daemonset.get("spec") or {}, template=p["planned_template"]))
    pods = cluster.watcher(cluster.core.list_namespaced_pod, p["namespace"], label_selector=selector)
    uid = (daemonset.get("metadata") or {}).get("uid")
    owned = [pod for pod in pods.list() if rollout.owned_by(pod, uid)]
    the_plan = rollout.plan(daemonset, revision["hash"] if revision else None, owned, p["nodes"], p["batch_size"],
                            assume_changed=bool(planned), verify_current=p["verify_current"], check_only=p["check_only"])
    waiting = [s["node"] for s in the_plan["steps"] if s["action"] in ("wait", "check") and s["node"] not in rollout.pod_nodes(owned)]
    if waiting:
        missing = sorted(set(waiting) - set((n.get("metadata") or {}).get("name") for n in cluster.nodes()))
        if missing:
            raise rollout.RolloutError("no such node in the cluster: %s (nodes); nothing was deleted" % ", ".join(missing))
    lines = rollout.plan_lines(the_plan, p["describe_container"], check_mode)
    rows = dict((s["node"], rollout.new_row(s)) for s in the_plan["steps"])
    stopped = False
    if check_mode:
        for row in rows.values():
            row["status"] = "planned"
    elif the_plan["steps"]:
        before = rollout.capacity_before(cluster.nodes(), p["resource"]) if p["resource"] else {}
        for batch in the_plan["batches"]:
            run_batch(cluster, daemonset, revision["hash"], batch, rows, pods, before)
            if len([r for r in rows.values() if r["status"] == "failed"]) > p["max_failed_nodes"]:
                stopped = True
                break
    ordered = [rows[s["node"]] for s in the_plan["steps"]]
    out = rollout.summary(ordered, the_plan, stopped, p["max_failed_nodes"], check_mode)
    deleted = any(s["action"] == "replace" for s in the_plan["steps"])
    out.update(changed=deleted and (check_mode or any(r["status"] != "not_started" for r in ordered)),
               plan=lines, lines=rollout.report_lines(ordered), revision=revision, api_calls=cluster.api_calls)
    return out


if __name__ == "__main__":
    main()
