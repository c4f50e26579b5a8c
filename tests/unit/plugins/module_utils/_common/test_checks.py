# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The value checks every module shares (_common/checks.py): numbers from text bounded (never int() on 5,000 digits or '²'),
booleans as surveys give them, quantities as kubelet rounds them, and the kinds of value a manifest or a unit may hold."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._common import checks
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError


@pytest.mark.parametrize("text,number", [("0", 0), (" 42 ", 42), ("9" * 18, 10 ** 18 - 1), ("9" * 19, None), ("\u00b2", None),
                                         ("\u0661", None), ("-1", None), ("1.5", None), ("", None), (7, None), (None, None)])
def test_digits_reads_ascii_digits_only_and_bounded(text, number):
    assert checks.digits(text) == number


def test_as_int_takes_a_number_or_its_digits_and_names_the_field_else_with_the_value_cut():
    assert checks.as_int("port", 5000) == 5000 and checks.as_int("port", "5000") == 5000
    for bad in (True, "5k", "9" * 5000, 1.0):
        with pytest.raises(ParameterError) as err:
            checks.as_int("port", bad)
        assert err.value.field == "port" and len(str(err.value)) < 140


@pytest.mark.parametrize("text,value", [("yes", True), (" On ", True), ("1", True), ("false", False), ("NO", False), (False, False)])
def test_as_bool_takes_what_a_survey_gives(text, value):
    assert checks.as_bool("enabled", text) is value


def test_as_bool_refuses_anything_else_naming_the_field():
    for bad in ("maybe", 1, None, ""):
        with pytest.raises(ParameterError, match="enabled: expected true or false"):
            checks.as_bool("enabled", bad)


@pytest.mark.parametrize("quantity,whole", [("8", 8), ("1Ki", 1024), ("1.5", 2), ("100m", 1), ("2G", 2 * 10 ** 9), (None, 0), ("x", 0), (3, 3)])
def test_a_quantity_is_rounded_up_as_resource_quantity_value_does(quantity, whole):
    assert checks.whole_quantity(quantity) == whole


def test_a_value_of_a_kind_passes_and_another_names_the_field_and_the_rule():
    assert checks.check_value("namespace", "gpu-ops", "dns_label") == "gpu-ops"
    assert checks.check_value("image", "", "image", empty_ok=True) == ""
    for value, kind in (("Bad_Name", "dns_label"), ("a" * 64, "dns_label"), ("x\nkey: y", "label_value"), ("/a b", "unit_path"),
                        ("30 s", "duration"), ("$(id)", "image")):
        with pytest.raises(ParameterError) as err:
            checks.check_value("field", value, kind)
        assert err.value.field == "field" and checks.CHECKS[kind][2] in err.value.reason


def test_a_gpu_id_is_a_gpu_or_mig_uuid_form():
    assert checks.GPU_ID.match("GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0") and checks.GPU_ID.match("MIG-GPU-x/1/2") is None
    assert checks.GPU_ID.match("GPU-0650a168 e770") is None and checks.GPU_ID.match("gpu-0") is None
