# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the few systemctl calls of the node command.

``run`` is a callable ``run(argv) -> (rc, stdout, stderr)``, so tests pass a fake.
"""

from __future__ import annotations

import shutil
import subprocess


def run(argv):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def available():
    """Whether this host has systemctl at all (a sysroot or a container may not)."""
    return shutil.which("systemctl") is not None


def is_active(unit, run=run):
    rc, dummy, dummy2 = run(["systemctl", "is-active", "--quiet", unit])
    return rc == 0


def restart_no_block(unit, run=run):
    """Queue a restart (``--no-block``: the guard runs ordered before kubelet). Returns (ok, stderr)."""
    rc, dummy, err = run(["systemctl", "restart", "--no-block", unit])
    return rc == 0, err.strip()
