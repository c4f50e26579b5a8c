# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: careful reads and writes of node files.

* reads refuse symlinks (``O_NOFOLLOW``), non-regular files and files over a size limit;
* writes go to a temp file in the target directory, are fsynced, take the
  original mode and owner, and are renamed into place (then the directory is fsynced);
* a backup is written (exclusive create, fsync) before anything is replaced or removed;
* a file that changed since it was read is never replaced.

This does its own atomic write instead of ``AnsibleModule.atomic_move`` because the
node-side ``gpuops`` command uses it without Ansible.
"""

from __future__ import annotations

import errno
import os
import stat
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._errors import UnsafeFileError

DEFAULT_MAX_BYTES = 16 * 1024 * 1024


class NodeFile(object):
    """Bytes of a regular file plus the stat taken from the same open descriptor."""

    __slots__ = ("path", "data", "st")

    def __init__(self, path, data, st):
        self.path = path
        self.data = data
        self.st = st


def read(path, max_bytes=DEFAULT_MAX_BYTES):
    """Return a NodeFile, or None when the file does not exist."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        if exc.errno == errno.ELOOP:
            raise UnsafeFileError("%s is a symlink; refusing to follow it (point path at the real file)" % path)
        raise UnsafeFileError("cannot open %s: %s" % (path, exc.strerror))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError("%s is not a regular file" % path)
        if st.st_size > max_bytes:
            raise UnsafeFileError("%s is %d bytes, over the %d-byte limit (max_bytes); refusing to load it" % (path, st.st_size, max_bytes))
        chunks = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise UnsafeFileError("%s grew over the %d-byte limit while being read" % (path, max_bytes))
        return NodeFile(path, data, st)
    finally:
        os.close(fd)


def _fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_fd(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    os.fsync(fd)


def _apply_owner(fd, st):
    os.fchmod(fd, stat.S_IMODE(st.st_mode))
    try:
        os.fchown(fd, st.st_uid, st.st_gid)
    except OSError as exc:
        if exc.errno != errno.EPERM or (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
            raise


def ensure_unchanged(original):
    """Raise UnsafeFileError when ``original.path`` no longer is the file that was read."""
    try:
        st = os.lstat(original.path)
    except OSError as exc:
        raise UnsafeFileError("%s changed while reconciling (%s); nothing was written, run again" % (original.path, exc.strerror))
    old = original.st
    if (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns) != (old.st_ino, old.st_dev, old.st_size, old.st_mtime_ns):
        raise UnsafeFileError("%s changed while reconciling (kubelet wrote it?); nothing was written, run again" % original.path)


def backup_name(path, now=None):
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    frac = int((now % 1) * 1000000)
    return "%s.%s.%06dZ" % (os.path.basename(path), stamp, frac)


def write_backup(original, backup_dir, now=None):
    """Copy the bytes that were read into ``backup_dir`` (created 0700); returns the backup path."""
    if not os.path.isdir(backup_dir):
        os.makedirs(backup_dir, 0o700)
    base = os.path.join(backup_dir, backup_name(original.path, now))
    for attempt in range(100):
        target = base if attempt == 0 else "%s.%d" % (base, attempt)
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                continue
            raise UnsafeFileError("cannot write backup %s: %s" % (target, exc.strerror))
        try:
            _write_fd(fd, original.data)
            _apply_owner(fd, original.st)
        finally:
            os.close(fd)
        _fsync_dir(backup_dir)
        return target
    raise UnsafeFileError("could not find a free backup name for %s in %s" % (original.path, backup_dir))


def atomic_replace(original, data):
    """Replace ``original.path`` with ``data``: temp file in the same directory, fsync, rename."""
    ensure_unchanged(original)
    directory = os.path.dirname(original.path) or "."
    tmp = os.path.join(directory, ".%s.gpuops-%d.tmp" % (os.path.basename(original.path), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        try:
            _write_fd(fd, data)
            _apply_owner(fd, original.st)
        finally:
            os.close(fd)
        ensure_unchanged(original)
        os.rename(tmp, original.path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)


def remove(original):
    """Remove ``original.path`` (the caller has written a backup first)."""
    ensure_unchanged(original)
    os.unlink(original.path)
    _fsync_dir(os.path.dirname(original.path) or ".")
