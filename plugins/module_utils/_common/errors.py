# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: typed errors.

Module code turns these into ``fail_json`` once, at the edge; the node-side
``gpuops`` command turns them into log lines and exit codes.
"""

from __future__ import annotations

import errno


class GpuopsError(Exception):
    """Base class of every error this collection raises on purpose."""


class ResultError(GpuopsError):
    """An error that carries, beside its message, the result up to where it happened (``result``, None where there is none):
    the module's edge returns it with the message (``_node/edge.py``, ``_cluster/k8s_watch.failure``)."""

    def __init__(self, message, result=None):
        self.result = result
        super().__init__(message)


class ParameterError(GpuopsError):
    """A parameter is missing, malformed or contradicts another one."""

    def __init__(self, field, reason):
        self.field = field
        self.reason = reason
        super().__init__("%s: %s" % (field, reason))


class CheckpointDecodeError(GpuopsError):
    """The checkpoint is not something kubelet would decode."""

    def __init__(self, reason, path):
        self.reason = reason
        self.path = path
        super().__init__(("%s: %s" % (path, reason)) if path else reason)


class UnsafeFileError(GpuopsError):
    """A node file is a symlink, not a regular file, too large, or changed under us."""


class NodeFileError(UnsafeFileError):
    """An operating-system call on a node file failed: names the errno, the operation and the path.

    ``str()`` reads e.g. ``ENOSPC writing backup /var/lib/gpuops/backups/...: No space left on device``.
    """

    def __init__(self, operation, path, error):
        self.operation = operation
        self.path = path
        self.errno = getattr(error, "errno", None)
        name = errno.errorcode.get(self.errno, "error") if self.errno is not None else "error"
        detail = getattr(error, "strerror", None) or str(error)
        super().__init__("%s %s %s: %s" % (name, operation, path, detail))


class ChangedWhileWorkingError(UnsafeFileError):
    """kubelet wrote the checkpoint between our read and our change: nothing was changed or lost."""


class LockBusyError(GpuopsError):
    """Another run holds the lock for this checkpoint."""


class InventoryError(GpuopsError):
    """The GPU inventory could not be read (driver not loaded, NVML or nvidia-smi error)."""

    def __init__(self, reason, backend=None):
        self.reason = reason
        self.backend = backend
        super().__init__(reason)


class BackendUnavailable(GpuopsError):
    """A GPU backend itself is missing (library or binary absent), so another may be tried."""


class KubeletConfigError(GpuopsError):
    """kubelet's settings were found but could not be read."""


class KubeletControlError(ResultError):
    """Stopping or starting kubelet around a repair failed; ``result`` is the reconcile result, if any."""


class KubeletRunningError(ResultError):
    """kubelet runs and may not be stopped (restart_kubelet false): the checkpoint was left alone."""
