#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_health_info
short_description: Read the health of a node's NVIDIA GPUs (NVML and the kernel log) and say what NVIDIA's guidance asks for
version_added: 0.4.0
description:
  - Reads, per GPU, through NVML (C(nvidia-ml-py)) the state (V(ok), V(lost), V(reset_required), V(unreadable)),
    the recovery action (NVML field 230, C(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION); where the driver lacks the field,
    the last XID 154 line's), remapped rows, retired pages, ECC counters, persistence mode, temperature,
    clocks event reasons, NVLink state and peers, and the compute processes with the pod and container of each.
  - Reads the XIDs since boot from the kernel log (C(journalctl -k -b -o json), else C(/dev/kmsg)), joins each to its
    GPU by PCI bus ID and gives it the bucket of NVIDIA's XID catalog.
  - Gives each GPU and the node a verdict from one decision table (V(none), V(observe), V(reset), V(investigate),
    V(reboot), V(replace)). NVML's answers decide before the log's; a node whose NVML cannot be read is
    V(unknown) and gets no verdict.
  - Read-only. Sets the fact C(gpuops_gpu_health). Acting on the verdict is not this module's job.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.attributes
  - gpuops.fleet.attributes.facts
  - gpuops.fleet.attributes.info_module
options:
  backend:
    description:
      - How to read the GPUs. Health is read through NVML only (V(auto) and V(nvml) are the same); C(nvidia-smi) has
        no recovery-action field.
    type: str
    choices: [auto, nvml]
    default: auto
  driver_root:
    description:
      - Root of a containerized driver, e.g. C(/run/nvidia/driver) (the GPU Operator's); C(libnvidia-ml.so.1) is loaded
        from there, as M(gpuops.fleet.gpu_uuid_facts) does.
    type: path
  gpus_expected:
    description:
      - How many GPUs this node should have. Fewer seen by NVML is a missing GPU (the node's verdict is V(reboot)).
      - Not set means no count check.
    type: int
  kernel_log:
    description:
      - Where to read the XIDs. V(auto) tries the journal, then C(/dev/kmsg). V(file) reads O(kernel_log_path)
        (the C(/dev/kmsg) record format or C(dmesg) lines). V(none) reads no log.
      - Only kernel-facility records count; a line written to C(/dev/kmsg) by a process is ignored.
    type: str
    choices: [auto, journal, kmsg, file, none]
    default: auto
  kernel_log_path:
    description:
      - The file O(kernel_log=file) reads; of a file larger than 64 MiB, its last 64 MiB (the newest lines), and the
        result's C(kernel_log.reason) says so.
    type: path
  mark_path:
    description:
      - Where M(gpuops.fleet.gpu_reset) records each GPU's last verified reset in this boot (a host path). A GPU's XIDs
        logged up to it were dealt with and are not counted again, so a reset GPU is not reset again for the same line.
    type: path
    default: /var/lib/gpuops/health/last-remediation.json
    version_added: 0.4.0
  thresholds:
    description:
      - The health decision's thresholds; each key that is not given keeps its default. They are returned in the facts
        (RV(ansible_facts.gpuops_gpu_health.thresholds)), and the remediation plan decides again with the node's own.
      - V(repeat_xids) (default V([13, 31])), V(repeat_count) (2 or more, default V(2)) and V(repeat_window) (seconds, 60
        to 30 days, default V(86400)) - the XID codes whose distinct faults, repeated that many times on one GPU within
        that window, point at the GPU rather than the application (V(investigate)).
      - V(fault_window_usec) (default V(10000000)) - lines of one GPU, XID and PID within this many microseconds of the
        previous are one fault (the driver logs one crash as several lines).
      - An unknown key or a value out of range fails the module, naming it (for example C(thresholds.repeat_count)).
    type: dict
    default: {}
    version_added: 0.4.0
  xid_overrides:
    description:
      - "A catalog bucket per XID code that replaces NVIDIA's, for example V({109: IGNORE})."
      - A code must be one of the catalog's, and a bucket one of V(RESTART_APP), V(IGNORE), V(WORKFLOW_XID_45),
        V(RESET_GPU), V(WORKFLOW_XID_48), V(WORKFLOW_NVLINK_ERR), V(WORKFLOW_NVLINK5_ERR), V(RESTART_BM),
        V(RESTART_VM), V(CHECK_MECHANICALS), V(UPDATE_SWFW), V(XID_154), V(CHECK_UVM), V(UNKNOWN).
    type: dict
    default: {}
requirements:
  - nvidia-ml-py (module C(pynvml))
notes:
  - Works over SSH and through P(gpuops.fleet.k8s_node#connection), on the host or beside it.
  - A GPU's XIDs up to its last remediation recorded on the node in this boot (O(mark_path)) are not counted again.
  - Per GPU, every XID whose catalog bucket asks for an action is kept (the newest 1,000), and the newest 200 routine ones
    (an application's faults, and those NVIDIA ignores); C(xids_dropped) counts the others, and the verdict's reasons say
    so. One application fault logged as a burst of lines (the same GPU, XID and PID within 10 seconds) is one fault.
seealso:
  - module: gpuops.fleet.gpu_uuid_facts
  - name: NVIDIA XID catalog
    description: The buckets this module gives each XID.
    link: https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
  - name: NVIDIA GPU memory error management
    description: Row remapping, the recovery action flag, and what each value asks for.
    link: https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html
"""

EXAMPLES = r"""
- name: Read the health of the node's GPUs
  gpuops.fleet.gpu_health_info:
    gpus_expected: 8

- name: Show the node's verdict
  ansible.builtin.debug:
    msg: "{{ ansible_facts.gpuops_gpu_health.verdict }}"

- name: Treat XID 109 as the device plugin does
  gpuops.fleet.gpu_health_info:
    xid_overrides:
      109: IGNORE
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    gpuops_gpu_health:
      description: The node's GPU health.
      returned: always
      type: dict
      contains:
        available:
          description: Whether NVML could be read. V(false) means the verdict is V(unknown), never a fault.
          type: bool
          returned: always
        reason:
          description: Why NVML could not be read, V(null) when it could.
          type: str
          returned: always
        driver_version:
          description: NVIDIA driver version.
          type: str
          returned: always
        boot_id:
          description: The kernel's boot ID (C(/proc/sys/kernel/random/boot_id)).
          type: str
          returned: always
        gpus_seen:
          description: How many GPUs NVML counts, lost ones included.
          type: int
          returned: always
        gpus_expected:
          description: O(gpus_expected).
          type: int
          returned: always
        thresholds:
          description: The decision's thresholds the verdicts were decided with (O(thresholds), the defaults filled in).
          type: dict
          returned: always
          version_added: 0.4.0
        nvswitch:
          description: Whether this is an NVSwitch system.
          type: bool
          returned: always
        fabric_manager:
          description: The state of C(nvidia-fabricmanager.service) on an NVSwitch system, else V(null).
          type: str
          returned: always
        kernel_log:
          description: Which log was read (C(source), C(reason) when none), how many records, how many XIDs were before the last remediation
            (C(ignored_before_mark)), and the XIDs whose PCI bus ID is no GPU's (C(unattributed_xids)).
          type: dict
          returned: always
        gpus:
          description:
            - One entry per GPU in NVML index order, with C(index), C(uuid), C(name), C(pci_bus_id), C(state), C(error),
              C(architecture), C(mig_mode), C(recovery_action) (C(value), C(name), C(source) V(nvml_field), V(xid154_log) or
              V(unsupported)), C(remapped_rows), C(retired_pages), C(ecc), C(persistence_mode), C(temperature),
              C(clocks_event_reasons), C(nvlink), C(processes) (C(pid), C(used_mib), C(pod_uid), C(container)), C(xids)
              (C(code), C(bucket), C(mnemonic), C(usec) since boot, C(pid), C(process), C(line)), C(xids_dropped) and
              C(xids_before_mark) (where there were some) and C(verdict).
          type: list
          elements: dict
          returned: always
        verdict:
          description:
            - The node's verdict. C(state) is V(unknown), V(ok), V(attention) or V(faulty); C(action) is V(none), V(observe),
              V(reset), V(investigate), V(reboot) or V(replace); C(scope) V(gpu) or V(node); C(row) the decision table's;
              C(gpus) the GPUs it is about; C(reasons); C(signals) (C(kind), C(key), C(value), C(source), C(gpu)).
          type: dict
          returned: always
          sample:
            state: faulty
            action: reset
            scope: gpu
            row: 5
            gpus: [GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0]
            reasons: ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0: recovery action GPU_RESET (nvml_field): NVIDIA says reset the GPU (nvidia-smi -r)"]
            signals: [{kind: recovery, key: "recovery:1", value: 1, source: nvml_field, gpu: GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._node import edge, hostroot
from ansible_collections.gpuops.fleet.plugins.module_utils._node.health import gpu_health


def main():
    module = AnsibleModule(argument_spec=gpu_health.ARGUMENT_SPEC, supports_check_mode=True)
    facts = edge.run(module, lambda: gpu_health.read_with(module.params, module.run_command, module.get_bin_path))
    module.exit_json(changed=False, ansible_facts={"gpuops_gpu_health": hostroot.to_host(facts)})


if __name__ == "__main__":
    main()
