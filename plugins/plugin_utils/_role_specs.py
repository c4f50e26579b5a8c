# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection (controller side): a role's argument spec, read from this collection's
``roles/<role>/meta/argument_specs.yml`` (read-only: an installed collection is never written). The filters that check a
fleet's variables against a role (fleet_report's ``_role_argument_errors``) take it from here; a filter does not read files."""

from __future__ import annotations

import os
import re

import yaml

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError
from ansible_collections.gpuops.fleet.plugins.plugin_utils._guard_code import collection_root

_ROLE = re.compile(r"\A[a-z][a-z0-9_]*\Z")


class RoleSpecError(GpuopsError):
    """No such role of this collection, no argument spec for it, or no such entry point."""


def role_spec(role, entry_point="main"):
    """The options of ``role``'s ``entry_point``, from its ``meta/argument_specs.yml``; RoleSpecError says what is missing."""
    if not isinstance(role, str) or not _ROLE.match(role) or not isinstance(entry_point, str):
        raise RoleSpecError("%r is not a role name of this collection" % (role,))
    path = os.path.join(collection_root(), "roles", role, "meta", "argument_specs.yml")
    try:
        with open(path, encoding="utf-8") as handle:
            specs = yaml.safe_load(handle)["argument_specs"]
    except (OSError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise RoleSpecError("no argument spec for role %s (%s)" % (role, exc)) from exc
    if entry_point not in specs:
        raise RoleSpecError("role %s has no entry point %r (it has %s)" % (role, entry_point, ", ".join(sorted(specs))))
    return specs[entry_point].get("options") or {}
