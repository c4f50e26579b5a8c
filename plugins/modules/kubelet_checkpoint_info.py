#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: kubelet_checkpoint_info
short_description: Read kubelet's device-manager checkpoint exactly as kubelet does
version_added: 0.2.0
description:
  - Decodes C(kubelet_internal_checkpoint) with the strictness of Go's C(encoding/json) into kubelet's structs,
    detects the layout (V(v1) for kubelet 1.19 and older, V(v2) for 1.20 and newer, with the newest C(BootID)),
    and verifies kubelet's own checksum (FNV-32a over the go-spew dump of the data).
  - A missing, corrupt or undecodable file is reported in the result, never as a task failure.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.attributes
  - gpuops.fleet.attributes.info_module
  - gpuops.fleet.checkpoint
options: {}
seealso:
  - module: gpuops.fleet.kubelet_checkpoint
"""

EXAMPLES = r"""
- name: Read the checkpoint
  gpuops.fleet.kubelet_checkpoint_info:
  register: checkpoint

- name: Warn on a checkpoint kubelet would reject
  ansible.builtin.debug:
    msg: "corrupt checkpoint: {{ checkpoint.error }}"
  when: checkpoint.exists and not checkpoint.checksum_valid
"""

RETURN = r"""
checkpoint_path:
  description: The file that was read.
  returned: always
  type: str
  sample: /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
exists:
  description: Whether the file exists.
  returned: always
  type: bool
  sample: true
size:
  description: File size in bytes, V(null) when missing.
  returned: always
  type: int
  sample: 144
layout:
  description: V(v1) or V(v2) as kubelet decodes it, V(null) when missing or undecodable. A file without pod entries
    is identical in both layouts and reported as V(v2), which is how current kubelets read it.
  returned: always
  type: str
  sample: v2
checksum_valid:
  description: Whether kubelet would accept the file (decodes and the stored checksum matches).
  returned: always
  type: bool
  sample: true
stored_checksum:
  description: The C(Checksum) field, V(null) when the file is missing or undecodable.
  returned: always
  type: int
  sample: 3952659280
computed_checksum:
  description: The checksum kubelet computes for the data, V(null) when the file is missing or undecodable.
  returned: always
  type: int
  sample: 3952659280
boot_id:
  description: The C(BootID) written by the newest kubelets, V(null) when absent.
  returned: always
  type: str
  sample: null
registered_devices:
  description: Device IDs per resource, in file order.
  returned: always
  type: dict
  sample: {"nvidia.com/gpu": ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]}
pod_device_entries:
  description: One item per container allocation.
  returned: always
  type: list
  elements: dict
  sample:
    - pod_uid: 300f47eb-e5c3-4d0b-9a87-925837b67732
      container_name: app-3g-v1
      resource_name: nvidia.com/gpu
      device_ids: [GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0]
      numa_nodes: {"0": [GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0]}
      alloc_envs: {NVIDIA_VISIBLE_DEVICES: GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0}
  contains:
    pod_uid:
      description: Pod UID.
      type: str
    container_name:
      description: Container name.
      type: str
    resource_name:
      description: Extended resource name.
      type: str
    device_ids:
      description: All device IDs of the allocation, flattened.
      type: list
      elements: str
    numa_nodes:
      description: Device IDs per NUMA node (v2), V(null) for v1.
      type: dict
    alloc_envs:
      description:
        - The environment the device plugin gave the container (C(envs) of the C(AllocResp) kubelet keeps), only the
          variables named C(NVIDIA_*), C(ALIYUN_COM_GPU_MEM_*) and C(CUDA_*); e.g. C(NVIDIA_VISIBLE_DEVICES), the GPU a
          gpushare container really got. V(null) when the entry has no C(AllocResp) or it does not decode.
      type: dict
      version_added: 0.3.0
error:
  description: Why kubelet would reject the file (decode error or checksum mismatch), V(null) otherwise.
  returned: always
  type: str
  sample: "checksum mismatch: stored 1, computed 3952659280 (v2 layout)"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._node.options import CHECKPOINT_ARGS
from ansible_collections.gpuops.fleet.plugins.module_utils._node import edge, hostroot
from ansible_collections.gpuops.fleet.plugins.module_utils._node.reconcile import describe


def main():
    module = AnsibleModule(argument_spec=dict(CHECKPOINT_ARGS), supports_check_mode=True)
    path = module.params["checkpoint_path"]
    # a host path, reached under the host's root where the module runs beside it (hostroot)
    result = edge.run(module, lambda: describe(hostroot.local(path), module.params["max_bytes"]), {"checkpoint_path": path})
    module.exit_json(changed=False, **hostroot.to_host(result))


if __name__ == "__main__":
    main()
