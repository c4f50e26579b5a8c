# -*- coding: utf-8 -*-
"""The event sources' options (module_utils/_cluster/events/options.py): a bad option named, a survey's strings coerced,
the defaults."""

from __future__ import annotations


import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import options as source_options
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError


@pytest.mark.parametrize("args, field", [
    ({"gpu_resources": []}, "gpu_resources"), ({"gpu_resources": [7]}, "gpu_resources"), ({"label_selector": "a\nb"}, "label_selector"),
    ({"heartbeat": 0}, "heartbeat"), ({"heartbeat": "soon"}, "heartbeat"), ({"backoff_max": True}, "backoff_max"),
    ({"watch_seconds": 5}, "watch_seconds"), ({"kubeconfig": ["x"]}, "kubeconfig"), ({"namespace": "x"}, "namespace"),
])
def test_bad_options_are_named(args, field):
    with pytest.raises(ParameterError) as err:
        source_options.check_nodes(args)
    assert err.value.field == field


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "alerts", "/a b"])
def test_the_alerts_path_is_a_url_path_other_than_the_probes(path):
    with pytest.raises(ParameterError) as err:
        source_options.check_alerts({"token": "s3cret-token-0123456789", "path": path})
    assert err.value.field == "path" and ("probes" in str(err.value)) == (path in source_options.PROBES)


def test_options_from_a_survey_and_the_defaults():
    got = source_options.check_nodes({"gpu_resources": "nvidia.com/gpu, aliyun.com/gpu-mem", "heartbeat": "30", "validate_certs": "false"})
    assert got["gpu_resources"] == ["nvidia.com/gpu", "aliyun.com/gpu-mem"] and got["heartbeat"] == 30 and got["validate_certs"] is False
    assert source_options.check_nodes({})["gpu_resources"] == list(source_options.DEFAULT_RESOURCES)


def test_an_option_with_a_default_given_no_value_is_refused_never_its_default():
    for check, args, field in ((source_options.check_nodes, {"heartbeat": None}, "heartbeat"),
                               (source_options.check_nodes, {"gpu_resources": None}, "gpu_resources"),
                               (source_options.check_alerts, {"token": "t" * 20, "port": None}, "port")):
        with pytest.raises(ParameterError) as err:
            check(args)
        assert err.value.field == field and "leave it out" in err.value.reason
    assert source_options.check_nodes({"kubeconfig": None, "context": ""})["kubeconfig"] is None  # no default: not given


def test_a_bad_value_names_the_rulebook_variable_the_user_set():
    """Issue 59, item 5: a bad rulebook variable was reported by the source's option name (settle_seconds), not by the
    variable the user set (gpuops_events_settle_seconds)."""
    with pytest.raises(ParameterError) as err:
        source_options.check_nodes({"settle_seconds": "soon"})
    assert err.value.field == "settle_seconds" and "rulebook variable gpuops_events_settle_seconds" in str(err.value)
    with pytest.raises(ParameterError) as err:
        source_options.check_nodes({"alertmanager": {"port": "99999", "token": "s3cret-token-0123456789"}})
    assert err.value.field == "alertmanager.port" and "gpuops_alerts_port" in str(err.value)
    with pytest.raises(ParameterError) as err:
        source_options.check_nodes({"heartbeat": 0})  # no shipped rulebook sets it: the option alone
    assert "rulebook variable" not in str(err.value)


def test_the_rulebook_variables_are_the_shipped_rulebooks():
    import os
    import re

    import yaml

    here = os.path.dirname(os.path.abspath(__file__))
    folder = os.path.join(here, *[os.pardir] * 6, "extensions", "eda", "rulebooks")
    seen = {}

    def walk(options, prefix=""):
        for key, value in options.items():
            if isinstance(value, dict):
                walk(value, prefix + key + ".")
            elif isinstance(value, str):
                found = re.match(r"\A\{\{ (\w+) \| default\(", value)
                if found:
                    seen.setdefault(prefix + key, set()).add(found.group(1))

    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as handle:
            for ruleset in yaml.safe_load(handle):
                for source in ruleset["sources"]:
                    walk(source.get("gpuops.fleet.gpu_nodes") or {})
    assert seen and all(len(v) == 1 for v in seen.values()), seen  # one variable per option across the rulebooks
    assert dict((k, min(v)) for k, v in seen.items()) == source_options.RULEBOOK_VARIABLES
