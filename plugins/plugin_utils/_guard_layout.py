# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection (controller side): where the boot guard's install puts things, once for both installs.

The SSH install (``checkpoint_guard`` role, filter ``_checkpoint_guard_layout`` into
``guard_install``) and the DaemonSet form (``_guard_daemonset``'s install spec) create the
same directories, each named by the role variable it comes from (the name a refusal gives), and
remove what an older layout left. Pure data from ``_guard_settings.role_settings``' checked result;
controller code, so not in the guard's file.
"""

from __future__ import annotations

import posixpath

LATE_UNIT = "gpuops-late.service"
# what the older layout's entry point (gpuops_main.py beside loose module_utils) imports: only such a file is the guard's
OLDER_ENTRY_IMPORT = "ansible_collections.gpuops.fleet.plugins.module_utils._node.guard"
# the late unit's [Install] WantedBy= (plugin_utils/_guard_files.late_service writes it)
LATE_WANTED_BY = "multi-user.target"


def directories(settings, unit_dir, root=""):
    """The install's directories under ``root``: path, mode and the role variable each comes from."""
    unit, config = settings["unit"], settings["config"]
    return [
        {"path": root + unit["lib_dir"], "mode": "0755", "name": "checkpoint_guard_lib_dir"},
        {"path": root + posixpath.dirname(unit["bin"]), "mode": "0755", "name": "checkpoint_guard_bin"},
        {"path": root + posixpath.dirname(unit["config_path"]), "mode": "0755", "name": "checkpoint_guard_config_path"},
        {"path": root + unit_dir, "mode": "0755", "name": "checkpoint_guard_unit_dir"},
        {"path": root + config["backup_dir"], "mode": "0700", "name": "checkpoint_guard_backup_dir"},
    ]


def leftovers(settings, unit_dir, late_check, root="", systemd=True):
    """What an older layout left, to remove: the code as loose files, and the late unit when the late check is off.

    With ``systemd`` the late unit's entry names the unit (guard_install disables it, which removes its
    links); without (the DaemonSet form makes no systemd call), its ``.wants`` link is a path too."""
    lib = root + settings["unit"]["lib_dir"]
    # the older layout's copy of the collection and its entry point, removed only when they hold nothing else: the
    # library directory may be shared (checkpoint_guard_lib_dir=/usr/lib/python3/dist-packages has the system's collections)
    found = [{"path": lib + "/ansible_collections", "only": "gpuops/fleet"},
             {"path": lib + "/gpuops_main.py", "contains": OLDER_ENTRY_IMPORT}]
    if not late_check:
        if systemd:
            found.append({"path": root + unit_dir + "/" + LATE_UNIT, "unit": LATE_UNIT})
        else:
            found.extend([{"path": root + unit_dir + "/" + LATE_UNIT},
                          {"path": "%s%s/%s.wants/%s" % (root, unit_dir, LATE_WANTED_BY, LATE_UNIT)}])
    return found
