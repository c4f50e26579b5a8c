# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint_guard role's data path: role variables (strings allowed) -> typed gpuops.json and unit values."""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.filter.checkpoint_guard import (
    checkpoint_guard_daemonset, checkpoint_guard_files, checkpoint_guard_install_spec, checkpoint_guard_layout, checkpoint_guard_settings)

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


def test_the_files_are_built_from_the_checked_settings():
    built = checkpoint_guard_files(settings(environment={"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64"}), root="/srv/node",
                                   unit_dir="/etc/systemd/system", hardening="yes", late_check="false")
    by_name = dict((f["path"], f) for f in built)
    assert sorted(by_name) == ["/srv/node/etc/gpuops/gpuops.json", "/srv/node/etc/systemd/system/gpuops.service", "/srv/node/usr/local/bin/gpuops"]
    assert [f["unit"] for f in built] == [False, False, True] and [f["mode"] for f in built] == ["0755", "0644", "0644"]
    wrapper = by_name["/srv/node/usr/local/bin/gpuops"]["content"]
    assert wrapper.startswith("#!/usr/bin/python3\n")
    compile(wrapper, "gpuops", "exec")  # valid Python, its paths repr() literals under the sysroot
    assert "sys.path.insert(0, '/srv/node/usr/local/lib/gpuops/gpuops.pyz')" in wrapper
    assert json.loads(by_name["/srv/node/etc/gpuops/gpuops.json"]["content"])["strategy"] == "remove"
    unit = by_name["/srv/node/etc/systemd/system/gpuops.service"]["content"].splitlines()
    # the unit names node paths, not the sysroot's
    for line in ("ExecStart=/usr/local/bin/gpuops check --config /etc/gpuops/gpuops.json", "Before=kubelet.service",
                 "After=local-fs.target nvidia-persistenced.service", "TimeoutStartSec=120", "ProtectSystem=full",
                 'Environment="LD_LIBRARY_PATH=/usr/local/nvidia/lib64"', "WantedBy=multi-user.target kubelet.service",
                 "RequiresMountsFor=/var/lib/kubelet/device-plugins /var/lib/gpuops/backups"):
        assert line in unit, line
    assert not [line for line in unit if line.startswith(("Requires=", "BindsTo="))]


def test_the_late_unit_comes_with_the_late_check_and_hardening_can_be_off():
    built = checkpoint_guard_files(settings(), hardening=False, late_check=True)
    assert [f["path"] for f in built][-1] == "/etc/systemd/system/gpuops-late.service"
    late = built[-1]["content"].splitlines()
    assert "ExecStart=/usr/local/bin/gpuops check --late --config /etc/gpuops/gpuops.json" in late and "Type=exec" in late
    assert not [f for f in built if "NoNewPrivileges=yes" in f["content"]]


@pytest.mark.parametrize("kw, message", [
    ({"unit_dir": "etc/systemd"}, "checkpoint_guard_unit_dir: 'etc/systemd' must be an absolute path"),
    ({"unit_dir": "/etc/systemd/system\nExecStartPre=/bin/sh"}, "checkpoint_guard_unit_dir"),
    ({"root": "/srv/my node"}, "checkpoint_guard_sysroot"),
    ({"hardening": "maybe"}, "checkpoint_guard_hardening: expected true or false"),
    ({"late_check": "sometimes"}, "checkpoint_guard_late_check: expected true or false"),
])
def test_a_bad_location_or_switch_is_refused_by_name(kw, message):
    with pytest.raises(AnsibleFilterError, match=message.replace("\n", ".")):
        checkpoint_guard_files(settings(), **kw)
    with pytest.raises(AnsibleFilterError, match="expected the result of gpuops.fleet._checkpoint_guard_settings"):
        checkpoint_guard_files({"config": {}})


OLDER = "ansible_collections.gpuops.fleet.plugins.module_utils._node.guard"


def test_the_layout_names_each_directory_s_variable_and_what_an_older_install_left():
    layout = checkpoint_guard_layout(settings(), root="/srv/node1", unit_dir="/etc/systemd/system/")
    assert layout["directories"] == [
        {"path": "/srv/node1/usr/local/lib/gpuops", "mode": "0755", "name": "checkpoint_guard_lib_dir"},
        {"path": "/srv/node1/usr/local/bin", "mode": "0755", "name": "checkpoint_guard_bin"},
        {"path": "/srv/node1/etc/gpuops", "mode": "0755", "name": "checkpoint_guard_config_path"},
        {"path": "/srv/node1/etc/systemd/system", "mode": "0755", "name": "checkpoint_guard_unit_dir"},
        {"path": "/srv/node1/var/lib/gpuops/backups", "mode": "0700", "name": "checkpoint_guard_backup_dir"},
    ]
    assert layout["absent"] == [
        {"path": "/srv/node1/usr/local/lib/gpuops/ansible_collections", "only": "gpuops/fleet"},
        {"path": "/srv/node1/usr/local/lib/gpuops/gpuops_main.py", "contains": OLDER},
        {"path": "/srv/node1/etc/systemd/system/gpuops-late.service", "unit": "gpuops-late.service"},
    ]
    assert checkpoint_guard_layout(settings(), late_check="true")["absent"] == [
        {"path": "/usr/local/lib/gpuops/ansible_collections", "only": "gpuops/fleet"}, {"path": "/usr/local/lib/gpuops/gpuops_main.py", "contains": OLDER}]
    with pytest.raises(AnsibleFilterError, match="checkpoint_guard_late_check: expected true or false"):
        checkpoint_guard_layout(settings(), late_check="sometimes")
    with pytest.raises(AnsibleFilterError, match="checkpoint_guard_unit_dir"):
        checkpoint_guard_layout(settings(), unit_dir="relative/dir")


def test_the_install_spec_is_the_layout_files_code_selftest_and_units_from_one_settings_check():
    """What the role's vars/main.yml built from four filters and a dozen templates, in one evaluation (issue 36)."""
    raw = dict(BASE, environment={"LD_LIBRARY_PATH": "/opt/fakes"}, backup_keep="3")
    spec = checkpoint_guard_install_spec(raw, root="/srv/node1//", unit_dir="/etc/systemd/system", hardening="true", late_check="yes",
                                         require_persistent="false", manage_systemd=False, enabled="true")
    checked = checkpoint_guard_settings(raw)
    layout = checkpoint_guard_layout(checked, root="/srv/node1", late_check=True)
    assert spec == {
        "directories": layout["directories"],
        "require_persistent": False,
        "code": {"path": "/srv/node1/usr/local/lib/gpuops/gpuops.pyz"},
        "files": checkpoint_guard_files(checked, root="/srv/node1", hardening=True, late_check=True),
        "absent": layout["absent"],
        "selftest": {"argv": ["/srv/node1/usr/local/bin/gpuops", "report", "--config", "/srv/node1/etc/gpuops/gpuops.json"],
                     "environment": {"LD_LIBRARY_PATH": "/opt/fakes"}},
        "systemd": False,
        "dev_char_symlinks": True,
        "units": [{"name": "gpuops.service", "enabled": True}, {"name": "gpuops-late.service", "enabled": True}],
    }
    # a real node: sysroot / means no prefix; without the late check its unit is among what goes, and is not enabled
    plain = checkpoint_guard_install_spec(BASE, root="/")
    assert plain["code"] == {"path": "/usr/local/lib/gpuops/gpuops.pyz"} and plain["selftest"]["argv"][0] == "/usr/local/bin/gpuops"
    assert plain["units"] == [{"name": "gpuops.service", "enabled": True}]
    assert {"path": "/etc/systemd/system/gpuops-late.service", "unit": "gpuops-late.service"} in plain["absent"]


@pytest.mark.parametrize("kw, named", [
    ({"enabled": "sometimes"}, "checkpoint_guard_enabled: expected true or false"),
    ({"require_persistent": "maybe"}, "checkpoint_guard_require_persistent: expected true or false"),
    ({"manage_systemd": "2"}, "checkpoint_guard_manage_systemd: expected true or false"),
    ({"root": "relative/root"}, "checkpoint_guard_sysroot"),
    ({"unit_dir": "relative/dir"}, "checkpoint_guard_unit_dir"),
])
def test_a_bad_install_spec_setting_is_named(kw, named):
    with pytest.raises(AnsibleFilterError, match=named):
        checkpoint_guard_install_spec(BASE, **kw)
    with pytest.raises(AnsibleFilterError, match="checkpoint_guard_backup_keep"):
        checkpoint_guard_install_spec(dict(BASE, backup_keep="many"))


def test_the_daemonset_form_installs_the_same_layout_under_the_host_mount():
    """One builder for both installs: the DaemonSet's spec is the SSH install's layout under /host, and without systemd
    the late unit's WantedBy= link (read from the unit the late check installs) is removed as a file."""
    image = "registry.example/python@sha256:" + "1" * 64
    built = checkpoint_guard_daemonset(settings(), image)
    spec = json.loads(built["configmap"]["data"]["install.json"])
    layout = checkpoint_guard_layout(settings())
    assert [d for d in spec["directories"] if "name" in d] == [dict(d, path="/host" + d["path"]) for d in layout["directories"]]
    late_unit = [f for f in checkpoint_guard_files(settings(), late_check=True) if f["path"].endswith("/gpuops-late.service")][0]
    wanted_by = [line.split("=", 1)[1] for line in late_unit["content"].splitlines() if line.startswith("WantedBy=")]
    assert [a["path"] for a in spec["absent"]] == (
        ["/host" + a["path"] for a in layout["absent"]] + ["/host/etc/systemd/system/%s.wants/gpuops-late.service" % wanted_by[0]])
    assert all("unit" not in a for a in spec["absent"]), "no systemd call from the pod"


@pytest.mark.parametrize("raw", ["checkpoint_guard_strategy=prune", ["a"], None, 7])
def test_settings_that_are_not_a_mapping_are_named_not_an_attribute_error(raw):
    """Issue 32 item 14: a string said "'str' object has no attribute 'get'"."""
    with pytest.raises(AnsibleFilterError, match="checkpoint_guard_settings: expects a mapping of the role's settings"):
        checkpoint_guard_settings(raw)
