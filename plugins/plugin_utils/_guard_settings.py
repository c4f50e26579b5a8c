# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection (controller side): the boot guard's settings from the role's variables.

The ``checkpoint_guard`` role builds ``/etc/gpuops/gpuops.json`` and the guard's units from its variables, which
may arrive as strings (``-e``, AWX surveys, older ansible-core): ``role_settings`` converts them explicitly, checks
the file with the node's own ``validate`` (``_node/guard/config.py``), and checks what goes into a systemd unit
(unit names, paths, ``Environment=`` lines), so nothing reaches a root unit file unchecked. Controller code: it is
not in the guard's file (``_guard_code``), which holds only what runs on the node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import ENV_NAME, UNIT_NAME, UNIT_PATH, as_bool, as_int
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._common import settings as settings_table
from ansible_collections.gpuops.fleet.plugins.module_utils._node import options as options_table
from ansible_collections.gpuops.fleet.plugins.module_utils._node.guard.config import BOOL_FIELDS, CONFIG_FIELDS, INT_FIELDS, OPTIONAL_PATHS, validate

_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _unit_path(field, value):
    if not isinstance(value, str) or not UNIT_PATH.match(value):
        raise ParameterError(field, "%r must be an absolute path of letters, digits and ._@+:,=/- only (it is written into gpuops.service)" % (value,))
    return value


def environment_lines(environment, field="checkpoint_guard_environment"):
    """``Environment="NAME=value"`` lines for a systemd unit, refusing what could break out of the line."""
    if environment is None:
        return []
    if not isinstance(environment, dict):
        raise ParameterError(field, "expected a mapping of environment variable names to values")
    lines = []
    for name in sorted(environment):
        value = environment[name]
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise ParameterError("%s.%s" % (field, name), "is not an environment variable name (letters, digits and _, not starting with a digit)")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ParameterError("%s.%s" % (field, name), "expected a string value, got %s" % type(value).__name__)
        value = str(value)
        if _CONTROL.search(value):
            raise ParameterError("%s.%s" % (field, name), "contains a newline or another control character; one line per variable")
        # systemd.exec(5) Environment=: C escapes inside quotes, % starts a specifier
        quoted = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
        lines.append('Environment="%s=%s"' % (name, quoted))
    return lines


def role_settings(raw):
    """The ``checkpoint_guard`` role's variables -> {"config": typed gpuops.json content, "unit": checked unit values,
    "module_args": kubelet_checkpoint's arguments for the repair step (every row of options.TABLE the role has)}.

    ``raw`` maps the config keys plus ``config_path``, ``bin``, ``python``, ``lib_dir``, ``after_units``,
    ``timeout_seconds`` and ``environment`` to the role variables' values. Strings
    are converted explicitly where a number or a boolean is meant; anything else that
    does not fit raises ParameterError naming the role variable.
    """
    if not isinstance(raw, Mapping):
        raise ParameterError("checkpoint_guard_settings", "expects a mapping of the role's settings (the role builds it from its "
                             "checkpoint_guard_* variables), got %s %r" % (type(raw).__name__, str(raw)[:80]))
    prefix = "checkpoint_guard_"
    doc = {}
    for key in CONFIG_FIELDS:
        if key not in raw:
            continue
        value = raw[key]
        field = prefix + key
        if key in INT_FIELDS:
            value = as_int(field, value)
        elif key in BOOL_FIELDS:
            value = as_bool(field, value)
        elif key in OPTIONAL_PATHS and value in ("", None):
            value = None
        doc[key] = value
    for key in ("checkpoint_path", "backup_dir", "lock_dir", "driver_root", "driver_ready_file"):
        if doc.get(key) is not None:
            _unit_path(prefix + key, doc[key])
    try:
        config = validate(doc, "checkpoint_guard")
    except ParameterError as exc:
        raise ParameterError(exc.field.replace("checkpoint_guard: ", prefix), exc.reason) from exc
    del config["options"]
    # the role's settings that are not gpuops.json keys (unknown_inventory): checked here too, so the
    # repair step's arguments come whole from this one checked result (options.module_args)
    role_only = {}
    for row in options_table.TABLE:
        if row["role"] and not row["guard"]:
            value = raw.get(row["name"], row["role_default"] if row["role_default"] is not None else row["default"])
            if row["choices"] and value not in row["choices"]:
                raise ParameterError(prefix + row["name"], "%r is not one of %s" % (value, ", ".join(row["choices"])))
            role_only[row["name"]] = value
    module_args = module_args_of(dict(config, **role_only))
    unit = {"environment": environment_lines(raw.get("environment"), prefix + "environment")}
    for key in ("config_path", "bin", "python", "lib_dir"):
        unit[key] = _unit_path(prefix + key, raw.get(key))
    after = raw.get("after_units") or []
    if not isinstance(after, list):
        raise ParameterError(prefix + "after_units", "expected a list of unit names")
    for item in after:
        if not isinstance(item, str) or not UNIT_NAME.match(item):
            raise ParameterError(prefix + "after_units", "%r is not a unit name (e.g. nvidia-persistenced.service)" % (item,))
    unit["after_units"] = list(after)
    unit["timeout_seconds"] = as_int(prefix + "timeout_seconds", raw.get("timeout_seconds"))
    if unit["timeout_seconds"] <= 0:
        raise ParameterError(prefix + "timeout_seconds", "must be a positive number of seconds")
    return {"config": config, "unit": unit, "module_args": module_args}


def role_defaults():
    """``{checkpoint_guard_<name>: default}`` the role's defaults must hold (the role's own where it differs): the rows of
    the checkpoint repair's table (``_node/options.py``) marked ``role``."""
    return dict(("checkpoint_guard_" + r["name"], settings_table.copy(r["role_default"] if r["role_default"] is not None else r["default"]))
                for r in options_table.TABLE if r["role"])


def module_args_of(settings):
    """kubelet_checkpoint's arguments from the role's checked settings (``role_settings``' ``config`` plus the role-only
    rows), so the role passes every setting of the table and nothing else."""
    return dict((r["name"], settings_table.copy(settings[r["name"]])) for r in options_table.TABLE if r["role"])
