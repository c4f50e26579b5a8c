# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: NVIDIA device-plugin versions, options, preflight
against kubelet's CPUManager policy, and who else manages the plugin. The node-by-node
rollout is ``rollout`` (module daemonset_rollout).

Pure functions over plain data (API objects as dicts from ``kubernetes.core.k8s_info``); the
device_plugin role calls them through the filters in ``plugins/filter/device_plugin.py``.

Version facts, from NVIDIA/k8s-device-plugin's CHANGELOG.md:

* ``1.8`` ... ``1.11``: the first tags, named after the Kubernetes release they followed.
* ``1.0.0-beta`` ... ``1.0.0-beta6`` came next and were re-versioned as ``v0.0.0`` ... ``v0.5.0``
  ("Reversioned to SEMVER"; ``v0.6.0``: "Change versioning scheme to v0.x.x instead of
  v1.0.0-betax"). So 1.0.0-beta6 is *older* than v0.6.0, although semver says otherwise.
* ``--pass-device-specs`` (return the device nodes in Allocate(), the CPUManager-safe mode;
  field report 002) arrived in 1.0.0-beta6 = v0.5.0 ("Add flag to optionally return list of
  device nodes in Allocate() call").
* ``--mig-strategy`` v0.7.0, ``--device-list-strategy`` v0.7.0 (volume-mounts),
  ``--fail-on-init-error`` v0.7.0, flags as environment variables and ``--device-id-strategy``
  v0.9.0, which also fixed "a bug when using CPUManager and the device plugin MIG mode not set
  to none"; several ``--device-list-strategy`` values and ``cdi-annotations`` v0.14.0;
  ``cdi-cri`` v0.15.0.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import as_bool
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError, ParameterError


# feature -> (first version that has it, how users know it)
FEATURES = {
    "pass_device_specs": ((0, 5, 0), "--pass-device-specs (1.0.0-beta6 = v0.5.0)"),
    "fail_on_init_error": ((0, 7, 0), "--fail-on-init-error (v0.7.0)"),
    "mig_strategy": ((0, 7, 0), "--mig-strategy (v0.7.0)"),
    "device_list_strategy": ((0, 7, 0), "--device-list-strategy (v0.7.0)"),
    "device_list_strategy_list": ((0, 14, 0), "several --device-list-strategy values (v0.14.0)"),
    "cdi_annotations": ((0, 14, 0), "device list strategy cdi-annotations (v0.14.0)"),
    "cdi_cri": ((0, 15, 0), "device list strategy cdi-cri (v0.15.0)"),
    "env_config": ((0, 9, 0), "options as environment variables (v0.9.0)"),
    "device_id_strategy": ((0, 9, 0), "--device-id-strategy (v0.9.0)"),
    "cpumanager_mig": ((0, 9, 0), "the CPUManager fix for MIG strategies other than none (v0.9.0)"),
}

OPTION_DEFAULTS = {
    "pass_device_specs": False,
    "device_id_strategy": "uuid",
    "device_list_strategy": ["envvar"],
    "mig_strategy": "none",
    "fail_on_init_error": True,
}
CHOICES = {
    "device_id_strategy": ("uuid", "index"),
    "device_list_strategy": ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri"),
    "mig_strategy": ("none", "single", "mixed"),
}
# option -> (role variable, flag, environment variable)
NAMES = {
    "pass_device_specs": ("device_plugin_pass_device_specs", "--pass-device-specs", "PASS_DEVICE_SPECS"),
    "device_id_strategy": ("device_plugin_device_id_strategy", "--device-id-strategy", "DEVICE_ID_STRATEGY"),
    "device_list_strategy": ("device_plugin_device_list_strategy", "--device-list-strategy", "DEVICE_LIST_STRATEGY"),
    "mig_strategy": ("device_plugin_mig_strategy", "--mig-strategy", "MIG_STRATEGY"),
    "fail_on_init_error": ("device_plugin_fail_on_init_error", "--fail-on-init-error", "FAIL_ON_INIT_ERROR"),
}

# \A...\Z: "$" would also match before a trailing newline, which then reached the image reference
_VERSION_RE = re.compile(r"\Av?(\d+)\.(\d+)(?:\.(\d+))?(?:-([0-9A-Za-z.\-]+))?\Z")
_SAFE_SUGGESTION = "v0.17.1"


class PluginVersion:
    """A device-plugin release, ordered by release history (not by semver)."""

    __slots__ = ("text", "key", "effective", "note")

    def __init__(self, text, key, effective, note=None):
        self.text = text
        self.key = key
        self.effective = effective
        self.note = note

    def at_least(self, triple):
        return self.key[:3] >= tuple(triple) and not (self.key[:3] == tuple(triple) and self.key[3] < 0)

    def has(self, feature):
        return self.at_least(FEATURES[feature][0])

    def describe(self):
        if self.effective and self.effective != self.text:
            return "%s (= %s)" % (self.text, self.effective)
        return self.text

    def as_dict(self):
        return {"text": self.text, "effective": self.effective, "note": self.note,
                "pass_device_specs": self.has("pass_device_specs"), "env_config": self.has("env_config")}


def _triple(key):
    return "v%d.%d.%d" % tuple(key[:3])


def parse_version(text, field="device_plugin_version"):
    """Parse a device-plugin image tag: v0.17.1, 0.14.0, v0.7.0-rc.8, v0.14.1-ubi8, 1.0.0-beta6, 1.11."""
    if not isinstance(text, str) or not text.strip():
        raise ParameterError(field, "expected the plugin's image tag, such as %s, got %r" % (_SAFE_SUGGESTION, text))
    raw = text
    match = _VERSION_RE.match(raw)
    if not match:
        raise ParameterError(field, "%r is not a device-plugin version (expected a tag such as %s, v0.9.0, "
                                    "1.0.0-beta6 or 1.11); set it explicitly when the image is pinned by digest" % (raw, _SAFE_SUGGESTION))
    major, minor = int(match.group(1)), int(match.group(2))
    patch = int(match.group(3) or 0)
    suffix = match.group(4) or ""
    beta = re.match(r"\Abeta(\d*)\Z", suffix)
    if (major, minor, patch) == (1, 0, 0) and beta:
        number = int(beta.group(1) or 0)
        # 1.0.0-beta (and beta1) = v0.0.0 ... beta6 = v0.5.0
        step = max(number - 1, 0)
        if step > 5:
            raise ParameterError(field, "%r: no 1.0.0-beta after beta6 was released (v0.6.0 followed)" % raw)
        key = (0, step, 0, 0, 0)
        return PluginVersion(raw, key, _triple(key), "1.0.0-betaN predates v0.6.0 (re-versioned as v0.%d.0)" % step)
    if major == 1 and match.group(3) is None and 8 <= minor <= 11 and not suffix:
        key = (-1, minor, 0, 0, 0)
        return PluginVersion(raw, key, "legacy-" + raw, "%s is a pre-v0.0.0 tag named after Kubernetes 1.%d" % (raw, minor))
    if major >= 1:
        raise ParameterError(field, "%r: NVIDIA device-plugin releases are v0.x.y (after 1.0.0-beta6, which is v0.5.0); "
                                    "did you mean %s?" % (raw, _SAFE_SUGGESTION))
    rc = re.match(r"\Arc\.?(\d+)\Z", suffix)
    if rc:
        key = (major, minor, patch, -1, int(rc.group(1)))
    else:  # release, or a flavour of it (-ubi8, -ubuntu20.04, -centos7)
        key = (major, minor, patch, 0, 0)
    return PluginVersion(raw, key, _triple(key))


def image_reference(repository, version):
    if not repository or not isinstance(repository, str):
        raise ParameterError("device_plugin_image", "expected an image repository such as nvcr.io/nvidia/k8s-device-plugin")
    if re.search(r"\s", repository):
        raise ParameterError("device_plugin_image", "%r holds white space; give the image repository only" % repository)
    if "@" in repository or re.search(r":[^/]+\Z", repository):
        raise ParameterError("device_plugin_image", "%r carries a tag or digest; give the repository only and the tag in "
                                                    "device_plugin_version" % repository)
    return "%s:%s" % (repository, version)


def normalize_options(options):
    """Validate the plugin options (role variables) and fill defaults."""
    out = dict(OPTION_DEFAULTS)
    for key, value in (options or {}).items():
        if key not in OPTION_DEFAULTS:
            raise ParameterError(key, "unknown device-plugin option; known: %s" % ", ".join(sorted(OPTION_DEFAULTS)))
        if value is None:
            continue
        var = NAMES[key][0]
        if key in ("pass_device_specs", "fail_on_init_error"):
            value = as_bool(var, value)  # "false" from -e or a survey is false
        elif key == "device_list_strategy":
            value = [value] if isinstance(value, str) else value
            if not isinstance(value, list) or not value or any(v not in CHOICES[key] for v in value):
                raise ParameterError(var, "expected a non-empty list of %s, got %r" % (", ".join(CHOICES[key]), value))
        elif value not in CHOICES[key]:
            raise ParameterError(var, "expected one of %s, got %r" % (", ".join(CHOICES[key]), value))
        out[key] = value
    return out


def _needs(version, feature, var, value):
    """A problem when ``version`` lacks ``feature``, with a fix that works (None when it has it)."""
    if version.has(feature):
        return None
    first, label = FEATURES[feature]
    option = next(k for k, names in NAMES.items() if names[0] == var)
    plugin_default = OPTION_DEFAULTS[option]
    if isinstance(plugin_default, bool):
        plugin_default = "true" if plugin_default else "false"
    elif isinstance(plugin_default, list):
        plugin_default = ",".join(plugin_default)
    other = "or set %s: %s" % (var, plugin_default)
    if option == "pass_device_specs":
        other += " (safe only where no node runs kubelet with cpuManagerPolicy=static)"
    return {"option": var,
            "problem": "%s=%s needs %s; device plugin %s does not have it" % (var, _text(value), label, version.describe()),
            "fix": "set device_plugin_version to %s (%s is the oldest that has it), %s" % (_SAFE_SUGGESTION, _triple(first), other)}


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return ",".join(value) if isinstance(value, list) else str(value)


def container_config(version, options):
    """The container's ``args`` and ``env`` for these options on this version.

    From v0.9.0 every option is passed as an environment variable (upstream's manifests do the
    same since v0.12.0); before that only flags exist, and each option is checked against the
    version that introduced it, so a setting never silently does nothing: ``problems`` lists each
    option this version lacks, for the preflight to refuse naming the nodes it would run on.
    """
    opts = normalize_options(options)
    wanted = []
    if opts["pass_device_specs"]:
        wanted.append(("pass_device_specs", "pass_device_specs", True))
    if opts["device_id_strategy"] != "uuid":
        wanted.append(("device_id_strategy", "device_id_strategy", opts["device_id_strategy"]))
    if opts["mig_strategy"] != "none":
        wanted.append(("mig_strategy", "mig_strategy", opts["mig_strategy"]))
    lists = opts["device_list_strategy"]
    if lists != ["envvar"]:
        wanted.append(("device_list_strategy", "device_list_strategy", lists))
        if len(lists) > 1:
            wanted.append(("device_list_strategy_list", "device_list_strategy", lists))
        for value, feature in (("cdi-annotations", "cdi_annotations"), ("cdi-cri", "cdi_cri")):
            if value in lists:
                wanted.append((feature, "device_list_strategy", lists))
    problems = []
    for feature, option, value in wanted:
        problem = _needs(version, feature, NAMES[option][0], value)
        if problem and not any(p["option"] == problem["option"] for p in problems):
            problems.append(problem)
    text = _text

    if version.has("env_config"):
        return {"args": [], "env": [{"name": NAMES[k][2], "value": text(opts[k])} for k in sorted(NAMES)], "problems": problems}
    args = []
    for key in sorted(NAMES):  # every option is also the feature that introduced its flag
        if version.has(key):
            args.append("%s=%s" % (NAMES[key][1], text(opts[key])))
    return {"args": args, "env": [], "problems": problems}


# -- preflight ---------------------------------------------------------------------------------

def _labels_match(labels, selector):
    labels = labels or {}
    return all(labels.get(k) == str(v) for k, v in (selector or {}).items())


def targeted_nodes(nodes, node_selector):
    """Names of the Node objects (k8s_info resources) the DaemonSet's nodeSelector picks."""
    return sorted(n["metadata"]["name"] for n in nodes or [] if _labels_match(n["metadata"].get("labels"), node_selector))


def _node_list(names):
    return "%s%s" % (", ".join(names[:5]), ", ..." if len(names) > 5 else "")


def preflight(version, options, node_names, kubelet_facts, option_problems=None):
    """Refuse a version or configuration that breaks under CPUManager ``static``.

    ``kubelet_facts`` maps node name -> the ``kubelet_config_info`` result of that node (or is
    missing the node); ``option_problems`` are ``container_config``'s (options this version
    lacks), refused on every targeted node. Returns ``{"problems", "warnings", "nodes",
    "refused"}``; every problem names the nodes, what is wrong and the fix, and a static node is
    named with its own problem even when an option problem comes first.
    """
    opts = normalize_options(options)
    problems, warnings, rows = [], [], []
    for problem in option_problems or ():
        problems.append({"node": "every targeted node (%d: %s)" % (len(node_names), _node_list(list(node_names))) if node_names
                         else "the DaemonSet (no node targeted yet)", "problem": problem["problem"], "fix": problem["fix"],
                         "nodes": list(node_names)})
    static = []
    for name in node_names:
        facts = (kubelet_facts or {}).get(name)
        if not facts:
            problems.append({"node": name, "problem": "no kubelet facts: its cpuManagerPolicy is unknown",
                             "fix": "add the node's host to the device_plugin_hosts_group group (its node name is matched by "
                                    "kubelet_config_info's node_name, or the host variable device_plugin_node_name), "
                                    "or change device_plugin_node_selector so the DaemonSet does not target it"})
            rows.append({"node": name, "cpu_manager_policy": None, "source": None})
            continue
        policy = facts.get("cpu_manager_policy")
        rows.append({"node": name, "cpu_manager_policy": policy, "source": facts.get("source")})
        if facts.get("error") or not policy:
            problems.append({"node": name, "problem": "kubelet's cpuManagerPolicy could not be read: %s" % (facts.get("error") or "no value"),
                             "fix": "make kubelet's flags or config file readable on the node, or point kubelet_config_info "
                                    "at them (device_plugin_kubelet_config_path)"})
        elif policy == "static":
            static.append(name)

    def where(name):
        return "%s (cpuManagerPolicy=static from %s)" % (name, (kubelet_facts[name] or {}).get("source"))

    for name in static:
        if not version.has("pass_device_specs"):
            problems.append({
                "node": where(name),
                "problem": "device plugin %s does not pass device specs in Allocate(); kubelet's CPUManager rewrites the "
                           "container's cpuset and its /dev/nvidia* devices vanish (NVML: Unknown Error)" % version.describe(),
                "fix": "set device_plugin_version to %s (v0.5.0 = 1.0.0-beta6 is the oldest that can) with "
                       "device_plugin_pass_device_specs: true" % _SAFE_SUGGESTION})
        elif not opts["pass_device_specs"]:
            problems.append({
                "node": where(name),
                "problem": "device_plugin_pass_device_specs is false; containers lose /dev/nvidia* when kubelet's CPUManager "
                           "rewrites their cpusets (NVML: Unknown Error)",
                "fix": "set device_plugin_pass_device_specs: true"})
        if opts["mig_strategy"] != "none" and not version.has("cpumanager_mig"):
            problems.append({
                "node": where(name),
                "problem": "device plugin %s with mig_strategy=%s breaks under CPUManager static (fixed in v0.9.0)"
                           % (version.describe(), opts["mig_strategy"]),
                "fix": "set device_plugin_version to %s, or device_plugin_mig_strategy: none" % _SAFE_SUGGESTION})
    if not opts["pass_device_specs"] and not static and node_names:
        warnings.append("device_plugin_pass_device_specs is false: GPU containers will lose their devices if a node "
                        "later turns on cpuManagerPolicy=static")
    refused = set()
    for problem in problems:
        refused.update(problem.pop("nodes", None) or [problem["node"].split(" ")[0]])
    return {"problems": problems, "warnings": warnings, "nodes": rows, "refused": sorted(refused)}


# Helm 3 marks what it manages with this label and these annotations (what `helm install` adopts by)
HELM_LABEL = ("app.kubernetes.io/managed-by", "Helm")
# what this collection's templates put on the objects it manages (templates/daemonset.yml.j2)
OUR_MANAGER = "gpuops.fleet"
HELM_RELEASE = "meta.helm.sh/release-name"
HELM_NAMESPACE = "meta.helm.sh/release-namespace"
PLUGIN_IMAGE = "k8s-device-plugin"


def _operator_plugin_enabled(policy):
    # gpu-operator api/nvidia/v1/clusterpolicy_types.go: DevicePluginSpec.IsEnabled() is true
    # when spec.devicePlugin.enabled is not set ("default is true if not specified by user")
    enabled = ((policy.get("spec") or {}).get("devicePlugin") or {}).get("enabled")
    return enabled is None or enabled is True or str(enabled).lower() == "true"


def _manager(obj):
    """Who manages a DaemonSet, from its owner references, labels and annotations; None when nobody says."""
    meta = obj.get("metadata") or {}
    for owner in meta.get("ownerReferences") or ():
        if owner.get("kind") == "ClusterPolicy":
            return "the NVIDIA GPU Operator (owner ClusterPolicy %s)" % owner.get("name")
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    if labels.get(HELM_LABEL[0]) == HELM_LABEL[1] or HELM_RELEASE in notes:
        return "Helm (release %s/%s)" % (notes.get(HELM_NAMESPACE) or meta.get("namespace"), notes.get(HELM_RELEASE) or "?")
    if labels.get(HELM_LABEL[0]) not in (None, "", OUR_MANAGER):
        return labels[HELM_LABEL[0]]
    return None


def _runs_the_plugin(obj):
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    return any(PLUGIN_IMAGE in str(c.get("image") or "") for c in spec.get("containers") or ())


def _shared_nodes(obj, nodes, targets):
    """The targeted nodes another DaemonSet's nodeSelector also picks (its node affinity is not read: any is assumed)."""
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    return [n["metadata"]["name"] for n in nodes or () if n["metadata"]["name"] in targets and _labels_match(n["metadata"].get("labels"), selector)]


def other_managers(cluster_policies, daemonsets, namespace, name, nodes=None, node_selector=None):
    """Who else manages the NVIDIA device plugin, each a refusal naming it and the fix.

    ``cluster_policies``: nvidia.com/v1 ClusterPolicy objects (none where the CRD is absent);
    ``daemonsets``: every DaemonSet of the cluster; ``nodes``: the Node objects and ``node_selector``
    the role's DaemonSet's nodeSelector. Refused: a ClusterPolicy whose device plugin is enabled (the
    GPU Operator deploys its own); the role's DaemonSet (``namespace``/``name``) when its owner, labels
    or annotations say the operator or Helm manages it (they would undo the change); any other
    DaemonSet running the plugin image on a node the role targets (two plugins would register
    nvidia.com/gpu on the same node).
    """
    problems = []
    targets = set(targeted_nodes(nodes, node_selector))
    for policy in cluster_policies or ():
        if _operator_plugin_enabled(policy):
            problems.append({
                "node": "ClusterPolicy %s" % (policy.get("metadata") or {}).get("name"),
                "problem": "the NVIDIA GPU Operator deploys and manages the device plugin on this cluster (spec.devicePlugin.enabled)",
                "fix": "upgrade the plugin through the operator (spec.devicePlugin.version), or set spec.devicePlugin.enabled: false "
                       "before handing the plugin to this role"})
    for obj in daemonsets or ():
        meta = obj.get("metadata") or {}
        ours = (meta.get("namespace"), meta.get("name")) == (namespace, name)
        manager = _manager(obj)
        where = "DaemonSet %s/%s" % (meta.get("namespace"), meta.get("name"))
        if ours and manager:
            problems.append({"node": where, "problem": "it is managed by %s, which would undo this role's changes" % manager,
                             "fix": "upgrade it with its manager, or remove that manager's ownership first"})
            continue
        shared = [] if ours or not _runs_the_plugin(obj) else _shared_nodes(obj, nodes, targets)
        if shared:
            problems.append({
                "node": where,
                "problem": "it already runs the NVIDIA device plugin%s on %d node(s) this role targets (%s%s); a second plugin "
                           "would register nvidia.com/gpu on the same nodes"
                           % (" (managed by %s)" % manager if manager else "", len(shared), ", ".join(shared[:3]), ", ..." if len(shared) > 3 else ""),
                "fix": "remove it (or point device_plugin_namespace/device_plugin_name at it)"})
    return problems


def format_problems(problems):
    return "\n".join("- %s: %s. Fix: %s." % (p["node"], p["problem"], p["fix"]) for p in problems)


# -- the whole preflight (module device_plugin_preflight) -------------------------------------------

class PreflightRefused(GpuopsError):
    """The preflight refuses: nothing may change. The message names every node or manager and the fix."""


def kubelet_facts_by_node(rows):
    """Node name -> {kubelet_config_info result, host, gpu_uuids} from the GPU hosts' variables:
    ``[(host, {device_plugin_kubelet, device_plugin_node_name, gpus})]`` as the action plugin's
    ``host_variables`` reads them (``gpus``: the host's gpuops_gpus fact).

    A host counts once its ``device_plugin_kubelet`` (kubelet_config_info) is set; its node name
    is the host variable ``device_plugin_node_name``, else what kubelet registers.
    """
    out = {}
    for host, hv in rows or ():
        kubelet = hv.get("device_plugin_kubelet")
        if not kubelet:
            continue
        name = hv.get("device_plugin_node_name") or kubelet.get("node_name")
        gpus = hv.get("gpus") or {}
        entry = dict(kubelet)
        entry["host"] = host
        entry["gpu_uuids"] = [g.get("uuid") for g in gpus.get("gpus") or []] if gpus.get("available") else None
        out[name] = entry
    return out


def full_preflight(version, settings, nodes, node_selector, kubelet_facts, cluster_policies, daemonsets,
                   namespace, name, selector_labels, existing, take_over=False):
    """Everything the device_plugin role checks before it changes anything; raises PreflightRefused.

    Order: the nodes (CPUManager policy, options the version lacks), then the other managers,
    then the existing DaemonSet's immutable selector.
    """
    targets = targeted_nodes(nodes, node_selector)
    result = preflight(version, settings["options"], targets, kubelet_facts, settings["container"].get("problems"))
    if result["problems"]:
        raise PreflightRefused("device plugin %s refused on %d node(s); nothing was changed:\n%s"
                               % (version.text, len(result["refused"]), format_problems(result["problems"])))
    owners = other_managers(cluster_policies, daemonsets, namespace, name, nodes, node_selector)
    if owners and not take_over:
        raise PreflightRefused("the NVIDIA device plugin is managed by someone else; nothing was changed "
                               "(device_plugin_take_over: true proceeds anyway):\n%s" % format_problems(owners))
    if existing is not None:
        current = ((existing.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if current != dict((k, str(v)) for k, v in (selector_labels or {}).items()):
            raise PreflightRefused(
                "DaemonSet %s/%s selects pods by %s, but device_plugin_selector_labels is %s; a DaemonSet's selector cannot "
                "change. Fix: set device_plugin_selector_labels to the existing matchLabels." % (namespace, name, current, selector_labels))
    gpu_uuids = dict((node, entry["gpu_uuids"]) for node, entry in (kubelet_facts or {}).items() if entry.get("gpu_uuids"))
    return {"targets": targets, "gpu_uuids": gpu_uuids, "nodes": result["nodes"], "risks": result["warnings"],
            "taken_over": format_problems(owners).splitlines() if owners else [],
            "msg": "device plugin %s: %d targeted node(s) pass the preflight%s" % (
                version.text, len(targets), "; taking over from %d other manager(s)" % len(owners) if owners else "")}
