# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint_guard role's data path: role variables (strings allowed) -> typed gpuops.json and unit values."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.filter.checkpoint_guard import checkpoint_guard_settings

BASE = {
    "checkpoint_path": "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint",
    "backup_dir": "/var/lib/gpuops/backups",
    "backup_keep": 10,
    "lock_dir": "/run/gpuops",
    "lock_timeout": 30,
    "strategy": "remove",
    "on_corrupt": "report",
    "resources": ["nvidia.com/gpu"],
    "backend": "auto",
    "nvidia_smi": "",
    "max_bytes": 16777216,
    "driver_wait_seconds": 30,
    "restart_kubelet": True,
    "kubelet_unit": "kubelet.service",
    "config_path": "/etc/gpuops/gpuops.json",
    "bin": "/usr/local/bin/gpuops",
    "python": "/usr/bin/python3",
    "lib_dir": "/usr/local/lib/gpuops",
    "after_units": ["nvidia-persistenced.service"],
    "timeout_seconds": 120,
    "environment": {},
}


def settings(**kw):
    raw = dict(BASE)
    raw.update(kw)
    return checkpoint_guard_settings(raw)


def test_strings_from_extra_vars_or_old_ansible_core_become_typed_values():
    # ansible-core 2.16-2.18 hand "{{ x | int }}" over as "16777216": the file must still say 16777216
    out = settings(max_bytes="16777216", driver_wait_seconds="0", backup_keep="3", lock_timeout="5", restart_kubelet="false", timeout_seconds="90")
    config = out["config"]
    assert (config["max_bytes"], config["driver_wait_seconds"], config["backup_keep"], config["lock_timeout"]) == (16777216, 0, 3, 5)
    assert config["restart_kubelet"] is False and config["nvidia_smi"] is None
    assert out["unit"]["timeout_seconds"] == 90
    assert "options" not in config


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"environment": {"A": "x\nExecStartPre=/bin/sh -c id"}}, "checkpoint_guard_environment.A: contains a newline"),
        ({"environment": {"A\nExecStartPre": "x"}}, "is not an environment variable name"),
        ({"environment": {"1A": "x"}}, "is not an environment variable name"),
        ({"environment": {"A": "x\x1b"}}, "control character"),
        ({"environment": {"A": ["x"]}}, "expected a string value"),
        ({"environment": "A=1"}, "checkpoint_guard_environment: expected a mapping"),
        ({"kubelet_unit": "--help"}, "checkpoint_guard_kubelet_unit: '--help' is not a unit name"),
        ({"after_units": ["x.service\nExecStartPre=/bin/sh"]}, "checkpoint_guard_after_units"),
        ({"bin": "/usr/local/bin/gpuops --config /tmp/evil"}, "checkpoint_guard_bin"),
        ({"lib_dir": '/x"); import os; os.system("id'}, "checkpoint_guard_lib_dir"),
        ({"checkpoint_path": "/var/lib/kubelet/%h/cp"}, "checkpoint_guard_checkpoint_path"),
        ({"max_bytes": "lots"}, "checkpoint_guard_max_bytes: expected a whole number, got 'lots'"),
        ({"restart_kubelet": "maybe"}, "checkpoint_guard_restart_kubelet: expected true or false"),
        ({"driver_wait_seconds": "601"}, "checkpoint_guard_driver_wait_seconds: must be a whole number of seconds from 0 to 600"),
        ({"strategy": "nuke"}, "checkpoint_guard_strategy: 'nuke' is not one of auto, remove, prune"),
        ({"timeout_seconds": 0}, "checkpoint_guard_timeout_seconds"),
    ],
)
def test_what_could_break_the_root_unit_or_the_config_is_refused_by_name(kw, message):
    with pytest.raises(AnsibleFilterError) as err:
        settings(**kw)
    assert message in str(err.value)


def test_environment_is_quoted_for_systemd():
    lines = settings(environment={"PATH": "/a:/b", "X": 'say "hi" \\ 100%', "N": 5})["unit"]["environment"]
    assert lines == ['Environment="N=5"', 'Environment="PATH=/a:/b"', 'Environment="X=say \\"hi\\" \\\\ 100%%"']
