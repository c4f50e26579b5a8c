# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: one owner for the checkpoint repair's settings.

``TABLE`` is the one place a setting of a repair is declared: its type, default, choices and check
(``check``: the one rule a value must meet, wherever it comes from: module option, gpuops.json key,
role variable). Everything else derives from it, as community.crypto's ``get_privatekey_argument_spec()`` serves
its module and its action plugin alike:

* the modules' argument specs (``argument_spec``; ``CHECKPOINT_ARGS`` and ``BACKEND_ARGS`` pair
  with the doc fragments ``gpuops.fleet.checkpoint`` and ``gpuops.fleet.attributes.gpu_backend``);
* ``OPTION_DEFAULTS`` (what ``validate_options`` fills in) and ``Options``, a reconcile run's checked settings;
* the boot guard's ``gpuops.json`` keys (``guard_config.CONFIG_FIELDS``: the rows marked ``guard``);
* the ``checkpoint_guard`` role: its ``checkpoint_guard_<name>`` variables (a test proves its
  defaults and argument specs agree with this table, or differ where ``role_default`` says so),
  and the module arguments its repair step passes (the controller's ``plugin_utils/_guard_settings.py``
  derives both from the rows marked ``role``: node code keeps no controller-only helper);
* every check of one value (``check``): ``validate_options`` (the module and the guard),
  the guard's ``gpuops.json`` (``guard/config.py``) and the module's kubelet settings call it; only
  checks across settings (a backup directory inside the checkpoint's) stay with their callers.

Adding a setting is one row here plus its documentation (module, role spec, role README).
"""

from __future__ import annotations

import os

from ansible_collections.gpuops.fleet.plugins.module_utils._node import device_ids as ids
from ansible_collections.gpuops.fleet.plugins.module_utils._node import nodefile
from ansible_collections.gpuops.fleet.plugins.module_utils._node.gpu_inventory import BACKENDS
from ansible_collections.gpuops.fleet.plugins.module_utils._common import settings
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import UNIT_NAME, is_int
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

DEFAULT_PATH = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
# Not inside device-plugins/: kubelets up to 1.2x delete every file there but the checkpoint.
DEFAULT_BACKUP_DIR = "/var/lib/gpuops/backups"
STRATEGIES = ("auto", "remove", "prune")
ON_CORRUPT = ("report", "remove")
ON_UNKNOWN_INVENTORY = ("fail", "skip")
# A run killed while kubelet is stopped: the transient timer armed before the stop starts kubelet
# at most this many seconds later (repair.Kubelet).
DEFAULT_RESCUE_SECONDS = 60
RESCUE_SECONDS_RANGE = (1, 3600)


def is_absolute_path(value):
    """An absolute path the kernel can take: a string, absolute, and without a NUL byte (which no file name holds)."""
    return isinstance(value, str) and os.path.isabs(value) and "\x00" not in value


# The checks a row names: each takes the value and returns None, or why it is refused (the field is the row's name).
def _absolute_path(value):
    return None if is_absolute_path(value) else "%r must be an absolute path" % (value,)


def _checkpoint_path(value):
    reason = _absolute_path(value)
    return reason and "%s, e.g. %s" % (reason, DEFAULT_PATH)


def _positive_int(value):
    return None if is_int(value) and value > 0 else "%r must be a positive whole number" % (value,)


def _backups_to_keep(value):
    return None if is_int(value) and value >= 0 else "%r must be a whole number of backups to keep (0 keeps all)" % (value,)


def _rescue_seconds(value):
    low, high = RESCUE_SECONDS_RANGE
    return None if is_int(value) and low <= value <= high else "%r must be a whole number of seconds from %d to %d" % (value, low, high)


def _unit_name_or_empty(value):
    if isinstance(value, str) and (value == "" or UNIT_NAME.match(value)):
        return None
    return "%r is not a unit name; use the kubelet's unit, e.g. kubelet.service (an empty string leaves kubelet alone)" % (value,)


def _resource_names(value):
    if isinstance(value, (list, tuple)) and all(isinstance(r, str) and "/" in r and not set("*?[") & set(r) for r in value):
        return None
    return "expected a list of resource names such as nvidia.com/gpu (no patterns), got %r" % (value,)


def _resource_patterns(value):
    try:
        ids.validate_resource_patterns(value)
    except ParameterError as exc:
        return exc.reason
    return None


def _row(name, kind, default, choices=None, elements=None, aliases=None, reconcile=True, guard=True, role=True, role_default=None, check=None):
    return settings.row(name, kind, default, choices, elements, aliases, check, reconcile=reconcile, guard=guard, role=role,
                        role_default=role_default)


# reconcile: a setting of the reconcile run (reconcile.Options); guard: a key of gpuops.json;
# role: a checkpoint_guard_<name> variable; role_default: the role's default where it differs, and why
TABLE = (
    _row("checkpoint_path", "path", DEFAULT_PATH, aliases=["path"], check=_checkpoint_path),
    _row("strategy", "str", "auto", choices=STRATEGIES),
    _row("on_corrupt", "str", "report", choices=ON_CORRUPT),
    # the role skips a node whose GPUs cannot be read (a fleet run goes on, the summary names it);
    # the module fails: one node, one answer. The guard never reads it (boot: no inventory, no repair)
    _row("unknown_inventory", "str", "fail", choices=ON_UNKNOWN_INVENTORY, guard=False, role_default="skip"),
    _row("backup_dir", "path", DEFAULT_BACKUP_DIR, check=_absolute_path),
    _row("backup_keep", "int", nodefile.DEFAULT_BACKUP_KEEP, check=_backups_to_keep),
    _row("resources", "list", list(ids.DEFAULT_GPU_RESOURCES), elements="str", check=_resource_patterns),
    # a one-off after a mode switch (gpu_sharing's retire step), never a boot-time or role setting
    _row("retired_resources", "list", [], elements="str", guard=False, role=False, check=_resource_names),
    _row("max_bytes", "int", nodefile.DEFAULT_MAX_BYTES, check=_positive_int),
    _row("lock_dir", "path", nodefile.DEFAULT_LOCK_DIR, check=_absolute_path),
    _row("lock_timeout", "int", nodefile.DEFAULT_LOCK_TIMEOUT, check=_positive_int),
    _row("kubelet_unit", "str", "kubelet.service", reconcile=False, check=_unit_name_or_empty),
    _row("restart_kubelet", "bool", True, reconcile=False, check=settings.boolean),
    _row("kubelet_rescue_seconds", "int", DEFAULT_RESCUE_SECONDS, reconcile=False, check=_rescue_seconds),
)
SETTINGS = settings.Table(*TABLE)  # the generic half: checks, defaults, argument specs (_common/settings.py)
ROWS = SETTINGS.by_name
problem, check = SETTINGS.problem, SETTINGS.check


def reconcile_defaults():
    """``{setting: default}`` of a reconcile run (OPTION_DEFAULTS; lists as tuples: shared, never changed)."""
    return dict((r["name"], tuple(r["default"]) if r["type"] == "list" else r["default"]) for r in TABLE if r["reconcile"])


def guard_defaults():
    """``{key: default}`` of the rows that are keys of the guard's gpuops.json."""
    return dict((r["name"], settings.copy(r["default"])) for r in TABLE if r["guard"])


argument_spec = SETTINGS.argument_spec

# Every setting of a reconcile run, with its default (module options and guard keys alike).
OPTION_DEFAULTS = reconcile_defaults()


class Options:
    """The validated settings of one reconcile run, shared by the module and the guard.

    Built once by validate_options(); the field names are the module's options and
    the guard's configuration keys alike, so an error names the field the user wrote.
    """

    __slots__ = tuple(sorted(OPTION_DEFAULTS)) + ("patterns",)

    def __init__(self, **values):
        for name, value in values.items():
            setattr(self, name, value)


def _inside(child, parent):
    child, parent = os.path.realpath(child), os.path.realpath(parent)
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


# the settings that are paths on the node (hostroot.localize maps them where the module runs beside the host)
PATH_OPTIONS = ("checkpoint_path", "backup_dir", "lock_dir")


def validate_options(**values):
    """Check every setting once; returns an Options. Unknown or bad settings raise ParameterError."""
    unknown = sorted(set(values) - set(OPTION_DEFAULTS))
    if unknown:
        raise ParameterError(unknown[0], "unknown setting; known settings: %s" % ", ".join(sorted(OPTION_DEFAULTS)))
    merged = dict(OPTION_DEFAULTS)
    merged.update(values)
    # each value by its row's check (the table's order), then what only the settings together can say
    for row in TABLE:
        if row["name"] in merged:
            check(row["name"], merged[row["name"]])
    if _inside(merged["backup_dir"], os.path.dirname(merged["checkpoint_path"])):
        raise ParameterError(
            "backup_dir",
            "must not be inside the checkpoint's directory %s: kubelet may delete files there; use e.g. %s"
            % (os.path.dirname(merged["checkpoint_path"]), DEFAULT_BACKUP_DIR),
        )
    options = Options(**merged)
    options.patterns = ids.validate_resource_patterns(merged["resources"])
    return options


CHECKPOINT_ARGS = argument_spec("checkpoint_path", "max_bytes")

BACKEND_ARGS = dict(
    backend=dict(type="str", default="auto", choices=list(BACKENDS)),
    driver_root=dict(type="path"),
)
