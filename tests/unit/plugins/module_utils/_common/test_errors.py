# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The typed errors (_common/errors.py): each names what is wrong and, where it has one, the field and the result it carries,
so that the one edge (fail_json) says it without a traceback."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._common import errors


def test_a_parameter_error_names_its_field_and_why():
    exc = errors.ParameterError("drain_timeout", "0 must be a positive number of seconds")
    assert (exc.field, exc.reason, str(exc)) == ("drain_timeout", "0 must be a positive number of seconds",
                                                 "drain_timeout: 0 must be a positive number of seconds")
    assert isinstance(exc, errors.GpuopsError)


def test_a_result_error_carries_where_the_node_stands():
    exc = errors.ResultError("node a stays quarantined", {"step": "drain_blocked"})
    assert str(exc) == "node a stays quarantined" and exc.result == {"step": "drain_blocked"}
    assert errors.ResultError("no result").result in (None, {})


def test_every_error_of_the_collection_is_a_gpuops_error():
    found = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    assert found and all(issubclass(e, errors.GpuopsError) for e in found)
