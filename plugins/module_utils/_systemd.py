# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the few systemctl calls of the node code.

``run`` is a callable ``run(argv) -> (rc, stdout, stderr)``, so tests pass a fake.
"""

from __future__ import annotations

import shutil
import subprocess

# systemctl is-active prints one of these for a unit whose process may run now or in a
# moment (an auto-restart is "activating"): each must be stopped before the checkpoint
# is touched, and started again afterwards.
RUNNING_STATES = ("active", "activating", "reloading", "deactivating", "refreshing")


def run(argv):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def available():
    """Whether this host has systemctl at all (a sysroot or a container may not)."""
    return shutil.which("systemctl") is not None


def state(unit, run=run):
    """``systemctl is-active`` of the unit: its state word, or ``unknown`` when systemd cannot say."""
    dummy, out, dummy2 = run(["systemctl", "is-active", unit])
    word = out.strip().splitlines()[0].strip() if out.strip() else ""
    return word or "unknown"


def is_active(unit, run=run):
    return state(unit, run) in RUNNING_STATES


def stop(unit, run=run):
    """Stop the unit and wait for it to be stopped. Returns (ok, stderr)."""
    rc, dummy, err = run(["systemctl", "stop", unit])
    return rc == 0, err.strip()


def start(unit, run=run, block=True):
    """Start the unit; ``block=False`` only queues the job (a unit ordered before it is running). Returns (ok, stderr)."""
    rc, dummy, err = run(["systemctl", "start"] + ([] if block else ["--no-block"]) + [unit])
    return rc == 0, err.strip()
