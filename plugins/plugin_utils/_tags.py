# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection (controller side): whether a tagged task runs under the run's tags."""

from __future__ import annotations


def tags_run(tags, run_tags=None, skip_tags=None):
    """Whether a task tagged ``tags`` (none of them ``always`` or ``never``) runs under the run's ``--tags`` and
    ``--skip-tags`` (``ansible_run_tags``, ``ansible_skip_tags``)."""
    run, skip, tags = set(run_tags or ("all",)), set(skip_tags or ()), set(tags)
    if skip & (tags | {"tagged", "all"}):
        return False
    return bool(run & (tags | {"tagged", "all"}))
