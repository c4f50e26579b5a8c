# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection (controller side): gpuops.fleet.guard_install's options as the node gets them.

Two action plugins send them: ``guard_install`` (the install) and ``kubelet_checkpoint`` (its ``guard`` option: the
plan's read of whether that install would change anything, in the same round trip). Both check them here and replace
the code's path with the code built on the controller (``_guard_code``), by its SHA-256; the install adds the bytes
only where the node's file differs. ``fingerprint`` names one set of options, so the install trusts the plan's reading
only when it was made for the options the install has now. ``install`` is the install itself, run by an action
plugin's own connection: the guard_install action, and kubelet_checkpoint's with ``install_guard`` (its plan and this
install in one task).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping

from ansible_collections.gpuops.fleet.plugins.plugin_utils._guard_code import built, digest
from ansible_collections.gpuops.fleet.plugins.plugin_utils._merged_options import merged as merged_options

MODULE = "gpuops.fleet.guard_install"
# what kubelet_checkpoint's guard result adds to the install's own check-mode result
PLANNED_ONLY = ("needed", "error", "fingerprint")


def merged(args, name="spec"):
    """The options: ``args[name]`` (a mapping of the install's options, one templated value) under the task's other
    options (those win). Returns ``(options, error)``; ``error`` names the field and the fix."""
    return merged_options(args, name, "gpuops.fleet.guard_install", reserved=("planned",))


def request(options, field=""):
    """``(options for the node, the code's bytes, its archive names, error)``: the code's path checked, and its
    SHA-256 (never its bytes) put in; ``error`` names the field (under ``field``, e.g. ``guard.``) and the fix."""
    code = options.get("code")
    if not isinstance(code, Mapping) or not isinstance(code.get("path"), str):
        return None, None, None, "%scode: give its path on the node, e.g. code: {path: /usr/local/lib/gpuops/gpuops.pyz}" % field
    # ansible-core's own check of an option with suboptions fails with a traceback when the value is not a
    # mapping (ansible/ansible#81631, open): selftest, like code above, is checked here by name
    selftest = options.get("selftest")
    if selftest is not None and not isinstance(selftest, Mapping):
        return None, None, None, ("%sselftest: give a mapping (see gpuops.fleet.guard_install's documentation), not %s"
                                  % (field, type(selftest).__name__))
    unknown = sorted(set(code) - {"path", "mode"})
    if unknown:
        return None, None, None, "%scode.%s: not an option here (code takes path and mode; the plugin adds the rest)" % (field, unknown[0])
    data, names = built()
    return dict(options, code=dict(code, sha256=digest(data))), data, names, None


def fingerprint(options):
    """SHA-256 of the options as the node gets them without the code's bytes (``request``'s result)."""
    options = dict(options, code=dict((k, v) for k, v in options["code"].items() if k != "data"))
    text = json.dumps(options, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def install(action, requested, planned, task_vars):
    """gpuops.fleet.guard_install's result for ``requested`` (``request``'s result for the merged options: the caller
    builds it once, and kubelet_checkpoint's plan sends the same request), run through ``action`` (an ActionBase: its
    connection, its task's check mode). ``planned``: kubelet_checkpoint's ``guard`` result, or None.

    Where ``planned`` was read for exactly these options (``fingerprint``) and says the install changes nothing and
    owes no self-test, the node gets no call: the result is that reading (``planned: true``). Elsewhere the module runs
    once, with the code's bytes only where the node's file differs. A bad option is a failed result naming it."""
    if planned is not None and not isinstance(planned, Mapping):
        return dict(failed=True, msg="planned: give kubelet_checkpoint's guard result (a mapping), not %s" % type(planned).__name__)
    options, data, names, error = requested
    if error:
        return dict(failed=True, msg=error)
    sha = options["code"]["sha256"]
    info = {"path": options["code"]["path"], "sha256": sha, "size": len(data), "entries": names, "sent": False}
    trusted = planned is not None and planned.get("fingerprint") == fingerprint(options) and not planned.get("error")
    if trusted and planned.get("needed") is False:
        # the plan read, in its own round trip, that this install changes nothing and owes no self-test
        done = dict((k, v) for k, v in planned.items() if k not in PLANNED_ONLY)
        warnings = ["left alone, not the guard's to remove: %s" % row["reason"] for row in done.get("left_alone") or ()]
        done.update(changed=False, planned=True, code=info)
        if warnings:
            done["warnings"] = warnings
        return done
    code = options["code"]
    # The bytes go only where the node's file differs: as the plan read it (its files name the code's path), else
    # compared first with a shell command, not a module (no Python on the node). Where sha256sum is
    # missing the bytes go; where the file changed in between, the module asks for them (code_needed).
    # check mode compares only: the module says from the SHA-256 alone that the file would change
    if action._task.check_mode:
        sent = False
    elif trusted:
        sent = any(row.get("path") == code["path"] for row in planned.get("files") or ())
    else:
        sent = _node_sha256(action, code["path"]) != sha
    args = dict(options, code=_code(code, data if sent else None))
    try:
        done = action._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        if done.get("code_needed") and not done.get("failed"):
            args["code"] = _code(code, data)
            sent = True
            done = action._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
    finally:
        action._remove_tmp_path(action._connection._shell.tmpdir)
    # the rendered files are in the task's own arguments: not repeated in the result
    done.pop("invocation", None)
    done.pop("code_needed", None)
    done.update(planned=False, code=dict(info, sent=sent))
    return done


def _code(code, data):
    """The module's ``code`` option: its SHA-256, and its bytes (base64) only where they go."""
    return dict(code, **({} if data is None else {"data": base64.b64encode(data).decode("ascii")}))


def _node_sha256(action, path):
    """SHA-256 of the node's file from ``sha256sum`` (coreutils, busybox), or None (missing file or tool)."""
    quoted = action._connection._shell.quote(path)
    done = action._low_level_execute_command("sha256sum -- %s 2>/dev/null || true" % quoted)
    words = (done.get("stdout") or "").split()
    return words[0] if words and len(words[0]) == 64 else None
