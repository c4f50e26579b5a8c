#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_diag
short_description: DCGM's diagnostic on remediated GPUs, the gate before a node is released
version_added: 0.4.0
description:
  - Runs on the node (root). Where DCGM is installed (C(dcgmi) on the node), runs C(dcgmi diag -r <level> -i <GPU ids> -j)
    on O(gpus) (their NVML indices, which are DCGM's GPU ids) and reads its JSON - the categories, tests and each GPU's
    result. A test that fails on one of O(gpus) fails the task, naming the test, its category, the GPU and DCGM's warning;
    so does an output with no result for them, or DCGM's runtime error - never a pass.
  - Where DCGM is absent, changes nothing and returns C(gate=no_dcgm) with why; the role C(gpuops.fleet.gpu_remediation) then
    keeps its verification pod as the gate, and its report says which gate ran.
  - Check mode does not run the diagnostic (it loads the GPUs for minutes at level 2 and up).
  - The diagnostic runs for its level's time (level 1 about a minute, 2 a few minutes, 3 and 4 up to hours).
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  gpus:
    description: The remediated GPUs (UUIDs) the diagnostic must pass.
    type: list
    elements: str
    required: true
  level:
    description: C(dcgmi diag -r) - 1 quick (deployment tests), 2 medium (adds PCIe and GPU memory), 3 long, 4 extended.
    type: int
    default: 2
  driver_root:
    description: Where the driver's libraries are (a GPU Operator node, C(/run/nvidia/driver)).
    type: path
notes:
  - DCGM's JSON as NVVS writes it, in both of its shapes - DCGM 3.x (C(DCGM GPU Diagnostic), C(test_categories), C(tests),
    C(results) with C(gpu_ids), C(status), C(warnings)) and DCGM 4.x (C(DCGM Diagnostic), each result naming its entity
    with C(entity_group), C(entity_group_id) and C(entity_id); the version in C(metadata)); text before the JSON, C(null)
    entries and a software test's C(gpu_ids) as one CSV string are read as real output has them. A 4.x result of another
    entity (a CPU, a switch) names no GPU. dcgmi exits 226 (C(DCGM_ST_NVVS_ERROR)) on a failed test; the verdict is read from the
    JSON, the exit code only where there is none.
seealso:
  - module: gpuops.fleet.gpu_reset
"""

EXAMPLES = r"""
- name: DCGM's diagnostic before the release
  gpuops.fleet.gpu_diag:
    gpus: [GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0]
    level: 2
  become: true
"""

RETURN = r"""
gate:
  description: V(dcgm) where the diagnostic ran, V(no_dcgm) where DCGM is not on the node (the verification pod is the gate).
  returned: always
  type: str
passed:
  description: Whether every test passed on O(gpus) (null in check mode).
  returned: gate is dcgm
  type: bool
failed:
  description: The failing results (C(category), C(test), C(gpus), C(status), C(warnings)).
  returned: gate is dcgm
  type: list
  elements: dict
results:
  description: Every result of the run, as C(failed)'s.
  returned: gate is dcgm
  type: list
  elements: dict
gpus:
  description: Each GPU's DCGM id (its NVML index), by UUID.
  returned: gate is dcgm
  type: dict
version:
  description: DCGM's version, as its JSON says.
  returned: gate is dcgm
  type: str
reason:
  description: Why the diagnostic did not run (no DCGM, check mode).
  returned: when it did not run
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._node import edge
from ansible_collections.gpuops.fleet.plugins.module_utils._node.health import diag


def main():
    module = AnsibleModule(argument_spec=diag.ARGUMENT_SPEC, supports_check_mode=True)
    result = edge.run(module, lambda: diag.run_gate(module.params, module.run_command, module.get_bin_path, module.check_mode))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
