# -*- coding: utf-8 -*-
"""The node modules' options the gpu_remediation role passes from its variables (module_utils/_common/health/node_options.py):
one row each, used by the node module and by the role's check before any node is touched."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.gpuops.fleet.plugins.module_utils._common import settings
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import node_options
from ansible_collections.gpuops.fleet.plugins.module_utils._node.health import diag, evidence, gpu_reset

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 6))


def test_the_node_modules_check_with_the_same_rows():
    assert gpu_reset.SETTINGS.by_name["rescue_seconds"] is node_options.RESCUE_SECONDS
    assert evidence._OPTIONS.by_name["max_bytes"] is node_options.MAX_BYTES
    assert tuple(node_options.DIAG_LEVEL["choices"]) == diag.LEVELS
    with pytest.raises(ParameterError) as err:
        evidence.collect({"max_bytes": node_options.EVIDENCE_MIN_BYTES - 1}, None, None)
    assert err.value.field == "max_bytes" and "16384 or more" in str(err.value)


def _module_options_by_variable():
    """{role variable: (module, option)} for every node module option the role's tasks set from one variable."""
    with open(os.path.join(ROOT, "roles", "gpu_remediation", "tasks", "main.yml")) as handle:
        text = yaml.safe_load(handle)
    found = {}

    def walk(tasks):
        for task in tasks or ():
            for key in ("block", "rescue", "always"):
                walk(task.get(key))
            for module in ("gpuops.fleet.gpu_reset", "gpuops.fleet.gpu_diag", "gpuops.fleet.gpu_rma_evidence"):
                for option, value in (task.get(module) or {}).items():
                    if isinstance(value, str) and value.startswith("{{ gpu_remediation_") and value.endswith(" }}") and " " not in value[3:-3]:
                        found[value[3:-3]] = (module, option)
    walk(text)
    return found


def test_every_checked_variable_reaches_the_option_whose_row_checks_it():
    found = _module_options_by_variable()
    rows = {"gpu_remediation_rescue_seconds": ("gpuops.fleet.gpu_reset", "rescue_seconds"),
            "gpu_remediation_diag_level": ("gpuops.fleet.gpu_diag", "level"),
            "gpu_remediation_evidence_max_bytes": ("gpuops.fleet.gpu_rma_evidence", "max_bytes")}
    assert set(node_options.ROLE.names()) == set(rows)
    for variable, where in rows.items():
        assert found.get(variable) == where, (variable, found)


@pytest.mark.parametrize("variable, value, ok", [
    ("gpu_remediation_evidence_max_bytes", "16384", True), ("gpu_remediation_evidence_max_bytes", 16383, False),
    ("gpu_remediation_evidence_max_bytes", "lots", False), ("gpu_remediation_diag_level", 0, True),
    ("gpu_remediation_diag_level", "4", True), ("gpu_remediation_diag_level", 5, False),
    ("gpu_remediation_rescue_seconds", 3600, True), ("gpu_remediation_rescue_seconds", 3601, False),
])
def test_the_roles_variables_are_checked_by_the_rows_a_surveys_string_read_as_its_number(variable, value, ok):
    if ok:
        assert node_options.ROLE.check_all({variable: value}, coerce=settings.coerce)
    else:
        with pytest.raises(ParameterError) as err:
            node_options.ROLE.check_all({variable: value}, coerce=settings.coerce)
        assert err.value.field == variable
