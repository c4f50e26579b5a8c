# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin for gpuops.fleet.node_pods: the host's gpuops.fleet.k8s_node connection deletes
this run's node pod (kubectl with the host's own auth options); nothing runs on the node."""

from __future__ import annotations

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        unknown = sorted(set(args) - {"state"})
        if unknown or args.get("state", "absent") != "absent":
            return dict(result, failed=True, msg="gpuops.fleet.node_pods takes only state: absent (got %s)" % (unknown or args.get("state")))
        remove = getattr(self._connection, "remove_node_pod", None)
        if remove is None:
            return dict(result, changed=False, pod=None, msg="connection %s makes no node pod: nothing to delete" % self._connection.transport)
        try:
            found = remove(check_mode=self._task.check_mode)
        except AnsibleError as exc:
            return dict(result, failed=True, msg=str(exc))
        return dict(result, **found)
