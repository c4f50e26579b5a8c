# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the gpushare / cGPU vocabulary (field report 003).

Names AliyunContainerService's gpushare-device-plugin and gpushare-scheduler-extender use
(Apache-2.0), shared by the node's checkpoint view (``_node.shared_memory``) and the controller's
accounting (``_cluster.gpu_share``, whose docstring cites where each comes from upstream).
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import UUID

MEM = "aliyun.com/gpu-mem"
COUNT = "aliyun.com/gpu-count"
WHOLE_GPU = "nvidia.com/gpu"
ANN_IDX = "ALIYUN_COM_GPU_MEM_IDX"
ANN_POD = "ALIYUN_COM_GPU_MEM_POD"
ANN_DEV = "ALIYUN_COM_GPU_MEM_DEV"
ANN_ASSIGNED = "ALIYUN_COM_GPU_MEM_ASSIGNED"
ANN_ASSUME_TIME = "ALIYUN_COM_GPU_MEM_ASSUME_TIME"
# one GiB of one GPU: pkg/gpu/nvidia/nvidia.go generateFakeDeviceID
GPUSHARE_ID = re.compile(r"\A(?P<uuid>GPU-%s)-_-[0-9]+\Z" % UUID)


def gpus_by_index(gpus):
    """``{index: uuid}`` from gpu_uuid_facts' ``gpus`` (entries without both are skipped)."""
    out = {}
    for gpu in gpus or ():
        if isinstance(gpu, dict) and gpu.get("uuid") is not None and gpu.get("index") is not None:
            out[int(gpu["index"])] = gpu["uuid"]
    return out


def pct(used, total):
    """A percentage as upstream's inspect prints it: int64(float64(used) / float64(total) * 100), truncated."""
    return int(float(used) / float(total) * 100) if total > 0 else 0
