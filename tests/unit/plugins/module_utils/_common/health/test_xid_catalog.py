# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's XID catalog (_common/health/xid_catalog.py): each code's bucket, a user's overrides checked (codes as strings, a
code or a bucket the catalog does not know named), NVML's recovery actions by name."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import xid_catalog as c


def test_every_code_is_in_one_bucket_and_an_unknown_one_is_unknown():
    assert set(c.CATALOG.values()) <= set(c.BUCKET_NAMES) and c.UNKNOWN in c.BUCKET_NAMES
    assert c.bucket(79) == c.CATALOG[79] and c.bucket(99999) == c.UNKNOWN
    assert set(c.ROUTINE_BUCKETS) <= set(c.BUCKETS)
    assert c.bucket(79, {79: "IGNORE"}) == "IGNORE"  # an override first


def test_overrides_take_codes_as_strings_and_name_what_the_catalog_does_not_know():
    code = sorted(c.CATALOG)[0]
    assert c.check_overrides("xid_overrides", {str(code): "IGNORE"}) == {code: "IGNORE"}
    assert c.check_overrides("xid_overrides", None) == {} and c.check_overrides("xid_overrides", "") == {}
    for bad, said in (({"99999": "IGNORE"}, "not an XID of NVIDIA's catalog"), ({str(code): "PANIC"}, "not a catalog bucket"),
                      ({"\u00b2": "IGNORE"}, "not an XID"), ([79], "must be a mapping")):
        with pytest.raises(ParameterError, match=said) as err:
            c.check_overrides("xid_overrides", bad)
        assert err.value.field == "xid_overrides"


def test_recovery_actions_by_name_and_an_unknown_value_said_so():
    assert c.recovery_name(0) == c.RECOVERY_ACTIONS[0] and c.recovery_name(77) == "UNKNOWN_77"
