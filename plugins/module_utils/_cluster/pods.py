# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: what every controller step asks of a Pod object."""

from __future__ import annotations

# the phases of a pod whose containers all ended: it holds no device and no node resource any more
TERMINAL_PHASES = ("Succeeded", "Failed")


def active(pod):
    """Whether the pod has not ended (its phase is not terminal)."""
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES
