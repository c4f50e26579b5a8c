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
                     -> stop kubelet (wait for it) -> reconcile -> start kubelet (always)

Containers keep running while kubelet is stopped: the runtime owns them, and kubelet on
its next start adopts running pods instead of admitting them again (kubernetes#123980;
the device manager skips allocation for running pods, kubernetes#118559 and its fix).
"""

from __future__ import annotations

import time

from ansible_collections.gpuops.fleet.plugins.module_utils import _nodefile as nodefile
from ansible_collections.gpuops.fleet.plugins.module_utils import _reconcile as rec
from ansible_collections.gpuops.fleet.plugins.module_utils import _systemd as systemd
from ansible_collections.gpuops.fleet.plugins.module_utils._errors import KubeletControlError, KubeletRunningError


class Kubelet(object):
    """How to handle the kubelet unit around a repair.

    ``restart``: whether a running kubelet may be stopped and started again (else the
    repair is refused while it runs). ``block_start``: wait for the start job; the boot
    guard, ordered before kubelet, must only queue it (a blocking start would wait for
    the guard itself).
    """

    __slots__ = ("unit", "restart", "block_start", "run", "clock")

    def __init__(self, unit, restart=True, block_start=True, run=systemd.run, clock=time.monotonic):
        self.unit = unit
        self.restart = restart
        self.block_start = block_start
        self.run = run
        self.clock = clock


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
    if kubelet is None:
        result = rec.reconcile(facts, options, check_mode=check_mode, diff=diff, now=now)
        result["kubelet"] = _kubelet_result(None)
        return result
    if check_mode:
        result = rec.reconcile(facts, options, check_mode=True, diff=diff, now=now)
        result["kubelet"] = info = _kubelet_result(kubelet.unit)
        if result["changed"]:  # as in a real run, kubelet is asked only when the file would change
            info["state_before"] = systemd.state(kubelet.unit, kubelet.run)
            info["would_restart"] = info["state_before"] in systemd.RUNNING_STATES
        return result
    with nodefile.run_lock(options.lock_dir, options.checkpoint_path, options.lock_timeout):
        return _repair_locked(facts, options, kubelet, diff, now, notify)


def _repair_locked(facts, options, kubelet, diff, now, notify):
    plan = rec.reconcile(facts, options, check_mode=True, diff=diff, now=now, lock=False)
    unit = kubelet.unit
    info = _kubelet_result(unit)
    if not plan["changed"]:
        plan["kubelet"] = info  # nothing to change: kubelet is not even asked
        return plan
    info["state_before"] = systemd.state(unit, kubelet.run)
    if info["state_before"] not in systemd.RUNNING_STATES:
        result = rec.reconcile(facts, options, diff=diff, now=now, lock=False)
        result["kubelet"] = info
        return result
    if not kubelet.restart:
        _untouched(plan, info)
        raise KubeletRunningError(
            "%s is %s and restart_kubelet is false: the checkpoint was left alone, because kubelet would write its "
            "in-memory copy back over a repair. Allow the restart (restart_kubelet: true) or repair while kubelet is stopped"
            % (unit, info["state_before"]),
            plan,
        )
    began = kubelet.clock()
    notify("kubelet_stopping", unit=unit, state=info["state_before"])
    ok, err = systemd.stop(unit, kubelet.run)
    info["stop_seconds"] = round(kubelet.clock() - began, 3)
    if not ok:
        # a failed stop may still have stopped it: make sure it runs, then say so
        started, start_err = _start_if_down(kubelet)
        info["started"] = started
        _untouched(plan, info)
        raise KubeletControlError(
            "stopping %s failed (%s): the checkpoint was left alone%s"
            % (unit, err or "no message", "" if start_err is None else "; starting it again failed too (%s): start it by hand" % start_err),
            plan,
        )
    info["stopped"] = True
    notify("kubelet_stopped", unit=unit, stop_seconds=info["stop_seconds"])
    try:
        result = rec.reconcile(facts, options, diff=diff, now=now, lock=False)
    except BaseException as exc:
        ok, err = systemd.start(unit, kubelet.run, block=kubelet.block_start)
        info["started"] = ok
        notify("kubelet_started" if ok else "kubelet_start_failed", unit=unit, error=err or None)
        if not ok:
            raise KubeletControlError("%s; and starting %s again failed (%s): start it by hand" % (exc, unit, err or "no message"), None)
        raise
    result["kubelet"] = info
    notify("reconciled", result=result)
    ok, err = systemd.start(unit, kubelet.run, block=kubelet.block_start)
    info["down_seconds"] = round(kubelet.clock() - began, 3)
    if not ok:
        notify("kubelet_start_failed", unit=unit, error=err or None)
        raise KubeletControlError(
            "%s, but starting %s again failed (%s): start it by hand (systemctl start %s)" % (result["msg"], unit, err or "no message", unit),
            result,
        )
    info["started"] = info["restarted"] = True
    notify("kubelet_started", unit=unit, down_seconds=info["down_seconds"], queued=not kubelet.block_start)
    return result


def _start_if_down(kubelet):
    """(started by us, start error or None) after a failed stop."""
    if systemd.is_active(kubelet.unit, kubelet.run):
        return False, None
    ok, err = systemd.start(kubelet.unit, kubelet.run, block=kubelet.block_start)
    return ok, (None if ok else (err or "no message"))


def _untouched(plan, info):
    """The plan as the result of a run that changed nothing (its action is kept as ``planned_action``)."""
    plan.update(changed=False, planned_action=plan["action"], action="none", backup_path=None, kubelet=info)
