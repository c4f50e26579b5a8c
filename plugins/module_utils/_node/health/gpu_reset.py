# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: resetting GPUs on a node (module gpu_reset), runs as root on the node.

There is no reset in NVML's Python binding; ``nvidia-smi -r -i <uuids>`` is NVIDIA's way (its man page, quoted in
``../shared/specs/gpu-health.md`` A2). Its rules, checked first, each a refusal that changes nothing:

* no application may use the GPUs: a compute process refuses, naming its PID and the pod it belongs to;
* while MIG instances exist the reset is refused (``allow_mig``);
* "If Fabric Manager is not running, or if any of the GPUs being reset are based on an architecture preceding
  Ampere, any GPUs with NVLink connections to a GPU being reset must also be reset in the same command": the
  peers are added with ``include_peers``, else named in the refusal (their processes refuse too);
* "On Ampere NVSwitch systems, Fabric Manager is required": refused while it is not active;
* a GPU NVML cannot read, or has lost, is not reset (a lost GPU needs the machine restarted).

Then NVML's clients are let go: this process shuts NVML down (the health read does), the host units in
``stop_units`` that are active are stopped, persistence mode is turned off where it was on (a persistence
daemon's attachment refuses the reset: NVSentinel#1690), and the reset runs. Whatever happens, persistence
mode and the units come back, and a rescue armed before anything stopped (transient timers, as kubelet's
rescue) brings them back if this process dies: one timer per unit, one for persistence mode, each waiting
for this run's lock first. The post-check reads NVML again: the same UUIDs, and for each no rule of the health
decision at the reset's severity or above (``decision.healthy_again``: no recovery action, no pending or failed remap, no
lost, unreadable or reset-required GPU, no double-bit ECC error where the driver cannot say the recovery action, ...).
"""

from __future__ import annotations

import shutil
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._common import settings
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import GPU_ID, UNIT_NAME
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError, ResultError
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import decision, node_options
from ansible_collections.gpuops.fleet.plugins.module_utils._node import hostroot, nodefile, systemd
from ansible_collections.gpuops.fleet.plugins.module_utils._node.health import kernel_log

DEFAULT_STOP_UNITS = ("gpuops-metrics.timer", "gpuops-metrics.service", "nvidia-dcgm.service", "dcgm-exporter.service")
STOP_UNIT_TYPES = (".service", ".timer", ".socket")
LOCK_FILE = "gpu-reset.lock"
PERSISTENCE_RESCUE = "gpu-reset-persistence"


def _gpu_uuid(value):
    if isinstance(value, str) and GPU_ID.match(value) and value.startswith("GPU-"):
        return None
    return "%r is not a GPU UUID (GPU-...); a MIG device is reset with its GPU" % (value,)


def _stop_unit(value):
    if isinstance(value, str) and UNIT_NAME.match(value) and value.endswith(STOP_UNIT_TYPES):
        return None
    return "%r is not a unit name (letters, digits, :_.@- and .service, .timer or .socket)" % (value,)


def _some(value):
    return None if value else "give the UUIDs of the GPUs to reset"


# gpu_reset's options: the module's argument spec and every check of a value come from this table (_common/settings.py)
SETTINGS = settings.Table(
    settings.row("gpus", "list", None, elements="str", required=True, check=_some, each=_gpu_uuid),
    settings.row("include_peers", "bool", False),
    settings.row("allow_mig", "bool", False),
    settings.row("stop_units", "list", list(DEFAULT_STOP_UNITS), elements="str", each=_stop_unit),
    node_options.RESCUE_SECONDS,
    settings.row("driver_root", "path", None),
    settings.row("lock_dir", "path", "/run/gpuops"),
    settings.row("mark_path", "path", kernel_log.MARK),
    settings.row("verify_only", "bool", False),
)
ARGUMENT_SPEC = SETTINGS.argument_spec()


class ResetRefused(ResultError):
    """Nothing was changed: a precondition of nvidia-smi's reset does not hold (``result`` says which)."""


class ResetFailed(ResultError):
    """The reset ran and failed, or the GPUs are not healthy after it; persistence mode and the units were restored."""


def check_params(p):
    """The module's parameters, each checked by its row of SETTINGS (ParameterError names the option, or its element)."""
    for name in ("gpus", "stop_units", "rescue_seconds"):
        SETTINGS.check(name, p.get(name))
    return p


def _who(process):
    pod = process.get("pod_uid")
    return "PID %s%s" % (process.get("pid"), (" (pod %s, container %s)" % (pod, process.get("container"))) if pod else " (not a pod's)")


def reset_set(facts, targets, include_peers=False, allow_mig=False):
    """``(uuids to reset, peers added, refusals)`` from the health facts, by nvidia-smi's rules (module docstring)."""
    if not facts.get("available"):
        return [], [], ["NVML could not be read on this node (%s): nothing is reset on a node whose GPU inventory could not be read"
                        % (facts.get("reason") or "unknown")]
    by_uuid = dict((g["uuid"], g) for g in facts.get("gpus") or () if g.get("uuid"))
    refusals, chosen, added = [], [], []
    for uuid in targets:
        if uuid not in by_uuid:
            refusals.append("%s is not on this node (its GPUs: %s)" % (uuid, ", ".join(sorted(by_uuid)) or "none"))
        elif uuid not in chosen:
            chosen.append(uuid)
    fabric = facts.get("fabric_manager")
    peers, why = decision.nvlink_peers(facts, chosen)
    if peers and include_peers:
        chosen.extend(p for p in peers if p not in chosen)
        added.extend(peers)
    elif peers:
        for uuid in list(chosen):
            own = [p for p in by_uuid[uuid]["nvlink"].get("peers") or () if p in peers]
            if own:
                refusals.append("%s has NVLink peers %s that nvidia-smi must reset in the same command (%s): set include_peers to reset "
                                "them too, after their pods are drained" % (uuid, ", ".join(own), why))
    for uuid in chosen:
        gpu = by_uuid.get(uuid)
        if gpu is None:
            continue
        if gpu["state"] == "lost":
            refusals.append("%s is lost (off the bus): a reset cannot reach it; the machine must be restarted" % uuid)
        elif gpu["state"] == "unreadable":
            refusals.append("%s could not be read (%s): not reset" % (uuid, gpu.get("error")))
        for process in gpu.get("processes") or ():
            refusals.append("%s is in use by %s: drain it first (gpu_quarantine)" % (uuid, _who(process)))
        if gpu.get("mig_devices") and not allow_mig:
            refusals.append("%s has MIG instances %s: a reset would destroy them; set allow_mig" % (uuid, ", ".join(gpu["mig_devices"])))
        if facts.get("nvswitch") and gpu.get("architecture") == decision.AMPERE and fabric != "active":
            refusals.append("%s: an Ampere NVSwitch system needs Fabric Manager for a reset, and it is %s" % (uuid, fabric or "not running"))
    order = [g["uuid"] for g in facts.get("gpus") or () if g.get("uuid") in chosen]
    return order, added, refusals


def post_check(facts, uuids):
    """The reasons the reset GPUs are not healthy now (empty: healthy): the same UUIDs, and for each no rule of the health
    decision at the reset's severity or above (``decision.healthy_again``), decided with the node's thresholds."""
    if not facts.get("available"):
        return ["NVML could not be read after the reset (%s)" % facts.get("reason")]
    by_uuid = dict((g["uuid"], g) for g in facts.get("gpus") or () if g.get("uuid"))
    bad = []
    for uuid in uuids:
        gpu = by_uuid.get(uuid)
        if gpu is None:
            bad.append("%s is gone after the reset (a GPU fell off the bus, or its UUID changed)" % uuid)
            continue
        bad.extend("%s: %s" % (uuid, why) for why in decision.healthy_again(gpu, facts.get("thresholds")))
    return bad


class Node:
    """What the reset runs with: ``run`` (argv -> rc, out, err), the tools' paths, the lock directory, a reader of the
    health facts (``read()``), and ``mark(uuids, boot_id)``, which records a verified reset (kernel_log.write_mark)."""

    def __init__(self, run, read, nvidia_smi, lock_dir, which=shutil.which, clock=time.monotonic, mark=None):
        self.run, self.read, self.nvidia_smi, self.lock_dir, self.which, self.clock = run, read, nvidia_smi, lock_dir, which, clock
        self.mark = mark


def reset(node, p, check_mode):
    """The module's result (see the module docstring); ResetRefused before any change, ResetFailed after."""
    started = node.clock()
    facts = node.read()  # NVML is shut down again when it returns: this process holds no client
    uuids, peers, refusals = reset_set(facts, p["gpus"], p["include_peers"], p["allow_mig"])
    result = {"gpus": list(p["gpus"]), "reset": uuids, "peers_included": peers, "persistence_restored": [], "units_stopped": [],
              "units_restarted": [], "nvidia_smi_rc": None, "stdout": "", "stderr": "", "post": [], "rescue_seconds": p["rescue_seconds"]}
    if refusals:
        raise ResetRefused("not reset, nothing was changed: %s" % "; ".join(refusals), result)
    by_uuid = dict((g["uuid"], g) for g in facts["gpus"] if g.get("uuid"))
    persistent = [u for u in uuids if by_uuid[u].get("persistence_mode")]
    units = [u for u in p["stop_units"] if systemd.is_active(u, node.run)]
    result.update(persistence_off=persistent, units_to_stop=units)
    if check_mode:
        return dict(result, changed=True, msg="would reset %s%s" % (", ".join(uuids), _extra(persistent, units)))
    with nodefile.run_lock(node.lock_dir, "the GPU reset", lock_file=LOCK_FILE) as lock:
        armed = _arm(node, p, persistent, units, lock)
        try:
            for unit in units:
                ok, err = systemd.stop(unit, node.run)
                if not ok:
                    raise ResetFailed("stopping %s failed (%s): not reset" % (unit, err), result)
                result["units_stopped"].append(unit)
            for uuid in persistent:
                rc, out, err = node.run([node.nvidia_smi, "-pm", "0", "-i", uuid])
                if rc != 0:
                    raise ResetFailed("turning persistence mode off on %s failed (rc %d): %s" % (uuid, rc, (out + err).strip()), result)
            rc, out, err = node.run([node.nvidia_smi, "-r", "-i", ",".join(uuids)])
            result.update(nvidia_smi_rc=rc, stdout=out, stderr=err)
            if rc != 0:
                raise ResetFailed("nvidia-smi -r failed (rc %d): %s" % (rc, (out + err).strip()), result)
        finally:
            _restore(node, persistent, result)
            # a rescue whose restore failed stays armed: it tries again when it fires
            _disarm(node, [a for a in armed if (a == PERSISTENCE_RESCUE and result["persistence_restored"] == persistent)
                           or a in result["units_restarted"] or (a in units and a not in result["units_stopped"])])
    post = node.read()
    result["post"] = post_check(post, uuids)
    result["seconds"] = round(node.clock() - started, 3)
    result["after"] = [dict((k, g.get(k)) for k in ("uuid", "state", "recovery_action", "persistence_mode")) for g in post.get("gpus") or ()
                       if g.get("uuid") in uuids]
    if result["post"]:
        raise ResetFailed("the reset ran, and the GPUs are not healthy: %s; NVIDIA: power-cycle the node" % "; ".join(result["post"]), result)
    _record(node, uuids, post.get("boot_id"), result)
    return dict(result, changed=True, msg="reset %s%s" % (", ".join(uuids), _extra(persistent, units)))


def _record(node, uuids, boot_id, result):
    """The reset's mark (the GPUs' XIDs logged until now were dealt with: the next health read does not count them again,
    so a driver without NVML's recovery-action field does not reset the same GPU for the same XID line again). A mark that
    cannot be written does not undo a good reset: the result warns, naming why."""
    if node.mark is None:
        return
    if not boot_id:
        result["warnings"] = ["the reset's mark was not written: this node's boot ID could not be read; the next health read may "
                              "count the XIDs before the reset again"]
        return
    try:
        result["marked"] = node.mark(uuids, boot_id)
    except (OSError, GpuopsError) as exc:
        result["warnings"] = ["the reset's mark was not written (%s); the next health read may count the XIDs before the reset "
                              "again" % (exc.strerror if isinstance(exc, OSError) and exc.strerror else exc)]


def verify(node, p):
    """``verify_only``: the post-check alone (after a reboot), on a node read once; changes nothing. ResetFailed names what is
    still wrong."""
    started = node.clock()
    facts = node.read()
    uuids = list(p["gpus"])
    result = {"gpus": uuids, "reset": [], "peers_included": [], "persistence_restored": [], "units_stopped": [], "units_restarted": [],
              "nvidia_smi_rc": None, "stdout": "", "stderr": "", "post": post_check(facts, uuids), "changed": False,
              "after": [dict((k, g.get(k)) for k in ("uuid", "state", "recovery_action", "persistence_mode")) for g in facts.get("gpus") or ()
                        if g.get("uuid") in uuids]}
    result["seconds"] = round(node.clock() - started, 3)
    if result["post"]:
        raise ResetFailed("the GPUs are not healthy: %s" % "; ".join(result["post"]), result)
    return dict(result, msg="%s healthy: the same UUIDs, and no rule of the health decision at the reset's severity or above fires"
                % ", ".join(uuids))


def _extra(persistent, units):
    text = ""
    if persistent:
        text += "; persistence mode off and on again on %s" % ", ".join(persistent)
    if units:
        text += "; %s stopped and started again" % ", ".join(units)
    return text


def _arm(node, p, persistent, units, lock):
    """The rescues, armed before anything stops: persistence mode on again, each unit started again. The host's systemd
    runs them: the lock is named by its host path (the same file beside the host, ``hostroot``)."""
    armed = []
    lock = hostroot.host(lock)
    if persistent:
        ok, err = systemd.arm_command_rescue(PERSISTENCE_RESCUE, p["rescue_seconds"], lock, [node.nvidia_smi, "-pm", "1", "-i", ",".join(persistent)],
                                             "turn persistence mode on again on %s if the GPU reset died" % ",".join(persistent), node.run, node.which)
        if not ok:
            raise ResetRefused("arming the rescue that restores persistence mode failed (%s): not reset, nothing was changed" % err)
        armed.append(PERSISTENCE_RESCUE)
    for unit in units:
        ok, err = systemd.arm_rescue(unit, p["rescue_seconds"], lock, node.run, node.which, why="the GPU reset that stopped it")
        if not ok:
            _disarm(node, armed)
            raise ResetRefused("arming the rescue that starts %s again failed (%s): not reset, nothing was changed" % (unit, err))
        armed.append(unit)
    return armed


def _restore(node, persistent, result):
    for uuid in persistent:
        rc, out, err = node.run([node.nvidia_smi, "-pm", "1", "-i", uuid])
        if rc == 0:
            result["persistence_restored"].append(uuid)
        else:
            result.setdefault("restore_errors", []).append("persistence mode on %s: %s" % (uuid, (out + err).strip()))
    for unit in result["units_stopped"]:
        ok, err = systemd.start(unit, node.run)
        if ok:
            result["units_restarted"].append(unit)
        else:
            result.setdefault("restore_errors", []).append("starting %s: %s (its rescue timer stays armed)" % (unit, err))


def _disarm(node, armed):
    for name in armed:
        systemd.disarm_rescue(name, node.run)
