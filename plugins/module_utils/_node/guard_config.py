# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the boot guard's settings.

* ``/etc/gpuops/gpuops.json`` is strict JSON: UTF-8, no repeated key, each value of
  its own type (a number is never a string), unknown keys refused (``parse_config``);
* the ``checkpoint_guard`` role builds that file from role variables, which may
  arrive as strings (``-e``, AWX surveys, older ansible-core): ``role_settings``
  converts them explicitly and checks what goes into the systemd unit (unit names,
  paths, ``Environment=`` lines), so nothing reaches a root unit file unchecked.
"""

from __future__ import annotations

from collections.abc import Mapping

import json
import re

from ansible_collections.gpuops.fleet.plugins.module_utils._node import gpu_inventory as inventory
from ansible_collections.gpuops.fleet.plugins.module_utils._node import options as options_table
from ansible_collections.gpuops.fleet.plugins.module_utils._node import reconcile as rec
from ansible_collections.gpuops.fleet.plugins.module_utils._node import repair
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import ENV_NAME, UNIT_NAME, UNIT_PATH, as_bool, as_int, is_int
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

DEFAULT_CONFIG = "/etc/gpuops/gpuops.json"

# The guard's own settings; the rest are the reconcile options (the guard always
# skips a node whose GPUs cannot be read, so unknown_inventory is not one of them).
# the guard's own settings (the repair's are options.TABLE's rows marked guard)
GUARD_DEFAULTS = {
    "backend": "auto",
    "nvidia_smi": None,
    "driver_wait_seconds": 0,
    # a containerized driver (GPU Operator): where its root is, the file its validator
    # writes once the driver works, and the late check that waits for it after kubelet
    "driver_root": None,
    "driver_ready_file": None,
    "late_check": False,
    "late_wait_seconds": 600,
}
# the repair's settings that are gpuops.json keys, checked by validate_options
RECONCILE_KEYS = tuple(sorted(k for k in options_table.guard_defaults() if k in rec.OPTION_DEFAULTS))
# the kubelet settings the guard shares with the module and the role, checked by _check_field
KUBELET_KEYS = tuple(sorted(k for k in options_table.guard_defaults() if k not in rec.OPTION_DEFAULTS))
CONFIG_FIELDS = options_table.guard_defaults()
CONFIG_FIELDS.update(GUARD_DEFAULTS)

_TYPES = dict((k, options_table.ROWS[k]["type"]) for k in options_table.guard_defaults())
_TYPES.update(driver_wait_seconds="int", late_wait_seconds="int", late_check="bool")
INT_FIELDS = tuple(sorted(k for k, kind in _TYPES.items() if kind == "int"))
BOOL_FIELDS = tuple(sorted(k for k, kind in _TYPES.items() if kind == "bool"))
OPTIONAL_PATHS = ("nvidia_smi", "driver_root", "driver_ready_file")

_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _check_field(name, value):
    """Type and range checks of the guard's own settings (validate_options checks the rest)."""
    if name in ("backend", "kubelet_unit") and (not isinstance(value, str) or not value):
        return "must be a non-empty string"
    if name == "backend" and value not in inventory.BACKENDS:
        return "%r is not one of %s" % (value, ", ".join(inventory.BACKENDS))
    if name == "kubelet_unit" and not UNIT_NAME.match(value):
        return "%r is not a unit name; use the kubelet's unit, e.g. kubelet.service" % (value,)
    if name == "nvidia_smi" and value is not None and (not isinstance(value, str) or not value.startswith("/")):
        return "must be null (search PATH) or an absolute path to nvidia-smi"
    if name in ("driver_root", "driver_ready_file") and value is not None and (not isinstance(value, str) or not value.startswith("/")):
        return "must be null (the host's own driver) or an absolute path, e.g. /run/nvidia/driver"
    if name == "late_wait_seconds" and (not is_int(value) or not 0 <= value <= 3600):
        return "must be a whole number of seconds from 0 to 3600"
    if name == "driver_wait_seconds" and (not is_int(value) or not 0 <= value <= 600):
        return "must be a whole number of seconds from 0 to 600"
    if name == "kubelet_rescue_seconds" and (not is_int(value) or not repair.RESCUE_SECONDS_RANGE[0] <= value <= repair.RESCUE_SECONDS_RANGE[1]):
        return "must be a whole number of seconds from %d to %d" % repair.RESCUE_SECONDS_RANGE
    if name in BOOL_FIELDS and not isinstance(value, bool):
        return "must be true or false"
    return None


def _no_duplicates(source):
    def hook(pairs):
        seen = set()
        for key, dummy in pairs:
            if key in seen:
                raise ParameterError("%s: %s" % (source, key), "appears more than once; keep one")
            seen.add(key)
        return dict(pairs)

    return hook


def validate(doc, source):
    """A full configuration (defaults filled in) from a dict of settings, plus ``options`` (rec.Options)."""
    if not isinstance(doc, dict):
        raise ParameterError(source, "must hold a JSON object of settings")
    unknown = sorted(set(doc) - set(CONFIG_FIELDS))
    if unknown:
        raise ParameterError("%s: %s" % (source, unknown[0]), "unknown setting; known settings: %s" % ", ".join(sorted(CONFIG_FIELDS)))
    config = dict(CONFIG_FIELDS)
    config["resources"] = list(config["resources"])
    config.update(doc)
    for name in sorted(set(GUARD_DEFAULTS) | set(KUBELET_KEYS)):
        problem = _check_field(name, config[name])
        if problem:
            raise ParameterError("%s: %s" % (source, name), problem)
    if not isinstance(config["resources"], list) or not all(isinstance(v, str) for v in config["resources"]):
        raise ParameterError("%s: resources" % source, 'must be a list of resource names or patterns, e.g. ["nvidia.com/gpu"]')
    try:
        config["options"] = rec.validate_options(unknown_inventory="skip", **dict((k, config[k]) for k in RECONCILE_KEYS))
    except ParameterError as exc:
        raise ParameterError("%s: %s" % (source, exc.field), exc.reason) from exc
    return config


def parse_config(text, source):
    """Validated configuration from JSON ``text``; malformed, repeated or unknown settings raise ParameterError."""
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates(source)) if text.strip() else {}
    except ValueError as exc:
        raise ParameterError(source, "not valid JSON (%s)" % exc) from exc
    return validate(doc, source)


def load_config(path, explicit):
    """Read the configuration file; a missing default file means defaults, a missing explicit one is an error."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        if not explicit and getattr(exc, "errno", None) == 2:
            return parse_config("", path)
        raise ParameterError("--config", "cannot read %s: %s" % (path, exc.strerror or exc)) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParameterError(path, "is not valid UTF-8 (byte 0x%02x at offset %d); write the file as UTF-8 JSON" % (raw[exc.start], exc.start)) from exc
    return parse_config(text, path)


# ---------------------------------------------------------------------------
# From role variables (strings allowed) to the file and the unit
# ---------------------------------------------------------------------------

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
    module_args = options_table.module_args(dict(config, **role_only))
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
