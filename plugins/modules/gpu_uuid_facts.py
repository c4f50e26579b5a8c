#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_uuid_facts
short_description: Gather the NVIDIA GPUs of a node (UUIDs, PCI bus IDs, MIG devices) as facts
version_added: 0.2.0
description:
  - Reads the driver version, the CUDA driver version and, per GPU, index, UUID, name, PCI bus ID,
    total memory, minor number, MIG mode and MIG devices.
  - Sets the fact C(gpuops_gpus). A node without a usable NVIDIA driver yields C(available=false) and a
    C(reason) instead of an error, unless O(fail_on_unavailable=true).
  - The output is what M(gpuops.fleet.kubelet_checkpoint) takes as O(gpuops.fleet.kubelet_checkpoint#module:gpus).
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.attributes
  - gpuops.fleet.attributes.facts
  - gpuops.fleet.attributes.info_module
  - gpuops.fleet.attributes.gpu_backend
options:
  fail_on_unavailable:
    description:
      - Fail the task when the GPUs cannot be read (no driver, driver not loaded, NVML or C(nvidia-smi) error).
      - When V(false), the facts say C(available=false) and why.
    type: bool
    default: false
  nvidia_smi_path:
    description:
      - Path of the C(nvidia-smi) binary. Looked up on E(PATH) and in C(/usr/bin), C(/usr/local/nvidia/bin), C(/home/kubernetes/bin/nvidia/bin) when not set.
    type: path
requirements:
  - nvidia-ml-py (module C(pynvml)) for the V(nvml) backend, or the C(nvidia-smi) CLI
notes:
  - With the V(nvidia-smi) backend, C(cuda_driver_version), C(gpu_instance_id) and C(compute_instance_id) are V(null);
    the minor number is read from C(/proc/driver/nvidia/gpus/<bus>/information).
seealso:
  - module: gpuops.fleet.kubelet_checkpoint
  - module: gpuops.fleet.kubelet_checkpoint_info
"""

EXAMPLES = r"""
- name: Read the GPUs of the node
  gpuops.fleet.gpu_uuid_facts:

- name: Show the UUIDs
  ansible.builtin.debug:
    msg: "{{ ansible_facts.gpuops_gpus.gpus | map(attribute='uuid') | list }}"

- name: Refuse to go on without a working driver
  gpuops.fleet.gpu_uuid_facts:
    fail_on_unavailable: true

- name: Read the GPUs on a GPU Operator node (driver in a container)
  gpuops.fleet.gpu_uuid_facts:
    driver_root: /run/nvidia/driver

- name: Force the CLI backend
  gpuops.fleet.gpu_uuid_facts:
    backend: nvidia-smi
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    gpuops_gpus:
      description: The node's NVIDIA GPUs.
      returned: always
      type: dict
      contains:
        available:
          description: Whether the GPUs could be read.
          type: bool
          returned: always
          sample: true
        reason:
          description: Why the GPUs could not be read, V(null) when they could.
          type: str
          returned: always
          sample: "NVIDIA driver is not loaded (NVML: Driver Not Loaded)"
        backend:
          description: The backend that produced the facts (V(nvml) or V(nvidia-smi)), V(null) when none could run.
          type: str
          returned: always
          sample: nvml
        driver_version:
          description: NVIDIA driver version.
          type: str
          returned: always
          sample: "535.104.05"
        cuda_driver_version:
          description: Highest CUDA version the driver supports (NVML only).
          type: str
          returned: always
          sample: "12.2"
        count:
          description: Number of GPUs.
          type: int
          returned: always
          sample: 1
        node_id:
          description:
            - Which machine the facts were read on (a hash of its machine-id, never the id itself).
              M(gpuops.fleet.kubelet_checkpoint) refuses facts whose C(node_id) is not its own machine's, so another node's
              GPUs can never be compared with this node's checkpoint.
          type: str
          returned: always
          sample: 3f9d0c1b2a4e5f60718293a4b5c6d7e8
          version_added: 0.3.0
        gpus:
          description: One entry per GPU, in NVML index order.
          type: list
          elements: dict
          returned: always
          sample:
            - index: 0
              uuid: GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0
              name: Tesla T4
              pci_bus_id: "00000000:07:00.0"
              memory_total_mib: 15360
              minor_number: 0
              mig_mode: {current: null, pending: null}
              mig_devices: []
          contains:
            index:
              description: NVML index.
              type: int
            uuid:
              description: GPU UUID (C(GPU-...)).
              type: str
            name:
              description: Product name.
              type: str
            pci_bus_id:
              description: PCI bus ID as NVML prints it.
              type: str
            memory_total_mib:
              description: Total framebuffer memory in MiB.
              type: int
            minor_number:
              description: Minor number of C(/dev/nvidiaN).
              type: int
            mig_mode:
              description: MIG mode, V(enabled), V(disabled) or V(null) when the GPU has no MIG.
              type: dict
            mig_devices:
              description: MIG devices when MIG is enabled (index, uuid, profile, gpu_instance_id, compute_instance_id, memory_total_mib).
              type: list
              elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._node.options import BACKEND_ARGS
from ansible_collections.gpuops.fleet.plugins.module_utils._node import edge, hostroot
from ansible_collections.gpuops.fleet.plugins.module_utils._node.gpu_inventory import gather_on_node


def main():
    module = AnsibleModule(
        argument_spec=dict(
            BACKEND_ARGS,
            fail_on_unavailable=dict(type="bool", default=False),
            nvidia_smi_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    # on the host, or beside it from the node pod (hostroot: the host's nvidia-smi, NVML under the host's root)
    params = module.params
    facts = edge.run(module, lambda: gather_on_node(module.run_command, params["backend"], params["nvidia_smi_path"], params["driver_root"],
                                                    get_bin_path=module.get_bin_path))
    facts = hostroot.to_host(facts)
    if not facts["available"] and module.params["fail_on_unavailable"]:
        module.fail_json(msg="cannot read the GPUs: %s" % facts["reason"], ansible_facts={"gpuops_gpus": facts})
    module.exit_json(changed=False, ansible_facts={"gpuops_gpus": facts})


if __name__ == "__main__":
    main()
