# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The checkpoint_guard role's data path: its variables -> gpuops.json and gpuops.service values -> the files."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_daemonset as guard_daemonset
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_spec as guard_spec
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import as_bool
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError
from ansible_collections.gpuops.fleet.plugins.plugin_utils._guard_settings import role_settings
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_code


def checkpoint_guard_settings(raw):
    """Typed, validated settings of the boot guard; raises with the role variable's name and the fix."""
    try:
        return role_settings(raw)
    except GpuopsError as exc:
        raise AnsibleFilterError("gpuops.fleet.checkpoint_guard: %s" % exc) from exc


def checkpoint_guard_files(settings, root="", unit_dir="/etc/systemd/system", hardening=True, late_check=False):
    """The guard's wrapper, configuration and units for gpuops.fleet.guard_install, from checkpoint_guard_settings."""
    try:
        return guard_spec.files(settings, root, unit_dir, hardening, late_check)
    except GpuopsError as exc:
        raise AnsibleFilterError("gpuops.fleet.checkpoint_guard: %s" % exc) from exc


def checkpoint_guard_layout(settings, root="", unit_dir="/etc/systemd/system", late_check=False):
    """The install's directories (each with its role variable) and what an older layout left, for gpuops.fleet.guard_install."""
    try:
        return guard_spec.layout(settings, root, unit_dir, late_check)
    except GpuopsError as exc:
        raise AnsibleFilterError("gpuops.fleet.checkpoint_guard: %s" % exc) from exc


def checkpoint_guard_install_spec(raw, root="", unit_dir="/etc/systemd/system", hardening=True, late_check=False, require_persistent=True,
                                  manage_systemd=True, enabled=True):
    """gpuops.fleet.guard_install's options from the role's variables as they come (``raw``, checked here once): the
    layout's directories and leftovers, the files, the code's path, the self-test and the units, in one evaluation per
    task (one settings check, where building each part from its own filter cost one each)."""
    try:
        return guard_spec.install_spec(raw, root, unit_dir, hardening, late_check, require_persistent, manage_systemd, enabled)
    except GpuopsError as exc:
        raise AnsibleFilterError("gpuops.fleet.checkpoint_guard: %s" % exc) from exc


def checkpoint_guard_daemonset(settings, image, name="gpuops-guard", namespace="kube-system", python="python3", node_label_keys=None,
                               tolerations=None, priority_class_name="", unit_dir="/etc/systemd/system", hardening=True, late_check=False,
                               enabled=True):
    """The guard's DaemonSet form (a ConfigMap with the code and install spec, an OnDelete DaemonSet), from checkpoint_guard_settings."""
    try:
        dummy, unit_dir = guard_spec.checked(settings, "", unit_dir)
        files = checkpoint_guard_files(settings, "", unit_dir, hardening, late_check)
        code, dummy = _guard_code.built()
        options = {"name": name, "namespace": namespace, "image": image, "python": python, "tolerations": tolerations or [],
                   "node_label_keys": node_label_keys or [], "priority_class_name": priority_class_name}
        return guard_daemonset.manifests(settings, files, code, options, unit_dir=unit_dir,
                                         enabled=as_bool("checkpoint_guard_enabled", enabled),
                                         late_check=as_bool("checkpoint_guard_late_check", late_check))
    except GpuopsError as exc:
        raise AnsibleFilterError("gpuops.fleet.checkpoint_guard: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"_checkpoint_guard_settings": checkpoint_guard_settings, "_checkpoint_guard_files": checkpoint_guard_files,
                "_checkpoint_guard_layout": checkpoint_guard_layout, "_checkpoint_guard_daemonset": checkpoint_guard_daemonset,
                "_checkpoint_guard_install_spec": checkpoint_guard_install_spec}
