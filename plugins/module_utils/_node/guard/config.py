# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the boot guard's settings, as the node reads them.

``/etc/gpuops/gpuops.json`` is strict JSON: UTF-8, no repeated key, each value of its own type
(a number is never a string), unknown keys refused (``parse_config``, ``validate``). The
controller builds that file from the role's variables with the same ``validate``
(plugins/plugin_utils/_guard_settings.py), so both sides hold it to one set of rules.
"""

from __future__ import annotations

import json

from ansible_collections.gpuops.fleet.plugins.module_utils._node import gpu_inventory as inventory
from ansible_collections.gpuops.fleet.plugins.module_utils._node import options as options_table
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import is_int
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
RECONCILE_KEYS = tuple(sorted(k for k in options_table.guard_defaults() if k in options_table.OPTION_DEFAULTS))
# the kubelet settings the guard shares with the module and the role, checked by _check_field
KUBELET_KEYS = tuple(sorted(k for k in options_table.guard_defaults() if k not in options_table.OPTION_DEFAULTS))
CONFIG_FIELDS = options_table.guard_defaults()
CONFIG_FIELDS.update(GUARD_DEFAULTS)

_TYPES = dict((k, options_table.ROWS[k]["type"]) for k in options_table.guard_defaults())
_TYPES.update(driver_wait_seconds="int", late_wait_seconds="int", late_check="bool")
INT_FIELDS = tuple(sorted(k for k, kind in _TYPES.items() if kind == "int"))
BOOL_FIELDS = tuple(sorted(k for k, kind in _TYPES.items() if kind == "bool"))
OPTIONAL_PATHS = ("nvidia_smi", "driver_root", "driver_ready_file")


def _check_field(name, value):
    """Checks of the guard's own settings and of the kubelet rows of options.TABLE (their own check);
    validate_options checks the repair's rows."""
    if name in ("backend", "kubelet_unit") and (not isinstance(value, str) or not value):
        return "must be a non-empty string"  # the guard always has a kubelet to guard
    if name == "backend" and value not in inventory.BACKENDS:
        return "%r is not one of %s" % (value, ", ".join(inventory.BACKENDS))
    if name in KUBELET_KEYS:
        return options_table.problem(name, value)
    if name == "nvidia_smi" and value is not None and (not isinstance(value, str) or not value.startswith("/")):
        return "must be null (search PATH) or an absolute path to nvidia-smi"
    if name in ("driver_root", "driver_ready_file") and value is not None and (not isinstance(value, str) or not value.startswith("/")):
        return "must be null (the host's own driver) or an absolute path, e.g. /run/nvidia/driver"
    if name == "late_wait_seconds" and (not is_int(value) or not 0 <= value <= 3600):
        return "must be a whole number of seconds from 0 to 3600"
    if name == "driver_wait_seconds" and (not is_int(value) or not 0 <= value <= 600):
        return "must be a whole number of seconds from 0 to 600"
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
    """A full configuration (defaults filled in) from a dict of settings, plus ``options`` (options.Options)."""
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
        config["options"] = options_table.validate_options(unknown_inventory="skip", **dict((k, config[k]) for k in RECONCILE_KEYS))
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
