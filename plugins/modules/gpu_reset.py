#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_reset
short_description: Reset GPUs on a node with nvidia-smi, after checking its rules, with persistence mode and units restored
version_added: 0.4.0
description:
  - Resets the GPUs O(gpus) with C(nvidia-smi -r -i <uuids>), NVIDIA's way (NVML's Python binding has no reset).
  - Checks nvidia-smi's rules first, through NVML; each that fails refuses the reset, names its cause and changes nothing.
    No compute process may use a GPU (the refusal names the PID and its pod). No MIG instance may exist (O(allow_mig)).
    Where Fabric Manager is not active, or a GPU is older than Ampere, the GPUs' NVLink peers must be reset in the same
    command (O(include_peers) adds them, else the refusal names them). An Ampere NVSwitch system needs Fabric Manager
    active. A lost or unreadable GPU is not reset, nor is any GPU of a node whose NVML cannot be read.
  - Lets NVML's clients go first. This module shuts its own NVML down. Host units in O(stop_units) that are active are
    stopped. Persistence mode is turned off where it was on (its daemon's attachment refuses a reset, NVSentinel#1690).
    Pods that hold NVML (the device plugin, DCGM, exporters) are the controller's to pause.
  - Whatever happens, persistence mode and the stopped units are restored. Before anything stops, transient systemd
    timers are armed (one per unit, one for persistence mode) that restore them O(rescue_seconds) later if this module
    dies, after its lock; they are disarmed once restored.
  - Then reads NVML again. The same UUIDs must be there, and for each no rule of the GPU health decision at the reset's
    severity or above may fire - no recovery action, no pending or failed row remap, no double-bit ECC errors where the
    driver cannot say the recovery action, and none lost, unreadable or requiring a reset (the decision's own rules, so
    the post-check and M(gpuops.fleet.gpu_health_info) never disagree). A failed reset or post-check fails the task (the
    playbook escalates to a reboot, as NVIDIA advises).
  - Check mode reports what would be stopped and reset; nothing runs.
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
    details: Each run resets the GPUs it is given; the playbook resets only what the plan asks for.
options:
  gpus:
    description: The UUIDs of the GPUs to reset (C(GPU-...)).
    type: list
    elements: str
    required: true
  include_peers:
    description: Add the NVLink peers nvidia-smi must reset in the same command (their pods must be drained too).
    type: bool
    default: false
  allow_mig:
    description: Reset a GPU that has MIG instances (they are destroyed).
    type: bool
    default: false
  stop_units:
    description:
      - Host units that hold NVML, stopped for the reset where active and started again, in this order (a timer before
        its service, so that no new run starts while the running one is waited for).
    type: list
    elements: str
    default: [gpuops-metrics.timer, gpuops-metrics.service, nvidia-dcgm.service, dcgm-exporter.service]
  rescue_seconds:
    description: Seconds after which the rescue timers restore persistence mode and the units if this module died (10 to 3600).
    type: int
    default: 300
  driver_root:
    description: Where the NVIDIA driver's files are (its C(libnvidia-ml.so.1) and C(nvidia-smi)), as the other node modules take it.
    type: path
  lock_dir:
    description: Directory of the run's lock file (C(gpu-reset.lock)), which the rescues wait for.
    type: path
    default: /run/gpuops
  mark_path:
    description:
      - After a verified reset, the reset GPUs' mark is written there (a host path), atomically, with the boot ID and the
        time since boot. M(gpuops.fleet.gpu_health_info) reads it (its own O(gpuops.fleet.gpu_health_info#module:mark_path))
        and no longer counts the XIDs those GPUs logged before it, so a GPU reset for an XID line is not reset again for
        the same line (a driver without NVML's recovery-action field decides from the kernel log). The marks of the
        node's other GPUs in the same boot are kept.
      - A mark that cannot be written does not fail a good reset; the task warns.
    type: path
    default: /var/lib/gpuops/health/last-remediation.json
    version_added: 0.4.0
  verify_only:
    description:
      - Reset nothing - read NVML once and run only the post-check on O(gpus) (after a reboot, the proof that they came
        back healthy). Fails naming what is still wrong; changes nothing, in check mode too.
    type: bool
    default: false
notes:
  - Runs as root on the node. NVIDIA says a reset "is not guaranteed to work in all cases" and that each reset GPU's health
    should be verified before further use; the post-check is that verification, and M(gpuops.fleet.gpu_quarantine)
    keeps the node out of scheduling until the play releases it.
seealso:
  - module: gpuops.fleet.gpu_health_info
  - module: gpuops.fleet.gpu_quarantine
"""

EXAMPLES = r"""
- name: Reset the faulty GPU (its pods drained by gpuops.fleet.gpu_quarantine)
  gpuops.fleet.gpu_reset:
    gpus: [GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0]
  become: true
"""

RETURN = r"""
reset:
  description: The GPUs reset (or that would be), in NVML order, peers included.
  returned: always
  type: list
  elements: str
peers_included:
  description: NVLink peers added with O(include_peers).
  returned: always
  type: list
  elements: str
persistence_off:
  description: GPUs whose persistence mode was on, turned off for the reset.
  returned: success
  type: list
  elements: str
persistence_restored:
  description: GPUs whose persistence mode is on again.
  returned: always
  type: list
  elements: str
units_stopped:
  description: Units stopped for the reset.
  returned: always
  type: list
  elements: str
units_restarted:
  description: Units started again.
  returned: always
  type: list
  elements: str
nvidia_smi_rc:
  description: The exit status of C(nvidia-smi -r) (null when it did not run).
  returned: always
  type: int
stdout:
  description: nvidia-smi's output.
  returned: always
  type: str
post:
  description: Why the reset GPUs are not healthy after it (empty when they are).
  returned: always
  type: list
  elements: str
seconds:
  description: Seconds from the first read to the post-check.
  returned: success
  type: float
marked:
  description: Where the reset's mark was written (O(mark_path)); absent where it was not (check mode, O(verify_only), a warning).
  returned: success
  type: str
  version_added: 0.4.0
msg:
  description: What was done, or why not.
  returned: always
  type: str
"""


from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._node import edge, hostroot
from ansible_collections.gpuops.fleet.plugins.module_utils._node.health import gpu_health, gpu_reset, kernel_log


def _work(module):
    p = gpu_reset.check_params(dict(module.params))
    base = hostroot.root()
    run = module.run_command
    driver_root = p["driver_root"] or None
    found, run = hostroot.tools(("systemctl", "nvidia-smi"), module.get_bin_path, run, base)
    systemctl, smi = found["systemctl"], hostroot.driver_tool("nvidia-smi", found["nvidia-smi"], driver_root, base)
    if base is not None and driver_root:
        driver_root = hostroot.local(driver_root, base)
    if not smi and not p["verify_only"]:
        raise gpu_reset.ResetRefused("nvidia-smi was not found on this node (PATH, or driver_root's usr/bin): not reset, nothing was changed")

    def read():
        return gpu_health.read(run, driver_root=driver_root, log_source="none", systemctl=systemctl)

    # beside the host (a node pod), the lock is the host's file, which the rescues (run by the host's systemd) wait for
    # and the rescues' tools (systemd-run, flock, sh) are the host's, found by their host paths
    mark_path = hostroot.local(p["mark_path"], base) if base else p["mark_path"]

    def mark(uuids, boot_id):
        kernel_log.write_mark(boot_id, uuids, kernel_log.now_usec(), mark_path)
        return p["mark_path"]

    node = gpu_reset.Node(run, read, smi, hostroot.local(p["lock_dir"], base) if base else p["lock_dir"], which=hostroot.which, mark=mark)
    if p["verify_only"]:
        return gpu_reset.verify(node, p)
    return gpu_reset.reset(node, p, module.check_mode)


def main():
    module = AnsibleModule(
        argument_spec=gpu_reset.SETTINGS.argument_spec(),
        supports_check_mode=True,
    )
    module.exit_json(**hostroot.to_host(edge.run(module, lambda: _work(module))))


if __name__ == "__main__":
    main()
