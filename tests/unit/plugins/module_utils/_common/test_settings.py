# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The settings table (_common/settings.py): one row per setting, and from it the defaults, every check of a value (a list's
element named), the argument spec, and a whole raw set checked with an unknown key refused."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._common import settings
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

TABLE = settings.Table(
    settings.row("mode", "str", "report", choices=("report", "remediate")),
    settings.row("batch", "int", 1, check=settings.whole(1, 100)),
    settings.row("gpus", "list", [], elements="str", aliases=("targets",), each=lambda v: None if str(v).startswith("GPU-") else "not a GPU"),
    settings.row("dry", "bool", False, check=settings.boolean),
)


def test_the_defaults_and_the_argument_spec_come_from_the_rows():
    assert TABLE.names() == ("mode", "batch", "gpus", "dry")
    assert TABLE.defaults() == {"mode": "report", "batch": 1, "gpus": [], "dry": False}
    assert TABLE.defaults()["gpus"] is not TABLE.defaults()["gpus"]  # a copy each time: a caller's change never reaches the table
    spec = TABLE.argument_spec()
    assert spec["mode"] == {"type": "str", "default": "report", "choices": ["report", "remediate"]}
    assert spec["gpus"] == {"type": "list", "default": [], "aliases": ["targets"], "elements": "str"}
    assert TABLE.argument_spec("batch") == {"batch": {"type": "int", "default": 1}}


def test_a_value_is_refused_by_its_choices_its_check_or_an_element_named():
    assert TABLE.refusal("mode", "nuke") == ("mode", "'nuke' is not one of report, remediate")
    assert TABLE.problem("batch", 0) == "0 must be a whole number from 1 to 100"
    assert TABLE.problem("batch", True) is not None  # a bool is no number
    assert TABLE.refusal("gpus", ["GPU-1", "2"]) == ("gpus[1]", "not a GPU")
    with pytest.raises(ParameterError) as err:
        TABLE.check("gpus", ["x"])
    assert err.value.field == "gpus[0]"


def test_a_raw_set_is_checked_whole_coerced_first_and_an_unknown_key_refused():
    got = TABLE.check_all({"batch": "3", "mode": None}, coerce=lambda row, v: int(v) if row["type"] == "int" else v)
    assert got == {"mode": "report", "batch": 3, "gpus": [], "dry": False}
    with pytest.raises(ParameterError) as err:
        TABLE.check_all({"bacth": 3}, where="thresholds.")
    assert err.value.field == "thresholds.bacth" and "known: batch, dry, gpus, mode" in err.value.reason
    with pytest.raises(ParameterError) as err:
        TABLE.check_all({"gpus": ["GPU-a", "b"]}, where="plan.")
    assert err.value.field == "plan.gpus[1]"
