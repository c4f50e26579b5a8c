# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The checkpoint file options (module_utils/_node/options.py CHECKPOINT_ARGS)."""

    DOCUMENTATION = r"""
options:
  checkpoint_path:
    description:
      - Absolute path of kubelet's device-manager checkpoint. Symlinks are refused.
      - The same name as the C(checkpoint_path) key of the boot guard's C(gpuops.json).
    type: path
    default: /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
    aliases: [path]
  max_bytes:
    description: Refuse to read a checkpoint larger than this many bytes.
    type: int
    default: 16777216
"""
