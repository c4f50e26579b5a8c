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
* **a kill at any instant leaves the old file or the new one at the checkpoint's path,
  never none.** The order of a change (each step an atomic filesystem operation):

  replace: backup written and fsynced -> new content written and fsynced under a temp
  name -> the checkpoint *claimed* as a hard link and compared with what was read ->
  the new file swapped in (``renameat2(RENAME_EXCHANGE)``, else ``rename``) -> the
  displaced file checked to be the claimed one -> temp names removed.

  remove (the strategy's end state is no file): backup written -> the checkpoint
  renamed to a claim name and compared -> the claim removed.

  If kubelet wrote a newer file in between, that file is kept at the checkpoint's
  path and ChangedWhileWorkingError says nothing was changed or lost;
* ``recover`` runs first on every change, under the lock: a claim left by a killed
  ``remove`` is put back when the checkpoint is missing (the run then redoes the
  change), and every other ``gpuops-*`` temp file of this checkpoint is removed (a
  claim whose bytes are neither the checkpoint's nor a backup's is saved as a backup
  first). kubelet (1.20's ``removeContents``) deletes unknown files in its directory
  when it starts, so a claim must never be the only copy there;
* every ``OSError`` becomes a NodeFileError naming errno, operation and path;
* ``failpoint(step)`` is where a test stops a run at an exact step boundary
  (``GPUOPS_FAILPOINT=<step>`` in the environment: SIGKILL there; see ``STEPS``).

This does its own atomic writes instead of ``AnsibleModule.atomic_move`` because the
node-side ``gpuops`` command uses it without Ansible.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import os
import re
import signal
import stat
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._node import hostroot
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import (
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


class NodeFile:
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
            raise UnsafeFileError("%s is a symlink; refusing to follow it (point path at the real file)" % path) from exc
        raise NodeFileError("opening", path, exc) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError("%s is not a regular file" % path)
        if st.st_size > max_bytes:
            raise UnsafeFileError("%s is %d bytes, over the %d-byte limit (max_bytes); refusing to load it" % (path, st.st_size, max_bytes))
        return NodeFile(path, _read_fd(fd, path, max_bytes), st)
    except OSError as exc:
        raise NodeFileError("reading", path, exc) from exc
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


def unlink_quietly(path):
    """Remove ``path`` where it is; a file already gone (or one that cannot be removed) is left as it is."""
    try:
        os.unlink(path)
    except OSError:
        pass


def lstat_or_none(path):
    """``os.lstat(path)``, or None where nothing is there; any other error is a NodeFileError naming the path."""
    try:
        return os.lstat(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise NodeFileError("checking", path, exc) from exc
        return None


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


def write_file(path, data, mode):
    """Replace ``path`` with ``data`` atomically (temp file beside it, fsync, rename, directory fsync).

    A kill at any instant leaves the old file or the new one; a temp file it leaves behind
    (``.<name>.gpuops-file-*.tmp``) is removed by the next call for the same path. ``path``
    must not be a symlink or a directory. For the guard's own files, not for kubelet's checkpoint
    (which ``replace`` handles with a backup and a claim).
    """
    st = lstat_or_none(path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UnsafeFileError("%s is not a regular file (a symlink or a directory): remove it or change the path" % path)
    _swap_in(path, "file", lambda temp: _write_new(temp, data, mode=mode), "writing")


def write_link(path, target):
    """Make ``path`` a symlink to ``target`` atomically (a new link beside it, renamed over the old one).

    As ``write_file``: a temp link a killed run left (``.<name>.gpuops-link-*.tmp``) is removed by the
    next call for the same path. ``path`` must not exist as anything but a symlink."""
    _swap_in(path, "link", lambda temp: os.symlink(target, temp), "linking")


def _swap_in(path, tag, make, verb):
    """``make(temp)`` the new version under a temp name beside ``path``, rename it over ``path``, fsync the directory.

    First the temps of this ``tag`` that a killed call for the same path left are removed; on failure this call's
    temp is removed and NodeFileError names ``verb`` and ``path``."""
    directory, base = os.path.split(path)
    stale = _temp_pattern(path, (tag,))
    temp = _temp_name(directory, base, tag)
    try:
        for name in _listdir(directory):
            if stale.match(name):
                os.unlink(os.path.join(directory, name))
        make(temp)
        os.rename(temp, path)
        _fsync_dir(directory)
    except OSError as exc:
        unlink_quietly(temp)
        raise NodeFileError(verb, path, exc) from exc


# ---------------------------------------------------------------------------
# One run at a time
# ---------------------------------------------------------------------------

def lock_path(lock_dir, checkpoint_path):
    """The lock file for one checkpoint (its real path on the host, hashed: one lock per file, the same name whether
    the code runs on the host or beside it, hostroot)."""
    real = hostroot.host(os.path.realpath(checkpoint_path))
    digest = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(lock_dir, "checkpoint-%s.lock" % digest)


@contextlib.contextmanager
def run_lock(lock_dir, checkpoint_path, timeout=DEFAULT_LOCK_TIMEOUT, sleep=time.sleep, clock=time.monotonic, lock_file=None):
    """Hold an exclusive ``flock`` for ``checkpoint_path`` (or, with ``lock_file``, the lock of that name in ``lock_dir``,
    ``checkpoint_path`` then naming what it guards); wait at most ``timeout`` seconds for it."""
    path = os.path.join(lock_dir, lock_file) if lock_file else lock_path(lock_dir, checkpoint_path)
    try:
        os.makedirs(lock_dir, 0o755, exist_ok=True)  # two first runs may both create it
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o600)
    except OSError as exc:
        raise NodeFileError("opening lock", path, exc) from exc
    try:
        deadline = clock() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise NodeFileError("locking", path, exc) from exc
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
                ) from exc
            return False
        raise NodeFileError("checking backup_dir", backup_dir, exc) from exc
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
        raise NodeFileError("creating backup_dir", backup_dir, exc) from exc
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
        unlink_quietly(tmp)
        raise NodeFileError("writing backup", target, exc) from exc
    except BaseException:
        unlink_quietly(tmp)
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
        raise NodeFileError("listing backups in", backup_dir, exc) from exc
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
            raise NodeFileError("removing old backup", victim, exc) from exc
        removed.append(victim)
    return removed


# ---------------------------------------------------------------------------
# Failpoints: where a test stops a run at an exact step boundary
# ---------------------------------------------------------------------------

# Every step boundary of a change, in order (the repair adds the kubelet ones).
STEPS = (
    "backup_written",  # the backup is durable; the checkpoint untouched
    "new_written",  # replace: the new content is durable under a temp name
    "claimed",  # the checkpoint is claimed (replace: a hard link; remove: renamed away) and compared
    "swapped",  # replace: the new file is at the checkpoint's path, the old one under a temp name
    "removed",  # remove: the claimed file is unlinked
    "rescue_armed",  # repair: the kubelet rescue timer is armed, kubelet still runs
    "kubelet_stopped",  # repair: kubelet is stopped, the checkpoint untouched
    "reconciled",  # repair: the checkpoint is changed, kubelet still stopped
)
FAILPOINT_ENV = "GPUOPS_FAILPOINT"
# tests in this process set a callable(step); the environment variable serves child processes
STEP_HOOK = None


def failpoint(step):
    """Called at each step boundary: a no-op unless a test asked to stop here."""
    if STEP_HOOK is not None:
        STEP_HOOK(step)
    elif os.environ.get(FAILPOINT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------------------
# Changing the checkpoint without racing kubelet
# ---------------------------------------------------------------------------

_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100
_renameat2 = None


def _exchange(a, b):
    """Atomically swap the names ``a`` and ``b`` (Linux renameat2 RENAME_EXCHANGE, glibc 2.28+).

    Returns False where the C library or the filesystem cannot (the caller then renames).
    """
    global _renameat2  # pylint: disable=global-statement
    if _renameat2 is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)  # the C library python itself runs on
            func = libc.renameat2
            func.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
            func.restype = ctypes.c_int
            _renameat2 = func
        except (AttributeError, OSError, TypeError):
            _renameat2 = False
    if not _renameat2:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)):
        return False
    raise OSError(err, os.strerror(err), a)


def _same_file(st, path):
    try:
        other = os.lstat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (other.st_dev, other.st_ino)


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


def _holds(path, original):
    """Whether ``path`` holds exactly the bytes that were read."""
    try:
        current = read(path, len(original.data))
    except UnsafeFileError:
        return False
    return current is not None and current.data == original.data


def _drop_backup(backup):
    """A backup of bytes that were not changed after all (kubelet wrote first) is not kept."""
    unlink_quietly(backup)


def _claim_link(original, backup):
    """A hard link to the checkpoint under a temp name, checked to hold what was read; returns (claim, its stat).

    The checkpoint's path keeps the file all along. When kubelet wrote a newer file since our
    read, the link is dropped and ChangedWhileWorkingError raised: nothing changed, nothing lost.
    """
    path = original.path
    directory = os.path.dirname(path) or "."
    claim = _temp_name(directory, os.path.basename(path), "claim")
    try:
        os.link(path, claim)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            _drop_backup(backup)
            raise ChangedWhileWorkingError("%s disappeared while we worked (kubelet removed or replaced it); nothing was changed, run again" % path) from exc
        if exc.errno not in _NO_HARDLINKS:
            raise NodeFileError("linking", path, exc) from exc
        return None, None  # no hard links here: compare the path itself, then rename over it
    if not _holds(claim, original):
        unlink_quietly(claim)
        _drop_backup(backup)
        raise ChangedWhileWorkingError("%s changed while we worked (kubelet wrote it): left as kubelet wrote it, nothing lost; run again" % path)
    return claim, os.lstat(claim)


def _put_back(claimed, path):
    """Return a claimed file to its name; when kubelet wrote an even newer one meanwhile, that one wins."""
    try:
        if not _install_noclobber(claimed, path):
            os.unlink(claimed)  # superseded by kubelet's newer write
        _fsync_dir(os.path.dirname(path) or ".")
    except OSError as exc:
        raise NodeFileError("putting back (the file is at %s)" % claimed, path, exc) from exc


def remove(original, backup_dir, now=None):
    """Move ``original.path`` aside: back it up, claim it (rename), remove it. Returns the backup path.

    A kill after the claim leaves no file at the path and the claim beside it, with its
    backup written: ``recover`` puts the claim back and the next run removes it again.
    """
    path = original.path
    backup = write_backup(original, backup_dir, now)
    failpoint("backup_written")
    claimed = _temp_name(os.path.dirname(path) or ".", os.path.basename(path), "claim")
    try:
        os.rename(path, claimed)
    except OSError as exc:
        _drop_backup(backup)
        if exc.errno == errno.ENOENT:
            raise ChangedWhileWorkingError("%s disappeared while we worked (kubelet removed or replaced it); nothing was changed, run again" % path) from exc
        raise NodeFileError("moving aside", path, exc) from exc
    if not _holds(claimed, original):
        _drop_backup(backup)
        _put_back(claimed, path)
        raise ChangedWhileWorkingError("%s changed while we worked (kubelet wrote it): put back, nothing lost; run again" % path)
    failpoint("claimed")
    try:
        os.unlink(claimed)
        _fsync_dir(os.path.dirname(path) or ".")
    except OSError as exc:
        raise NodeFileError("removing", claimed, exc) from exc
    failpoint("removed")
    return backup


def replace(original, data, backup_dir, now=None):
    """Replace ``original.path`` with ``data`` (mode and owner kept). Returns the backup path.

    The checkpoint's path holds the old file or the new one at every instant: the backup and
    the new file are durable before the checkpoint is touched, and the swap is one atomic call.
    """
    path = original.path
    directory = os.path.dirname(path) or "."
    backup = write_backup(original, backup_dir, now)
    failpoint("backup_written")
    new = _temp_name(directory, os.path.basename(path), "new")
    claim = None
    try:
        try:
            _write_new(new, data, original.st)
            ours = os.lstat(new)
        except OSError as exc:
            _drop_backup(backup)
            raise NodeFileError("writing new checkpoint", new, exc) from exc
        failpoint("new_written")
        claim, claimed = _claim_link(original, backup)
        failpoint("claimed")
        try:
            if claim is not None and _exchange(new, path):
                failpoint("swapped")
                # ``new`` now names what was at the path: the claimed file, unless kubelet
                # wrote between the claim and the swap (then its file must go back)
                if not _same_file(claimed, new):
                    _give_back_after_swap(new, path, ours, backup)
            else:
                if claim is None and not _holds(path, original):
                    _drop_backup(backup)
                    raise ChangedWhileWorkingError("%s changed while we worked (kubelet wrote it): left as kubelet wrote it, nothing lost; run again" % path)
                os.rename(new, path)
                failpoint("swapped")
            _fsync_dir(directory)
        except OSError as exc:
            raise NodeFileError("swapping the new checkpoint into place at", path, exc) from exc
    finally:
        unlink_quietly(new)
        if claim is not None:
            unlink_quietly(claim)
    return backup


def _give_back_after_swap(new, path, ours, backup):
    """kubelet wrote between our claim and our swap: its file (now at ``new``) goes back to the path."""
    _exchange(new, path)  # kubelet's file back at the path, ours (normally) at ``new``
    if not _same_file(ours, new):
        # kubelet wrote once more, over ours: that newest file is now at ``new``, swap it back in;
        # the one left at ``new`` is kubelet's older write, which kubelet itself superseded
        _exchange(new, path)
    raise ChangedWhileWorkingError(
        "%s was written by kubelet while we worked: kept kubelet's file, nothing lost (the file we read is saved at %s); run again" % (path, backup)
    )


# ---------------------------------------------------------------------------
# Recovery from a run that was killed
# ---------------------------------------------------------------------------

def _temp_pattern(path, tags):
    return re.compile(r"\A\.%s\.gpuops-(%s)-\d+-[0-9a-f]{8}\.tmp\Z" % (re.escape(os.path.basename(path)), "|".join(tags)))


def _listdir(directory):
    try:
        return sorted(os.listdir(directory))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return []
        raise NodeFileError("listing", directory, exc) from exc


def _in_a_backup(data, path, backup_dir):
    pattern = _backup_pattern(path)
    for name in _listdir(backup_dir):
        if pattern.match(name):
            try:
                kept = read(os.path.join(backup_dir, name), len(data))
            except UnsafeFileError:
                continue
            if kept is not None and kept.data == data:
                return True
    return False


def recover(path, backup_dir, dry_run=False, max_bytes=DEFAULT_MAX_BYTES, now=None):
    """Undo what a killed run left; the caller holds the checkpoint's lock. Returns (steps, restore_from).

    ``steps`` is a list of ``{"action": restored|removed|rescued, "path": ..., "backup_path": ...}``
    (done, or with ``dry_run`` what would be done); ``restore_from`` is the claim that is (or
    would be) put back at ``path``, else None. Only this checkpoint's ``gpuops-*`` temp files
    are touched: the lock guarantees that no run of ours still owns them.
    """
    directory = os.path.dirname(path) or "."
    steps = []
    restore_from = None
    claims, others = [], []
    pattern = _temp_pattern(path, ("claim", "new"))
    for name in _listdir(directory):
        match = pattern.match(name)
        if match:
            (claims if match.group(1) == "claim" else others).append(os.path.join(directory, name))
    try:
        if claims and not os.path.lexists(path):
            # the newest claim is the last state the checkpoint had (a run is killed once)
            claims.sort(key=lambda p: os.lstat(p).st_mtime_ns)
            restore_from = claims.pop()
            steps.append({"action": "restored", "path": restore_from, "backup_path": None})
            if not dry_run:
                _put_back(restore_from, path)
        current = read(path, max_bytes) if not dry_run or restore_from is None else read(restore_from, max_bytes)
        for claim in claims:
            step = {"action": "removed", "path": claim, "backup_path": None}
            kept = read(claim, max_bytes)
            if kept is not None and (current is None or kept.data != current.data) and not _in_a_backup(kept.data, path, backup_dir):
                step["action"] = "rescued"  # bytes found nowhere else: saved before the temp name goes
                if not dry_run:
                    step["backup_path"] = write_backup(NodeFile(path, kept.data, kept.st), backup_dir, now)
            steps.append(step)
            if not dry_run:
                os.unlink(claim)
        for other in others:
            steps.append({"action": "removed", "path": other, "backup_path": None})
            if not dry_run:
                os.unlink(other)
        backup_temps = _temp_pattern(path, ("backup",))
        for name in _listdir(backup_dir):
            if backup_temps.match(name):
                steps.append({"action": "removed", "path": os.path.join(backup_dir, name), "backup_path": None})
                if not dry_run:
                    os.unlink(os.path.join(backup_dir, name))
        if steps and not dry_run:
            _fsync_dir(directory)
    except OSError as exc:
        raise NodeFileError("recovering leftovers of a killed run beside", path, exc) from exc
    return steps, restore_from
