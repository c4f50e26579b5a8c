# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: careful reads and writes of node files.

* reads refuse symlinks (``O_NOFOLLOW``), non-regular files and files over a size limit;
* one run at a time per checkpoint: ``run_lock`` takes an ``flock`` under ``/run/gpuops``
  and waits a bounded time for another run;
* a backup is written like the checkpoint itself: a temp name in the backup
  directory, fsync, rename, directory fsync, mode 0600; on any failure the temp
  file is removed and nothing with a backup's name exists; old backups are rotated;
* the change itself first *claims* the checkpoint: an atomic rename to a temp name
  in its own directory, then a byte comparison with what was read. If kubelet wrote
  a newer file in between, that file is put back (never over an even newer one)
  and ChangedWhileWorkingError says nothing was changed or lost. Only then is the
  backup written and the file removed or the new content linked into place
  (``link`` does not replace a file kubelet may have written meanwhile);
* every ``OSError`` becomes a NodeFileError naming errno, operation and path.

This does its own atomic writes instead of ``AnsibleModule.atomic_move`` because the
node-side ``gpuops`` command uses it without Ansible.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import stat
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._errors import (
    ChangedWhileWorkingError,
    LockBusyError,
    NodeFileError,
    UnsafeFileError,
)

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_LOCK_DIR = "/run/gpuops"
DEFAULT_LOCK_TIMEOUT = 30
DEFAULT_BACKUP_KEEP = 10

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# link() is not offered by every filesystem: fall back to a checked rename there
_NO_HARDLINKS = (errno.EPERM, errno.EXDEV, errno.EMLINK, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP), errno.EOPNOTSUPP)


class NodeFile(object):
    """Bytes of a regular file plus the stat taken from the same open descriptor."""

    __slots__ = ("path", "data", "st")

    def __init__(self, path, data, st):
        self.path = path
        self.data = data
        self.st = st


def _read_fd(fd, path, limit):
    chunks = []
    remaining = limit + 1
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    data = b"".join(chunks)
    if len(data) > limit:
        raise UnsafeFileError("%s grew over the %d-byte limit while being read" % (path, limit))
    return data


def read(path, max_bytes=DEFAULT_MAX_BYTES):
    """Return a NodeFile, or None when the file does not exist."""
    flags = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        if exc.errno == errno.ELOOP:
            raise UnsafeFileError("%s is a symlink; refusing to follow it (point path at the real file)" % path)
        raise NodeFileError("opening", path, exc)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError("%s is not a regular file" % path)
        if st.st_size > max_bytes:
            raise UnsafeFileError("%s is %d bytes, over the %d-byte limit (max_bytes); refusing to load it" % (path, st.st_size, max_bytes))
        return NodeFile(path, _read_fd(fd, path, max_bytes), st)
    except OSError as exc:
        raise NodeFileError("reading", path, exc)
    finally:
        os.close(fd)


def _fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
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


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _temp_name(directory, base, tag):
    return os.path.join(directory, ".%s.gpuops-%s-%d-%s.tmp" % (base, tag, os.getpid(), os.urandom(4).hex()))


def _write_new(path, data, st=None, mode=0o600):
    """Create ``path`` exclusively with ``data`` (fsynced); mode and owner of ``st`` when given."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    try:
        _write_fd(fd, data)
        if st is not None:
            _apply_owner(fd, st)
        else:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------
# One run at a time
# ---------------------------------------------------------------------------

def lock_path(lock_dir, checkpoint_path):
    """The lock file for one checkpoint (its real path, hashed: one lock per file)."""
    digest = hashlib.sha256(os.path.realpath(checkpoint_path).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(lock_dir, "checkpoint-%s.lock" % digest)


@contextlib.contextmanager
def run_lock(lock_dir, checkpoint_path, timeout=DEFAULT_LOCK_TIMEOUT, sleep=time.sleep, clock=time.monotonic):
    """Hold an exclusive ``flock`` for ``checkpoint_path``; wait at most ``timeout`` seconds for it."""
    path = lock_path(lock_dir, checkpoint_path)
    try:
        os.makedirs(lock_dir, 0o755, exist_ok=True)  # two first runs may both create it
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o600)
    except OSError as exc:
        raise NodeFileError("opening lock", path, exc)
    try:
        deadline = clock() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise NodeFileError("locking", path, exc)
            if clock() >= deadline:
                raise LockBusyError(
                    "another run holds the lock %s for %s (waited %ds); nothing was changed, run again later" % (path, checkpoint_path, timeout)
                )
            sleep(0.05)
        yield path
    finally:
        os.close(fd)  # closing the descriptor releases the flock


# ---------------------------------------------------------------------------
# Backups
# ---------------------------------------------------------------------------

def backup_name(path, now=None):
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    frac = int((now % 1) * 1000000)
    return "%s.%s.%06dZ" % (os.path.basename(path), stamp, frac)


def check_backup_dir(backup_dir):
    """Refuse a backup directory that is a dangling symlink, not a directory, or writable by others.

    Returns True when it exists, False when it is still to be created.
    """
    try:
        st = os.stat(backup_dir)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            if os.path.islink(backup_dir):
                raise UnsafeFileError(
                    "backup_dir %s is a dangling symlink (to %s); point backup_dir at a real directory" % (backup_dir, os.readlink(backup_dir))
                )
            return False
        raise NodeFileError("checking backup_dir", backup_dir, exc)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeFileError("backup_dir %s is not a directory" % backup_dir)
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        # backups hold AllocResp environment variables: nobody else may add or swap files there
        raise UnsafeFileError(
            "backup_dir %s is group- or world-writable (mode %04o); run chmod 0700 on it, or choose another backup_dir" % (backup_dir, mode)
        )
    return True


def write_backup(original, backup_dir, now=None):
    """Save the bytes that were read into ``backup_dir`` (created 0700) as a 0600 file; returns its path.

    Temp file, fsync, rename, directory fsync: either a whole backup exists under a
    backup's name, or nothing does (the temp file is removed on any failure).
    """
    base = os.path.join(backup_dir, backup_name(original.path, now))
    target = base
    try:
        if not check_backup_dir(backup_dir):
            os.makedirs(backup_dir, 0o700)
    except OSError as exc:
        raise NodeFileError("creating backup_dir", backup_dir, exc)
    tmp = _temp_name(backup_dir, os.path.basename(original.path), "backup")
    try:
        _write_new(tmp, original.data, mode=0o600)
        for attempt in range(100):
            target = base if attempt == 0 else "%s.%d" % (base, attempt)
            if not os.path.lexists(target):
                break
        else:
            raise UnsafeFileError("could not find a free backup name for %s in %s" % (original.path, backup_dir))
        os.rename(tmp, target)
        _fsync_dir(backup_dir)
    except OSError as exc:
        _unlink_quietly(tmp)
        raise NodeFileError("writing backup", target, exc)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return target


def _backup_pattern(path):
    return re.compile(r"\A%s\.(\d{8}T\d{6}\.\d{6})Z(?:\.(\d+))?\Z" % re.escape(os.path.basename(path)))


def rotate_backups(backup_dir, path, keep):
    """Remove all but the newest ``keep`` backups of ``path`` in ``backup_dir`` (0 keeps all); returns removed paths."""
    if keep <= 0:
        return []
    pattern = _backup_pattern(path)
    try:
        names = os.listdir(backup_dir)
    except OSError as exc:
        raise NodeFileError("listing backups in", backup_dir, exc)
    found = []
    for name in names:
        match = pattern.match(name)
        if match:
            found.append((match.group(1), int(match.group(2) or 0), name))
    found.sort()
    removed = []
    for dummy, dummy2, name in found[:-keep]:
        victim = os.path.join(backup_dir, name)
        try:
            os.unlink(victim)
        except OSError as exc:
            raise NodeFileError("removing old backup", victim, exc)
        removed.append(victim)
    return removed


# ---------------------------------------------------------------------------
# Changing the checkpoint without racing kubelet
# ---------------------------------------------------------------------------

def _install_noclobber(src, dst):
    """Give ``src`` the name ``dst`` unless ``dst`` exists; True when installed."""
    try:
        os.link(src, dst)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            return False
        if exc.errno not in _NO_HARDLINKS:
            raise
        if os.path.lexists(dst):
            return False
        os.rename(src, dst)
        return True
    os.unlink(src)
    return True


def _claim(original):
    """Atomically take the checkpoint away under a temp name and make sure it is the file we read.

    Returns the temp path. When kubelet wrote a newer file since our read, that file
    is put back and ChangedWhileWorkingError is raised: nothing changed, nothing lost.
    """
    path = original.path
    directory = os.path.dirname(path) or "."
    claimed = _temp_name(directory, os.path.basename(path), "claim")
    try:
        os.rename(path, claimed)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise ChangedWhileWorkingError("%s disappeared while we worked (kubelet removed or replaced it); nothing was changed, run again" % path)
        raise NodeFileError("moving aside", path, exc)
    try:
        current = read(claimed, len(original.data))
        same = current is not None and current.data == original.data
    except UnsafeFileError:
        same = False
    if not same:
        _put_back(claimed, path)
        raise ChangedWhileWorkingError("%s changed while we worked (kubelet wrote it): put back, nothing lost; run again" % path)
    return claimed


def _put_back(claimed, path):
    """Return a claimed file to its name; when kubelet wrote an even newer one meanwhile, that one wins."""
    try:
        if not _install_noclobber(claimed, path):
            os.unlink(claimed)  # superseded by kubelet's newer write
        _fsync_dir(os.path.dirname(path) or ".")
    except OSError as exc:
        raise NodeFileError("putting back (the file is at %s)" % claimed, path, exc)


def _backup_or_put_back(original, claimed, backup_dir, now):
    try:
        return write_backup(original, backup_dir, now)
    except BaseException:
        _put_back(claimed, original.path)
        raise


def remove(original, backup_dir, now=None):
    """Move ``original.path`` aside: claim it, back it up, remove it. Returns the backup path."""
    claimed = _claim(original)
    backup = _backup_or_put_back(original, claimed, backup_dir, now)
    try:
        os.unlink(claimed)
        _fsync_dir(os.path.dirname(original.path) or ".")
    except OSError as exc:
        raise NodeFileError("removing", claimed, exc)
    return backup


def replace(original, data, backup_dir, now=None):
    """Replace ``original.path`` with ``data`` (mode and owner kept). Returns the backup path.

    The new file is written and fsynced first, so a failure there changes nothing.
    """
    directory = os.path.dirname(original.path) or "."
    new = _temp_name(directory, os.path.basename(original.path), "new")
    try:
        _write_new(new, data, original.st)
    except OSError as exc:
        _unlink_quietly(new)
        raise NodeFileError("writing new checkpoint", new, exc)
    try:
        claimed = _claim(original)
        backup = _backup_or_put_back(original, claimed, backup_dir, now)
        try:
            installed = _install_noclobber(new, original.path)
        except OSError as exc:
            _put_back(claimed, original.path)
            raise NodeFileError("renaming the new checkpoint into place at", original.path, exc)
        try:
            os.unlink(claimed)
            _fsync_dir(directory)
        except OSError as exc:
            raise NodeFileError("removing", claimed, exc)
    finally:
        _unlink_quietly(new)
    if not installed:
        raise ChangedWhileWorkingError(
            "%s was written by kubelet while we worked: kept kubelet's file, nothing lost (the file we read is saved at %s); run again"
            % (original.path, backup)
        )
    return backup
