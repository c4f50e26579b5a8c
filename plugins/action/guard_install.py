# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin for gpuops.fleet.guard_install: build the gpuops command's one file on the
controller (plugin_utils/_guard_code.py), then install everything with one call of the module on
the node. The bytes of the code go only where the node's file differs (``sha256sum`` on the node
first, a shell command, not a module): every run is one module call per node."""

from __future__ import annotations

import base64
from collections.abc import Mapping

from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.fleet.plugins.plugin_utils._guard_code import build, digest

MODULE = "gpuops.fleet.guard_install"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        code = args.get("code")
        if not isinstance(code, dict) or not isinstance(code.get("path"), str):
            return dict(result, failed=True, msg="code: give its path on the node, e.g. code: {path: /usr/local/lib/gpuops/gpuops.pyz}")
        # ansible-core's own check of an option with suboptions fails with a traceback when the value is not a
        # mapping (ansible/ansible#81631, open): selftest, like code above, is checked here by name
        selftest = args.get("selftest")
        if selftest is not None and not isinstance(selftest, Mapping):
            return dict(result, failed=True, msg="selftest: give a mapping (see the module's documentation), not %s" % type(selftest).__name__)
        unknown = sorted(set(code) - {"path", "mode"})
        if unknown:
            return dict(result, failed=True, msg="code.%s: not an option here (code takes path and mode; the plugin adds the rest)" % unknown[0])
        data, names = build()
        sha = digest(data)
        # The node's file is compared first with a shell command, not a module (no Python on the node):
        # the bytes go only where it differs, and every run is one module call. Where sha256sum is
        # missing the bytes go; where the file changed in between, the module asks for them (code_needed).
        # check mode compares only: the module says from the SHA-256 alone that the file would change
        sent = not self._play_context.check_mode and self._node_sha256(code["path"]) != sha
        args["code"] = self._code(code, sha, data if sent else None)
        try:
            done = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
            if done.get("code_needed") and not done.get("failed"):
                args["code"] = self._code(code, sha, data)
                sent = True
                done = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        # the rendered files are in the task's own arguments: not repeated in the result
        done.pop("invocation", None)
        done.pop("code_needed", None)
        result.update(done)
        result["code"] = {"path": code["path"], "sha256": sha, "size": len(data), "entries": names, "sent": sent}
        return result

    @staticmethod
    def _code(code, sha, data):
        """The module's ``code`` option: its SHA-256, and its bytes (base64) only where they go."""
        return dict(code, sha256=sha, **({} if data is None else {"data": base64.b64encode(data).decode("ascii")}))

    def _node_sha256(self, path):
        """SHA-256 of the node's file from ``sha256sum`` (coreutils, busybox), or None (missing file or tool)."""
        quoted = self._connection._shell.quote(path)
        done = self._low_level_execute_command("sha256sum -- %s 2>/dev/null || true" % quoted)
        words = (done.get("stdout") or "").split()
        return words[0] if words and len(words[0]) == 64 else None
