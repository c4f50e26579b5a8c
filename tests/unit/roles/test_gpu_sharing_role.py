# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_sharing: argument specs match defaults, the README lists every variable; the gpushare plugin
renders only on sharing nodes and unprivileged, the NVIDIA plugin (device_plugin) keeps off them;
the action plugins read modes and node truth from the inventory."""

from __future__ import annotations

import role_checks  # tests/unit/roles/role_checks.py  # pylint: disable=import-error
from ansible_collections.gpuops.fleet.plugins.action.gpu_share_info import node_truth
from ansible_collections.gpuops.fleet.plugins.action.gpu_sharing_mode import desired_modes


def render(role, name, values):
    return role_checks.render_docs(role, name, values)


def sharing_values(**extra):
    values = dict(role_checks.load("gpu_sharing", "defaults", "main.yml"), ansible_managed="managed")
    values.update(extra)
    return values


def affinity(spec):
    return spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def test_argument_specs_match_defaults_keys_and_values():
    assert role_checks.spec_problems("gpu_sharing", entries=("main", "retire", "node_truth")) == []


def test_readme_documents_every_variable():
    assert role_checks.undocumented_vars("gpu_sharing") == []


def test_the_gpushare_plugin_only_on_sharing_nodes_and_unprivileged():
    (ds,) = render("gpu_sharing", "daemonset.yml.j2", sharing_values(gpu_sharing_label="example.com/share", gpu_sharing_true_value="on"))
    spec = ds["spec"]["template"]["spec"]
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    # and never while a GPU reset runs on the node (gpu_quarantine state=paused): the plugin holds NVML
    maintenance = {"key": "gpuops.fleet/gpu-maintenance", "operator": "NotIn", "values": ["true"]}
    assert affinity(spec) == [{"matchExpressions": [{"key": "example.com/share", "operator": "In", "values": ["on"]}, maintenance]}]
    (ctr,) = spec["containers"]
    assert ctr["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert "--memory-unit=GiB" in ctr["command"] and spec["serviceAccountName"] == "gpushare-device-plugin"


def test_the_extender_and_rbac_render_as_upstream_without_privilege():
    docs = render("gpu_sharing", "extender.yml.j2", sharing_values())
    kinds = [d["kind"] for d in docs]
    assert kinds == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service"]
    service = docs[-1]
    assert service["spec"]["ports"] == [{"name": "http", "port": 12345, "targetPort": 12345, "nodePort": 32766}]
    ctr = docs[3]["spec"]["template"]["spec"]["containers"][0]
    assert ctr["securityContext"]["runAsNonRoot"] is True and ctr["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "PORT", "value": "12345"} in ctr["env"]
    rbac = render("gpu_sharing", "device-plugin-rbac.yml.j2", sharing_values())
    assert [d["kind"] for d in rbac] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]


def test_the_nvidia_plugin_keeps_off_sharing_nodes():
    defaults = role_checks.load("device_plugin", "defaults", "main.yml")
    settings = {"image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1", "container": {"args": [], "env": []}}
    values = dict(defaults, ansible_managed="managed", __device_plugin_settings=settings,
                  device_plugin_selector_labels={"name": "nvidia-device-plugin-ds"})
    (ds,) = render("device_plugin", "daemonset.yml.j2", values)
    maintenance = {"key": "gpuops.fleet/gpu-maintenance", "operator": "NotIn", "values": ["true"]}
    assert affinity(ds["spec"]["template"]["spec"]) == [{"matchExpressions": [{"key": "cgpu", "operator": "NotIn", "values": ["true"]}, maintenance]}]
    # without a sharing label, still never on a node in a GPU reset (gpu_quarantine state=paused): the plugin holds NVML
    (off,) = render("device_plugin", "daemonset.yml.j2", dict(values, device_plugin_sharing_label=""))
    assert affinity(off["spec"]["template"]["spec"]) == [{"matchExpressions": [maintenance]}]


def test_modes_come_from_the_host_variable_else_the_group():
    hostvars = {"h1": {"gpu_sharing_enabled": "false"}, "h2": {"gpuops_node_name": "node-2"}, "h3": {"gpu_sharing_enabled": True}, "h4": {}}
    groups = {"gpu_nodes": ["h1", "h2", "h3", "h4"], "gpu_sharing": ["h1", "h2"]}
    nodes, hosts = desired_modes(hostvars, groups, "gpu_nodes", "gpu_sharing")
    # the host variable wins over the group (h1); the module checks the string
    assert nodes == {"h1": "false", "node-2": True, "h3": True, "h4": False}
    assert hosts == {"h1": "h1", "node-2": "h2", "h3": "h3", "h4": "h4"}


def test_node_truth_only_from_nodes_that_read_both_their_gpus_and_checkpoint():
    gpus = {"available": True, "gpus": [{"index": 0, "uuid": "GPU-a", "name": "x"}]}
    info = {"exists": True, "error": None, "pod_device_entries": [{"pod_uid": "u"}]}
    hostvars = {
        "ok": {"ansible_facts": {"gpuops_gpus": gpus}, "gpu_sharing_checkpoint_info": info, "gpuops_node_name": "k8s-ok"},
        "no-driver": {"ansible_facts": {"gpuops_gpus": {"available": False, "gpus": []}}, "gpu_sharing_checkpoint_info": info},
        "corrupt": {"ansible_facts": {"gpuops_gpus": gpus}, "gpu_sharing_checkpoint_info": dict(info, error="checksum mismatch")},
        "unread": {"ansible_facts": {"gpuops_gpus": gpus}},
    }
    assert node_truth(hostvars, list(hostvars)) == [{"node": "k8s-ok", "gpus": [{"index": 0, "uuid": "GPU-a"}], "pod_device_entries": [{"pod_uid": "u"}]}]
