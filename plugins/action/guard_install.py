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

import base64
from collections.abc import Mapping

from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_install as guard_install

MODULE = "gpuops.fleet.guard_install"
# what kubelet_checkpoint's guard result adds to the install's own check-mode result
PLANNED_ONLY = ("needed", "error", "fingerprint")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        raw = dict(self._task.args)
        planned = raw.pop("planned", None)
        if planned is not None and not isinstance(planned, Mapping):
            return dict(result, failed=True, msg="planned: give kubelet_checkpoint's guard result (a mapping), not %s" % type(planned).__name__)
        options, error = guard_install.merged(raw)
        if error is None:
            options, data, names, error = guard_install.request(options)
        if error:
            return dict(result, failed=True, msg=error)
        sha = options["code"]["sha256"]
        info = {"path": options["code"]["path"], "sha256": sha, "size": len(data), "entries": names, "sent": False}
        trusted = planned is not None and planned.get("fingerprint") == guard_install.fingerprint(options) and not planned.get("error")
        if trusted and planned.get("needed") is False:
            # the plan read, in its own round trip, that this install changes nothing and owes no self-test
            done = dict((k, v) for k, v in planned.items() if k not in PLANNED_ONLY)
            warnings = ["left alone, not the guard's to remove: %s" % row["reason"] for row in done.get("left_alone") or ()]
            result.update(done, changed=False, planned=True, code=info)
            if warnings:
                result["warnings"] = warnings
            return result
        code = options["code"]
        # The bytes go only where the node's file differs: as the plan read it (its files name the code's path), else
        # compared first with a shell command, not a module (no Python on the node). Where sha256sum is
        # missing the bytes go; where the file changed in between, the module asks for them (code_needed).
        # check mode compares only: the module says from the SHA-256 alone that the file would change
        if self._play_context.check_mode:
            sent = False
        elif trusted:
            sent = any(row.get("path") == code["path"] for row in planned.get("files") or ())
        else:
            sent = self._node_sha256(code["path"]) != sha
        args = dict(options, code=self._code(code, data if sent else None))
        try:
            done = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
            if done.get("code_needed") and not done.get("failed"):
                args["code"] = self._code(code, data)
                sent = True
                done = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        # the rendered files are in the task's own arguments: not repeated in the result
        done.pop("invocation", None)
        done.pop("code_needed", None)
        result.update(done, planned=False)
        result["code"] = dict(info, sent=sent)
        return result

    @staticmethod
    def _code(code, data):
        """The module's ``code`` option: its SHA-256, and its bytes (base64) only where they go."""
        return dict(code, **({} if data is None else {"data": base64.b64encode(data).decode("ascii")}))

    def _node_sha256(self, path):
        """SHA-256 of the node's file from ``sha256sum`` (coreutils, busybox), or None (missing file or tool)."""
        quoted = self._connection._shell.quote(path)
        done = self._low_level_execute_command("sha256sum -- %s 2>/dev/null || true" % quoted)
        words = (done.get("stdout") or "").split()
        return words[0] if words and len(words[0]) == 64 else None
