# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: NVIDIA's XID catalog (data) and NVML's recovery-action values.

Buckets are the catalog's "Resolution Bucket (Immediate Action)" column of
docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, as read from the generated copy in
leptonai/gpud ``components/accelerator/nvidia/xid/catalog_generated.go`` (generated 2025-10-29 from that
page); the rows agree with the EKS node monitoring agent's code comments (``../shared/specs/gpu-health.md`` A2).
A code the catalog does not list (the "Unused" rows, 162 and later in that copy, a newer driver's) is
``UNKNOWN``, which the decision table treats as NVSentinel treats it: contact support (investigate).

Where the sources disagree, this follows the catalog: XID 109 is RESET_GPU (the device plugin ignores it,
k8s-device-plugin#1974), XID 94 is RESTART_APP (the device plugin marks the GPU unhealthy,
k8s-device-plugin#1014), XID 63 and 92 are IGNORE.

Used on both sides of the wall: the node reads the kernel log, the controller plans.
"""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import digits
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError


def _codes(*spans):
    out = []
    for span in spans:
        if isinstance(span, tuple):
            out.extend(range(span[0], span[1] + 1))
        else:
            out.append(span)
    return out


# bucket -> XID codes (the catalog's immediate action)
BUCKETS = {
    "RESTART_APP": _codes(8, 11, 13, 25, 31, 32, (39, 41), 60, 68, 69, (70, 72), (75, 77), 80, (82, 86), 88, 89, 94,
                          (96, 105), (126, 135), 139),
    "IGNORE": _codes(14, 37, 38, 43, 44, 63, 66, 67, 92, 93, (106, 108), 121, 137, 141, 152, 153, 157, 160, 161),
    "WORKFLOW_XID_45": [45],
    "RESET_GPU": [46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158],
    "WORKFLOW_XID_48": [48],
    "WORKFLOW_NVLINK_ERR": [74],
    "WORKFLOW_NVLINK5_ERR": _codes((144, 150)),
    "RESTART_BM": [79],
    "RESTART_VM": [151],
    "CHECK_MECHANICALS": [54],
    "UPDATE_SWFW": [78],
    "XID_154": [154],
    "CHECK_UVM": [159],
}
UNKNOWN = "UNKNOWN"
BUCKET_NAMES = tuple(sorted(BUCKETS)) + (UNKNOWN,)
# the buckets NVIDIA asks no node action for (an application's fault, or nothing): routine on a busy fleet. The kernel
# log keeps fewer of their lines (the newest), the same-signal breaker never counts them
ROUTINE_BUCKETS = ("RESTART_APP", "IGNORE", "WORKFLOW_XID_45")
CATALOG = dict((code, bucket) for bucket, codes in BUCKETS.items() for code in codes)

# Short names of the codes this collection's docs and reports mention (NVIDIA's XID catalog and
# docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt); a code without one is reported by its number only.
MNEMONICS = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    54: "Auxiliary power is not connected to the GPU board",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    154: "GPU Recovery Action Changed",
}

# nvmlDeviceGpuRecoveryAction_t (pynvml NVML_GPU_RECOVERY_ACTION_*), the value of field 230
# (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION); there is no nvmlDeviceGetGpuRecoveryAction function.
RECOVERY_FIELD = 230
RECOVERY_ACTIONS = {
    0: "NONE",
    1: "GPU_RESET",
    2: "NODE_REBOOT",
    3: "DRAIN_P2P",
    4: "DRAIN_AND_RESET",
    5: "RECOVER_IMEX_DOMAIN",
    6: "BUS_RESET",
    7: "SYSTEM_REBOOT",
}
# XID 154's text ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"): the words the
# driver prints for each value, for a line whose number cannot be read
RECOVERY_TEXTS = {
    "none": 0,
    "gpu reset required": 1,
    "node reboot required": 2,
    "drain p2p": 3,
    "drain and reset": 4,
}


def bucket(code, overrides=None):
    """The catalog bucket of XID ``code``; ``overrides`` ({code: bucket}, checked by check_overrides) first."""
    if overrides and code in overrides:
        return overrides[code]
    return CATALOG.get(code, UNKNOWN)


def mnemonic(code):
    return MNEMONICS.get(code)


def recovery_name(value):
    return RECOVERY_ACTIONS.get(value, "UNKNOWN_%s" % value)


def check_overrides(field, value):
    """``{code: bucket}`` from a user's ``{code: bucket}`` (codes may arrive as strings: YAML keys, AWX surveys).

    A code must be one the catalog lists and a bucket one of BUCKET_NAMES; anything else is a ParameterError
    naming ``field``, never a silent default."""
    if value in (None, ""):
        return {}
    if not isinstance(value, dict):
        raise ParameterError(field, "must be a mapping of XID code to catalog bucket, e.g. {109: RESET_GPU}; got %s" % type(value).__name__)
    out = {}
    for key, name in value.items():
        text = str(key).strip()
        if digits(text) not in CATALOG:
            raise ParameterError(field, "%r is not an XID of NVIDIA's catalog (known: 8 to 161, not every number): give one the catalog "
                                 "lists" % (key,))
        if name not in BUCKET_NAMES:
            raise ParameterError(field, "XID %s: %r is not a catalog bucket; use one of %s" % (text, name, ", ".join(BUCKET_NAMES)))
        out[int(text)] = name
    return out
