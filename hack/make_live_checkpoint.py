# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write lab/files/live_checkpoint.json: a kubelet v2 checkpoint of a node with two GPU pods running.

Two Tesla T4s were registered under nvidia.com/gpu; GPU 1 (GPU-7fd52bfc-...) has since been
replaced. Pod "train-valid" holds GPU 0, which is still there; pod "train-stale" holds the
replaced GPU. AllocResp is the NVIDIA device plugin's ContainerAllocateResponse (envs:
NVIDIA_VISIBLE_DEVICES) in protobuf wire format. Molecule's replaced_gpu_live scenario runs
the repair under a kubelet stand-in that keeps writing this file; auto must prune, keeping
train-valid's entry as it is. Run from the repository root after `make collection-link`.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.getcwd(), "build", "collections"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec  # noqa: E402
from make_gpushare_checkpoint import alloc_resp  # noqa: E402

KEPT = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
REPLACED = "GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb"
VALID_POD = "5d3c1b2a-8e7f-4a6b-9c0d-1e2f3a4b5c6d"
STALE_POD = "0a9b8c7d-6e5f-4d3c-2b1a-0f9e8d7c6b5a"


def main():
    entries = [
        codec.PodDevicesEntry(VALID_POD, "train-valid", "nvidia.com/gpu", {0: [KEPT]}, alloc_resp({"NVIDIA_VISIBLE_DEVICES": KEPT})),
        codec.PodDevicesEntry(STALE_POD, "train-stale", "nvidia.com/gpu", {0: [REPLACED]}, alloc_resp({"NVIDIA_VISIBLE_DEVICES": REPLACED})),
    ]
    cp = codec.Checkpoint(codec.LAYOUT_V2, entries, {"nvidia.com/gpu": [KEPT, REPLACED]})
    data, dummy = codec.encode(cp)
    with open("lab/files/live_checkpoint.json", "wb") as handle:
        handle.write(data)


if __name__ == "__main__":
    main()
