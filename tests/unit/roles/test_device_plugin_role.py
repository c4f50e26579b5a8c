# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""device_plugin: argument specs match defaults (keys and values) for both entry points, internal
variables are private, the README lists every variable, filters raise errors that name the variable."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.filter import device_plugin as filters

import role_checks  # tests/unit/roles/role_checks.py  # pylint: disable=import-error


def load(*parts):
    return role_checks.load("device_plugin", *parts)


def test_argument_specs_match_defaults_keys_and_values():
    assert role_checks.spec_problems("device_plugin", entries=("main", "node_facts")) == []


def test_internal_vars_are_private():
    assert role_checks.non_private_vars("device_plugin") == []


def test_readme_documents_every_variable():
    assert role_checks.undocumented_vars("device_plugin") == []


def test_defaults_pass_the_preflight_on_static_nodes():
    defaults = load("defaults", "main.yml")
    options = dict((key, defaults["device_plugin_" + key]) for key in
                   ("pass_device_specs", "device_id_strategy", "device_list_strategy", "mig_strategy", "fail_on_init_error"))
    settings = filters.device_plugin_settings(defaults["device_plugin_version"], defaults["device_plugin_image"], options)
    node = {"metadata": {"name": "gpu-a", "labels": {}}}
    host = {"inventory_hostname": "gpu-a", "device_plugin_kubelet": {"node_name": "gpu-a", "cpu_manager_policy": "static",
                                                                     "source": "config file /var/lib/kubelet/config.yaml"}}
    result = filters.device_plugin_preflight([node], settings, {}, [host])
    assert result["problems"] == [] and result["targets"] == ["gpu-a"]
    assert {e["name"]: e["value"] for e in settings["container"]["env"]}["PASS_DEVICE_SPECS"] == "true"


def test_filters_turn_typed_errors_into_filter_errors():
    with pytest.raises(AnsibleFilterError, match="device_plugin_version"):
        filters.device_plugin_settings("latest", "nvcr.io/nvidia/k8s-device-plugin", {})
    with pytest.raises(AnsibleFilterError, match="device_plugin_mig_strategy"):
        filters.device_plugin_settings("v0.17.1", "nvidia/k8s-device-plugin", {"mig_strategy": "all"})
    with pytest.raises(AnsibleFilterError, match="expects the GPU hosts' variables as a list"):
        filters.device_plugin_preflight([], filters.device_plugin_settings("v0.17.1", "x/y", {}), {}, {"gpu-a": {}})


def test_extra_var_strings_pass_the_settings_check():
    # -e device_plugin_pass_device_specs=false (and =true, and fail_on_init_error=false) arrive as strings
    for text, value in (("false", "false"), ("true", "true")):
        settings = filters.device_plugin_settings("v0.17.1", "nvcr.io/nvidia/k8s-device-plugin",
                                                  {"pass_device_specs": text, "fail_on_init_error": "false"})
        env = {e["name"]: e["value"] for e in settings["container"]["env"]}
        assert (env["PASS_DEVICE_SPECS"], env["FAIL_ON_INIT_ERROR"]) == (value, "false")


def test_an_option_the_version_lacks_is_refused_by_the_preflight_naming_the_nodes():
    settings = filters.device_plugin_settings("1.0.0-beta5", "nvidia/k8s-device-plugin", {"pass_device_specs": True})
    node = {"metadata": {"name": "gpu-a", "labels": {}}}
    host = {"inventory_hostname": "gpu-a", "device_plugin_kubelet": {"node_name": "gpu-a", "cpu_manager_policy": "none",
                                                                     "source": "config file /var/lib/kubelet/config.yaml"}}
    result = filters.device_plugin_preflight([node], settings, {}, [host])
    assert result["refused"] == ["gpu-a"]
    assert result["message"].startswith("- every targeted node (1: gpu-a): device_plugin_pass_device_specs=true needs")
