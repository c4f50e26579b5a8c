# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin for gpuops.fleet.kubelet_checkpoint: ``settings`` (a mapping of the module's own options,
e.g. ``module_args`` of the ``gpuops.fleet._checkpoint_guard_settings`` filter) is merged under the task's
other options on the controller, and the module is called once with the result.

This is what lets the checkpoint_guard role pass the one option table's checked settings without a
templated argument dict (``module: "{{ dict }}"``, which ansible-core warns is unsafe and may refuse):
the task's options stay literal keys, ``settings`` is one templated value among them.

``guard`` (gpuops.fleet.guard_install's options) goes to the node with the code built here, by its SHA-256 alone; the
node's reading of what that install would do comes back as ``guard`` with the options' ``fingerprint``, which
gpuops.fleet.guard_install compares with its own (``planned``) before it skips its call.

``role`` is the checkpoint_guard role's form of ``settings`` and ``guard``: the role's variables as they come, checked
and turned into both here (plugin_utils/_guard_spec.role_task), in Python, where the role's tasks once templated the
``_checkpoint_guard_settings`` and ``_checkpoint_guard_install_spec`` filters into them. A task that names a filter of
this collection makes each node's worker load every filter file and the settings code again; this plugin is loaded
once, by ansible-core's main process, before it forks the workers (issue 36).

``role`` with ``from_task_vars: true`` (the role's own tasks): this plugin reads the role's variables from the task's
variables itself, rendering only those that are templates (plugin_utils/_guard_spec.role_from_task_vars), instead of
the task templating some 15 arguments and a lookup of the role's 27 variables in every node's worker (issue 62).

``install_guard`` makes the task the plan *and* the guard's install, in one task (issue 36: a task per node costs
Ansible a worker, templating and a result, even where it makes no call): the module reads and plans, in check mode
whatever the task's mode (the checkpoint is never changed here), and the install (plugin_utils/_guard_install.install,
the guard_install action's own code) follows with that reading as its ``planned``: no call where the guard is in place.
``changed`` is then the install's; the plan's would-be change is ``repair_needed``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import filter_loader, test_loader

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_code
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_install as guard_install
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_spec as guard_spec
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _restart_place as restart_place
from ansible_collections.gpuops.fleet.plugins.plugin_utils._merged_options import merged

MODULE = "gpuops.fleet.kubelet_checkpoint"


def _prefork():
    """Work done once in ansible-core's main process, which imports this plugin before it forks a worker per node for the
    plan: each node's worker inherits what is made here instead of making its own (issue 62)."""
    _guard_code.built()  # the guard's code, which the install compares by its SHA-256
    # The role's defaults render with ``| bool`` and site.yml's with ``default``: the first filter (or test) a worker
    # renders makes it load every builtin filter (or test) file, about 20 ms of CPU per node (issue 62, cProfile).
    filter_loader.get("ansible.builtin.bool")
    test_loader.get("ansible.builtin.defined")


_prefork()


def merged_args(args, task_vars=None):
    """The module's arguments: ``settings`` under the task's other options (those win); ``role`` (the
    checkpoint_guard role's variables) first becomes ``settings`` and, where the role installs the guard in this run,
    ``guard``.

    Returns ``(args, error)``; ``error`` names the field and the fix."""
    args = dict(args)
    if args.get("role") is not None:
        clash = [name for name in ("settings", "guard") if args.get(name) is not None]
        if clash:
            return None, "role: give the role's variables or %s, not both" % " and ".join(clash)
        task_vars = task_vars or {}
        try:
            args["settings"], guard = guard_spec.role_task(args.pop("role"), task_vars.get("ansible_run_tags"), task_vars.get("ansible_skip_tags"))
        except GpuopsError as exc:
            return None, "gpuops.fleet.checkpoint_guard: %s" % exc
        if guard is not None:
            args["guard"] = guard
    args.pop("role", None)
    return merged(args, "settings", MODULE, hint=" (e.g. the module_args of gpuops.fleet._checkpoint_guard_settings)")


def _diffs(diff):
    """A result's ``diff`` as a list (a module gives none, one mapping, or a list of them)."""
    if diff is None:
        return []
    return [diff] if isinstance(diff, Mapping) else list(diff)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_args = dict(self._task.args)
        if isinstance(task_args.get("role"), Mapping) and task_args["role"].get("from_task_vars") is not None:
            try:
                task_args = guard_spec.role_from_task_vars(task_args, self._variable(task_vars), (task_vars or {}).get("ansible_facts"))
            except GpuopsError as exc:
                return dict(result, failed=True, msg="gpuops.fleet.checkpoint_guard: %s" % exc)
        place = task_args.pop("restart_place", None)  # the controller's: never sent to the node
        args, error = merged_args(task_args, task_vars)
        if error:
            return dict(result, failed=True, msg=error)
        try:
            install = boolean(args.pop("install_guard", False), strict=True)
        except TypeError:
            return dict(result, failed=True, msg="install_guard: give true or false")
        stamp = None
        requested = None
        if args.get("guard") is not None:
            if not isinstance(args["guard"], Mapping):
                return dict(result, failed=True, msg="guard: give gpuops.fleet.guard_install's options (a mapping), not %s"
                            % type(args["guard"]).__name__)
            # the code is built once: the plan sends its SHA-256, and the install (install_guard) its bytes where needed
            requested = guard_install.request(args["guard"], field="guard.")
            args["guard"], dummy, dummy2, error = requested
            if error:
                return dict(result, failed=True, msg=error)
            stamp = guard_install.fingerprint(args["guard"])
        # install_guard: the checkpoint is only planned here, whatever the task's mode; with guard, the install follows
        if install and self._task.async_val:
            return dict(result, failed=True, msg="install_guard: not with async (the install follows the plan in the same task)")
        wrap_async = self._task.async_val and not self._connection.has_native_async
        check_mode = self._task.check_mode
        if place is not None and (install or check_mode or wrap_async):
            place = None  # only a repair that may stop kubelet holds a place; check mode and the plan stop nothing
        try:
            place = restart_place.check(place) if place is not None else None
        except GpuopsError as exc:
            return dict(result, failed=True, msg=str(exc))
        try:
            try:
                if install:  # the plan: read-only whatever the task's mode (the checkpoint changes in the repair step)
                    self._task.check_mode = True
                if place is None:
                    result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars, wrap_async=wrap_async))
                else:
                    result.update(self._placed(place, args, task_vars))
            finally:
                self._task.check_mode = check_mode
            if stamp is not None and isinstance(result.get("guard"), Mapping):
                result["guard"] = dict(result["guard"], fingerprint=stamp)
            if install:
                # the install's module, where it runs, goes into the plan's temporary directory on the node: one mkdir
                # and one rm for both calls, not two each (issue 62: the first run's SSH commands per node 12 -> 9)
                result = self._install(result, requested, task_vars)
        finally:
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def _variable(self, task_vars):
        """``get(name, default)``: a task variable's value, rendered as the task's arguments would render it (only a value
        that is a template costs a compile), or ``default`` where it is not defined; each name rendered once per task
        (the role reads some twice: ``late_check`` is a setting and an install key)."""
        task_vars = task_vars or {}
        rendered = {}

        def get(name, default):
            if name not in task_vars:
                return default
            if name not in rendered:
                rendered[name] = self._templar.template(task_vars[name])
            return rendered[name]

        return get

    def _placed(self, place, args, task_vars):
        """The module's result with one of the fleet's kubelet restart places held around it (``restart_place``; its report
        as ``restart_place``), or the failure to take one: the module then never runs, kubelet untouched."""
        report = {}
        try:
            held = restart_place.Held(place, (task_vars or {}).get("inventory_hostname"), report).take()
        except Exception as exc:  # noqa: BLE001 (no place, the API's refusal, no cluster: this node fails, named; never a traceback)
            return dict(failed=True, restart_place=report, msg="restart_place: no kubelet was stopped: %s: %s" % (
                type(exc).__name__, str(exc)[:300]))
        try:
            done = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        finally:
            held.give_back()
        return dict(done, restart_place=report)

    def _install(self, result, requested, task_vars):
        """The plan's result with the guard's install after it (``guard_install``); ``changed`` is the install's."""
        # the plan's diff is the repair's, not this task's: shown only where the task itself only plans (check mode)
        if not self._task.check_mode:
            result.pop("diff", None)
        result["changed"] = False
        if requested is None or result.get("failed") or result.get("unreachable"):
            return result
        done = guard_install.install(self, requested, result.get("guard"), task_vars)
        # a nested result: ansible-core's own keys (_ansible_parsed, ...) are not the install's to report
        done = dict((k, v) for k, v in done.items() if not k.startswith("_ansible"))
        result["guard_install"] = done
        result["changed"] = bool(done.get("changed"))
        if done.get("diff") is not None:
            result["diff"] = _diffs(result.get("diff")) + _diffs(done["diff"])
        if done.get("warnings"):
            result["warnings"] = list(result.get("warnings") or ()) + list(done["warnings"])
        if done.get("failed"):
            result.update(failed=True, msg="guard_install: %s" % done.get("msg", "failed"))
        return result
