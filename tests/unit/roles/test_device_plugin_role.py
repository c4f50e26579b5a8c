# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""device_plugin: argument specs match defaults (keys and values) for both entry points, internal
variables are private, the README lists every variable; the preflight the module device_plugin_preflight runs."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import device_plugin as dp
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

import role_checks  # tests/unit/roles/role_checks.py  # pylint: disable=import-error


def load(*parts):
    return role_checks.load("device_plugin", *parts)


def test_argument_specs_match_defaults_keys_and_values():
    assert role_checks.spec_problems("device_plugin", entries=("main", "node_facts", "verify")) == []


def test_internal_vars_are_private():
    assert role_checks.non_private_vars("device_plugin") == []


def test_readme_documents_every_variable():
    assert role_checks.undocumented_vars("device_plugin") == []


def _settings(version, image, options):
    parsed = dp.parse_version(version)
    return {"version": parsed.as_dict(), "image": dp.image_reference(image, version),
            "container": dp.container_config(parsed, options), "options": dp.normalize_options(options)}


def _preflight(settings, node, host, **extra):
    args = dict(nodes=[node], node_selector={}, kubelet_facts=dp.kubelet_facts_by_node([host]), cluster_policies=[], daemonsets=[],
                namespace="kube-system", name="nvidia-device-plugin-daemonset", selector_labels={"name": "nvidia-device-plugin-ds"},
                existing=None)
    args.update(extra)
    return dp.full_preflight(dp.parse_version(settings["version"]["text"]), settings, **args)


NODE = {"metadata": {"name": "gpu-a", "labels": {}}}


def _host(policy):
    """One GPU host as the action plugin's host_variables reads it: (host, {its variables, gpus})."""
    return ("gpu-a", {"device_plugin_kubelet": {"node_name": "gpu-a", "cpu_manager_policy": policy,
                                                "source": "config file /var/lib/kubelet/config.yaml"},
                      "gpus": {"available": True, "gpus": [{"uuid": "GPU-1"}]}})


def test_defaults_pass_the_preflight_on_static_nodes():
    defaults = load("defaults", "main.yml")
    options = dict((key, defaults["device_plugin_" + key]) for key in
                   ("pass_device_specs", "device_id_strategy", "device_list_strategy", "mig_strategy", "fail_on_init_error"))
    settings = _settings(defaults["device_plugin_version"], defaults["device_plugin_image"], options)
    result = _preflight(settings, NODE, _host("static"))
    assert result["targets"] == ["gpu-a"] and result["gpu_uuids"] == {"gpu-a": ["GPU-1"]} and result["risks"] == []
    assert {e["name"]: e["value"] for e in settings["container"]["env"]}["PASS_DEVICE_SPECS"] == "true"


def test_extra_var_strings_pass_the_settings_check():
    # -e device_plugin_pass_device_specs=false (and =true, and fail_on_init_error=false) arrive as strings
    for text, value in (("false", "false"), ("true", "true")):
        settings = _settings("v0.17.1", "nvcr.io/nvidia/k8s-device-plugin", {"pass_device_specs": text, "fail_on_init_error": "false"})
        env = {e["name"]: e["value"] for e in settings["container"]["env"]}
        assert (env["PASS_DEVICE_SPECS"], env["FAIL_ON_INIT_ERROR"]) == (value, "false")


def test_an_option_the_version_lacks_is_refused_by_the_preflight_naming_the_nodes():
    settings = _settings("1.0.0-beta5", "nvidia/k8s-device-plugin", {"pass_device_specs": True})
    with pytest.raises(dp.PreflightRefused) as err:
        _preflight(settings, NODE, _host("none"))
    assert str(err.value).startswith("device plugin 1.0.0-beta5 refused on 1 node(s); nothing was changed:\n"
                                     "- every targeted node (1: gpu-a): device_plugin_pass_device_specs=true needs")


def test_other_managers_are_refused_unless_taken_over_and_a_changed_selector_always():
    settings = _settings("v0.17.1", "nvcr.io/nvidia/k8s-device-plugin", {"pass_device_specs": True})
    policy = {"metadata": {"name": "cluster-policy"}, "spec": {}}
    with pytest.raises(dp.PreflightRefused, match="managed by someone else"):
        _preflight(settings, NODE, _host("static"), cluster_policies=[policy])
    taken = _preflight(settings, NODE, _host("static"), cluster_policies=[policy], take_over=True)
    assert taken["taken_over"][0].startswith("- ClusterPolicy cluster-policy: the NVIDIA GPU Operator")
    existing = {"spec": {"selector": {"matchLabels": {"app": "other"}}}}
    with pytest.raises(dp.PreflightRefused, match="a DaemonSet's selector cannot change"):
        _preflight(settings, NODE, _host("static"), existing=existing)


def test_a_bad_version_names_the_variable():
    with pytest.raises(ParameterError, match="device_plugin_version"):
        _settings("latest", "nvcr.io/nvidia/k8s-device-plugin", {})
    with pytest.raises(ParameterError, match="device_plugin_mig_strategy"):
        _settings("v0.17.1", "nvidia/k8s-device-plugin", {"mig_strategy": "all"})
