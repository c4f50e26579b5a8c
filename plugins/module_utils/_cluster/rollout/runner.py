# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the rollout engine's API half (module daemonset_rollout).

``DaemonSetApi`` does the reads, deletes and watches (``k8s_watch.Watcher``); ``roll`` plans with
the pure half (``plan``), deletes a batch's old pods, waits on the watches for each node's new pod,
its GPUs and its log, runs the verification pod, and stops past ``max_failed_nodes``. Every cluster
role drives it through the module; the tests drive it against scripted watches (no cluster).
"""

from __future__ import annotations

import time

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.rollout import plan as rollout
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import GPU_ID, check_value
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_watch import Watcher

try:
    from kubernetes.client.api import apps_v1_api, core_v1_api
    from kubernetes.client.exceptions import ApiException
except ImportError:
    # AnsibleK8SModule reports a missing kubernetes library itself
    pass


class DaemonSetApi:
    """The cluster side: reads, deletes, and the watches the waits ride on."""

    def __init__(self, client, params, check_mode, core=None, apps=None):
        self.client = client
        self.core = core or core_v1_api.CoreV1Api(client)
        self.apps = apps or apps_v1_api.AppsV1Api(client)
        self.p = params
        self.check_mode = check_mode
        self.calls = 0
        self.watchers = []

    def watcher(self, list_fn, *args, **kwargs):
        self.watchers.append(Watcher(list_fn, *args, **kwargs))
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

    def free_gpus(self, node, resource):
        """``resource`` the node has allocatable and no pod of it holds (two requests: the Node, its pods)."""
        self.calls += 2
        pods = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node).items
        return rollout.free_gpus(self.client.sanitize_for_serialization(self.core.read_node(node)),
                                 [self.client.sanitize_for_serialization(x) for x in pods], resource)

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
    must_see = spec.get("must_see") or {}
    for node in pending:
        name = ("%s-%s" % (spec["name_prefix"], node))[:253].rstrip("-.")
        gpus = spec.get("requested")
        if node in must_see:
            # kubelet gives a pod no GPU by name: ask for every free one, the remediated GPU among them
            gpus = cluster.free_gpus(node, spec["resource"])
            if gpus < 1:
                rows[node].update(verify="failed", status="failed", reason="no %s of the node is free for the verification pod, so %s cannot be "
                                  "checked: a pod holds it, or it is not allocatable" % (spec["resource"], ", ".join(must_see[node])))
                continue
        elif gpus is None and expected is not None:
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
        result = rollout.verify_result(pod, (expected or {}).get(node, []) if expected is not None else None, spec.get("requested"),
                                       must_see.get(node))
        rows[node]["verify"] = "ok" if result["ok"] else "failed"
        rows[node]["verify_message"] = result.get("message")
        rows[node]["verify_seen"] = result.get("seen")
        if not result["ok"]:
            rows[node].update(status="failed", reason=result["reason"] or "verification pod did not finish in %d s" % spec["timeout"])
    for name in names.values():
        cluster.delete(namespace, name)
    watch.wait(lambda w: not any((namespace, n) in w.objects for n in names.values()), time.monotonic() + spec["timeout"])


def check_params(p):
    """Refuse options no rollout can honour, naming the option (before any request)."""
    rollout.check_int("max_failed_nodes", p["max_failed_nodes"], 0)
    if p["nodes"] is not None and not p["nodes"]:
        raise ParameterError("nodes", "is empty, so nothing would be rolled: name the nodes, or omit nodes to roll every node with a pod of the DaemonSet")
    for field in ("pod_timeout", "resource_timeout", "observe_timeout", "crashloop_restarts"):
        rollout.check_int(field, p[field], 1)
    if p["log_check"]:
        rollout.check_pattern("log_check.pattern", p["log_check"]["pattern"], p["log_check"]["expect"])
    if p.get("restart") and (not p["nodes"] or p["check_only"]):
        raise ParameterError("restart", "recreates the pods of the nodes named in nodes: name them, and do not combine it with check_only")
    for node, uuids in sorted(((p.get("verify_pod") or {}).get("must_see") or {}).items()):
        check_value("verify_pod.must_see", node, "dns_subdomain")
        if not isinstance(uuids, list) or not uuids or not all(isinstance(u, str) and GPU_ID.match(u) for u in uuids):
            raise ParameterError("verify_pod.must_see[%s]" % node, "%r is not a list of GPU UUIDs (GPU-...)" % (uuids,))


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
                            assume_changed=bool(planned) or bool(p.get("restart")), verify_current=p["verify_current"], check_only=p["check_only"])
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
