# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin for gpuops.fleet.guard_code: build the gpuops command's one file on the controller
(plugin_utils/_guard_code.py) and hand it to ansible.builtin.copy, one transfer per node."""

from __future__ import annotations

import os
import tempfile

from ansible import constants as C
from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.fleet.plugins.plugin_utils._guard_code import build, digest


class ActionModule(ActionBase):
    TRANSFERS_FILES = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        unknown = sorted(set(args) - {"dest", "mode"})
        dest = args.get("dest")
        if unknown:
            return dict(result, failed=True, msg="%s: unknown option of gpuops.fleet.guard_code (it takes dest and mode)" % unknown[0])
        if not isinstance(dest, str) or not os.path.isabs(dest):
            return dict(result, failed=True, msg="dest: %r must be the absolute path of the file on the node, e.g. /usr/local/lib/gpuops/gpuops.pyz" % (dest,))
        data, names = build()
        local_tmp = os.path.expanduser(C.DEFAULT_LOCAL_TMP)
        os.makedirs(local_tmp, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix="gpuops-", suffix=".pyz", dir=local_tmp)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            task = self._task.copy()
            task.args = {"src": path, "dest": dest, "mode": args.get("mode") or "0644"}
            copy = self._shared_loader_obj.action_loader.get(
                "ansible.builtin.copy", task=task, connection=self._connection, play_context=self._play_context,
                loader=self._loader, templar=self._templar, shared_loader_obj=self._shared_loader_obj,
            )
            copied = copy.run(task_vars=task_vars)
        finally:
            os.unlink(path)
        copied.update(files=names, size=len(data), sha256=digest(data))
        result.update(copied)
        return result
