# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """Attribute documentation shared by the modules of gpuops.fleet."""

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in C(check_mode) and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in C(check_mode)), when in diff mode.
  idempotent:
    description:
      - When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
"""

    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details:
      - This action does not modify state.
  diff_mode:
    support: N/A
    details:
      - This action does not modify state.
  idempotent:
    support: full
"""

    FACTS = r"""
options: {}
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
"""

    GPU_BACKEND = r"""
options:
  backend:
    description:
      - How to read the GPUs.
      - V(nvml) uses the C(nvidia-ml-py) Python bindings in-process (C(libnvidia-ml.so.1) from the driver).
      - V(nvidia-smi) runs the C(nvidia-smi) CLI.
      - V(auto) tries NVML and falls back to C(nvidia-smi) only when the bindings or the library are absent;
        an NVML error such as "driver not loaded" is reported, not papered over by the fallback.
    type: str
    choices: [auto, nvml, nvidia-smi]
    default: auto
  driver_root:
    description:
      - Root of a containerized driver, e.g. C(/run/nvidia/driver) where the NVIDIA GPU Operator mounts its driver
        container. With the V(nvml) backend (or V(auto)) C(libnvidia-ml.so.1) is loaded from there (C(usr/lib/x86_64-linux-gnu),
        C(usr/lib64), C(usr/lib/aarch64-linux-gnu), C(lib64) or C(usr/lib) under it).
      - Not set (or empty) means the host's own driver.
    type: path
    version_added: 0.2.0
"""
