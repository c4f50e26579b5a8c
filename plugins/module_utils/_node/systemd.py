# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the few systemctl calls of the node code.

``run`` is a callable ``run(argv) -> (rc, stdout, stderr)``: a module passes
``AnsibleModule.run_command``, the node-side ``gpuops`` command its entry point's runner
(``roles/checkpoint_guard/files/gpuops_main.py``), tests a fake. Nothing here starts a process
itself: module_utils run commands through the module that imports them.
"""

from __future__ import annotations

import shutil

# systemctl is-active prints one of these for a unit whose process may run now or in a
# moment (an auto-restart is "activating"): each must be stopped before the checkpoint
# is touched, and started again afterwards.
RUNNING_STATES = ("active", "activating", "reloading", "deactivating", "refreshing")


def available():
    """Whether this host has systemctl at all (a sysroot or a container may not)."""
    return shutil.which("systemctl") is not None


def state(unit, run):
    """``systemctl is-active`` of the unit: its state word, or ``unknown`` when systemd cannot say."""
    dummy, out, dummy2 = run(["systemctl", "is-active", unit])
    word = out.strip().splitlines()[0].strip() if out.strip() else ""
    return word or "unknown"


def is_active(unit, run):
    return state(unit, run) in RUNNING_STATES


def stop(unit, run):
    """Stop the unit and wait for it to be stopped. Returns (ok, stderr)."""
    rc, dummy, err = run(["systemctl", "stop", unit])
    return rc == 0, err.strip()


def start(unit, run, block=True):
    """Start the unit; ``block=False`` only queues the job (a unit ordered before it is running). Returns (ok, stderr)."""
    rc, dummy, err = run(["systemctl", "start"] + ([] if block else ["--no-block"]) + [unit])
    return rc == 0, err.strip()


# ---------------------------------------------------------------------------
# The kubelet rescue: kubelet runs again even when the run that stopped it dies
# ---------------------------------------------------------------------------

# How long a rescue that fired waits for a live run's lock before it starts kubelet anyway.
RESCUE_LOCK_WAIT = 300
_RESCUE_SCRIPT = 'flock -w "$1" "$2" true; exec "$3" start --no-block "$4"'
_RESCUE_SCRIPT_NO_FLOCK = 'exec "$3" start --no-block "$4"'


def rescue_unit(unit):
    """The transient unit's base name for ``unit``: ``kubelet.service`` -> ``gpuops-rescue-kubelet``; another type keeps
    it, so a timer and its service (both stopped for a GPU reset) get their own: ``gpuops-metrics.timer`` ->
    ``gpuops-rescue-gpuops-metrics-timer``."""
    base, dot, kind = unit.rpartition(".")
    if not dot:
        base, kind = unit, "service"
    if kind != "service":
        base = "%s-%s" % (base, kind)
    return "gpuops-rescue-" + "".join(c if c.isalnum() or c in "_.:-" else "-" for c in base)


def _tool(name, which=shutil.which):
    return which(name) or which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")


def _arm(name, seconds, description, script, args, run, which):
    """systemd-run a transient timer ``name`` whose service runs ``sh -c script gpuops-rescue args...`` ``seconds`` from now."""
    systemd_run = _tool("systemd-run", which)
    if systemd_run is None:
        return False, "systemd-run is not installed"
    shell = _tool("sh", which) or "/bin/sh"
    argv = [systemd_run, "--unit=" + name, "--on-active=%ds" % seconds, "--timer-property=AccuracySec=1s", "--description=" + description,
            "--", shell, "-c", script, "gpuops-rescue"] + list(args)
    rc, dummy, err = run(argv)
    return rc == 0, err.strip()


def arm_rescue(unit, seconds, lock_path, run, which=shutil.which, why="the checkpoint repair that stopped it"):
    """Arm a transient timer that starts ``unit`` ``seconds`` from now. Returns (ok, error).

    The timer's service waits for the run's lock first (``flock``, at most
    RESCUE_LOCK_WAIT seconds): while the run that armed it is alive it holds that lock
    and starts the unit itself, then disarms the timer; a run that was killed released
    the lock with its last file descriptor, so the unit is started at once. Arguments are
    passed as argv, never through a shell line.
    """
    flock = _tool("flock", which)
    systemctl = _tool("systemctl", which) or "systemctl"
    return _arm(rescue_unit(unit), seconds, "gpuops: start %s if %s died" % (unit, why),
                _RESCUE_SCRIPT if flock else _RESCUE_SCRIPT_NO_FLOCK, [str(RESCUE_LOCK_WAIT), lock_path, systemctl, unit], run, which)


_COMMAND_SCRIPT = 'flock -w "$1" "$2" true; shift 2; exec "$@"'
_COMMAND_SCRIPT_NO_FLOCK = 'shift 2; exec "$@"'


def arm_command_rescue(name, seconds, lock_path, argv, description, run, which=shutil.which):
    """Arm a transient timer ``gpuops-rescue-<name>`` that runs ``argv`` ``seconds`` from now, after the run's lock
    (as ``arm_rescue``); disarmed with ``disarm_rescue(name, run)``. Returns (ok, error)."""
    flock = _tool("flock", which)
    return _arm(rescue_unit(name), seconds, "gpuops: %s" % description, _COMMAND_SCRIPT if flock else _COMMAND_SCRIPT_NO_FLOCK,
                [str(RESCUE_LOCK_WAIT), lock_path] + list(argv), run, which)


def rescue_armed(unit, run):
    """Whether a rescue for ``unit`` is still armed or running (a run that armed it died)."""
    name = rescue_unit(unit)
    return state(name + ".timer", run) in RUNNING_STATES or state(name + ".service", run) in RUNNING_STATES


def disarm_rescue(unit, run):
    """Stop the rescue's timer and service (transient units then vanish); errors of units already gone are ignored."""
    name = rescue_unit(unit)
    for suffix in (".timer", ".service"):
        run(["systemctl", "stop", name + suffix])
