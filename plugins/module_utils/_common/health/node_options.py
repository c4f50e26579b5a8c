# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the node modules' options that the gpu_remediation role passes from its variables,
each declared once (a settings row). The node modules check them with these rows (gpu_reset's ``rescue_seconds``,
gpu_diag's ``level``, gpu_rma_evidence's ``max_bytes``); the role checks its variables against the same rows on the
controller, before any node is touched (``ROLE``, through the filter ``gpuops.fleet._remediation_node_options``), so a bad
value is never found by a node module after the node was quarantined and reset."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._common import settings

EVIDENCE_MAX_BYTES = 256 * 1024
# the evidence needs room for the GPUs' serials and the XIDs
EVIDENCE_MIN_BYTES = 16 * 1024

RESCUE_SECONDS = settings.row("rescue_seconds", "int", 300, check=settings.whole(10, 3600, "whole number of seconds"))
DIAG_LEVEL = settings.row("level", "int", 2, choices=(1, 2, 3, 4))  # dcgmi diag -r: 1 quick, 2 medium, 3 long, 4 extended
MAX_BYTES = settings.row("max_bytes", "int", EVIDENCE_MAX_BYTES, check=settings.whole(EVIDENCE_MIN_BYTES, None, "whole number of bytes"))


def _as(entry, name):
    return dict(entry, name=name)


# the role's variables that reach a node module's option (roles/gpu_remediation/tasks/main.yml), by the option's row
ROLE = settings.Table(
    _as(RESCUE_SECONDS, "gpu_remediation_rescue_seconds"),
    dict(DIAG_LEVEL, name="gpu_remediation_diag_level", choices=(0,) + tuple(DIAG_LEVEL["choices"])),  # 0: the role runs no diagnostic
    _as(MAX_BYTES, "gpu_remediation_evidence_max_bytes"),
)
