# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpuops.fleet.gpu_nodes: an ansible-rulebook event source of the GPU Nodes' health.

It lists the GPU Nodes, then watches them from the list's resourceVersion (bookmarks on), and puts typed events on the
rulebook's queue, each under the key ``gpuops``: ``startup`` (once per start: every node unhealthy now), ``gpu_unallocatable``
and ``gpu_restored`` (a GPU resource's allocatable below, or back towards, its capacity: the device plugin marked a GPU
Unhealthy or Healthy), ``node_rebooted`` (a new bootID), ``node_not_ready`` and ``node_ready``, ``remediation_step`` (our
quarantine annotation's step), ``node_removed``, and ``heartbeat`` (every ``heartbeat`` seconds). Each carries the node,
what changed (before and after), the resourceVersion and the time observed, and ``meta.hosts`` (the node: ansible-rulebook
limits a playbook to it). ``gpu_faults`` gathers the GPU faults of a short window (``settle_seconds``, 5) into one event
(``nodes``, ``meta.hosts``: one plan run for a storm), each node at most once per ``flap_seconds`` (600; a node of the window
run more recently is ``throttled``; ``gpu_faults_throttled`` where all were). The window is the ruleset's: the alerts of
``gpuops.fleet.alertmanager`` in the same ruleset add to it, so one fault seen by both runs once. ``node_reboots`` gathers
the ``node_rebooted`` events the same way (a rack that power-cycles is one checkpoint run, checkpoint_repair.yml), less the
nodes our remediation rebooted (they carry its taint: the remediation verifies them).

A watch that ends is resumed from the last resourceVersion; ``410 Gone`` makes it list again, and so does a reconnect after
an error (capped backoff, ``backoff_max``); a list emits exactly what changed while away, as every event is a change of
the node's state, never a notification as such (module_utils/_cluster/events/nodes.py), so none is emitted twice.

Options: DOCUMENTATION below, as ansible.eda declares its sources' (the docs site's "Event sources" page is written
from it, hack/eda_docs.py); a bad option fails the source, naming it.

Example::

    sources:
      - gpuops.fleet.gpu_nodes:
          label_selector: nvidia.com/gpu.present=true
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
short_description: Typed events of the GPU Nodes' health, from a watch of the Kubernetes API
description:
  - Lists the GPU Nodes, then watches them from the list's resourceVersion (bookmarks on), and puts typed events on the
    rulebook's queue, each under the key C(gpuops) with C(kind), the node, what changed (before and after), the
    resourceVersion and the time observed, and C(meta.hosts) (the node; ansible-rulebook limits a playbook to it).
  - "Kinds: C(startup) (once per start: every node unhealthy now), C(gpu_unallocatable) and C(gpu_restored) (a GPU resource's
    allocatable below, or back towards, its capacity), C(node_rebooted) (a new bootID), C(node_not_ready), C(node_ready),
    C(remediation_step) (the step our quarantine's annotation shows), C(node_removed), C(node_unreadable) (a Node whose
    data could not be read: that node only, the watch goes on) and C(heartbeat)."
  - C(gpu_faults) gathers the GPU faults of a short window (O(settle_seconds)) into one event for all its nodes, each node
    at most once per O(flap_seconds) (C(gpu_faults_throttled) where all were); a node still unhealthy after its window is
    offered again with a capped backoff (O(retry_max_seconds)). The window is the ruleset's, shared with
    M(gpuops.fleet.alertmanager)'s alerts. C(node_reboots) gathers reboots the same way, less the nodes our remediation
    rebooted (they carry its taint).
  - C(remediation_due) (every remediation finishes on its own) offers again a node our quarantine holds at a waiting step
    (its ledger entry in O(ledger_namespace), our taint on the Node), with C(why) - V(pods_gone) (the pods its entry
    waits for are gone), V(deadline) (a C(delete_after_timeout) pod's time has come) or V(drain_retry) (a drain a
    PodDisruptionBudget blocked, tried again a minute later, then twice as long after each offer, at most
    O(retry_max_seconds)) - and C(meta.hosts), the node. Checked every O(due_seconds) from the ledger and the pods the API
    lists on the node, never from what a node writes of itself.
  - A watch that ends is resumed; C(410 Gone) and a reconnect after an error list again (capped backoff, O(backoff_max));
    a list emits exactly what changed while away, so no event is emitted twice.
  - It needs C(list) and C(watch) on nodes, C(list) on pods and C(get) on the ledger's ConfigMap, nothing else
    (docs/rbac/gpu-nodes-events.yml). A bad option fails the source, naming it.
options:
  kubeconfig:
    description: Path of a kubeconfig file; none of the connection options, the in-cluster ServiceAccount or C(~/.kube/config).
    type: str
  context:
    description: The kubeconfig's context.
    type: str
  host:
    description: The API server's URL.
    type: str
  api_key:
    description: A bearer token for the API server.
    type: str
  validate_certs:
    description: Whether the API server's certificate is verified.
    type: bool
    default: true
  ca_cert:
    description: Path of the CA bundle that signs the API server's certificate.
    type: str
  gpu_resources:
    description: The GPU resources of a Node's capacity and allocatable (names or shell patterns; a comma-separated string too).
    type: list
    elements: str
    default: [nvidia.com/gpu, nvidia.com/mig-*, aliyun.com/gpu-mem]
  label_selector:
    description: A label selector of the Nodes to watch.
    type: str
    default: ""
  heartbeat:
    description: Seconds between C(heartbeat) events (1 to 3600).
    type: int
    default: 60
  backoff_max:
    description: The cap, in seconds, of the backoff between reconnects (1 to 600); the first retries are soon.
    type: int
    default: 30
  watch_seconds:
    description: Seconds a watch request lasts before it is resumed (10 to 1800).
    type: int
    default: 300
  ledger_namespace:
    description: The namespace of the remediation's ledger (the ConfigMap C(gpuops-remediation-ledger); the playbooks'
      C(gpuops_gpu_health_namespace)).
    type: str
    default: gpuops-system
  due_seconds:
    description: Seconds between two checks of the waiting remediations (C(remediation_due); 0 to 3600, 0 turns it off).
    type: int
    default: 30
  settle_seconds:
    description: Seconds the fault window gathers faults before one C(gpu_faults) event (1 to 300); shared by the ruleset's sources.
    type: int
    default: 5
  flap_seconds:
    description: Seconds a node of a C(gpu_faults) event is not offered again (0 to 86400); shared by the ruleset's sources.
    type: int
    default: 600
  retry_max_seconds:
    description:
      - The cap, in seconds, of the backoff with which a node still unhealthy after its flap window is offered again (0 to
        86400; 0, never again); shared by the ruleset's sources.
    type: int
    default: 3600
  alertmanager:
    description:
      - The options of an Alertmanager receiver this source runs beside its Node watch (every option of
        M(gpuops.fleet.alertmanager) but the fault window's, which are this source's), so one source owns the fault window
        that the withheld GPUs and the fault alerts add to.
      - Until the Node watch has listed the GPU Nodes, an alert is answered 503 (Alertmanager sends it again) and C(GET /readyz)
        answers 503; then C(ready). An alert is never judged against a watch that has not listed yet.
      - Without it, the window is the ruleset's, shared with a M(gpuops.fleet.alertmanager) source of the same ruleset (the
        older form; it relies on how ansible-rulebook 1.3 hands each source its queue, so prefer this option).
    type: dict
  leader_election:
    description:
      - One acting activation of a rulebook run twice (an HA pair, or a restarted activation while the old process still
        runs) - the activations elect a leader on a C(coordination.k8s.io) Lease, as Kubernetes' controllers do; only the
        leader watches, emits and receives alerts. The standby takes over within C(lease_seconds) plus C(renew_seconds) of
        the leader's death (at once where the leader stops and gives the Lease up), begins with the C(startup) event, and
        never runs within the flap window a window the leader ran (the leader writes its window's runs into the Lease). A
        leader that cannot renew for two thirds of C(lease_seconds) ends the source (its activation is restarted as a
        standby).
      - "Keys: C(enabled) (default true), C(lease) (the Lease's name, default C(gpuops-events-leader)), C(namespace) (default
        O(ledger_namespace)), C(identity) (default the host name and process id), C(lease_seconds) (3 to 300, default 10),
        C(renew_seconds) (1 to 60, at most half of C(lease_seconds), default 2)."
      - Needs C(get), C(create) and C(update) on C(leases.coordination.k8s.io) in its namespace (docs/rbac/gpu-nodes-events.yml).
    type: dict
"""

EXAMPLES = r"""
- name: GPU faults of the GPU Nodes and Alertmanager's GPU alerts, one fault window, one playbook run per storm
  hosts: all
  sources:
    - gpuops.fleet.gpu_nodes:
        label_selector: nvidia.com/gpu.present=true
        settle_seconds: 5
        alertmanager:
          host: 0.0.0.0
          port: 5000
          token_file: /run/secrets/alertmanager-token
  rules:
    - name: Remediate the faulty GPU nodes
      condition: event.gpuops.kind == "gpu_faults"
      action:
        run_playbook:
          name: gpuops.fleet.gpu_remediation
"""

import asyncio
import os
import sys
import threading


def _checkout(root):
    """Make ``ansible_collections.gpuops.fleet`` the git checkout ``root`` (its galaxy.yml names gpuops.fleet), beside the
    installed collections (kubernetes.core): the quick look below, run from a checkout."""
    import types

    try:
        import ansible_collections  # the installed collections' namespace package, kept
    except ImportError:
        ansible_collections = sys.modules["ansible_collections"] = types.ModuleType("ansible_collections")
        ansible_collections.__path__ = []
    for name, path in (("ansible_collections.gpuops", []), ("ansible_collections.gpuops.fleet", [root])):
        module = sys.modules[name] = types.ModuleType(name)
        module.__path__ = path


def _import():
    """The collection's code: from the installed collections; else from the tree this file is in: an installed collection
    (ansible-rulebook loads a source by its path: the folder that holds ansible_collections/ is seven folders above this
    file's), or a git checkout (four folders above, its galaxy.yml naming gpuops.fleet)."""
    try:
        from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import options, watch, webhook, window
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        root = os.path.abspath(os.path.join(here, *[os.pardir] * 4))
        if os.path.basename(os.path.dirname(root)) == "gpuops" and os.path.basename(os.path.dirname(os.path.dirname(root))) == "ansible_collections":
            sys.path.insert(0, os.path.abspath(os.path.join(here, *[os.pardir] * 7)))
        elif _is_checkout(root):
            _checkout(root)
        from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import options, watch, webhook, window
    return options, watch, webhook, window


def _is_checkout(root):
    try:
        with open(os.path.join(root, "galaxy.yml"), encoding="utf-8") as handle:
            text = handle.read(65536)
    except OSError:
        return False
    return "\nnamespace: gpuops\n" in "\n" + text and "\nname: fleet\n" in "\n" + text


options, watch, webhook, windows = _import()
follow = watch.follow  # the Node watch (module_utils/_cluster/events/watch.py), in a thread


async def main(queue, args):
    """ansible-rulebook's entry point: the Node watch, and with ``alertmanager`` the alerts receiver beside it, one fault window
    owned by this source. Without ``alertmanager`` the window is the ruleset's (``window.shared``): the older form, where a
    ``gpuops.fleet.alertmanager`` source of the same ruleset adds its alerts to it. With ``leader_election``, all of it only
    once this activation holds the Lease (events/leader.py); it ends when the Lease is lost."""
    checked = options.check_nodes(args, read=webhook.read)
    receiver = checked["alertmanager"] if checked["alertmanager"] is not None and checked["alertmanager"]["enabled"] else None
    if receiver is not None:
        window = windows.FaultWindow(checked["settle_seconds"], checked["flap_seconds"], again_max=checked["retry_max_seconds"])
    else:
        window = windows.shared(queue, checked["settle_seconds"], checked["flap_seconds"], checked["retry_max_seconds"])
    window.expect_watch()  # the alerts wait for this watch's first list (answered 503 until then, sent again)
    loop = asyncio.get_running_loop()
    stop = threading.Event()
    elector = await _lead(checked, window) if checked["leader_election"] is not None else None

    def emit(event):
        if elector is not None and not elector.leading:
            return  # the Lease is lost: nothing more from this activation
        asyncio.run_coroutine_threadsafe(queue.put(event), loop).result(timeout=60)

    tasks = [asyncio.ensure_future(asyncio.to_thread(follow, checked, emit, stop, window=window))]
    if receiver is not None:
        tasks.append(asyncio.ensure_future(webhook.serve(receiver, queue.put, window)))
    if elector is not None:
        tasks.append(asyncio.ensure_future(_renew(elector, window, checked["leader_election"]["renew_seconds"])))
    try:
        done, dummy = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()  # the receiver's error (a port in use), a lost Lease: ends the source, named
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if elector is not None:
            await asyncio.to_thread(elector.give_up)


async def _lead(checked, window):
    """Wait until this activation holds the leader's Lease; its window seeded with what the previous leader ran."""
    import socket
    import time

    from kubernetes.client import CoordinationV1Api
    from kubernetes.client.exceptions import ApiException

    from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import leases
    from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import leader

    settings = checked["leader_election"]
    identity = settings["identity"] or ("%s-%d" % (socket.gethostname(), os.getpid()))[:253]
    lease_api = leases.Leases(CoordinationV1Api(watch.client_of(checked)), settings["namespace"], ApiException)
    elector = leader.Elector(lease_api, settings["lease"], identity, settings["lease_seconds"], settings["renew_seconds"])
    while not await asyncio.to_thread(elector.step):
        await asyncio.sleep(settings["renew_seconds"])
    window.seed(elector.handed, time.monotonic(), time.time())
    return elector


async def _renew(elector, window, every):
    """The leader's renewals, each writing what its window ran where that changed (the Lease keeps it otherwise); raises
    LeaderLost when it cannot renew in time."""
    import time

    written = None
    while True:
        await asyncio.sleep(every)
        handover = window.handover(time.monotonic(), time.time())
        renewed = await asyncio.to_thread(elector.step, handover if handover != written else None)
        if renewed and elector.error is None:
            written = handover


if __name__ == "__main__":
    # a quick look without ansible-rulebook: print the events (python gpu_nodes.py [kubeconfig]), from an installed collection
    # or a git checkout

    class _Print:
        async def put(self, event):
            print(event, flush=True)

    try:
        asyncio.run(main(_Print(), {"kubeconfig": sys.argv[1]} if len(sys.argv) > 1 else {}))
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # a bad kubeconfig, an option: one line, never a traceback
        sys.exit("gpu_nodes: %s: %s" % (type(exc).__name__, exc))
