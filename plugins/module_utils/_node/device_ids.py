# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: map device-plugin IDs to physical GPUs.

ID forms understood (one device plugin resource may mix them):

========================================  ==========================================
``GPU-<uuid>``                            NVIDIA plugin, ``DEVICE_ID_STRATEGY=uuid``
``GPU-<uuid>::<n>``                       time-slicing / MPS replica of that GPU
``MIG-<uuid>`` (``::<n>``)                MIG device, driver >= 470
``MIG-GPU-<uuid>/<gi>/<ci>`` (``::<n>``)  MIG device, legacy driver < 470 form
``GPU-<uuid>-_-<n>``                      gpushare / cGPU (``aliyun.com/gpu-mem``) unit
``<i>`` (``::<n>``)                       ``DEVICE_ID_STRATEGY=index``
``<i>:<m>`` (``::<n>``)                   index strategy, MIG device m on GPU i
========================================  ==========================================

Anything else is *unrecognized*: reported, never called stale.
"""

from __future__ import annotations

import fnmatch

from ansible_collections.gpuops.fleet.plugins.module_utils._common.device_forms import classify
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

DEFAULT_GPU_RESOURCES = (
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-*",
    "aliyun.com/gpu-mem",
)

PRESENT = "present"
STALE = "stale"
UNRECOGNIZED = "unrecognized"


class Inventory:
    """The physical devices of one node, indexed for ID lookups."""

    __slots__ = ("gpu_uuids", "mig_uuids", "gpu_indexes", "mig_indexes", "gpu_count")

    def __init__(self, gpus):
        self.gpu_uuids = set()
        self.mig_uuids = set()
        self.gpu_indexes = set()
        self.mig_indexes = set()
        for gpu in gpus:
            self.gpu_uuids.add(gpu["uuid"].lower())
            self.gpu_indexes.add(str(gpu["index"]))
            for mig in gpu.get("mig_devices") or ():
                self.mig_uuids.add(mig["uuid"].lower())
                self.mig_indexes.add("%s:%s" % (gpu["index"], mig["index"]))
        self.gpu_count = len(gpus)

    def state(self, device_id):
        form, key = classify(device_id)
        if form is None:
            return UNRECOGNIZED
        if form in ("gpu_uuid", "gpushare"):
            found = key in self.gpu_uuids
        elif form == "mig_uuid":
            found = key in self.mig_uuids
        elif form == "gpu_index":
            found = key in self.gpu_indexes
        else:
            found = key in self.mig_indexes
        return PRESENT if found else STALE


def _require(mapping, key, kind, field):
    if key not in mapping:
        raise ParameterError(field, "missing key %r; pass the ansible_facts.gpuops_gpus value returned by gpuops.fleet.gpu_uuid_facts" % key)
    value = mapping[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ParameterError("%s.%s" % (field, key), "expected %s, got %s" % (kind.__name__, type(value).__name__))
    return value


def availability(facts, field="gpus"):
    """Return ``(available, reason)`` of a ``gpuops_gpus`` facts dict; ParameterError names a bad field."""
    if not isinstance(facts, dict):
        raise ParameterError(field, "expected a dict (the ansible_facts.gpuops_gpus value of gpuops.fleet.gpu_uuid_facts)")
    if "available" not in facts:
        raise ParameterError(field, "missing key 'available'; pass the ansible_facts.gpuops_gpus value returned by gpuops.fleet.gpu_uuid_facts")
    if not isinstance(facts["available"], bool):
        raise ParameterError("%s.available" % field, "expected a boolean, got %s %r" % (type(facts["available"]).__name__, facts["available"]))
    return facts["available"], facts.get("reason")


def inventory_from_facts(facts, field="gpus"):
    """Validate a ``gpuops_gpus`` facts dict and build an Inventory.

    Raises ParameterError naming the bad field. Does not judge availability:
    callers check ``facts['available']`` first.
    """
    if not isinstance(facts, dict):
        raise ParameterError(field, "expected a dict (the ansible_facts.gpuops_gpus value of gpuops.fleet.gpu_uuid_facts)")
    gpus = _require(facts, "gpus", list, field)
    for i, gpu in enumerate(gpus):
        where = "%s.gpus[%d]" % (field, i)
        if not isinstance(gpu, dict):
            raise ParameterError(where, "expected a dict with index and uuid")
        _require(gpu, "index", int, where)
        _require(gpu, "uuid", str, where)
        for j, mig in enumerate(gpu.get("mig_devices") or ()):
            mwhere = "%s.mig_devices[%d]" % (where, j)
            if not isinstance(mig, dict):
                raise ParameterError(mwhere, "expected a dict with index and uuid")
            _require(mig, "index", int, mwhere)
            _require(mig, "uuid", str, mwhere)
    return Inventory(gpus)


def validate_resource_patterns(patterns, field="resources"):
    if not patterns:
        raise ParameterError(field, "list at least one device-plugin resource name or glob, e.g. nvidia.com/gpu")
    for pattern in patterns:
        if not isinstance(pattern, str) or "/" not in pattern:
            raise ParameterError(field, "%r is not a resource name like nvidia.com/gpu or nvidia.com/mig-*" % (pattern,))
    return tuple(patterns)


def is_gpu_resource(resource, patterns):
    return any(fnmatch.fnmatchcase(resource, p) for p in patterns)
