# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection (controller side): gpuops.fleet.guard_install's options as the node gets them.

Two action plugins send them: ``guard_install`` (the install) and ``kubelet_checkpoint`` (its ``guard`` option: the
plan's read of whether that install would change anything, in the same round trip). Both check them here and replace
the code's path with the code built on the controller (``_guard_code``), by its SHA-256; the install adds the bytes
only where the node's file differs. ``fingerprint`` names one set of options, so the install trusts the plan's reading
only when it was made for the options the install has now.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from ansible_collections.gpuops.fleet.plugins.plugin_utils._guard_code import build, digest
from ansible_collections.gpuops.fleet.plugins.plugin_utils._merged_options import merged as merged_options


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
    data, names = build()
    return dict(options, code=dict(code, sha256=digest(data))), data, names, None


def fingerprint(options):
    """SHA-256 of the options as the node gets them without the code's bytes (``request``'s result)."""
    options = dict(options, code=dict((k, v) for k, v in options["code"].items() if k != "data"))
    text = json.dumps(options, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
