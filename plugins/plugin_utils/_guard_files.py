# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection (controller only): the boot guard's text files, built from data.

The ``checkpoint_guard`` role's wrapper (``/usr/local/bin/gpuops``), configuration (``gpuops.json``) and
units (``gpuops.service``, ``gpuops-late.service``) from the checked settings of
``_guard_settings.role_settings``: every value in them was checked there (paths, unit names,
``Environment=`` lines), and each line is built here from one value, so no value can add a line.
Python string literals in the wrapper are ``repr()``s. One call per host renders all of them (the
role's templates were one lookup and one settings evaluation each).
"""

from __future__ import annotations

import json
import posixpath

from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_layout as guard_layout

HEADER = "# Managed by the gpuops.fleet.checkpoint_guard role: local changes are overwritten at its next run."
HARDENING = ["NoNewPrivileges=yes", "PrivateTmp=yes", "ProtectHome=read-only", "ProtectSystem=full"]


def wrapper(settings, root):
    unit = settings["unit"]
    return "\n".join([
        "#!" + unit["python"],
        HEADER,
        "# gpuops.fleet boot guard. The code is the collection's node code and its entry point, one file",
        "# (gpuops.fleet.guard_install) installed by the gpuops.fleet.checkpoint_guard role. `gpuops --help` lists exit codes.",
        "import sys",
        "",
        "sys.path.insert(0, %r)" % (root + unit["lib_dir"] + "/gpuops.pyz"),
        "from gpuops_main import entry  # noqa: E402",
        "",
        "sys.exit(entry(default_config=%r))" % (root + unit["config_path"]),
        "",
    ])


def config(settings):
    return json.dumps(settings["config"], indent=2, sort_keys=True, separators=(",", ": ")) + "\n"


def _unit_file(settings, hardening, comments, unit_lines, service_lines, wanted_by):
    """One unit: the header, its comment, [Unit] (ending with the mounts it needs), [Service] (ending with
    the checked Environment= lines and the hardening), [Install]."""
    config = settings["config"]
    mounts = "RequiresMountsFor=%s %s" % (posixpath.dirname(config["checkpoint_path"]), config["backup_dir"])
    return "\n".join(
        [HEADER] + comments + ["[Unit]"] + unit_lines + [mounts, "", "[Service]"] + service_lines
        + settings["unit"]["environment"] + (HARDENING if hardening else []) + ["", "[Install]", "WantedBy=" + wanted_by, ""]
    )


def service(settings, hardening):
    unit, kubelet = settings["unit"], settings["config"]["kubelet_unit"]
    return _unit_file(settings, hardening, [
        "# gpuops.fleet boot guard: runs once per boot, after the NVIDIA driver is up and before",
        "# kubelet, so kubelet never starts on a checkpoint that lists GPUs this node no longer has.",
    ], [
        "Description=gpuops: check kubelet's device checkpoint against the node's GPUs",
        "After=" + " ".join(["local-fs.target"] + unit["after_units"]),
        "Before=" + kubelet,
        "# Ordering only, no Requires=/BindsTo=: kubelet starts even when the guard fails.",
    ], [
        "Type=oneshot",
        "RemainAfterExit=yes",
        "ExecStart=%s check --config %s" % (unit["bin"], unit["config_path"]),
        "TimeoutStartSec=%d" % unit["timeout_seconds"],
        "SyslogIdentifier=gpuops",
    ], "multi-user.target " + kubelet)


def late_service(settings, hardening):
    unit, kubelet = settings["unit"], settings["config"]["kubelet_unit"]
    return _unit_file(settings, hardening, [
        "# gpuops.fleet late check: for a driver that comes up after kubelet (a driver container such as",
        "# the GPU Operator's). Started after kubelet at every boot; waits (bounded) for the driver's",
        "# ready file and readable GPUs, then checks once. A change is made in the runtime order: stop",
        "# kubelet, repair, start kubelet. A driver that never comes up ends with exit 3, nothing touched.",
    ], [
        "Description=gpuops: late check of kubelet's device checkpoint once a containerized NVIDIA driver is up",
        "After=" + kubelet,
    ], [
        "# exec: the unit is started once the command runs, so boot does not wait for the driver",
        "Type=exec",
        "ExecStart=%s check --late --config %s" % (unit["bin"], unit["config_path"]),
        "SyslogIdentifier=gpuops-late",
    ], guard_layout.LATE_WANTED_BY)


def files(settings, root, unit_dir, hardening, late_check):
    """[{path, content, mode, unit}] for gpuops.fleet.guard_install, paths under the sysroot ``root``."""
    unit = settings["unit"]
    found = [
        {"path": root + unit["bin"], "content": wrapper(settings, root), "mode": "0755", "unit": False},
        {"path": root + unit["config_path"], "content": config(settings), "mode": "0644", "unit": False},
        {"path": root + unit_dir + "/gpuops.service", "content": service(settings, hardening), "mode": "0644", "unit": True},
    ]
    if late_check:
        found.append({"path": root + unit_dir + "/" + guard_layout.LATE_UNIT, "content": late_service(settings, hardening), "mode": "0644", "unit": True})
    return found
