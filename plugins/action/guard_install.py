# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin for gpuops.fleet.guard_install: build the gpuops command's one file on the
controller (plugin_utils/_guard_code.py), then install everything with one call of the module on
the node. The bytes of the code go only where the node's file differs (as the plan read it, else ``sha256sum`` on
the node first, a shell command, not a module).

With ``planned`` (kubelet_checkpoint's ``guard`` result: the plan's read, in its own round trip, of what this
install would do), a node whose install would change nothing, for exactly these options (``fingerprint``), gets no
call at all: the result is that reading. ``spec`` gives the options as one mapping (the role's one templated
value), under the ones the task names."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_install as guard_install


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        raw = dict(self._task.args)
        planned = raw.pop("planned", None)
        options, error = guard_install.merged(raw)
        if error:
            return dict(result, failed=True, msg=error)
        result.update(guard_install.install(self, guard_install.request(options), planned, task_vars))
        return result
