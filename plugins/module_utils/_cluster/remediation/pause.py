# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the pause of a quarantined, drained node for a reset (module gpu_quarantine,
``state: paused`` and ``unpaused``).

**Paused**: the pause labels (default ``gpuops.fleet/gpu-maintenance=true``, which the collection's device plugin and
dcgm-exporter DaemonSets exclude) with their previous values kept in the node's ledger entry first, then a watch until no pod
of ``pause_pods`` runs on the node: NVML's clients gone, so a reset can run. **Unpaused**: the labels back as they were
(removed where there was none); the DaemonSets start their pods again, which is how the device plugin marks a GPU Healthy
again. A pause restores only its own keys: what it changed is the ledger's, never the node's word."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_watch import Watcher
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.pods import active
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import marks, states
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.session import QuarantineError
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import check_value
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

# The label that takes the NVML clients' DaemonSets off a node for a reset (the collection's device_plugin and
# gpu_monitoring DaemonSets exclude it; on GPU Operator nodes its nvidia.com/gpu.deploy.<component>=false labels do that)
MAINTENANCE_LABEL = "gpuops.fleet/gpu-maintenance"


def check_pause(p):
    labels = p.get("pause_labels") or {}
    if not labels:
        raise ParameterError("pause_labels", "name at least one label that takes the NVML clients' pods off the node")
    for key, value in labels.items():
        check_value("pause_labels", key, "label_key")
        check_value("pause_labels.%s" % key, str(value), "label_value")
    for i, selector in enumerate(p.get("pause_pods") or ()):
        if not isinstance(selector, dict) or not selector:
            raise ParameterError("pause_pods[%d]" % i, "expected the matchLabels of the pods that must leave the node, got %r" % (selector,))
        for key, value in selector.items():
            check_value("pause_pods[%d]" % i, key, "label_key")
            check_value("pause_pods[%d].%s" % (i, key), str(value), "label_value")
    return dict((k, str(v)) for k, v in labels.items())


def matching(pods, selectors):
    """The pods of ``selectors`` that may still hold NVML: every one not ended, a terminating one included (its containers
    run until kubelet stops them, terminationGracePeriodSeconds at most; kubelet then removes the pod). The real kubelet
    node showed it: a pause that took the plugin's terminating pod for gone reset a GPU its process still held."""
    found = []
    for pod in pods:
        labels = marks.meta(pod).get("labels") or {}
        if any(all(labels.get(k) == str(v) for k, v in sel.items()) for sel in selectors) and active(pod):
            found.append("%s/%s" % (marks.meta(pod).get("namespace"), marks.meta(pod).get("name")))
    return sorted(found)


def pause(s):
    """``state: paused`` (``s``: a session.Session): the pause labels on a quarantined node (their previous values kept in its
    ledger entry first), then a watch until no pod of ``pause_pods`` runs there: the NVML clients a reset needs gone."""
    p = s.p
    labels_wanted = check_pause(p)
    node, dummy, current = s.read()
    if current is None or current["step"] != states.DRAINED:
        raise QuarantineError("node %s is not quarantined and drained by gpu_quarantine (the ledger's step %s): pause only a drained "
                              "node; nothing was changed" % (p["node"], (current or {}).get("step")))
    labels = marks.meta(node).get("labels") or {}
    changes = dict((k, v) for k, v in labels_wanted.items() if labels.get(k) != v)
    previous = current.get("paused_labels")
    if previous is None:
        # the pause's own keys only, with what the node had: a release restores these and nothing else
        previous = dict((k, labels.get(k) if isinstance(labels.get(k), str) else None) for k in labels_wanted)
    result = {"node": p["node"], "labels": labels_wanted, "previous_labels": previous, "waited_for": []}
    if s.check_mode:
        return dict(result, changed=bool(changes), msg="would label %s %s" % (p["node"], labels_wanted))
    if current.get("paused_labels") is None:
        # the ledger first: a pause whose labels were written is always one whose previous values are known
        s.ledger_set({"paused_labels": previous})
    if changes:
        s.patch_node(node, annotations={marks.REMEDIATION: marks.mirror(dict(current, paused_labels=previous))}, labels=changes)
    selectors = p.get("pause_pods") or []
    if selectors:
        watch = Watcher(s.api.list_pod_for_all_namespaces, field_selector="spec.nodeName=%s" % p["node"])
        watch.wait(lambda w: not matching(w.values(), selectors), s.clock() + p["pause_timeout"])
        left = matching(watch.values(), selectors)
        result["waited_for"] = [dict(x) for x in selectors]
        if left:
            raise QuarantineError("node %s is labelled %s, and %s still run there after pause_timeout: does their DaemonSet exclude the "
                                  "label? (the collection's device_plugin and gpu_monitoring roles exclude %s=true)"
                                  % (p["node"], labels_wanted, ", ".join(left), MAINTENANCE_LABEL), dict(result, changed=bool(changes)))
    return dict(result, changed=bool(changes), msg="labelled %s %s; the NVML clients' pods are gone" % (p["node"], labels_wanted)
                if changes else "%s is paused already" % p["node"])


def unpause(s):
    """``state: unpaused``: the labels a pause changed back to the previous values its ledger entry keeps (removed where there
    was none); then the entry forgets them (a killed run restores them again, the same values)."""
    node, dummy, current = s.read()
    labels = dict((current or {}).get("paused_labels") or {})
    result = {"node": s.node, "restored_labels": labels}
    if not labels:
        return dict(result, changed=False, msg="%s is not paused" % s.node)
    if not s.check_mode:
        s.patch_node(node, annotations={marks.REMEDIATION: marks.mirror(dict(current, paused_labels=None))}, labels=labels)
        s.ledger_set({"paused_labels": None})
    return dict(result, changed=True, msg="%s %s's labels %s" % ("would restore" if s.check_mode else "restored", s.node, labels))
