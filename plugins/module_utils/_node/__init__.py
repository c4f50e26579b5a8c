# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the node code (runs on the node, as root, before kubelet; imports no controller code).

Imported first by every node module, it makes CPython compile each module of the zip the node code runs from once
instead of twice (``compile_once``: python/cpython#141276); from files (the controller, the tests) it changes nothing.
"""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._node import compile_once as _compile_once

_compile_once.install(__spec__)
