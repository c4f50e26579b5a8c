# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: a gpushare node's shared GPU memory, from its checkpoint alone."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._common.gpushare import GPUSHARE_ID, MEM, gpus_by_index, pct


def from_checkpoint(entries, registered, gpus):
    """The node's own view of its shared GPU memory, from the checkpoint alone (no cluster).

    Per GPU (by UUID and index): total GiB = its registered ``aliyun.com/gpu-mem`` IDs;
    allocated GiB = the device IDs of the containers whose AllocResp gave them that GPU
    (``NVIDIA_VISIBLE_DEVICES``). A container without that env is counted apart
    (``unattributed_gib``), never in a GPU's total. Pod names are not known on the node: pods
    are their UIDs.
    """
    by_index = gpus_by_index(gpus)
    index_of = dict((u, i) for i, u in by_index.items())
    totals = {}
    for device_id in (registered or {}).get(MEM) or ():
        match = GPUSHARE_ID.match(device_id)
        if match:
            totals[match.group("uuid")] = totals.get(match.group("uuid"), 0) + 1
    allocated = dict((u, 0) for u in totals)
    pods = dict((u, set()) for u in totals)
    unattributed = 0
    for entry in entries or ():
        if entry.get("resource_name") != MEM:
            continue
        gib = len(entry.get("device_ids") or ())
        given = ((entry.get("alloc_envs") or {}).get("NVIDIA_VISIBLE_DEVICES") or "").strip()
        if given in totals:
            allocated[given] += gib
            pods[given].add(entry.get("pod_uid"))
        else:
            unattributed += gib
    rows = []
    for uuid in sorted(totals, key=lambda u: (index_of.get(u, 1 << 30), u)):
        rows.append({"uuid": uuid, "index": index_of.get(uuid), "allocated_gib": allocated[uuid], "total_gib": totals[uuid],
                     "pods": len(pods[uuid])})
    used = sum(r["allocated_gib"] for r in rows) + unattributed
    total = sum(r["total_gib"] for r in rows)
    return {"gpus": rows, "allocated_gib": used, "total_gib": total, "percent": pct(used, total),
            "unattributed_gib": unattributed}
