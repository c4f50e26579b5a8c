# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""device_plugin: argument specs match defaults (keys and values) for both entry points, internal
variables are private, the README lists every variable, filters raise errors that name the variable."""

from __future__ import annotations

import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.filter import device_plugin as filters

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(os.path.dirname(ROOT), "roles", "device_plugin")


def load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def test_argument_specs_match_defaults_keys_and_values():
    defaults = load("defaults", "main.yml")
    specs = load("meta", "argument_specs.yml")["argument_specs"]
    assert sorted(specs["main"]["options"]) == sorted(defaults)
    for entry in ("main", "node_facts"):
        for name, spec in specs[entry]["options"].items():
            assert spec.get("default") == defaults[name], (entry, name)
            assert name.startswith("device_plugin_"), name


def test_internal_vars_are_private():
    assert all(name.startswith("__device_plugin_") for name in load("vars", "main.yml"))


def test_readme_documents_every_variable():
    with open(os.path.join(ROLE, "README.md")) as handle:
        readme = handle.read()
    assert [name for name in load("defaults", "main.yml") if "`%s`" % name not in readme] == []


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
    with pytest.raises(AnsibleFilterError, match="device_plugin_pass_device_specs"):
        filters.device_plugin_settings("1.0.0-beta5", "nvidia/k8s-device-plugin", {"pass_device_specs": True})
    with pytest.raises(AnsibleFilterError, match="expects the GPU hosts' variables as a list"):
        filters.device_plugin_preflight([], filters.device_plugin_settings("v0.17.1", "x/y", {}), {}, {"gpu-a": {}})
