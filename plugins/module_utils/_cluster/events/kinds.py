# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the kinds of event the collection's event sources emit (``event.gpuops.kind``),
declared once, pure data; every source and core emits them through these constants (a test holds it)."""

from __future__ import annotations


# the kinds of event the sources emit (``event.gpuops.kind``), each spelled here only: a rule's condition names one of them
STARTUP, HEARTBEAT, NODE_UNREADABLE, NODE_REMOVED = "startup", "heartbeat", "node_unreadable", "node_removed"
GPU_UNALLOCATABLE, GPU_RESTORED, NODE_REBOOTED = "gpu_unallocatable", "gpu_restored", "node_rebooted"
NODE_NOT_READY, NODE_READY, REMEDIATION_STEP = "node_not_ready", "node_ready", "remediation_step"
GPU_FAULTS, NODE_REBOOTS, THROTTLED = "gpu_faults", "node_reboots", "_throttled"  # a window's event, and where all were throttled
GPU_ALERT = "gpu_alert"  # the alertmanager source's, one per alert (alerts.py)
REMEDIATION_DUE = "remediation_due"  # a waiting remediation whose wait is over (due.py)
KINDS: tuple[str, ...] = (
    STARTUP, HEARTBEAT, GPU_UNALLOCATABLE, GPU_RESTORED, NODE_REBOOTED, NODE_NOT_READY, NODE_READY, REMEDIATION_STEP, NODE_REMOVED,
    NODE_UNREADABLE, GPU_FAULTS, GPU_FAULTS + THROTTLED, NODE_REBOOTS, NODE_REBOOTS + THROTTLED, GPU_ALERT, REMEDIATION_DUE)
