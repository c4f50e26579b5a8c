# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: where a pod of ours sees the host, spelled once for both sides.

The ``k8s_node`` connection's node pod and the guard's DaemonSet mount the host's ``/`` at ``HOST_ROOT``.
Node code run beside the host (the image's Python, not the host's) learns where that is from the
environment variable ``HOST_ROOT_ENV``, which the node pod's command prologue exports
(``_cluster/node_pod.py``) and ``_node/hostroot.py`` reads.
"""

from __future__ import annotations

HOST_ROOT = "/host"
HOST_ROOT_ENV = "GPUOPS_HOST_ROOT"
