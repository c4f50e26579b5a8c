# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the node modules' one error edge.

Every node module runs its work through :func:`run`: a typed error (``GpuopsError``) becomes one
``fail_json``, the same way in each module, as kubernetes.core turns its errors into one
``fail_from_exception``. The failure carries ``msg``, what the module says it had in hand (``context``:
e.g. ``checkpoint_path``, the GPUs it read), and what the error says was done before it failed (an
error's ``result``: a kubelet restart, an install's steps), every host path written as the host's own
(beside the host, ``GPUOPS_HOST_ROOT/...`` reads ``/...``). Any other exception is a defect and is left
to Ansible's own traceback report.
"""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError
from ansible_collections.gpuops.fleet.plugins.module_utils._node import hostroot


def failure(exc, context=None):
    """The ``fail_json`` arguments for ``exc``: ``context``, then the error's own ``result`` over it, then ``msg``.

    A ``diff`` in the error's result is dropped: a failed run shows no diff of a change it did not make."""
    failed = dict(context or {})
    failed.update(getattr(exc, "result", None) or {})
    failed.pop("diff", None)
    failed["msg"] = str(exc)
    return hostroot.to_host(failed)


def run(module, work, context=None):
    """``work()``'s value; a ``GpuopsError`` from it fails the module once, through :func:`failure`.

    ``context`` is read at the moment of the failure, so ``work`` may fill it in as it goes."""
    try:
        return work()
    except GpuopsError as exc:
        module.fail_json(**failure(exc, context))
