#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_rma_evidence
short_description: Collect on a GPU node the evidence an RMA or break-fix ticket asks for, size-capped
version_added: 0.4.0
description:
  - Runs on the node (root). Reads each GPU's serial number and board part number (NVML's C(nvmlDeviceGetSerial) and
    C(nvmlDeviceGetBoardPartNumber), from the InfoROM), with its UUID, PCI bus ID, state, recovery action, ECC counts,
    remapped rows and retired pages; the XIDs of this boot from the kernel log (C(NVRM) XID lines only, every one of
    this boot); and C(nvidia-smi -q).
  - With O(bug_report=true), also runs C(nvidia-bug-report.sh) where the node has it, into O(bug_report_dir); the
    archive holds the node's whole configuration, so it is returned by path, size and SHA-256, never inline, and only
    when allowed.
  - The returned evidence is at most O(max_bytes) as JSON; C(nvidia-smi -q) is cut first, then the oldest XIDs, and
    C(truncated) says what was cut. No environment, command line or file of the node other than these is read.
  - The role C(gpuops.fleet.gpu_remediation) runs it for a node it leaves as V(rma_candidate) or V(needs_human), and puts
    the evidence into the node's report and the job's artifacts.
  - Changes nothing but the bug report's file; check mode runs no bug report.
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
    support: none
    details: Each run with O(bug_report=true) writes a new archive (the same path for the same boot).
options:
  gpus:
    description: The GPUs the ticket is about (UUIDs); their entries carry C(target=true). Every GPU of the node is read.
    type: list
    elements: str
    default: []
  driver_root:
    description:
      - Where the driver's libraries are (a GPU Operator node, C(/run/nvidia/driver)).
      - Its C(usr/bin/nvidia-smi), where it has one, is the one C(nvidia-smi -q) runs, before PATH's (as M(gpuops.fleet.gpu_reset)).
    type: path
  kernel_log:
    description: Where the XIDs are read, as M(gpuops.fleet.gpu_health_info)'s.
    type: str
    choices: [auto, journal, kmsg, file, none]
    default: auto
  kernel_log_path:
    description: The saved kernel log, with O(kernel_log=file).
    type: path
  max_bytes:
    description: The most the evidence may be as JSON (16384 at least).
    type: int
    default: 262144
  bug_report:
    description: Run C(nvidia-bug-report.sh) (several minutes, tens of MB) where the node has it.
    type: bool
    default: false
  bug_report_dir:
    description: Where on the node the bug report's archive is written.
    type: path
    default: /var/lib/gpuops/evidence
seealso:
  - module: gpuops.fleet.gpu_health_info
"""

EXAMPLES = r"""
- name: The RMA evidence of a node
  gpuops.fleet.gpu_rma_evidence:
    gpus: [GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0]
  become: true
  register: evidence
"""

RETURN = r"""
evidence:
  description:
    - C(gpus) (C(index), C(uuid), C(name), C(pci_bus_id), C(state), C(serial), C(board_part_number), C(target),
      C(recovery_action), C(ecc), C(remapped_rows), C(retired_pages)), C(xids) (C(code), C(mnemonic), C(bucket), C(bus),
      C(usec) since boot, C(line)), C(kernel_log) (C(source), C(reason), C(records)), C(nvidia_smi_q) (or C(nvidia_smi_reason)),
      C(bug_report) (C(path), C(bytes), C(sha256), or C(skipped) with why), C(boot_id), C(driver_version), C(collected_at),
      C(truncated), C(bytes) and C(max_bytes).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._node import edge, hostroot
from ansible_collections.gpuops.fleet.plugins.module_utils._node.health import evidence


def main():
    module = AnsibleModule(argument_spec=evidence.ARGUMENT_SPEC, supports_check_mode=True)
    found = edge.run(module, lambda: evidence.collect(module.params, module.run_command, module.get_bin_path, module.check_mode))
    written = "path" in (found.get("bug_report") or {})
    module.exit_json(changed=written, evidence=hostroot.to_host(found))


if __name__ == "__main__":
    main()
