# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the GPU remediation plan, pure (no API calls).

From each node's health read (``gpu_health_info``), kubelet's own checkpoint entries
(``kubelet_checkpoint_info``), the API's Nodes, Pods and PodDisruptionBudgets, and the ledger
(``remediation_ledger``), it says per node what to do, to which GPUs, which pods that evicts and what
blocks it; and it applies the safety rails (``../shared/specs/gpu-health.md`` B5):

* **Pod -> GPU map from kubelet's checkpoint**, every ID form ``_node/device_ids`` knows (``GPU-<uuid>``,
  ``::<n>`` time-slicing, ``MIG-<uuid>`` joined to its GPU, gpushare ``GPU-<uuid>-_-<n>``, indexes). For
  gpushare the fake IDs kubelet checkpoints may name any GPU of the node (the plugin only counts them,
  ``_cluster/gpu_share.py``): the GPU a container really got is its AllocResp's ``NVIDIA_VISIBLE_DEVICES``,
  which wins wherever it names devices. Cross-checked with NVML's compute processes: a pod whose
  process is on a target GPU but whom the checkpoint does not give that GPU "uses the GPU outside kubelet's
  accounting", and a process of no pod is a host process: both are hard blockers.
* **Evictions by kubectl drain's rules** (``drain.pod_verdict``): a GPU-scoped reset evicts the pods on the
  target GPUs (and their NVLink peers where the verdict says so); a reboot evicts every pod of the node but
  DaemonSet and mirror pods. A pod a PDB covers whose ``status.disruptionsAllowed`` is 0 is named with its
  PDB (the eviction would answer 429 until it moves).
* **Breakers.** Capacity: at most ``max_nodes_per_run``, and at most max(``breaker_min_nodes``,
  ceil(``breaker_percent`` % of the GPU nodes in scope)) quarantined at once, ``breaker_max_nodes`` at
  most, our quarantines in flight counted. Same signal: a signal key with the driver version on
  min(``same_signal_nodes``, max(2, ceil(``same_signal_percent`` % of scope))) nodes or more, this run and
  the ledger's window together, is a fleet event: no node carrying it is touched and the breaker trips. A
  tripped breaker stays tripped (the ledger) until reset with a reason; after a reset, XIDs logged before
  it are not counted (NVSentinel#450).
* **Repeat offenders**: the same GPU remediated ``repeat_gpu`` times in 24 h, or the node ``repeat_node``
  times in 7 days (the ledger), is ``replace`` (an RMA report), never another automatic action.
"""

from __future__ import annotations

import fnmatch
import math

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import drain, gpu_nodes
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import eviction, jobs, node_facts
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import states
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.pods import active
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.tabwrite import tabwrite
from ansible_collections.gpuops.fleet.plugins.module_utils._common import settings
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import actions, decision
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import xid_catalog
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import as_int, digits, is_int
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._common.device_forms import classify

QUARANTINE_ANNOTATION = "gpuops.fleet/gpu-remediation"
# the ledger's result of a quarantine an operator cancelled by hand (the quarantine writes it, the plan's hold reads it)
CANCELLED_BY_OPERATOR = states.CANCELLED_BY_OPERATOR
# the blockers that keep a node out of the plan (deferred "blocked"); the quarantine refuses them too, and not_evictable
DEFERRING_BLOCKERS = ("outside_accounting", "host_process", "foreign_pod", "eviction_mode")
_DAY = 24 * 3600


def _percent(value):
    return None if settings.whole(0, 100)(value) is None else "is a percentage: 0 to 100, got %r" % (value,)


def _count(low):
    def check(value):
        return None if settings.whole(low)(value) is None else "must be %d or more, got %r" % (low, value)
    return check


# the plan's settings: gpu_remediation_plan's options (its argument spec) and their checks (_common/settings.py)
SETTINGS = settings.Table(
    settings.row("max_nodes_per_run", "int", 1, check=_count(0)),
    settings.row("batch", "int", 1, check=_count(1)),
    settings.row("breaker_percent", "int", 10, check=_percent),
    settings.row("breaker_min_nodes", "int", 1, check=_count(0)),
    settings.row("breaker_max_nodes", "int", None, check=_count(0)),
    settings.row("same_signal_nodes", "int", 3, check=_count(1)),
    settings.row("same_signal_percent", "int", 5, check=_percent),
    settings.row("breaker_window", "int", 3600, check=_count(0)),
    settings.row("repeat_gpu", "int", 3, check=_count(0)),
    settings.row("repeat_node", "int", 5, check=_count(0)),
    settings.row("drain_force", "bool", False),
    settings.row("drain_delete_emptydir_data", "bool", False),
)
DEFAULTS = SETTINGS.defaults()


def _coerce(entry, value):
    """An AWX survey's string as the row's type: a number (``as_int``), or a flag."""
    return bool(value) if entry["type"] == "bool" else as_int(entry["name"], value)


def check_settings(raw):
    """The plan's settings from the user's (numbers may arrive as strings: AWX surveys); a negative or non-numeric threshold
    is a ParameterError naming it."""
    return SETTINGS.check_all(raw, coerce=_coerce)


def _dict(value):
    return value if isinstance(value, dict) else {}


def _meta(obj):
    return _dict(_dict(obj).get("metadata"))


def _visible(entry):
    """The device IDs the container was given (AllocResp's NVIDIA_VISIBLE_DEVICES), when they are IDs."""
    value = ((entry.get("alloc_envs") or {}).get("NVIDIA_VISIBLE_DEVICES") or "").strip()
    if not value or value in ("all", "none", "void") or value.startswith("/"):
        return []
    return [v.strip() for v in value.split(",") if v.strip()]


def pod_gpu_map(entries, gpus):
    """``({gpu uuid: {pod uid: [containers]}}, [unmapped device IDs])`` from kubelet's checkpoint entries.

    ``gpus`` are the health read's GPUs (``index``, ``uuid``, ``mig_devices``)."""
    by_uuid = dict((g["uuid"].lower(), g["uuid"]) for g in gpus if g.get("uuid"))
    by_index = dict((str(g["index"]), g["uuid"]) for g in gpus if g.get("uuid") is not None and g.get("index") is not None)
    by_mig = {}
    for gpu in gpus:
        for mig in gpu.get("mig_devices") or ():
            by_mig[mig.lower()] = gpu["uuid"]
    holders, unmapped = {}, []
    for entry in entries or ():
        ids = _visible(entry) or list(entry.get("device_ids") or ())
        for device_id in ids:
            form, key = classify(device_id)
            gpu = None
            if form in ("gpu_uuid", "gpushare"):
                gpu = by_uuid.get(key)
            elif form == "mig_uuid" and key.startswith("mig-gpu-"):  # the legacy MIG-GPU-<uuid>/<gi>/<ci> names its GPU
                gpu = by_uuid.get(key.split("/")[0][len("mig-"):])
            elif form == "mig_uuid":
                gpu = by_mig.get(key)
            elif form == "gpu_index":
                gpu = by_index.get(key)
            elif form == "mig_index":
                gpu = by_index.get(key.split(":")[0])
            if gpu is None:
                unmapped.append(device_id)
                continue
            pods = holders.setdefault(gpu, {})
            containers = pods.setdefault(entry.get("pod_uid"), [])
            if entry.get("container_name") not in containers:
                containers.append(entry.get("container_name"))
    return holders, unmapped


def _selector_matches(selector, labels):
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


class Budgets:
    """The PodDisruptionBudgets, indexed once: by namespace, and a budget whose selector has ``matchLabels`` by its first
    label pair, so a pod is matched against the budgets that could cover it, not every budget of the cluster (at 5,000
    nodes with a budget per pod, every evicted pod against every budget was most of the plan's time)."""

    def __init__(self, pdbs):
        self.by_pair, self.scan = {}, {}
        for index, pdb in enumerate(p for p in pdbs or () if isinstance(p, dict)):
            namespace = _meta(pdb).get("namespace")
            selector = _dict(pdb.get("spec")).get("selector")
            labels = _dict(selector).get("matchLabels") if isinstance(selector, dict) else None
            if isinstance(labels, dict) and labels and all(isinstance(k, str) for k in labels):
                first = sorted(labels)[0]
                self.by_pair.setdefault((namespace, first, labels[first]), []).append((index, pdb))
            else:
                self.scan.setdefault(namespace, []).append((index, pdb))

    def candidates(self, namespace, labels):
        found = dict(self.scan.get(namespace) or ())
        for key, value in labels.items():
            found.update(self.by_pair.get((namespace, key, value)) or ())
        return [found[i] for i in sorted(found)]


def pdb_of(pod, pdbs):
    """The PDBs (``namespace/name``, disruptionsAllowed) that cover ``pod`` (``pdbs``: a list, or ``Budgets``)."""
    meta = _meta(pod)
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    budgets = pdbs if isinstance(pdbs, Budgets) else Budgets(pdbs)
    out = []
    for pdb in budgets.candidates(meta.get("namespace"), labels):
        pmeta = _meta(pdb)
        if pmeta.get("namespace") != meta.get("namespace"):
            continue
        if _selector_matches((pdb.get("spec") or {}).get("selector"), labels):
            allowed = (pdb.get("status") or {}).get("disruptionsAllowed")
            out.append(("%s/%s" % (pmeta.get("namespace"), pmeta.get("name")), allowed))
    return out


def _eviction(pod, reason, cluster):
    """One pod the row's action would take off its GPU: drain's verdict, its PDB, its eviction mode (``eviction.mode_of``:
    ``mode``, ``timeout_minutes``, ``mode_by``, ``system``; ``mode_error`` where its annotation asks for one it may not
    have) and the multi-pod job it belongs to (``jobs.job_of``)."""
    name = "%s/%s" % (_meta(pod).get("namespace"), _meta(pod).get("name"))
    settings = cluster["settings"]
    ok, why = drain.pod_verdict(pod, settings["drain_force"], settings["drain_delete_emptydir_data"])
    blocked = [p for p, allowed in pdb_of(pod, cluster["pdbs"]) if not allowed]
    out = {"pod": name, "uid": _meta(pod).get("uid"), "reason": reason, "evict": ok, "note": why,
           "pdb": blocked[0] if blocked else None, "job": jobs.job_of(pod)}
    try:
        found = eviction.mode_of(pod, cluster["policy"])
    except eviction.PodModeError as exc:
        return dict(out, mode=None, timeout_minutes=None, mode_by=None, system=False, mode_error=str(exc))
    return dict(out, mode=found["mode"], timeout_minutes=found["timeout_minutes"], mode_by=found["by"], system=found["system"],
                mode_error=None)


def _xid_wall(health, xid):
    if health.get("boot_time") is None or xid.get("usec") is None:
        return None
    return health["boot_time"] + xid["usec"] / 1e6


def _redecide(health, since):
    """The node's verdict with the XIDs logged before ``since`` (a breaker reset, epoch seconds) left out."""
    if not since or not health.get("available"):
        return health.get("verdict") or decision.decide_node(health)
    for gpu in health.get("gpus") or ():
        kept = [x for x in gpu.get("xids") or () if (_xid_wall(health, x) or since) >= since]
        if len(kept) != len(gpu.get("xids") or ()):
            gpu["xids_before_reset"] = len(gpu.get("xids") or ()) - len(kept)
            gpu["xids"] = kept
            gpu["verdict"] = decision.decide_gpu(gpu, health.get("thresholds"))
    return decision.decide_node(health)


def _keys(verdict, health):
    """The signal keys of a node's verdict that count for the same-signal breaker, sorted."""
    quiet = set()
    for gpu in health.get("gpus") or ():
        for xid in gpu.get("xids") or ():
            if xid.get("bucket") in xid_catalog.ROUTINE_BUCKETS:
                quiet.add("xid:%d" % xid["code"])
    chosen = set(verdict.get("gpus") or ())
    keys = []
    for signal in verdict.get("signals") or ():
        if signal.get("gpu") and signal["gpu"] not in chosen:
            continue
        if signal["key"] in quiet or signal["kind"] == "thermal" and signal["key"].startswith("clocks:"):
            continue
        key = signal["key"][:ledgers.MAX_TEXT]  # as the ledger keeps it, so this run's keys and the window's compare
        if key not in keys:
            keys.append(key)
    # sorted: the same fault gives the same keys in the same order on every run, whatever order the node's readings came
    # in (the condition's reason is the first: it was Xid48 one run and Recovery1 the next for one fault)
    return sorted(keys)[:ledgers.MAX_KEYS]


def _node_row(item):
    return {"node": item["node"], "host": item.get("host"), "state": None, "action": actions.NONE, "scope": None, "row": None, "gpus": [],
            "reasons": [], "signals": [], "keys": [], "driver_version": None, "evictions": [], "blockers": [], "batch": None,
            "deferred_reason": None, "waiting": None, "guard": None}


def _unplannable(item, named):
    """Why nothing may be planned for this host's node (a sentence), or None: the host returned facts named as controller
    variables (``untrusted``, from the action plugin), another host names the same node, it read no health, or its facts
    are not of the shape the node modules return (node_facts)."""
    if item.get("untrusted"):
        return str(item["untrusted"])
    others = [h for h in named.get(item["node"], ()) if h != item.get("host")]
    if others:
        return ("hosts %s and %s both name node %s (gpuops_node_name): a node is planned from one host's reads only; fix the "
                "inventory" % (item.get("host"), ", ".join(map(str, others)), item["node"]))
    if not item.get("health"):
        return "no health read from this host (gpu_health_info did not run, or failed)"
    try:
        node_facts.check_health(item["health"])
        node_facts.check_entries(item.get("entries"))
    except node_facts.FactsError as exc:
        return ("this node's facts are not what gpu_health_info and kubelet_checkpoint_info return (%s): nothing is planned for it"
                % exc)
    return None


class _Pods:
    """The pods the plan reads: a list (every pod), or ``pods(node)``, the API's pods on ``node`` (``node`` None: every pod),
    asked only for the nodes a row acts on, so a plan of N nodes with k faulty makes k calls, not one list of every pod
    of the cluster. A pod its node's checkpoint names that is not on the node is looked up among every pod (listed once,
    then kept): a foreign pod is told from a gone one."""

    def __init__(self, pods):
        self.source = pods if callable(pods) else None
        self.every = None if callable(pods) else [p for p in pods or () if isinstance(p, dict)]
        self.by_node, self.uids = {}, {}

    def all(self):
        if self.every is None:
            self.every = [p for p in self.source(None) or () if isinstance(p, dict)]
        return self.every

    def on(self, node):
        if node not in self.by_node:
            if self.source is not None:
                self.by_node[node] = [p for p in self.source(node) or () if isinstance(p, dict)]
            else:
                self.by_node[node] = [p for p in self.every if _dict(p.get("spec")).get("nodeName") == node]
        return self.by_node[node]

    def get(self, node, uid):
        """The pod of UID ``uid``: on ``node`` first, else anywhere (None where there is none)."""
        for pod in self.on(node):
            if _meta(pod).get("uid") == uid:
                return pod
        if "*" not in self.uids:
            self.uids["*"] = dict((_meta(p).get("uid"), p) for p in self.all() if isinstance(_meta(p).get("uid"), str))
        return self.uids["*"].get(uid)


def plan(items, api_nodes, pods, pdbs, ledger, settings, now, policy=None):
    """The plan (see the module docstring). ``items``: ``[{node, host, health, entries[, untrusted]}]``; ``pods``: every pod, or
    ``pods(node)`` (``_Pods``); ``ledger``:
    ``remediation_ledger.parse``'s; ``now``: epoch seconds; ``policy``: ``eviction.check_policy``'s (None: the default,
    every namespace immediate, the system namespaces never). A host whose node cannot be planned (``_unplannable``) is
    ``unknown`` with the reason, and the others are planned as if it were not there."""
    settings = check_settings(settings)
    policy = policy or eviction.check_policy(None, None)
    nodes_by_name = dict((_meta(n).get("name"), n) for n in api_nodes or () if isinstance(_meta(n).get("name"), str))
    cluster = {"pods": _Pods(pods), "pdbs": Budgets(pdbs), "settings": settings, "policy": policy}
    breaker = ledger.get("breaker") or {}
    reset_at = breaker.get("reset_at")
    named = {}
    for item in items:
        named.setdefault(item["node"], []).append(item.get("host"))
    rows = []
    for item in items:
        row = _node_row(item)
        rows.append(row)
        why = _unplannable(item, named)
        if why:
            row.update(state="unknown", reasons=[why])
            continue
        health = item["health"]
        verdict = _redecide(health, reset_at)
        row.update(state=verdict["state"], action=verdict["action"], scope=verdict["scope"], row=verdict["row"],
                   gpus=list(verdict["gpus"]), reasons=list(verdict["reasons"]), signals=verdict["signals"],
                   driver_version=(health.get("driver_version") or "")[:ledgers.MAX_DRIVER] or None)
        for rule in PLAN_RULES:
            rule(row, item=item, api_node=nodes_by_name.get(item["node"]), ledger=ledger, now=now, settings=settings)
        if row["action"] in actions.ACTING:
            row["keys"] = _keys(verdict, health)
            _map_and_evict(row, item, health, cluster)
            _operator_hold(row, ledger)
    # the fleet in scope: every GPU Node the API shows, with this run's hosts; never the run's --limit (an event run limited to
    # one node, or an AWX slice, would get a cap of 1 while every quarantine in the cluster counts against it)
    scope = len(set(gpu_fleet(api_nodes)) | set(item["node"] for item in items))
    result = _breakers(rows, ledger, settings, now, scope, nodes_by_name)
    result["scope"] = scope
    result["nodes"] = rows
    result["settings"] = settings
    result["table"] = table(rows)
    result["summary"] = dict((a, sum(1 for r in rows if r["action"] == a)) for a in actions.NAMES)
    result["summary"]["planned"] = sum(1 for r in rows if r["batch"] is not None)
    result["summary"]["deferred"] = sum(1 for r in rows if r["deferred_reason"])
    result["summary"]["unknown"] = sum(1 for r in rows if r["state"] == "unknown")
    return result


def fleet_view(node):
    """What ``gpu_fleet`` reads of a Node (its name, GPU feature discovery's label, its capacity): a list's ``slim`` where
    only the fleet's size is wanted (the kubelet restart places)."""
    meta, status = _meta(node), _dict(_dict(node).get("status"))
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    return {"metadata": {"name": meta.get("name"), "labels": dict((k, v) for k, v in labels.items() if k == "nvidia.com/gpu.present")},
            "status": {"capacity": _dict(status.get("capacity"))}}


def gpu_fleet(api_nodes):
    """The names of the GPU Nodes among ``api_nodes`` (as the API serves them): a GPU resource in the Node's capacity (its
    allocatable may be 0 while the plugin withholds every GPU), or GPU feature discovery's label ``nvidia.com/gpu.present``."""
    names = []
    for node in api_nodes or ():
        meta, status = _meta(node), _dict(_dict(node).get("status"))
        capacity = _dict(status.get("capacity"))
        labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
        gpus = any((_quantity(v) or 0) > 0 for k, v in capacity.items()
                   if isinstance(k, str) and any(fnmatch.fnmatchcase(k, p) for p in gpu_nodes.DEFAULT_RESOURCES))
        if (gpus or labels.get("nvidia.com/gpu.present") == "true") and isinstance(meta.get("name"), str):
            names.append(meta["name"])
    return names


def _plugin_unhealthy(row, api_node=None, **dummy):
    """Row 17 (a plan rule: it needs the API's Node): the device plugin withholds GPUs (the Node's allocatable below its capacity for an ``nvidia.com/``
    resource) while NVML finds nothing that decides an action. Reported as ``observe``, never planned: NVML is the
    judge of a GPU, and the plugin never marks a device Healthy again by itself (k8s-device-plugin#1014), so the
    remedy is the plugin pod's restart, not a drain (gpu-health.md B4 row 17; acting on it, after 15 minutes, is
    remediation's part)."""
    if row["action"] in actions.ACTING or row["state"] == "unknown" or not api_node:
        return
    status = _dict(api_node.get("status"))
    capacity, allocatable = _dict(status.get("capacity")), _dict(status.get("allocatable"))
    short = []
    for resource in sorted(capacity):
        if resource.startswith("nvidia.com/") and resource in allocatable:
            have, free = _quantity(capacity[resource]), _quantity(allocatable[resource])
            if have is not None and free is not None and free < have:
                short.append("%s %d of %d allocatable" % (resource, free, have))
    if short:
        row.update(action=actions.OBSERVE, scope=actions.scope_of(actions.OBSERVE), row=17, plugin_unhealthy=short,
                   reasons=row["reasons"] + ["the device plugin reports unhealthy devices (%s) and NVML finds no signal that asks "
                                             "for an action: restart the device-plugin pod (k8s-device-plugin#1014); if they stay "
                                             "unhealthy, investigate" % "; ".join(short)])


def _quantity(value):
    """A count resource's quantity (``"8"``), or None where it is not a plain integer."""
    return digits(value if isinstance(value, str) else str(value) if is_int(value) else None)


def _repeat(row, ledger=None, now=None, settings=None, **dummy):
    """Row ``repeat`` (a plan rule: it needs the ledger): the same GPU remediated ``repeat_gpu`` times in 24 h, or the node
    ``repeat_node`` times in 7 days, is ``replace``, never another automatic action."""
    if row["action"] not in actions.ACTING:
        return
    # a quarantine an operator cancelled was no remediation
    entries = [e for e in ledger.get("entries") or [] if e.get("result") != CANCELLED_BY_OPERATOR]
    node_count = sum(1 for e in entries if e.get("node") == row["node"] and now - (e.get("at") or 0) <= 7 * _DAY)
    gpu_counts = dict((g, sum(1 for e in entries if g in (e.get("gpus") or ()) and now - (e.get("at") or 0) <= _DAY)) for g in row["gpus"])
    worst = [g for g, n in gpu_counts.items() if settings["repeat_gpu"] and n >= settings["repeat_gpu"]]
    if worst or (settings["repeat_node"] and node_count >= settings["repeat_node"]):
        why = ("GPU %s remediated %d times in 24 h" % (worst[0], gpu_counts[worst[0]])) if worst else \
            ("node remediated %d times in 7 days" % node_count)
        why = "repeat offender: %s: an RMA candidate, no further automatic action" % why
        row.update(action=actions.REPLACE, scope=actions.scope_of(actions.REPLACE), row="repeat", reasons=row["reasons"] + [why])


# the plan's rules, in the decision's row space, after the node's verdict: what the API and the ledger add
PLAN_RULES = (_plugin_unhealthy, _repeat)


def _operator_hold(row, ledger):
    """An operator cancelled this node's last remediation (took our taint off, which no kubelet can: the quarantine closed its
    ledger entry ``cancelled_by_operator``) and the node shows the same signal, on the same GPUs or fewer: it is left alone
    (deferred ``cancelled_by_operator``), never quarantined again for it. A new signal, or a remediation since, plans it
    as before."""
    last = None
    for entry in ledger.get("entries") or ():
        if entry.get("node") == row["node"] and (last is None or (entry.get("at") or 0) >= (last.get("at") or 0)):
            last = entry
    if not last or last.get("result") != CANCELLED_BY_OPERATOR:
        return
    if not set(row["keys"]) <= set(last.get("keys") or ()) or not set(row["gpus"]) <= set(last.get("gpus") or ()):
        return
    row["deferred_reason"] = CANCELLED_BY_OPERATOR
    row["reasons"].append("an operator cancelled this node's remediation for the same signal (%s) at %s: it is left alone for it; "
                          "a new signal plans it again" % (", ".join(row["keys"]) or "-", last.get("closed_at")))


def _map_and_evict(row, item, health, cluster):
    """The row's evictions and blockers, by what its action evicts (the actions table): a GPU's pods, the node's, or none.
    ``cluster``: what the plan read of the cluster for every row (``pods``: a ``_Pods``, ``pdbs``) and the run's
    ``settings`` and eviction ``policy``."""
    holders, unmapped = pod_gpu_map(item.get("entries"), health.get("gpus") or [])
    row["unmapped_device_ids"] = unmapped
    evicts = actions.evicts(row["action"])
    if evicts == "gpu":
        _gpu_evictions(row, health, holders, cluster)
    elif evicts == "node":
        _node_evictions(row, cluster)
    for ev in row["evictions"]:
        if ev["mode_error"]:
            row["blockers"].append({"kind": "eviction_mode", "pod": ev["pod"], "detail": ev["mode_error"]})
        elif ev["system"] or ev["mode"] == eviction.ALLOW_COMPLETION:
            continue  # never evicted (a system namespace's pod, allow_completion): the quarantine waits for it to end
        if not ev["evict"]:
            row["blockers"].append({"kind": "not_evictable", "pod": ev["pod"], "detail": ev["note"]})
        elif ev["pdb"]:
            row["blockers"].append({"kind": "pdb", "pod": ev["pod"], "pdb": ev["pdb"],
                                    "detail": "PodDisruptionBudget %s allows no disruption now (disruptionsAllowed 0)" % ev["pdb"]})
    if any(b["kind"] in DEFERRING_BLOCKERS for b in row["blockers"]):
        row["deferred_reason"] = "blocked"


def _name(pod):
    return "%s/%s" % (_meta(pod).get("namespace"), _meta(pod).get("name"))


def _gpu_evictions(row, health, holders, cluster):
    """A GPU-scoped action: the target GPUs (with the NVLink peers that go with them: ``decision.nvlink_peers``), their pods
    from kubelet's checkpoint, cross-checked with NVML's processes. A pending remap (row 16) waits for a GPU with no pods."""
    gpus = health.get("gpus") or []
    by_uuid = dict((g.get("uuid"), g) for g in gpus)
    verdicts = [(g.get("verdict") or {}) for g in gpus if g.get("uuid") in row["gpus"]]
    peers, dummy = decision.nvlink_peers(health, row["gpus"], drain_peers=any(v.get("peers") for v in verdicts))
    targets = row["targets"] = list(row["gpus"]) + [p for p in peers if p not in row["gpus"]]
    uids = []
    for uuid in targets:
        uids.extend(uid for uid in sorted(holders.get(uuid) or {}) if uid not in uids)
        row["blockers"].extend(_process_blockers(uuid, by_uuid.get(uuid) or {}, holders.get(uuid) or {},
                                                 lambda uid: cluster["pods"].get(row["node"], uid)))
    if any(v.get("opportunistic") for v in verdicts):
        row["opportunistic"] = True
        if uids:
            row["deferred_reason"] = "gpu_busy"
            row["reasons"].append("the pending remap waits for a reset while the GPU holds no pods; it holds %d" % len(uids))
        return
    for uid in uids:
        pod = cluster["pods"].get(row["node"], uid)
        if pod is None or not active(pod):
            continue
        on = [u for u in targets if uid in (holders.get(u) or {})]
        where = (pod.get("spec") or {}).get("nodeName")
        if where != row["node"]:
            # a node's checkpoint is data about that node alone: a pod that runs elsewhere is never evicted for it
            row["blockers"].append({"kind": "foreign_pod", "pod": _name(pod), "detail": "this node's checkpoint gives %s to pod %s (UID %s), "
                                    "which runs on %s, not on this node: its checkpoint is not trusted" % (", ".join(on), _name(pod), uid, where or "no node")})
            continue
        row["evictions"].append(_eviction(pod, "holds %s" % ", ".join(on), cluster))


def _process_blockers(uuid, gpu, holders, pod_of):
    """NVML's processes on a target GPU: every one must be a pod the checkpoint gives this GPU."""
    out = []
    for proc in gpu.get("processes") or ():
        if proc.get("pod_uid") is None:
            out.append({"kind": "host_process", "gpu": uuid, "detail": "process %s (not a pod's) uses %s: a reset would kill it"
                        % (proc.get("pid"), uuid)})
        elif proc["pod_uid"] not in holders:
            pod = pod_of(proc["pod_uid"])
            name = _name(pod) if pod else proc["pod_uid"]
            out.append({"kind": "outside_accounting", "gpu": uuid, "pod": name,
                        "detail": "pod %s uses %s outside kubelet's accounting (its process %s is on the GPU; the checkpoint gives it "
                                  "no such device)" % (name, uuid, proc.get("pid"))})
    return out


def _node_evictions(row, cluster):
    """A node-scoped action: every pod of the node but those kubectl drain leaves (DaemonSet and mirror pods)."""
    for pod in cluster["pods"].on(row["node"]):
        if (pod.get("spec") or {}).get("nodeName") != row["node"] or not active(pod):
            continue
        if drain.left_by_drain(pod):
            continue  # kubectl drain leaves them; the reboot restarts them
        row["evictions"].append(_eviction(pod, "on the node to %s" % row["action"], cluster))


def _threshold(settings, scope):
    by_percent = max(2, int(math.ceil(settings["same_signal_percent"] * scope / 100.0)))
    return min(settings["same_signal_nodes"], by_percent)


# the quarantine's taint (marks.py TAINT_KEY; a Node's taints are a cluster user's to write, never its kubelet's)
QUARANTINE_TAINT = "gpuops.fleet/gpu-unhealthy"


def _tainted(node):
    taints = _dict(_dict(node).get("spec")).get("taints")
    return isinstance(taints, list) and any(isinstance(t, dict) and t.get("key") == QUARANTINE_TAINT for t in taints)


def _in_flight(nodes_by_name, ledger, now):
    """``(nodes quarantined by us now, nodes of open ledger entries that count no more)``, from the ledger alone, the
    controller's record: a node with an open entry whose Node carries our taint (which only a cluster user can write or lift),
    or whose entry opened less than ``STALE_OPEN`` seconds ago (its patch may be on its way). An entry left open longer on a
    node without our taint (a killed run's, a cancel not yet recorded, a release of old) is named, never counted, so it cannot
    keep the fleet's room at 0. What a Node says of itself (our annotation, which its kubelet may write) counts for nothing."""
    ours, stale = set(), set()
    for entry in ledger.get("entries") or ():
        node = entry.get("node")
        if entry.get("closed_at") or node in ours:
            continue
        if _tainted(nodes_by_name.get(node)) or now - entry.get("at", 0) <= ledgers.STALE_OPEN:
            ours.add(node)
        else:
            stale.add(node)
    return ours, stale - ours


def _waiting(ledger, in_flight):
    """``{node: step}`` of the nodes our quarantine holds (``in_flight``: the ledger's open entries on nodes with our taint)
    whose open entry is at a waiting state (``states.WAITING``: pods that run to their end, a PodDisruptionBudget)."""
    out = {}
    for entry in ledger.get("entries") or ():
        if not entry.get("closed_at") and entry.get("node") in in_flight and entry.get("step") in states.WAITING:
            out[entry["node"]] = entry["step"]
    return out


def _breakers(rows, ledger, settings, now, scope, nodes_by_name):
    breaker = dict(ledger.get("breaker") or {"state": "closed"})
    candidates = [r for r in rows if r["action"] in actions.ACTING]
    # same signal: this run's candidates and the ledger's window, per (key, driver)
    groups = {}
    for row in candidates:
        for key in row["keys"]:
            groups.setdefault((key, row["driver_version"]), set()).add(row["node"])
    for entry in ledger.get("entries") or ():
        if now - (entry.get("at") or 0) <= settings["breaker_window"]:
            for key in entry.get("keys") or ():
                groups.setdefault((key, entry.get("driver_version")), set()).add(entry.get("node"))
    limit = _threshold(settings, scope)
    fleet = sorted(((k, d, sorted(n)) for (k, d), n in groups.items() if len(n) >= limit), key=lambda g: (-len(g[2]), g[0]))
    tripped_keys = set(k for k, dummy, dummy2 in fleet)
    result = {"breaker": breaker, "signal_groups": [{"key": k, "driver_version": d, "nodes": n} for k, d, n in fleet],
              "same_signal_threshold": limit, "refused": None}
    if fleet and breaker.get("state") != "tripped":
        # bounded as a ledger entry is: the breaker is written into the same ConfigMap
        breaker.update(state="tripped", at=now, keys=sorted(tripped_keys)[:ledgers.MAX_KEYS],
                       reason=("same signal on %d nodes or more: %s" % (limit, "; ".join("%s (driver %s) on %s" % (k, d, ", ".join(n))
                                                                                         for k, d, n in fleet)))[:4096])
        result["tripped_now"] = True
    if breaker.get("state") == "tripped":
        result["refused"] = "the breaker is tripped (%s): no node is planned until it is reset with a reason" % breaker.get("reason")
        for row in candidates:
            if not row["deferred_reason"]:
                carries = [k for k in row["keys"] if k in tripped_keys or k in (breaker.get("keys") or ())]
                row["deferred_reason"] = "fleet_event" if carries else "breaker_tripped"
        return result
    # capacity: the per-run cap, and the fleet-wide cap with our quarantines in flight counted
    in_flight, stale = _in_flight(nodes_by_name, ledger, now)
    cap = max(settings["breaker_min_nodes"], int(math.ceil(settings["breaker_percent"] * scope / 100.0)))
    if settings["breaker_max_nodes"] is not None:
        cap = min(cap, settings["breaker_max_nodes"])
    # a node that waits (its pods run to their end, a PDB) holds its place in the fleet's cap, as any quarantine of ours, but
    # takes none in the batch: every run offers it (batch 1: the quarantine goes on where what it waits for has happened,
    # else says so and stops) and goes on to the next faulty node, so one training job never holds back the others
    waiting = _waiting(ledger, in_flight)
    room = max(0, min(settings["max_nodes_per_run"], cap - len(in_flight - set(r["node"] for r in candidates if r["node"] not in waiting))))
    result["capacity"] = {"cap": cap, "in_flight": sorted(n for n in in_flight if n), "room": room,
                          "stale_open_entries": sorted(n for n in stale if n), "waiting": sorted(waiting)}
    order = sorted((r for r in candidates if not r["deferred_reason"]), key=lambda r: (-actions.severity(r["action"]), r["node"]))
    placed = 0
    # what the quarantine checks again when it opens the node's entry, in the ledger's own write (claims.check_open): runs
    # started together each planned from the same ledger
    guard = {"cap": cap, "in_flight": sorted(n for n in in_flight if n), "threshold": limit, "window": settings["breaker_window"]}
    for row in order:
        if row["node"] in waiting:
            row["batch"], row["waiting"] = 1, waiting[row["node"]]
        elif placed < room:
            row["batch"] = placed // settings["batch"] + 1
            placed += 1
        else:
            row["deferred_reason"] = "deferred_capacity"
        if row["batch"] is not None:
            row["guard"] = guard
    return result


def table(rows):
    """A text table, one line per node."""
    lines = ["NODE\tHEALTH\tACTION\tSCOPE\tGPUS\tEVICT\tBLOCKERS\tPLAN\t\n"]
    for row in rows:
        gpus = ",".join(g[:12] for g in row["gpus"]) or "-"
        evict = sum(1 for e in row["evictions"] if e["evict"])
        plan_text = ("batch %d" % row["batch"]) if row["batch"] is not None else (row["deferred_reason"] or "-")
        if row.get("waiting"):
            plan_text += " (%s)" % row["waiting"]
        cells = (row["node"], row["state"] or "-", row["action"], row["scope"] or "-", gpus, evict, len(row["blockers"]), plan_text)
        lines.append("%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t\n" % cells)
    return tabwrite("".join(lines))


def check_reset(reset, reason):
    """A breaker reset needs a reason (recorded in the ledger); ParameterError otherwise."""
    if reset and not (reason or "").strip():
        raise ParameterError("breaker_reset_reason", "is required with breaker_reset=true: say why the breaker may close (it is recorded "
                             "in the ledger)")
    return bool(reset)
