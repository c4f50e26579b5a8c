# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: which filesystem holds a path, from ``/proc/self/mountinfo``.

The install asks before it writes: a read-only mount (an image-based node's ``/`` or ``/usr``)
would fail half-way, and a tmpfs (Container-Optimized OS's stateless ``/etc``, see
https://cloud.google.com/container-optimized-os/docs/concepts/disks-and-filesystem) would take the
guard away at the next boot, the one moment it is for. In a pod, a hostPath volume is a bind mount
whose line carries the host filesystem's type and options, so the same answer holds there.

Format (proc(5), "/proc/pid/mountinfo"): ``ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] -
FSTYPE SOURCE SUPEROPTIONS``; spaces, tabs, newlines and backslashes in paths are octal escapes.
"""

from __future__ import annotations

import os
import re

MOUNTINFO = "/proc/self/mountinfo"
# filesystems whose contents end with the boot
VOLATILE = frozenset(("tmpfs", "ramfs"))
_ESCAPE = re.compile(br"\\([0-7]{3})")


class Mount:
    """One mountinfo line: where, what filesystem, read-only or not."""

    __slots__ = ("point", "fstype", "source", "read_only")

    def __init__(self, point, fstype, source, read_only):
        self.point, self.fstype, self.source, self.read_only = point, fstype, source, read_only

    @property
    def volatile(self):
        return self.fstype in VOLATILE

    def describe(self):
        return "%s (%s%s, mounted at %s)" % (self.source, self.fstype, ", read-only" if self.read_only else "", self.point)


def _unescape(raw):
    """A mountinfo field (bytes) as a path: octal escapes undone on the bytes, then decoded as the OS decodes paths
    (``os.fsdecode``: a name that is not UTF-8 keeps its bytes as surrogates, as ``os.listdir`` and ``os.path`` do)."""
    return os.fsdecode(_ESCAPE.sub(lambda m: bytes((int(m.group(1), 8) & 0xFF,)), raw))


def parse(data):
    """The mounts of a mountinfo text (bytes, or str), in its order (later lines stack on earlier ones).

    Mount points are bytes: a name that is not UTF-8 is read, never refused."""
    if not isinstance(data, bytes):
        data = os.fsencode(data)
    found = []
    for line in data.splitlines():
        left, sep, right = line.partition(b" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or len(tail) < 3:
            continue  # not a mount line: ignored rather than guessed at
        options = set(fields[5].split(b",")) | set(tail[2].split(b","))
        found.append(Mount(_unescape(fields[4]), os.fsdecode(tail[0]), _unescape(tail[1]), b"ro" in options))
    return found


def _inside(path, point):
    return point == "/" or path == point or path.startswith(point.rstrip("/") + "/")


def holding(path, mounts):
    """The mount that holds ``path`` (or, where it does not exist yet, its nearest existing parent).

    The longest mount point that contains it; of stacked mounts on one point the last one."""
    path = os.path.abspath(path)
    while not os.path.lexists(path) and path != "/":
        path = os.path.dirname(path)
    path = os.path.realpath(path)
    best = None
    for mount in mounts:
        if _inside(path, mount.point) and (best is None or len(mount.point) >= len(best.point)):
            best = mount
    return best


def read(mountinfo=MOUNTINFO):
    """The mounts this process sees; an empty list where the file cannot be read (no /proc)."""
    try:
        with open(mountinfo, "rb") as handle:
            return parse(handle.read())
    except OSError:
        return []
