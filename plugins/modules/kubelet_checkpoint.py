#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: kubelet_checkpoint
short_description: Make kubelet's device checkpoint agree with the node's real GPUs
version_added: 0.2.0
description:
  - Compares every GPU device ID in C(kubelet_internal_checkpoint) (registered devices and pod allocations)
    with the GPUs the node really has, per resource. Plain GPU UUIDs, time-slicing replicas (C(<uuid>::<n>)),
    MIG UUIDs (current and legacy C(MIG-GPU-<uuid>/<gi>/<ci>) forms), gpushare IDs (C(<uuid>-_-<n>)) and index IDs
    are understood; resources outside O(resources) (RDMA, SR-IOV, ...) are never touched.
  - When IDs are stale (a GPU was replaced or its UUID changed), either moves the file aside (O(strategy=remove),
    the proven GPUOps behaviour; kubelet writes a fresh one) or rewrites it without the stale registrations and
    the pod entries that hold them (O(strategy=prune)), keeping every other entry, with a checksum kubelet accepts.
    The default O(strategy=auto) prunes when a pod entry still holds only valid devices and moves the file aside
    otherwise, so a running pod's allocation is never thrown away.
  - A timestamped backup (mode C(0600)) is always written before the file is removed or rewritten, itself atomically
    (temp file, fsync, rename); old backups are rotated (O(backup_keep)). Rewrites are atomic and keep mode and owner.
  - A kill at any instant (SIGKILL, OOM, power loss) leaves the old checkpoint or the new one, never none. The backup
    and the new content are written and fsynced first, then the checkpoint is claimed under a temp name in its own
    directory (a hard link), compared with what was read, and the new file swapped in with one atomic call
    (C(renameat2) C(RENAME_EXCHANGE), else C(rename)). If kubelet wrote a newer file in between, kubelet's file is kept
    and the task fails with "changed while we worked", nothing lost. Every run first puts back a checkpoint that a
    killed run had moved aside and removes the temp files it left (RV(recovered)). One run at a time holds a lock per
    checkpoint (O(lock_dir)).
  - Every filesystem error (disk full, read-only, permissions) fails the task with the errno, the operation and the
    path; the checkpoint is then untouched or replaced whole.
  - Nothing is changed when the GPU inventory is unknown (driver not loaded, NVML or C(nvidia-smi) error, or zero
    GPUs seen while the checkpoint lists some).
  - kubelet keeps its device state in memory and writes it over the file at its next allocation change, so a
    checkpoint must never be repaired under a running kubelet. When O(kubelet_unit) is running and the checkpoint
    must change, the module stops kubelet (and waits), reconciles, and starts kubelet again, all under the
    checkpoint's lock; kubelet is started again even when the repair fails, and by a timer armed before the stop
    when the run itself is killed (O(kubelet_rescue_seconds)). Containers keep running while kubelet is
    stopped. A node where nothing changes is never touched, and kubelet is not even asked.
  - Restart kubelet on a few nodes at a time; the C(gpuops.fleet.site) playbook throttles with
    C(gpuops_kubelet_restart_batch).
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.attributes
  - gpuops.fleet.attributes.facts
  - gpuops.fleet.attributes.gpu_backend
  - gpuops.fleet.checkpoint
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details:
      - The diff shows the decoded checkpoint before and after; C(AllocResp) payloads are redacted.
  idempotent:
    support: full
options:
  settings:
    description:
      - Options of this module as one mapping, merged under the options the task names (those win) by the module's
        action plugin on the controller. Give it the C(module_args) of the P(gpuops.fleet._checkpoint_guard_settings#filter)
        filter, so a play passes the checked repair settings without a templated argument dict, which ansible-core
        2.19 and later warn is unsafe.
      - Keys must be options of this module; a key starting with C(_) or V(settings) itself is refused.
    type: dict
    version_added: 0.3.0
  guard:
    description:
      - The boot guard's install, as the options of M(gpuops.fleet.guard_install) (its action plugin's form, the
        code by its path), checked with that module's own argument spec.
      - When given, the same call also reads whether that install would change anything (its check mode, whatever
        this module's mode) and returns it as RV(guard). M(gpuops.fleet.guard_install) takes RV(guard) as its
        O(gpuops.fleet.guard_install#module:planned) option, so a node whose guard is in place gets no second call;
        with O(install_guard) that install follows in the same task (the C(gpuops.fleet.checkpoint_guard) role).
      - The module's action plugin builds the code on the controller and sends its SHA-256, never its bytes.
    type: dict
    version_added: 0.4.0
  install_guard:
    description:
      - The task is a plan and, with O(guard), the boot guard's install right after it, in the same task (one task
        per node instead of two; the C(gpuops.fleet.checkpoint_guard) role does this). The checkpoint is only read
        and planned, whatever the task's mode (the module runs in check mode; the role's repair step changes the
        checkpoint), and M(gpuops.fleet.guard_install)'s install follows with RV(guard) as its
        O(gpuops.fleet.guard_install#module:planned), so a node whose guard is in place gets no second call.
        The install's result is RV(guard_install); the task's C(changed) is the install's, and the plan's would-be
        change is RV(repair_needed). A failed install fails the task. In check mode the install only reads, as
        M(gpuops.fleet.guard_install) does.
      - Without O(guard) there is nothing to install, and the task only plans (read-only, as in check mode) and
        reports C(changed=false). Not with C(async).
      - Handled by the module's action plugin on the controller.
    type: bool
    default: false
    version_added: 0.4.0
  role:
    description:
      - The C(gpuops.fleet.checkpoint_guard) role's own form of O(settings) and O(guard), for the role's tasks. Its
        variables as they come (C(variables), the C(checkpoint_guard_*) values by their names without the prefix;
        strings from C(-e) or a survey are fine), whether it installs the guard (C(install), with the install's
        C(install_tags), checked against the run's C(--tags) and C(--skip-tags)), and the install's C(sysroot),
        C(unit_dir), C(hardening), C(late_check), C(require_persistent), C(manage_systemd) and C(enabled).
      - The module's action plugin checks them as P(gpuops.fleet._checkpoint_guard_settings#filter) does (an error
        names the role variable) and builds O(settings) and O(guard) from them on the controller, once per node,
        without a filter in the task's arguments (each filter costs every node's worker a load of the collection's
        filter files). Not with O(settings) or O(guard).
      - With C(from_task_vars=true) (the role's own plan and repair tasks), the action plugin reads all of these from the
        task's variables itself (C(checkpoint_guard_<name>) for each name of the role's C(__checkpoint_guard_setting_names)),
        and O(backend), O(driver_root), O(kubelet_unit) (empty where C(checkpoint_guard_kubelet_control) is false) and
        O(gpus) (the node's C(gpuops_gpus) fact where it has one); with C(install_tags) also the install's keys and, with
        C(checkpoint_guard_gpu_health), O(health). Only a value that is itself a template is rendered, so the task names
        no template argument (ansible-core 2.19 and later compile each template string of a task's arguments again in
        every node's worker). The task's own options win over what is read.
      - Handled by the module's action plugin on the controller.
    type: dict
    version_added: 0.4.0
  health:
    description:
      - The options of M(gpuops.fleet.gpu_health_info), checked with that module's own argument spec; C(driver_root)
        defaults to this module's O(driver_root).
      - When given, the same call also reads the GPUs' health, read-only, as that module does, and sets the same fact,
        C(ansible_facts.gpuops_gpu_health) (C(playbooks/site.yml) with C(gpuops_gpu_health), through the
        C(gpuops.fleet.checkpoint_guard) role's C(checkpoint_guard_gpu_health)), with no second call per node.
    type: dict
    version_added: 0.4.0
  gpus:
    description:
      - The GPU inventory to compare with, as returned by M(gpuops.fleet.gpu_uuid_facts) in C(ansible_facts.gpuops_gpus).
      - When not set, the module reads the GPUs itself with O(backend) (and O(driver_root)) and returns them as
        C(ansible_facts.gpuops_gpus), exactly as M(gpuops.fleet.gpu_uuid_facts) sets them, so one task per node reads
        the GPUs and plans or repairs.
    type: dict
  strategy:
    description:
      - V(auto) (the default since 0.2.0) chooses per run and says why in RV(strategy) and RV(strategy_reason),
        V(prune) when any pod entry would survive pruning (it holds only valid GPU IDs, or a device of a resource
        that is not a GPU), so that running pods keep their recorded allocations; V(remove) when none would (the
        field report's case, a rebooted node whose GPU changed).
      - V(remove) moves a stale checkpoint aside (into O(backup_dir)); kubelet starts from a fresh one. On a node
        where kubelet runs GPU pods on GPUs that are still there, their allocations are lost with the file, and
        after a kubelet restart kubelet may hand such a GPU to a new pod.
      - V(prune) rewrites it without the stale IDs and the pod entries holding them.
    type: str
    choices: [auto, remove, prune]
    default: auto
  on_corrupt:
    description:
      - What to do with a checkpoint kubelet would reject (bad JSON, wrong types, checksum mismatch).
      - V(report) leaves it in place (kubelet ignores it and starts without allocations); V(remove) moves it into O(backup_dir).
    type: str
    choices: [report, remove]
    default: report
  unknown_inventory:
    description:
      - What to do when the GPU inventory is unknown. V(fail) fails the task, V(skip) returns C(action=skipped).
        Either way the checkpoint is left untouched.
    type: str
    choices: [fail, skip]
    default: fail
  backup_dir:
    description:
      - Directory for timestamped backups (mode C(0600)), created with mode C(0700) when missing.
      - Must not be inside the checkpoint's directory, where kubelet may delete unknown files; a dangling symlink or a
        directory writable by group or others is refused (backups hold C(AllocResp) environment variables).
    type: path
    default: /var/lib/gpuops/backups
  backup_keep:
    description:
      - How many backups of this checkpoint to keep in O(backup_dir); older ones are removed after each change, so a
        node that flaps does not fill C(/var). V(0) keeps every backup.
    type: int
    default: 10
  lock_dir:
    description:
      - Directory of the lock that lets one run at a time change this checkpoint (this module, the boot guard, a
        second play). Created when missing. Not taken in check mode, which changes nothing.
    type: path
    default: /run/gpuops
  lock_timeout:
    description: Seconds to wait for another run's lock before failing with "another run holds the lock".
    type: int
    default: 30
  kubelet_unit:
    description:
      - The systemd unit of kubelet on this host. When it is running (C(active), C(activating), C(reloading)) and the
        checkpoint must change, it is stopped before and started after the change (see O(restart_kubelet)).
      - Set to an empty string when the checkpoint does not belong to this host's kubelet (a sysroot, an image being
        built); kubelet is then not looked at. On a host without C(systemctl), a running kubelet process (C(/proc))
        refuses a change (nothing can stop it here), and without one the checkpoint is reconciled.
    type: str
    version_added: 0.2.0
    default: kubelet.service
  restart_kubelet:
    description:
      - Whether a running O(kubelet_unit) may be stopped and started around the change.
      - V(false) refuses (the task fails, nothing changed) while kubelet runs; a stopped kubelet is left stopped
        either way.
    type: bool
    version_added: 0.2.0
    default: true
  kubelet_rescue_seconds:
    description:
      - Before a running O(kubelet_unit) is stopped, a transient systemd timer (C(systemd-run --on-active)) is armed
        that starts kubelet this many seconds later, once this run's lock on the checkpoint is free. A run killed while
        kubelet is stopped (SIGKILL, OOM, an Ansible timeout, a lost connection) leaves kubelet down at most this long;
        a live run starts kubelet itself and disarms the timer, so the timer never starts kubelet under a repair.
      - When the timer cannot be armed (no C(systemd-run)), kubelet is not stopped and the task fails, nothing changed.
      - The next run finishes what a killed run left. It starts kubelet when that run had stopped it, and disarms the
        timer. 1 to 3600.
    type: int
    version_added: 0.3.0
    default: 60
  resources:
    description:
      - Device-plugin resource names (shell globs) whose IDs name GPUs. Other resources are left untouched.
    type: list
    elements: str
    default: [nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-*, aliyun.com/gpu-mem]
  retired_resources:
    description:
      - Resource names (exact, no patterns) this node no longer offers, e.g. V(nvidia.com/gpu) after
        M(gpuops.fleet.gpu_sharing_mode) switched the node to shared GPU memory (its RV(gpuops.fleet.gpu_sharing_mode#module:switched)).
        Every registration and pod entry of these resources is stale, whatever GPU its IDs name.
      - Make sure no running pod still holds them (M(gpuops.fleet.gpu_sharing_mode) refuses the switch while one does).
        With O(strategy=auto) pod entries of other resources are kept (V(prune)).
    type: list
    elements: str
    default: []
    version_added: 0.3.0
seealso:
  - module: gpuops.fleet.gpu_uuid_facts
  - module: gpuops.fleet.kubelet_checkpoint_info
"""

EXAMPLES = r"""
- name: Read the GPUs
  gpuops.fleet.gpu_uuid_facts:

# On a node where kubelet runs: stop it, repair, start it (only when something must change)
- name: Repair a stale checkpoint (auto - prune if a pod still holds valid devices, else move it aside; with a backup)
  gpuops.fleet.kubelet_checkpoint:
    gpus: "{{ ansible_facts.gpuops_gpus }}"
  register: reconcile

- name: Say which strategy auto chose and how long kubelet was down
  ansible.builtin.debug:
    msg: "{{ reconcile.strategy_reason }}; kubelet down {{ reconcile.kubelet.down_seconds }} s"
  when: reconcile.kubelet.restarted

- name: Repair only where kubelet is stopped, never restart it
  gpuops.fleet.kubelet_checkpoint:
    restart_kubelet: false

- name: A checkpoint in a mounted image (not this host's kubelet)
  gpuops.fleet.kubelet_checkpoint:
    checkpoint_path: /mnt/image/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
    kubelet_unit: ""

- name: Always move a stale checkpoint aside (the GPUOps behaviour)
  gpuops.fleet.kubelet_checkpoint:
    strategy: remove

- name: Keep valid allocations, drop only the stale ones
  gpuops.fleet.kubelet_checkpoint:
    strategy: prune
    resources: [nvidia.com/gpu, aliyun.com/gpu-mem]

- name: Also clear a corrupt checkpoint, and skip nodes whose driver is down
  gpuops.fleet.kubelet_checkpoint:
    on_corrupt: remove
    unknown_inventory: skip
"""

RETURN = r"""
checkpoint_path:
  description: The checkpoint path.
  returned: always
  type: str
  sample: /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
status:
  description: What was found; one of V(missing), V(corrupt), V(up_to_date), V(stale), V(inventory_unknown).
  returned: always
  type: str
  sample: stale
action:
  description: What was done (or would be done in check mode); one of V(none), V(removed), V(pruned), V(skipped).
  returned: always
  type: str
  sample: removed
layout:
  description: Checkpoint layout (V(v1), V(v2)), V(null) when missing or undecodable.
  returned: always
  type: str
  sample: v2
checksum_valid:
  description: Whether kubelet would accept the file as it was found.
  returned: always
  type: bool
  sample: true
error:
  description: Why kubelet would reject the file as found, V(null) otherwise.
  returned: always
  type: str
  sample: null
stale:
  description: Stale device IDs per resource (registered or allocated), in file order.
  returned: always
  type: dict
  sample: {"nvidia.com/gpu": ["GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb"]}
affected_pods:
  description: Pod entries that hold at least one stale ID (removed by O(strategy=prune)).
  returned: always
  type: list
  elements: dict
  sample:
    - pod_uid: 300f47eb-e5c3-4d0b-9a87-925837b67732
      container_name: app-3g-v1
      resource_name: nvidia.com/gpu
      device_ids: [GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb]
      stale_device_ids: [GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb]
      numa_nodes: {"0": [GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb]}
      entry_index: 0
unrecognized:
  description: Device IDs of GPU resources in a form this module cannot map to a GPU; reported, never called stale.
  returned: always
  type: dict
  sample: {}
registered_gpu_ids:
  description:
    - Every device ID of a GPU resource in C(RegisteredDevices), per resource, as listed before any change.
    - Empty when the checkpoint is missing or could not be decoded, or the GPU inventory is unknown.
  returned: always
  type: dict
  sample: {"nvidia.com/gpu": ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]}
pod_gpu_ids:
  description:
    - Every device ID of a GPU resource held by pod entries, per resource, as listed before any change.
    - Empty when the checkpoint is missing or could not be decoded, or the GPU inventory is unknown.
  returned: always
  type: dict
  sample: {"aliyun.com/gpu-mem": ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0-_-0"]}
shared_memory:
  description:
    - The node's own view of its shared GPU memory (C(aliyun.com/gpu-mem), gpushare/cGPU) from the checkpoint as read,
      without a cluster; V(null) when the checkpoint registers no C(aliyun.com/gpu-mem).
    - Per GPU (C(uuid), C(index) in the node's inventory, V(null) for a GPU the node no longer has) C(total_gib) (its
      registered IDs), C(allocated_gib) (the IDs of the containers the plugin gave that GPU, C(NVIDIA_VISIBLE_DEVICES)
      in their AllocResp) and C(pods); C(unattributed_gib) counts containers without that variable.
  returned: always
  type: dict
  version_added: 0.3.0
  sample: {gpus: [{uuid: GPU-1b7d2a3e-5c8f-4e61-9a0d-3f2c4b5a6d7e, index: 1, allocated_gib: 4, total_gib: 15, pods: 1}],
           allocated_gib: 4, total_gib: 15, percent: 26, unattributed_gib: 0}
backup_path:
  description: Where the original file was saved, V(null) when nothing was written (also in check mode).
  returned: always
  type: str
  sample: /var/lib/gpuops/backups/kubelet_internal_checkpoint.20261121T200102.123456Z
strategy:
  description: The strategy applied to a stale checkpoint (V(remove) or V(prune)), V(null) when nothing was stale.
  returned: always
  type: str
  sample: prune
strategy_reason:
  description: Why that strategy, e.g. which pods still hold valid devices when V(auto) chose V(prune).
  returned: always
  type: str
  sample: "auto: 1 pod entry still holds only valid devices (pod 300f47eb-...): pruning keeps its allocations"
kubelet:
  description:
    - What happened to kubelet around the change.
    - C(unit) the unit (V(null) when kubelet is not looked at); C(state_before) its state when asked (V(null) when
      nothing had to change and kubelet was not asked); C(stopped), C(started), C(restarted) what was done;
      C(would_restart) in check mode; C(stop_seconds) the time to stop it and C(down_seconds) from the stop request to
      the end of the start; C(rescue_seconds) the rescue timer's delay when one was armed; C(left_stopped_by_killed_run)
      when an earlier run was killed while kubelet was stopped (this run then started it; in check mode, C(would_start)
      says whether kubelet is down and would be started).
  returned: always
  type: dict
  sample:
    unit: kubelet.service
    state_before: active
    stopped: true
    started: true
    restarted: true
    would_restart: false
    stop_seconds: 0.41
    down_seconds: 0.52
    rescue_seconds: 60
    left_stopped_by_killed_run: false
    would_start: false
repair_needed:
  description:
    - Whether the node needs the repair step - the checkpoint must change (V(removed) or V(pruned)), or an earlier run
      was killed while kubelet was stopped and left its mark, so kubelet must be started and the mark and rescue timer
      cleared. A node with such a mark is not up to date even when its checkpoint is.
    - True only in check mode (the plan); a run that changes things did what was needed.
  returned: always
  type: bool
  version_added: 0.3.0
recovered:
  description:
    - What a run that was killed had left and this run undid, before anything else (in check mode, what it would
      undo). C(action) is V(restored) (a checkpoint moved aside by a killed removal put back; the run then decides
      again), V(removed) (a temp file), or V(rescued) (a temp file whose bytes were found nowhere else, saved to
      C(backup_path) first).
  returned: always
  type: list
  elements: dict
  version_added: 0.3.0
  sample:
    - action: removed
      path: /var/lib/kubelet/device-plugins/.kubelet_internal_checkpoint.gpuops-new-4242-0a1b2c3d.tmp
      backup_path: null
guard:
  description:
    - What M(gpuops.fleet.guard_install) would do with O(guard), read-only; the same keys as that module's check-mode
      result (without a diff), plus C(needed), C(error) and C(fingerprint).
    - C(needed) is V(true) when the install would change something, owes its self-test, or would fail (C(error) says
      why; the install then runs and fails with it). C(fingerprint) is the SHA-256 of the install's options, which
      M(gpuops.fleet.guard_install) compares with its own before it trusts this reading.
  returned: when O(guard) was given
  type: dict
  version_added: 0.4.0
  sample: {needed: false, error: null, changed: false, files: [], units: [], selftest_owed: false,
           fingerprint: 5f2c0d7b0e3a4c1f9b8e6d5a4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a291}
guard_install:
  description:
    - The boot guard's install (O(install_guard)), as M(gpuops.fleet.guard_install) returns it; C(planned) is V(true)
      where the plan's reading (RV(guard)) showed nothing to do and the node got no second call.
  returned: when O(install_guard) and O(guard) were given and the plan did not fail
  type: dict
  version_added: 0.4.0
  sample: {changed: false, planned: true, files: [], units: [], selftest: null,
           code: {path: /usr/local/lib/gpuops/gpuops.pyz, sent: false}}
host_root:
  description:
    - Where the module reached the host's files; V(null) when it ran on the host (SSH, local, the node pod chrooted
      into the host). V(/host) when C(gpuops.fleet.k8s_node) ran it in the node pod beside a host without C(python3).
      Either way every path in the result is the host's.
  returned: always
  type: str
  version_added: 0.3.0
  sample: null
backups_removed:
  description: Older backups removed by the rotation (O(backup_keep)) after this change.
  returned: always
  type: list
  elements: str
  sample: []
msg:
  description: One sentence on what was found and done.
  returned: always
  type: str
  sample: "stale device IDs nvidia.com/gpu: GPU-7fd5...: moved the checkpoint aside to /var/lib/gpuops/backups/..."
gpus:
  description: The inventory that was compared with (gathered by the module when O(gpus) was not given).
  returned: always
  type: dict
  sample: {"available": true, "count": 1, "driver_version": "535.104.05"}
ansible_facts:
  description: The GPUs the module read itself, as M(gpuops.fleet.gpu_uuid_facts) sets them; empty when O(gpus) was given.
  returned: always
  type: dict
  version_added: 0.2.0
  contains:
    gpuops_gpus:
      description: The node's NVIDIA GPUs (see M(gpuops.fleet.gpu_uuid_facts) for the keys).
      returned: when O(gpus) was not given
      type: dict
      sample: {"available": true, "backend": "nvml", "count": 1, "driver_version": "535.104.05", "gpus": []}
    gpuops_gpu_health:
      description: The GPUs' health, as M(gpuops.fleet.gpu_health_info) sets it (see that module for the keys).
      returned: when O(health) was given
      type: dict
      version_added: 0.4.0
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpuops.fleet.plugins.module_utils._node import options as options_table
from ansible_collections.gpuops.fleet.plugins.module_utils._node.options import BACKEND_ARGS, OPTION_DEFAULTS, PATH_OPTIONS, validate_options
from ansible_collections.gpuops.fleet.plugins.module_utils._node.options import argument_spec as table_argument_spec
from ansible_collections.gpuops.fleet.plugins.module_utils._node import edge, hostroot, install
from ansible_collections.gpuops.fleet.plugins.module_utils._node.gpu_inventory import gather_on_node
from ansible_collections.gpuops.fleet.plugins.module_utils._node.repair import Kubelet, repair


def _kubelet(module):
    # the table's checks (a ParameterError fails the module through edge.run)
    unit = options_table.check("kubelet_unit", module.params["kubelet_unit"])
    seconds = options_table.check("kubelet_rescue_seconds", module.params["kubelet_rescue_seconds"])
    if not unit:
        return None
    # the host's systemctl, also from the node pod beside the host (hostroot: run chrooted into it, host paths)
    if hostroot.which("systemctl") is None:
        # imported here: kubelet_config loads PyYAML (about 30 ms a run), which only this path needs
        from ansible_collections.gpuops.fleet.plugins.module_utils._node.kubelet_config import find_kubelet_process

        # no systemd to stop kubelet with (Talos): a running kubelet is never repaired under (hostPID beside the host)
        found = find_kubelet_process()
        return Kubelet.unmanaged(unit, found[0]) if found else None
    return Kubelet(unit, restart=module.params["restart_kubelet"], run=hostroot.runner(module.run_command), rescue_seconds=seconds,
                   which=hostroot.which)


def _guard_spec():
    return install.ARGUMENT_SPEC


def _guard(module, options):
    """The boot guard's install, read-only (install.would_change)."""
    def run(argv, env):
        return module.run_command(argv, environ_update=env or {})

    return install.would_change(options, run)


def _health_spec():
    # imported here: the plan's runs without a health read do not compile the health code
    from ansible_collections.gpuops.fleet.plugins.module_utils._node.health import gpu_health

    return gpu_health.ARGUMENT_SPEC


def _health(module, options):
    """The GPUs' health, as gpu_health_info reads it (a GpuopsError goes to the module's one edge)."""
    from ansible_collections.gpuops.fleet.plugins.module_utils._node.health import gpu_health

    return gpu_health.read_with(options, module.run_command, module.get_bin_path)


# The reads that ride on the repair's round trip, one row each: {option: (its argument spec, what the module's own options
# give it, the reader, where the value goes, what bad options do)}. Bad options of the health read fail the module by name
# (gpu_health_info would); the guard's install would refuse them too, so they are reported as an install that is needed.
# The next read is a row here, and its option in the argument spec and DOCUMENTATION.
READS = {
    "health": (_health_spec, lambda params: {"driver_root": params["driver_root"]}, _health, ("ansible_facts", "gpuops_gpu_health"), "fail"),
    "guard": (_guard_spec, lambda params: {}, _guard, ("guard",), "report"),
}


def _read_along(module):
    """``{option: value}`` of each read of READS whose option was given, in the table's order."""
    out = {}
    for option, (spec, inherited, reader, dummy, on_bad) in READS.items():
        if module.params[option] is None:
            continue
        options = dict(inherited(module.params), **module.params[option])
        validated = ArgumentSpecValidator(spec()).validate(options)
        if validated.error_messages:
            msg = "%s: %s" % (option, "; ".join(validated.error_messages))
            if on_bad == "fail":
                module.fail_json(msg=msg)
            out[option] = {"needed": True, "error": msg}
            continue
        out[option] = reader(module, validated.validated_parameters)
    return out


def main():
    # every repair setting is a row of options.TABLE (shared with the boot guard and the role)
    argument_spec = dict(table_argument_spec(), **BACKEND_ARGS)
    argument_spec.update(gpus=dict(type="dict"), settings=dict(type="dict"), guard=dict(type="dict"), health=dict(type="dict"),
                         install_guard=dict(type="bool", default=False), role=dict(type="dict"))
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    for name in ("settings", "role"):  # the action plugin merges them on the controller; here they would be ignored
        if params[name]:
            module.fail_json(msg="%s: merged by the action plugin of gpuops.fleet.kubelet_checkpoint on the controller; "
                             "run the module as a task (not through another action), or give the options themselves" % name)
    if params["install_guard"]:  # the action plugin installs the guard after the plan; the module only plans
        module.fail_json(msg="install_guard: handled by the action plugin of gpuops.fleet.kubelet_checkpoint on the controller; "
                         "run the module as a task (not through another action)")
    # what a failure reports besides its message: the GPUs in hand and, when read here, the facts
    # (a kubelet stop/start that failed adds its own result: edge.run merges KubeletControlError.result)
    context = {"checkpoint_path": params["checkpoint_path"], "gpus": params["gpus"], "ansible_facts": {}}

    def work():
        options = validate_options(**dict((name, params[name]) for name in OPTION_DEFAULTS))
        hostroot.localize(options, PATH_OPTIONS)  # host paths, reached under the host's root beside it
        if context["gpus"] is None:
            # GPUs read here (no gpus given) go back as facts: one round trip per node reads the
            # GPUs and plans (or repairs); gpu_uuid_facts is then not needed beforehand
            context["gpus"] = gather_on_node(module.run_command, params["backend"], driver_root=params["driver_root"], get_bin_path=module.get_bin_path)
            context["ansible_facts"] = {"gpuops_gpus": context["gpus"]}
        done = repair(context["gpus"], options, _kubelet(module), check_mode=module.check_mode, diff=module._diff)
        context["reads"] = _read_along(module)  # the health, the guard's install: in the same call (READS)
        return done

    result = edge.run(module, work, context)
    facts, gathered = context["gpus"], context["ansible_facts"]
    if result["status"] == "corrupt" and result["action"] == "none":
        module.warn(hostroot.to_host(result["msg"]))
    # the report names host paths, whichever side of the host the module ran on
    done = hostroot.to_host(dict(result, gpus=facts, ansible_facts=gathered))
    done["checkpoint_path"] = params["checkpoint_path"]  # as given (beside the host, its links were followed to reach it)
    done["ansible_facts"] = dict(done["ansible_facts"])
    for option, value in context.get("reads", {}).items():
        where = READS[option][3]
        (done[where[0]] if len(where) > 1 else done)[where[-1]] = hostroot.to_host(value)
    module.exit_json(host_root=hostroot.root(), **done)


if __name__ == "__main__":
    main()
