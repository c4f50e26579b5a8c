# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection (controller side): a module's options given as one templated mapping.

A role passes checked options as one value (``settings`` of kubelet_checkpoint, ``spec`` of guard_install) rather than a
templated argument dict (``module: "{{ dict }}"``, which ansible-core warns is unsafe and may refuse): the task's
options stay literal keys, and the action plugin merges that mapping under them here.
"""

from __future__ import annotations

from collections.abc import Mapping


def merged(args, name, module, hint="", reserved=()):
    """``args[name]`` (a mapping of ``module``'s options) under the task's other options (those win).

    Returns ``(options, error)``; ``error`` names the field and the fix. A key that is not a plain option name
    (empty, ``_``-prefixed as Ansible's internal ones are, ``name`` itself, or one of ``reserved``) is refused."""
    args = dict(args)
    value = args.pop(name, None)
    if value is None:
        return args, None
    if not isinstance(value, Mapping):
        return None, "%s: give a mapping of %s's options%s, not %s" % (name, module, hint, type(value).__name__)
    for key in value:
        if not isinstance(key, str) or not key or key.startswith("_") or key == name or key in reserved:
            return None, "%s: %r is not an option of %s" % (name, key, module)
    out = dict(value)
    out.update(args)
    return out, None
