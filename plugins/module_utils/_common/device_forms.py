# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the forms of a device-plugin device ID (the table in
``_node/device_ids.py``), read on the node (the checkpoint's stale IDs) and on the controller (the GPU
remediation plan's pod -> GPU map) alike."""

from __future__ import annotations

import re

from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import UUID

_REPLICA = r"(?:::(?P<replica>[0-9]+))?"
_FORMS = (
    ("gpushare", re.compile(r"\A(?P<key>GPU-%s)-_-(?P<unit>[0-9]+)\Z" % UUID)),
    ("gpu_uuid", re.compile(r"\A(?P<key>GPU-%s)%s\Z" % (UUID, _REPLICA))),
    ("mig_uuid", re.compile(r"\A(?P<key>MIG-%s)%s\Z" % (UUID, _REPLICA))),
    ("mig_uuid", re.compile(r"\A(?P<key>MIG-GPU-%s/[0-9]+/[0-9]+)%s\Z" % (UUID, _REPLICA))),
    ("gpu_index", re.compile(r"\A(?P<key>[0-9]+)%s\Z" % _REPLICA)),
    ("mig_index", re.compile(r"\A(?P<key>[0-9]+:[0-9]+)%s\Z" % _REPLICA)),
)


def classify(device_id):
    """Return ``(form, key)`` for a device ID; ``(None, None)`` when unrecognized.

    ``key`` is what identifies the physical device: a lower-case GPU or MIG
    UUID, a GPU index, or ``"<gpu>:<mig>"``.
    """
    for form, pattern in _FORMS:
        match = pattern.match(device_id)
        if match:
            key = match.group("key")
            return form, key if form in ("gpu_index", "mig_index") else key.lower()
    return None, None
