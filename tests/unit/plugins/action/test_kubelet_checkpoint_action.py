# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubelet_checkpoint's action plugin: ``settings`` merged under the task's own options, bad settings named."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.action.kubelet_checkpoint import merged_args


def test_settings_go_under_the_tasks_own_options():
    args, error = merged_args({"settings": {"strategy": "prune", "kubelet_unit": "kubelet.service", "backup_keep": 3},
                               "kubelet_unit": "", "gpus": {"available": True}})
    assert error is None
    assert args == {"strategy": "prune", "kubelet_unit": "", "backup_keep": 3, "gpus": {"available": True}}


def test_without_settings_the_arguments_are_the_tasks():
    assert merged_args({"strategy": "remove"}) == ({"strategy": "remove"}, None)
    assert merged_args({"settings": None, "strategy": "remove"}) == ({"strategy": "remove"}, None)


@pytest.mark.parametrize("settings, named", [
    ("strategy=prune", "settings: give a mapping"),
    (["strategy"], "settings: give a mapping"),
    ({"_ansible_check_mode": False}, "'_ansible_check_mode' is not an option"),
    ({"settings": {}}, "'settings' is not an option"),
    ({"": 1}, "'' is not an option"),
])
def test_bad_settings_are_refused_by_name(settings, named):
    args, error = merged_args({"settings": settings})
    assert args is None and named in error, error
