# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin for gpuops.fleet.report_files: the files are written here, on the controller, in this process
(plugin_utils/_report_files.py); no module runs and no connection is opened, whatever host the task runs for."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _report_files


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        unknown = sorted(set(args) - {"dir", "files"})
        if unknown:
            return dict(result, failed=True, changed=False, msg="%s: not an option of gpuops.fleet.report_files (dir and files)" % unknown[0])
        try:
            directory, files = _report_files.checked(args.get("dir"), args.get("files"))
        except GpuopsError as exc:
            return dict(result, failed=True, changed=False, msg=str(exc))
        try:
            written = _report_files.write(directory, files)
        except OSError as exc:
            return dict(result, failed=True, changed=False, msg="dir: could not write the report under %s: %s (%s)"
                        % (directory, exc.strerror or exc, exc.filename or directory))
        # the report is the run's output, not fleet state: written in check mode too, and never a change
        return dict(result, changed=False, dir=directory, files=written)
