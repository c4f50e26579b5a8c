# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: argument specs shared by the modules.

Each dict matches a doc fragment (``gpuops.fleet.checkpoint`` for CHECKPOINT_ARGS,
``gpuops.fleet.attributes.gpu_backend`` for BACKEND_ARGS), as kubernetes.core's
``args_common.py`` pairs with its ``k8s_auth_options`` fragment.
"""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._node.gpu_inventory import BACKENDS
from ansible_collections.gpuops.fleet.plugins.module_utils._node.nodefile import DEFAULT_MAX_BYTES
from ansible_collections.gpuops.fleet.plugins.module_utils._node.reconcile import DEFAULT_PATH

CHECKPOINT_ARGS = dict(
    checkpoint_path=dict(type="path", default=DEFAULT_PATH, aliases=["path"]),
    max_bytes=dict(type="int", default=DEFAULT_MAX_BYTES),
)

BACKEND_ARGS = dict(
    backend=dict(type="str", default="auto", choices=list(BACKENDS)),
    driver_root=dict(type="path"),
)
