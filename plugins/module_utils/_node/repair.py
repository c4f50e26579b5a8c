# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the runtime repair order on a node whose kubelet may run.

kubelet's device manager keeps its allocations in memory and writes the whole checkpoint
from memory at every allocation change (``ManagerImpl.writeCheckpoint`` in
``pkg/kubelet/cm/devicemanager/manager.go``); it reads the file only when it starts
(``readCheckpoint``). A checkpoint repaired under a running kubelet is therefore
overwritten with the stale IDs at kubelet's next allocation, and a restart "later" may
come after that write. So on a node where kubelet runs, one call does, under the
checkpoint's lock::

    plan (read-only) -> nothing to change: kubelet is never touched
                     -> mark "kubelet stopped by us" -> arm the rescue timer -> stop kubelet
                        -> reconcile -> start kubelet (always) -> disarm the rescue -> unmark

A run killed while kubelet is stopped (SIGKILL, OOM, an Ansible timeout) cannot start it
again itself. The rescue, a transient systemd timer armed before the stop
(``_systemd.arm_rescue``), starts kubelet ``rescue_seconds`` after it was armed once the
checkpoint's lock is free, i.e. at once when the run is dead and never before a live run
has finished; the bound is ``rescue_seconds`` past the kill. The mark (a file beside the
lock, under ``/run``: gone at reboot) tells the next run that a killed run left kubelet
stopped: it repairs, then starts kubelet and disarms the rescue.

Containers keep running while kubelet is stopped: the runtime owns them. kubelet v1.20.2 on
its next start admits the pods it already runs again; the device manager gives a pod whose
entry the checkpoint still holds that allocation without asking the plugin, and rejects a pod
whose entry was dropped (``UnexpectedAdmissionError``) until the plugin registers. Tested on a
real kubelet node: ``tests/knode/`` (``make kube-node``).
"""

from __future__ import annotations

import json
import os
import shutil
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._node import gpu_inventory as inventory
from ansible_collections.gpuops.fleet.plugins.module_utils._node import hostroot
from ansible_collections.gpuops.fleet.plugins.module_utils._node import nodefile
from ansible_collections.gpuops.fleet.plugins.module_utils._node import options as options_table
from ansible_collections.gpuops.fleet.plugins.module_utils._node import reconcile as rec
from ansible_collections.gpuops.fleet.plugins.module_utils._node import systemd
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import InventoryError, KubeletControlError, KubeletRunningError


# kubelet is started again at most this long after a run that stopped it was killed
# what reconcile() does to the checkpoint itself (restoring a killed run's claim is recovery)
ACTIONS = ("removed", "pruned")


class Kubelet:
    """How to handle the kubelet unit around a repair.

    ``restart``: whether a running kubelet may be stopped and started again (else the
    repair is refused while it runs). ``block_start``: wait for the start job; the boot
    guard, ordered before kubelet, must only queue it (a blocking start would wait for
    the guard itself). ``rescue_seconds``: the rescue timer's delay, the bound on how long
    kubelet stays down after this run is killed.
    """

    __slots__ = ("unit", "restart", "block_start", "run", "clock", "rescue_seconds", "which", "unmanaged_pid")

    def __init__(self, unit, run, restart=True, block_start=True, clock=time.monotonic, rescue_seconds=options_table.DEFAULT_RESCUE_SECONDS, which=shutil.which,
                 unmanaged_pid=None):
        self.unit = unit
        self.restart = restart
        self.block_start = block_start
        self.run = run
        self.clock = clock
        self.rescue_seconds = rescue_seconds
        self.which = which  # finds systemd-run, flock and sh for the rescue (host paths: hostroot.which beside the host)
        # a kubelet process that runs where no systemctl can stop it (Talos, a kubelet in a container): the repair is refused
        self.unmanaged_pid = unmanaged_pid

    @classmethod
    def unmanaged(cls, unit, pid):
        """kubelet running as process ``pid`` on a host without systemctl: never stopped, a repair under it refused."""
        return cls(unit, run=None, restart=False, unmanaged_pid=pid)

    def state(self):
        """``systemctl is-active``'s word, or ``running`` for a kubelet no systemctl manages."""
        return "running" if self.unmanaged_pid is not None else systemd.state(self.unit, self.run)


def _kubelet_result(unit, state=None):
    return {
        "unit": unit,
        "state_before": state,
        "stopped": False,
        "started": False,
        "restarted": False,
        "would_restart": False,
        "stop_seconds": None,
        "down_seconds": None,
        "left_stopped_by_killed_run": False,
        "would_start": False,
        "rescue_seconds": None,
    }


def _quiet(dummy_event, **dummy_fields):
    return None


def repair(facts, options, kubelet=None, check_mode=False, diff=False, now=None, notify=_quiet):
    """Reconcile the checkpoint in the runtime order; returns reconcile()'s result plus ``kubelet``.

    ``kubelet`` None means kubelet is not managed here (a sysroot, a host without
    systemd): a plain reconcile. ``notify(event, **fields)`` is called as each kubelet
    step happens (the guard logs it, so the journal shows the order). Raises what
    reconcile() raises, KubeletRunningError (a running kubelet may not be stopped) or
    KubeletControlError (stopping or starting it failed; the message says what to do).
    """
    check_node(facts)
    if kubelet is None:
        result = rec.reconcile(facts, options, check_mode=check_mode, diff=diff, now=now)
        result["kubelet"] = _kubelet_result(None)
        result["repair_needed"] = check_mode and result["action"] in ACTIONS
        return result
    if check_mode:
        result = rec.reconcile(facts, options, check_mode=True, diff=diff, now=now)
        result["kubelet"] = info = _kubelet_result(kubelet.unit)
        left = info["left_stopped_by_killed_run"] = _read_mark(_mark_path(options)) is not None
        if result["action"] in ACTIONS:  # as in a real run, kubelet is asked only when the file would change
            info["state_before"] = kubelet.state()
            info["would_restart"] = info["state_before"] in systemd.RUNNING_STATES and kubelet.unmanaged_pid is None
        elif left:
            # a killed run's mark: the node is not up to date until kubelet runs and the mark and rescue are gone
            info["state_before"] = kubelet.state()
            info["would_start"] = info["state_before"] not in systemd.RUNNING_STATES
            result["changed"] = True
            result["msg"] = "%s; an earlier run was killed while %s was stopped (%s): the repair step %s it and clears that run's mark" % (
                result.get("msg") or "checkpoint up to date", kubelet.unit, info["state_before"],
                "would start" if info["would_start"] else "would find it running, and disarm its rescue timer")
        result["repair_needed"] = result["action"] in ACTIONS or left
        return result
    with nodefile.run_lock(options.lock_dir, options.checkpoint_path, options.lock_timeout):
        result = _repair_locked(facts, options, kubelet, diff, now, notify)
    result["repair_needed"] = False  # this run did what was needed (or raised)
    return result


def check_node(facts, identity=inventory.node_identity):
    """Refuse GPU facts read on another machine (their ``node_id``): compared with this node's checkpoint they
    would call its valid IDs stale. Facts without ``node_id`` (written by hand, or older) are taken as they are."""
    given = facts.get("node_id") if isinstance(facts, dict) else None
    if given is not None and given != identity():
        raise InventoryError(
            "the GPU inventory given (gpus) was read on another machine (node_id %s, this one %s): refusing to compare it with this "
            "node's checkpoint, nothing was changed. Pass this node's own ansible_facts.gpuops_gpus, or omit gpus so the module reads "
            "the GPUs itself. On ansible-core 2.21 a run_once task earlier in the play can leak one host's facts to the others "
            "(ansible/ansible#87148)" % (given, identity())
        )


def _mark_path(options):
    """The file that says "kubelet was stopped by a repair": beside the lock, under /run (gone at reboot)."""
    return nodefile.lock_path(options.lock_dir, options.checkpoint_path)[: -len(".lock")] + ".kubelet-stopped"


def _read_mark(path):
    try:
        with open(path, "rb") as handle:
            raw = handle.read(4096)
    except OSError:
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError:
        return {}


def _write_mark(path, unit):
    data = json.dumps({"unit": unit, "pid": os.getpid(), "time": time.time()}).encode("utf-8")
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(tmp, path)
    except OSError as exc:
        raise KubeletControlError("writing %s failed (%s): kubelet was not stopped and the checkpoint was left alone" % (path, exc)) from exc


def _after_killed_run(kubelet, info, mark, notify):
    """A run killed while kubelet was stopped left its mark: start kubelet if it is down, disarm the rescue."""
    info["left_stopped_by_killed_run"] = True
    if not systemd.is_active(kubelet.unit, kubelet.run):
        ok, err = systemd.start(kubelet.unit, kubelet.run, block=kubelet.block_start)
        notify("kubelet_started" if ok else "kubelet_start_failed", unit=kubelet.unit, error=err or None, after_killed_run=True)
        if not ok:
            raise KubeletControlError(
                "an earlier run was killed while %s was stopped, and starting it failed (%s): start it by hand (systemctl start %s)"
                % (kubelet.unit, err or "no message", kubelet.unit)
            )
        info["started"] = True
    systemd.disarm_rescue(kubelet.unit, kubelet.run)
    nodefile.unlink_quietly(mark)
    return info["started"]


def _repair_locked(facts, options, kubelet, diff, now, notify):
    unit = kubelet.unit
    info = _kubelet_result(unit)
    mark = _mark_path(options)
    left = _read_mark(mark) is not None
    plan = rec.reconcile(facts, options, check_mode=True, diff=diff, now=now, lock=False)
    if plan["action"] not in ACTIONS:
        # nothing to change in the checkpoint: kubelet is not even asked (a killed run's leftovers are still cleared)
        result = rec.reconcile(facts, options, diff=diff, now=now, lock=False) if plan["recovered"] else plan
        result["kubelet"] = info
        if left and _after_killed_run(kubelet, info, mark, notify):
            result["changed"] = True
        return result
    info["state_before"] = kubelet.state()
    if kubelet.unmanaged_pid is not None:
        _untouched(plan, info)
        raise KubeletRunningError(
            "kubelet runs on this host (pid %d) and no systemctl here can stop it (%s is not a unit this module can manage): "
            "the checkpoint was left alone, because kubelet would write its in-memory copy back over a repair. Stop kubelet "
            "by the platform's own means and run again, or repair before kubelet starts" % (kubelet.unmanaged_pid, unit),
            plan,
        )
    if info["state_before"] not in systemd.RUNNING_STATES:
        result = rec.reconcile(facts, options, diff=diff, now=now, lock=False)
        result["kubelet"] = info
        if left and _after_killed_run(kubelet, info, mark, notify):
            result["changed"] = True
        return result
    if not kubelet.restart:
        _untouched(plan, info)
        raise KubeletRunningError(
            "%s is %s and restart_kubelet is false: the checkpoint was left alone, because kubelet would write its "
            "in-memory copy back over a repair. Allow the restart (restart_kubelet: true) or repair while kubelet is stopped"
            % (unit, info["state_before"]),
            plan,
        )
    if left:
        systemd.disarm_rescue(unit, kubelet.run)  # the killed run's timer, if it has not fired: this run takes over
    _write_mark(mark, unit)
    # the host's systemd runs the rescue: the lock is named by its host path (the same file beside the host, hostroot)
    lock = hostroot.host(nodefile.lock_path(options.lock_dir, options.checkpoint_path))
    ok, err = systemd.arm_rescue(unit, kubelet.rescue_seconds, lock, kubelet.run, kubelet.which)
    if not ok:
        nodefile.unlink_quietly(mark)
        _untouched(plan, info)
        raise KubeletControlError(
            "arming the rescue timer that starts %s again if this run dies failed (%s): kubelet was not stopped and the "
            "checkpoint was left alone; install systemd-run (systemd) or repair while kubelet is stopped" % (unit, err or "no message"),
            plan,
        )
    info["rescue_seconds"] = kubelet.rescue_seconds
    notify("rescue_armed", unit=unit, rescue_unit=systemd.rescue_unit(unit) + ".timer", rescue_seconds=kubelet.rescue_seconds)
    nodefile.failpoint("rescue_armed")
    began = kubelet.clock()
    notify("kubelet_stopping", unit=unit, state=info["state_before"])
    ok, err = systemd.stop(unit, kubelet.run)
    info["stop_seconds"] = round(kubelet.clock() - began, 3)
    if not ok:
        # a failed stop may still have stopped it: make sure it runs, then say so
        started, start_err = _start_if_down(kubelet)
        info["started"] = started
        if start_err is None:
            _disarm(kubelet, mark)
        _untouched(plan, info)
        raise KubeletControlError(
            "stopping %s failed (%s): the checkpoint was left alone%s"
            % (unit, err or "no message", "" if start_err is None else "; starting it again failed too (%s): start it by hand" % start_err),
            plan,
        )
    info["stopped"] = True
    notify("kubelet_stopped", unit=unit, stop_seconds=info["stop_seconds"])
    nodefile.failpoint("kubelet_stopped")
    try:
        result = rec.reconcile(facts, options, diff=diff, now=now, lock=False)
        nodefile.failpoint("reconciled")
    except BaseException as exc:
        ok, err = systemd.start(unit, kubelet.run, block=kubelet.block_start)
        info["started"] = ok
        notify("kubelet_started" if ok else "kubelet_start_failed", unit=unit, error=err or None)
        if not ok:
            raise KubeletControlError("%s; and starting %s again failed (%s): start it by hand" % (exc, unit, err or "no message"), None) from exc
        _disarm(kubelet, mark)
        raise
    result["kubelet"] = info
    info["left_stopped_by_killed_run"] = left
    notify("reconciled", result=result)
    ok, err = systemd.start(unit, kubelet.run, block=kubelet.block_start)
    info["down_seconds"] = round(kubelet.clock() - began, 3)
    if not ok:
        # the rescue stays armed: it tries once more, and the mark makes the next run try too
        notify("kubelet_start_failed", unit=unit, error=err or None)
        raise KubeletControlError(
            "%s, but starting %s again failed (%s): start it by hand (systemctl start %s)" % (result["msg"], unit, err or "no message", unit),
            result,
        )
    _disarm(kubelet, mark)
    info["started"] = info["restarted"] = True
    notify("kubelet_started", unit=unit, down_seconds=info["down_seconds"], queued=not kubelet.block_start)
    return result


def _disarm(kubelet, mark):
    systemd.disarm_rescue(kubelet.unit, kubelet.run)
    nodefile.unlink_quietly(mark)


def _start_if_down(kubelet):
    """(started by us, start error or None) after a failed stop."""
    if systemd.is_active(kubelet.unit, kubelet.run):
        return False, None
    ok, err = systemd.start(kubelet.unit, kubelet.run, block=kubelet.block_start)
    return ok, (None if ok else (err or "no message"))


def _untouched(plan, info):
    """The plan as the result of a run that changed nothing (its action is kept as ``planned_action``)."""
    plan.update(changed=False, planned_action=plan["action"], action="none", backup_path=None, kubelet=info)
