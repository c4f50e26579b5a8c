# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The guard's install options as the node gets them (plugin_utils/_guard_install.py): the plan's ``guard`` and the
install itself check them the same way, and the install trusts the plan's reading only for the same options."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_code, _guard_install as guard_install

SPEC = {"code": {"path": "/usr/local/lib/gpuops/gpuops.pyz"}, "files": [{"path": "/etc/gpuops/gpuops.json", "content": "{}", "mode": "0644"}],
        "units": [{"name": "gpuops.service", "enabled": True}]}


def test_the_code_goes_by_its_sha256_never_its_bytes():
    options, data, names, error = guard_install.request(SPEC)
    assert error is None and data == _guard_code.build()[0] and "gpuops_main.py" in names
    assert options["code"] == {"path": SPEC["code"]["path"], "sha256": _guard_code.digest(data)}
    assert options["files"] == SPEC["files"] and "data" not in options["code"]


def test_the_fingerprint_names_one_set_of_options():
    options = guard_install.request(SPEC)[0]
    same = guard_install.request(dict(SPEC, units=[{"enabled": True, "name": "gpuops.service"}]))[0]
    assert guard_install.fingerprint(options) == guard_install.fingerprint(same)
    # the code's bytes, when they go, are no part of it
    assert guard_install.fingerprint(dict(options, code=dict(options["code"], data="Zm9v"))) == guard_install.fingerprint(options)
    other = guard_install.request(dict(SPEC, units=[{"name": "gpuops.service", "enabled": False}]))[0]
    assert guard_install.fingerprint(other) != guard_install.fingerprint(options)
    moved = guard_install.request(dict(SPEC, code={"path": "/opt/gpuops/gpuops.pyz"}))[0]
    assert guard_install.fingerprint(moved) != guard_install.fingerprint(options)


def test_spec_goes_under_the_tasks_own_options():
    assert guard_install.merged({"spec": SPEC, "units": []}) == (dict(SPEC, units=[]), None)
    assert guard_install.merged({"code": {"path": "/x"}}) == ({"code": {"path": "/x"}}, None)


@pytest.mark.parametrize("args, field, named", [
    ({"spec": "code=/x"}, "", "spec: give a mapping"),
    ({"spec": {"planned": {}}}, "", "'planned' is not an option"),
    ({"spec": {"_ansible_diff": True}}, "", "'_ansible_diff' is not an option"),
])
def test_a_bad_spec_is_refused_by_name(args, field, named):
    options, error = guard_install.merged(args)
    assert options is None and named in error, error


@pytest.mark.parametrize("options, named", [
    ({}, "guard.code: give its path"),
    ({"code": "/x"}, "guard.code: give its path"),
    ({"code": {"path": "/x", "sha256": "0" * 64}}, "guard.code.sha256: not an option here"),
    ({"code": {"path": "/x"}, "selftest": ["gpuops"]}, "guard.selftest: give a mapping"),
])
def test_bad_install_options_are_named_under_their_field(options, named):
    dummy, dummy2, dummy3, error = guard_install.request(options, field="guard.")
    assert error is not None and error.startswith(named), error
