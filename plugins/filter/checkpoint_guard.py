# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The checkpoint_guard role's data path: its variables -> gpuops.json and gpuops.service values."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError
from ansible_collections.gpuops.fleet.plugins.module_utils._node.guard_config import role_settings


def checkpoint_guard_settings(raw):
    """Typed, validated settings of the boot guard; raises with the role variable's name and the fix."""
    try:
        return role_settings(raw)
    except GpuopsError as exc:
        raise AnsibleFilterError("gpuops.fleet.checkpoint_guard: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"checkpoint_guard_settings": checkpoint_guard_settings}
