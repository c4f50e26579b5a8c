# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write lab/files/gpushare_checkpoint.json: a kubelet v2 checkpoint of a gpushare node.

The gpushare device plugin (AliyunContainerService/gpushare-device-plugin) registers one
fake device per GiB of each GPU, ID ``<GPU UUID>-_-<n>``, under ``aliyun.com/gpu-mem``, and
answers Allocate with ALIYUN_COM_GPU_MEM_* environment variables (AllocResp below is that
ContainerAllocateResponse in protobuf wire format). Two Tesla T4s (15 GiB each); two pods,
one per GPU. The checksum is kubelet's, computed by the collection's codec, which re-encodes
real kubelet files byte for byte (tests/unit/plugins/module_utils/_node/fixtures/checkpoints).
Run from the repository root after `make collection-link`.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.getcwd(), "build", "collections"))

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec  # noqa: E402

GPUS = ("GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0", "GPU-1b7d2a3e-5c8f-4e61-9a0d-3f2c4b5a6d7e")
GIB = 15


def _len(n):
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def _field(number, payload):
    return bytes([(number << 3) | 2]) + _len(len(payload)) + payload


def alloc_resp(envs):
    """ContainerAllocateResponse{envs: map<string,string>} (field 1, map entries key=1 value=2)."""
    return b"".join(_field(1, _field(1, k.encode()) + _field(2, v.encode())) for k, v in sorted(envs.items()))


def entry(pod_uid, container, gpu_index, gib):
    ids = ["%s-_-%d" % (GPUS[gpu_index], n) for n in range(gib)]
    envs = {
        "ALIYUN_COM_GPU_MEM_IDX": str(gpu_index),
        "ALIYUN_COM_GPU_MEM_POD": str(gib),
        "ALIYUN_COM_GPU_MEM_CONTAINER": str(gib),
        "ALIYUN_COM_GPU_MEM_DEV": str(GIB),
        "NVIDIA_VISIBLE_DEVICES": GPUS[gpu_index],
    }
    return codec.PodDevicesEntry(pod_uid, container, "aliyun.com/gpu-mem", {-1: ids}, alloc_resp(envs))


def main():
    registered = {"aliyun.com/gpu-mem": ["%s-_-%d" % (uuid, n) for uuid in GPUS for n in range(GIB)]}
    entries = [
        entry("7a4f0d3c-2b1e-4c5d-8e9f-0a1b2c3d4e5f", "binpack-0", 0, 3),
        entry("9c8b7a6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d", "binpack-1", 1, 4),
    ]
    cp = codec.Checkpoint(codec.LAYOUT_V2, entries, registered)
    data, dummy = codec.encode(cp)
    with open("lab/files/gpushare_checkpoint.json", "wb") as handle:
        handle.write(data)


if __name__ == "__main__":
    main()
