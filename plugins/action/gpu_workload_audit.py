# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin for gpuops.fleet.gpu_workload_audit: ansible-core's normal action (how it runs any module), unless the task's
host returned facts named as variables the controller acts on (plugin_utils/_node_trust.py): then nothing runs and the task
fails."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.plugin_utils._host_facts_action import ControllerAction


class ActionModule(ControllerAction):
    pass
