# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection (controller side): the checkpoint_guard role's variables -> what the
install and the repair take, once for the filters and the kubelet_checkpoint action plugin.

``install_spec`` is gpuops.fleet.guard_install's options (the ``_checkpoint_guard_install_spec`` filter's result), and
``files`` and ``layout`` its parts; ``role_task`` is what the role's plan and repair tasks give the module, built by the
kubelet_checkpoint action plugin from the role's variables as they come (its ``role`` option). Each raises a
GpuopsError that names the role variable; the filters and the action plugin turn it into their own failure once.

Why the action plugin, not a filter in the task's arguments (issue 36): a task that names any of this collection's
filters makes its worker load every filter file of the collection, and with them this code, once per node; the task's
action plugin is loaded once, by ansible-core's main process (its strategy reads the action's class before it queues
the task), and every node's worker inherits it.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import UNIT_PATH, as_bool
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_files, _guard_layout
from ansible_collections.gpuops.fleet.plugins.plugin_utils._guard_settings import role_settings
from ansible_collections.gpuops.fleet.plugins.plugin_utils._tags import tags_run


def checked(settings, root, unit_dir):
    """(root, unit_dir) of a filter's input, checked as every path the role writes into a unit (role_settings)."""
    if not isinstance(settings, dict) or not {"config", "unit"} <= set(settings):
        raise ParameterError("_input", "expected the result of gpuops.fleet._checkpoint_guard_settings")
    if root not in ("", None) and not UNIT_PATH.match(str(root)):
        raise ParameterError("checkpoint_guard_sysroot", "%r must be / or an absolute path of letters, digits and ._@+:,=/-" % (root,))
    if not isinstance(unit_dir, str) or not UNIT_PATH.match(unit_dir):
        raise ParameterError("checkpoint_guard_unit_dir", "%r must be an absolute path of letters, digits and ._@+:,=/-" % (unit_dir,))
    return root or "", unit_dir.rstrip("/") or "/"


def files(settings, root="", unit_dir="/etc/systemd/system", hardening=True, late_check=False):
    """The guard's wrapper, configuration and units for gpuops.fleet.guard_install, from role_settings' result."""
    root, unit_dir = checked(settings, root, unit_dir)
    return _guard_files.files(settings, root, unit_dir, as_bool("checkpoint_guard_hardening", hardening),
                              as_bool("checkpoint_guard_late_check", late_check))


def layout(settings, root="", unit_dir="/etc/systemd/system", late_check=False):
    """The install's directories (each with its role variable) and what an older layout left."""
    root, unit_dir = checked(settings, root, unit_dir)
    return {"directories": _guard_layout.directories(settings, unit_dir, root),
            "absent": _guard_layout.leftovers(settings, unit_dir, as_bool("checkpoint_guard_late_check", late_check), root)}


def install_spec(raw, root="", unit_dir="/etc/systemd/system", hardening=True, late_check=False, require_persistent=True,
                 manage_systemd=True, enabled=True, settings=None):
    """gpuops.fleet.guard_install's options from the role's variables as they come (``raw``; ``settings``, its
    role_settings result where the caller has it): the layout's directories and leftovers, the files, the code's path,
    the self-test and the units, from one settings check."""
    settings = role_settings(raw) if settings is None else settings
    root = "" if root in ("", None) else str(root).rstrip("/")
    parts = layout(settings, root, unit_dir, late_check)
    late = as_bool("checkpoint_guard_late_check", late_check)
    enabled = as_bool("checkpoint_guard_enabled", enabled)
    unit = settings["unit"]
    return {
        "directories": parts["directories"],
        "require_persistent": as_bool("checkpoint_guard_require_persistent", require_persistent),
        "code": {"path": "%s%s/gpuops.pyz" % (root, unit["lib_dir"])},
        "files": files(settings, root, unit_dir, hardening, late_check),
        "absent": parts["absent"],
        # 0 up to date, 3 inventory unknown, 4 corrupt, 5 would act: the guard works; 1/2 fail the task
        "selftest": {"argv": [root + unit["bin"], "report", "--config", root + unit["config_path"]], "environment": raw.get("environment")},
        "systemd": as_bool("checkpoint_guard_manage_systemd", manage_systemd),
        "dev_char_symlinks": True,
        "units": [{"name": "gpuops.service", "enabled": enabled}] + ([{"name": "gpuops-late.service", "enabled": enabled}] if late else []),
    }


# install_spec's keyword arguments, as the kubelet_checkpoint action's ``role`` option gives them
INSTALL_KEYS = ("sysroot", "unit_dir", "hardening", "late_check", "require_persistent", "manage_systemd", "enabled")
# every key of the ``role`` option: the role's variables, whether and under which tags it installs, and INSTALL_KEYS;
# from_task_vars: the action plugin reads them from the task's variables itself (role_from_task_vars)
ROLE_KEYS = ("variables", "install", "install_tags", "from_task_vars") + INSTALL_KEYS
# the role's variables are checkpoint_guard_<name>; the names of the settings are the role's own list (its vars/main.yml)
ROLE_PREFIX = "checkpoint_guard_"
SETTING_NAMES_VARIABLE = "__checkpoint_guard_setting_names"
_MISSING = object()


def _flag(field, value):
    """A role variable that the role's tasks once took with ``| bool``: true/false as bool or text, or 0 and 1."""
    return as_bool(field, str(value) if value in (0, 1) and not isinstance(value, bool) else value)


def role_from_task_vars(task_args, get, facts):
    """The kubelet_checkpoint task's arguments where its ``role`` option says ``from_task_vars: true`` (the role's plan and
    repair tasks): the role's variables read one by one (``get(name)``: the variable's value, rendered, or ``default``
    where it is not defined), not templated into the task's arguments. Issue 62: ansible-core 2.19+ compiles each template
    string of a task's arguments in every node's worker; the role's tasks named about 15 of them (and a lookup over the
    role's 27 variable names) where most variables are plain values that need no template at all.

    Reads ``role.variables`` (the settings named by the role's ``__checkpoint_guard_setting_names``), ``backend``,
    ``driver_root``, ``kubelet_unit`` (empty where ``checkpoint_guard_kubelet_control`` is off) and ``gpus`` (the node's
    ``gpuops_gpus`` fact where it has one); with ``role.install_tags`` (the plan step) also whether the role installs the
    guard and how (INSTALL_KEYS) and, with ``checkpoint_guard_gpu_health``, the health read's options. The task's own
    arguments win over what is read. Raises a ParameterError naming the field."""
    role = dict(task_args["role"])
    if not _flag("role.from_task_vars", role.pop("from_task_vars")):
        return dict(task_args, role=role)
    clash = sorted(set(role) & ({"variables", "install"} | set(INSTALL_KEYS)))
    if clash:
        raise ParameterError("role.%s" % clash[0], "not with from_task_vars, which reads it from the role's variables")
    names = get(SETTING_NAMES_VARIABLE, _MISSING)
    if names is _MISSING:
        raise ParameterError("role.from_task_vars", "only in the gpuops.fleet.checkpoint_guard role's tasks (its %s is not defined here)"
                             % SETTING_NAMES_VARIABLE)
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ParameterError(SETTING_NAMES_VARIABLE, "expected the role's list of setting names")
    variables = dict((name, get(ROLE_PREFIX + name, None)) for name in names)
    role["variables"] = variables
    found = dict((key, variables[key]) for key in ("backend", "driver_root") if variables.get(key) is not None)
    control = get(ROLE_PREFIX + "kubelet_control", False)
    found["kubelet_unit"] = variables.get("kubelet_unit") if _flag(ROLE_PREFIX + "kubelet_control", control) else ""
    if isinstance(facts, Mapping) and facts.get("gpuops_gpus") is not None:
        found["gpus"] = facts["gpuops_gpus"]
    if role.get("install_tags") is not None:
        role["install"] = get(ROLE_PREFIX + "install", False)
        for key in INSTALL_KEYS:
            value = get(ROLE_PREFIX + key, _MISSING)
            if value is not _MISSING:
                role[key] = value
        if _flag(ROLE_PREFIX + "gpu_health", get(ROLE_PREFIX + "gpu_health", False)):
            found["health"] = get(ROLE_PREFIX + "gpu_health_options", {}) or {}
    found.update((key, value) for key, value in task_args.items() if key != "role")
    found["role"] = role
    return found


def role_task(role, run_tags=None, skip_tags=None):
    """``(settings, guard)`` for the kubelet_checkpoint module from its action's ``role`` option: ``settings`` the
    repair's checked ``module_args``; ``guard`` the install's options (install_spec), or None where the role does not
    install the guard in this run (``install`` false, or the run's ``--tags``/``--skip-tags`` leave out every tag of
    ``install_tags``)."""
    if not isinstance(role, Mapping):
        raise ParameterError("role", "give the checkpoint_guard role's variables (a mapping), not %s" % type(role).__name__)
    unknown = sorted(set(role) - set(ROLE_KEYS))
    if unknown:
        raise ParameterError("role.%s" % unknown[0], "unknown key; known keys: %s" % ", ".join(ROLE_KEYS))
    if role.get("from_task_vars") is not None:
        raise ParameterError("role.from_task_vars", "read by the kubelet_checkpoint action plugin, which has the task's variables")
    raw = role.get("variables")
    settings = role_settings(raw)
    install = role.get("install", False)
    # the role's argument spec (type bool) lets 0 and 1 through as the role's `| bool` took them
    install = _flag("checkpoint_guard_install", install)
    tags = role.get("install_tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ParameterError("role.install_tags", "give a list of the install's tags")
    if not install or (tags and not tags_run(tags, run_tags, skip_tags)):
        return settings["module_args"], None
    options = dict((key, role[key]) for key in INSTALL_KEYS if key in role)
    if "sysroot" in options:
        options["root"] = options.pop("sysroot")
    return settings["module_args"], install_spec(raw, settings=settings, **options)
