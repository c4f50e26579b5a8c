# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One owner per option set: options.TABLE, and everything that must agree with it."""

from __future__ import annotations

import os
import re

import pytest
import yaml

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._node.guard import config as guard_config
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_settings
from ansible_collections.gpuops.fleet.plugins.plugin_utils._guard_settings import role_settings
from ansible_collections.gpuops.fleet.plugins.module_utils._node import options
from ansible_collections.gpuops.fleet.plugins.modules import kubelet_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))))
ROLE = os.path.join(ROOT, "roles", "checkpoint_guard")


def _yaml(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def test_the_module_argspec_is_the_table_plus_its_own_options():
    spec = options.argument_spec()
    assert set(spec) == set(options.ROWS)
    for name, row in options.ROWS.items():
        assert spec[name]["type"] == row["type"] and spec[name]["default"] == row["default"]
        assert spec[name].get("choices") == (list(row["choices"]) if row["choices"] else None)
        assert spec[name].get("elements") == row["elements"] and spec[name].get("aliases") == row["aliases"]
    # the module's argspec is built from it (main() reads the table; a restated option would show here)
    with open(kubelet_checkpoint.__file__) as handle:
        source = handle.read()
    for name in options.ROWS:
        assert "%s=dict(" % name not in source, name


def test_the_reconcile_defaults_and_the_guard_keys_derive_from_the_table():
    derived = dict((r["name"], tuple(r["default"]) if r["type"] == "list" else r["default"]) for r in options.TABLE if r["reconcile"])
    assert derived == options.OPTION_DEFAULTS
    guard_rows = set(r["name"] for r in options.TABLE if r["guard"])
    assert guard_rows <= set(guard_config.CONFIG_FIELDS)
    assert set(guard_config.CONFIG_FIELDS) - guard_rows == set(guard_config.GUARD_DEFAULTS)
    for name in guard_rows:
        assert guard_config.CONFIG_FIELDS[name] == options.ROWS[name]["default"], name


def test_the_role_defaults_and_argument_specs_agree_with_the_table():
    defaults = _yaml("defaults", "main.yml")
    specs = _yaml("meta", "argument_specs.yml")["argument_specs"]
    spec = specs["main"]["options"]
    # the repair entry point declares every repair setting, exactly as the main one does
    assert set(_guard_settings.role_defaults()) <= set(specs["repair"]["options"])
    for variable in specs["repair"]["options"]:
        assert specs["repair"]["options"][variable] == spec[variable], variable
    for variable, default in _guard_settings.role_defaults().items():
        row = options.ROWS[variable[len("checkpoint_guard_"):]]
        assert defaults[variable] == default, variable
        assert spec[variable]["default"] == default, variable
        assert spec[variable]["type"] == row["type"], variable
        assert sorted(spec[variable].get("choices") or ()) == sorted(row["choices"] or ()), variable
        if row["elements"]:
            assert spec[variable]["elements"] == row["elements"], variable
    # a row the role does not have is not a role variable
    assert "checkpoint_guard_retired_resources" not in defaults


def test_the_role_passes_every_table_setting_from_one_checked_result():
    raw = dict.fromkeys(_yaml("vars", "main.yml")["__checkpoint_guard_setting_names"])
    assert set(r["name"] for r in options.TABLE if r["role"]) <= set(raw)
    # the role's variables as strings (AWX survey): module_args is typed and holds every role row
    values = dict((k, "x") for k in raw)
    values.update(checkpoint_path="/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", backup_dir="/var/lib/gpuops/backups",
                  backup_keep="3", lock_dir="/run/gpuops", lock_timeout="30", strategy="prune", on_corrupt="report",
                  unknown_inventory="skip", resources=["nvidia.com/gpu"], backend="auto", nvidia_smi="", max_bytes="1024",
                  driver_wait_seconds="0", restart_kubelet="yes", kubelet_rescue_seconds="60", kubelet_unit="kubelet.service",
                  driver_root="", driver_ready_file="", late_check="false", late_wait_seconds="600", config_path="/etc/gpuops/gpuops.json",
                  bin="/usr/local/bin/gpuops", python="/usr/bin/python3", lib_dir="/usr/local/lib/gpuops", after_units=[],
                  timeout_seconds="120", environment={})
    args = role_settings(values)["module_args"]
    assert set(args) == set(r["name"] for r in options.TABLE if r["role"])
    assert (args["backup_keep"], args["restart_kubelet"], args["strategy"], args["unknown_inventory"]) == (3, True, "prune", "skip")
    # the tasks have the module's action plugin read the role's variables from the task's variables (from_task_vars: no
    # template argument, issue 62), and name no table setting themselves
    for step in ("repair.yml", "plan.yml"):
        task = _yaml("tasks", step)[0]["gpuops.fleet.kubelet_checkpoint"]
        assert isinstance(task, dict) and task["role"]["from_task_vars"] is True and "settings" not in task, step
        assert "variables" not in task["role"], step
        restated = set(task) & set(r["name"] for r in options.TABLE)
        assert restated == set(), (step, restated)
    # the plan's one template is the environment keyword's: none among the module's arguments
    plan = _yaml("tasks", "plan.yml")[0]
    assert "{{" not in repr(plan["gpuops.fleet.kubelet_checkpoint"])


def test_a_role_only_setting_out_of_its_choices_is_refused_by_name():
    raw = dict.fromkeys(_yaml("vars", "main.yml")["__checkpoint_guard_setting_names"])
    values = dict((k, None) for k in raw)
    values.update(unknown_inventory="sometimes", kubelet_unit="kubelet.service", backend="auto", config_path="/etc/g.json",
                  bin="/usr/local/bin/gpuops", python="/usr/bin/python3", lib_dir="/usr/local/lib/gpuops", timeout_seconds="1")
    for key in ("checkpoint_path", "backup_dir", "lock_dir", "strategy", "on_corrupt", "resources", "max_bytes", "backup_keep",
                "lock_timeout", "restart_kubelet", "kubelet_rescue_seconds", "driver_wait_seconds", "late_check", "late_wait_seconds"):
        values.pop(key)
    with pytest.raises(ParameterError, match="checkpoint_guard_unknown_inventory"):
        role_settings(values)


# the role's settings as a valid run has them (strings where AWX surveys give strings)
_ROLE_RAW = dict(checkpoint_path="/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", backup_dir="/var/lib/gpuops/backups",
                 backup_keep="3", lock_dir="/run/gpuops", lock_timeout="30", strategy="prune", on_corrupt="report", unknown_inventory="skip",
                 resources=["nvidia.com/gpu"], backend="auto", nvidia_smi="", max_bytes="1024", driver_wait_seconds="0", restart_kubelet="yes",
                 kubelet_rescue_seconds="60", kubelet_unit="kubelet.service", driver_root="", driver_ready_file="", late_check="false",
                 late_wait_seconds="600", config_path="/etc/gpuops/gpuops.json", bin="/usr/local/bin/gpuops", python="/usr/bin/python3",
                 lib_dir="/usr/local/lib/gpuops", after_units=[], timeout_seconds="120", environment={})
# a value each row refuses (the table's check or choices), and the reason's start every entry point must give
BAD = {
    "checkpoint_path": ("relative/checkpoint", "'relative/checkpoint' must be an absolute path"),
    "strategy": ("nuke", "'nuke' is not one of auto, remove, prune"),
    "on_corrupt": ("shrug", "'shrug' is not one of report, remove"),
    "unknown_inventory": ("maybe", "'maybe' is not one of fail, skip"),
    "backup_dir": ("backups", "'backups' must be an absolute path"),
    "backup_keep": (-1, "-1 must be a whole number of backups to keep"),
    "resources": (["gpu"], "'gpu' is not a resource name"),
    "retired_resources": (["nvidia.com/*"], "expected a list of resource names"),
    "max_bytes": (0, "0 must be a positive whole number"),
    "lock_dir": ("/run/\x00gpuops", "'/run/\\x00gpuops' must be an absolute path"),
    "lock_timeout": (-3, "-3 must be a positive whole number"),
    "kubelet_unit": ("--help", "'--help' is not a unit name"),
    "restart_kubelet": ("yes", "must be true or false"),
    "kubelet_rescue_seconds": (0, "0 must be a whole number of seconds from 1 to 3600"),
}


def test_every_row_owns_its_check_and_each_entry_point_gives_its_answer():
    """Adding a setting is one row: its check is the table's; the module's run (validate_options) and the guard's
    gpuops.json (guard config) give its answer, and the role's settings (role_settings, which first turn survey
    strings into their types and hold paths to what a unit line takes) refuse the value by the role variable's name."""
    assert set(BAD) == set(options.ROWS)
    for name, (value, reason) in BAD.items():
        row = options.ROWS[name]
        with pytest.raises(ParameterError) as caught:
            options.check(name, value)
        assert (caught.value.field, caught.value.reason.startswith(reason)) == (name, True), (name, caught.value.reason)
        assert options.check(name, options.ROWS[name]["default"]) == row["default"]
        if row["reconcile"]:
            with pytest.raises(ParameterError, match=r"^%s: .*%s" % (name, re.escape(reason))):
                options.validate_options(**{name: value})
        if row["guard"]:
            with pytest.raises(ParameterError, match=r"^gpuops\.json: %s: .*%s" % (name, re.escape(reason))):
                guard_config.validate({name: value}, "gpuops.json")
        if row["role"]:
            role_value = "sometimes" if row["type"] == "bool" else value  # "yes" is a survey's true
            with pytest.raises(ParameterError, match=r"^checkpoint_guard_%s: " % name):
                role_settings(dict(_ROLE_RAW, **{name: role_value}))
