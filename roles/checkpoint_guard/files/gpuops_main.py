# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node-side ``gpuops`` command's entry point (boot guard, ``gpuops metrics``).

The command's code is the collection's node module_utils, which start no process themselves (a
module runs commands through ``AnsibleModule.run_command``, and ansible-test's pylint refuses
``subprocess`` in module_utils); this entry point, outside module_utils, is the one place where the
command starts the few it needs (systemctl, systemd-run, nvidia-smi, nvidia-ctk). It is node code:
tests/unit/plugins/module_utils/test_layout.py holds it to the standard library and the node
packages, and no plugin imports it. The guard's file puts it at its top (plugin_utils/_guard_code.py);
``/usr/local/bin/gpuops`` calls ``entry``.
"""

from __future__ import annotations

import subprocess
import sys


def run(argv):
    """``(rc, stdout, stderr)`` of a command, without a shell."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def entry(default_config="/etc/gpuops/gpuops.json", argv=None):
    """Run ``gpuops`` with ``argv`` (the command line by default); returns its exit code."""
    from ansible_collections.gpuops.fleet.plugins.module_utils._node.guard.main import main  # pylint: disable=import-outside-toplevel

    return main(sys.argv[1:] if argv is None else argv, default_config=default_config, run=run)
