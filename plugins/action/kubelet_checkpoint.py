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
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_install as guard_install
from ansible_collections.gpuops.fleet.plugins.plugin_utils._merged_options import merged

MODULE = "gpuops.fleet.kubelet_checkpoint"


def merged_args(args):
    """The module's arguments: ``settings`` under the task's other options (those win).

    Returns ``(args, error)``; ``error`` names the field and the fix."""
    return merged(args, "settings", MODULE, hint=" (e.g. the module_args of gpuops.fleet._checkpoint_guard_settings)")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args, error = merged_args(self._task.args)
        if error:
            return dict(result, failed=True, msg=error)
        stamp = None
        if args.get("guard") is not None:
            if not isinstance(args["guard"], Mapping):
                return dict(result, failed=True, msg="guard: give gpuops.fleet.guard_install's options (a mapping), not %s"
                            % type(args["guard"]).__name__)
            args["guard"], dummy, dummy2, error = guard_install.request(args["guard"], field="guard.")
            if error:
                return dict(result, failed=True, msg=error)
            stamp = guard_install.fingerprint(args["guard"])
        wrap_async = self._task.async_val and not self._connection.has_native_async
        try:
            result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars, wrap_async=wrap_async))
        finally:
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)
        if stamp is not None and isinstance(result.get("guard"), Mapping):
            result["guard"] = dict(result["guard"], fingerprint=stamp)
        return result
