# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: /dev/char links for the NVIDIA device nodes.

systemd resolves device cgroup rules through /dev/char/<major>:<minor>; without links
for the NVIDIA nodes, `systemctl daemon-reload` makes running GPU containers lose
their devices on systemd-cgroup nodes (nvidia-container-toolkit#251).
"""

from __future__ import annotations

import os
import stat

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError


def nvidia_char_devices(dev_root="/dev"):
    """[(path, major, minor)] of the NVIDIA character devices under ``dev_root``."""
    found = []
    candidates = [os.path.join(dev_root, n) for n in os.listdir(dev_root) if n.startswith("nvidia")]
    caps = os.path.join(dev_root, "nvidia-caps")
    if os.path.isdir(caps) and not os.path.islink(caps):
        candidates.extend(os.path.join(caps, n) for n in os.listdir(caps))
    for path in sorted(candidates):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            found.append((path, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return found


def dev_char_symlinks(dev_root="/dev", dry_run=False):
    """Ensure /dev/char/<major>:<minor> -> the NVIDIA node; returns {created, present, conflicts}."""
    char_dir = os.path.join(dev_root, "char")
    out = {"created": [], "present": [], "conflicts": []}
    for path, major, minor in nvidia_char_devices(dev_root):
        link = os.path.join(char_dir, "%d:%d" % (major, minor))
        target = os.path.relpath(path, char_dir)
        if os.path.islink(link):
            if os.path.realpath(link) == os.path.realpath(path):
                out["present"].append(link)
            else:
                out["conflicts"].append("%s -> %s (expected %s)" % (link, os.readlink(link), target))
            continue
        if os.path.lexists(link):
            out["conflicts"].append("%s exists and is not a symlink" % link)
            continue
        if not dry_run:
            if not os.path.isdir(char_dir):
                os.makedirs(char_dir, 0o755)
            os.symlink(target, link)
        out["created"].append(link)
    return out


class DevCharError(GpuopsError):
    """nvidia-ctk failed to create the links (``rc``, its message)."""

    def __init__(self, rc, message):
        self.rc = rc
        super().__init__("nvidia-ctk failed (rc %d): %s" % (rc, message))


def ensure_links(run, dev_root="/dev", dry_run=False, ctk=None):
    """The links made the way the node prefers: ``nvidia-ctk system create-dev-char-symlinks --create-all``
    when ``ctk`` (its path) is given, else our own (never replacing a link). ``run(argv) -> (rc, out, err)``.

    Returns ``(tool, {created, present, conflicts})``; raises DevCharError when nvidia-ctk fails.
    The ``gpuops dev-char-symlinks`` command and the guard's install (``install.py``) both call this.
    """
    before = dev_char_symlinks(dev_root, dry_run=True)
    if ctk and not dry_run and dev_root == "/dev":
        rc, out, err = run([ctk, "system", "create-dev-char-symlinks", "--create-all"])
        if rc != 0:
            raise DevCharError(rc, (err or out).strip())
        after = dev_char_symlinks(dev_root, dry_run=True)
        created = sorted(set(after["present"]) - set(before["present"]))
        return "nvidia-ctk", {"created": created, "present": before["present"], "conflicts": after["conflicts"]}
    return "gpuops", dev_char_symlinks(dev_root, dry_run=dry_run)
