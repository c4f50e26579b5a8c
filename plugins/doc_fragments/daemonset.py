# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The DaemonSet a controller-side module works on (namespace, name)."""

    DOCUMENTATION = r"""
options:
  namespace:
    description: The DaemonSet's namespace.
    type: str
    required: true
  name:
    description: The DaemonSet's name.
    type: str
    required: true
"""
