# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_sharing_mode's engine (``_cluster.sharing_mode.switch``) against a fake CoreV1Api: what it
patches, what it refuses, and that check mode and refusals change nothing. The drain's own rules
are in test_drain.py; ``make kube`` runs the module against a real API server."""

from __future__ import annotations

import types

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import sharing_mode
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.modules.gpu_sharing_mode import ARGUMENT_SPEC


def node(name, label=None):
    return {"metadata": {"name": name, "labels": {"cgpu": label} if label else {}}}


def gpu_pod(name, on):
    return {"metadata": {"name": name, "namespace": "ml", "uid": name,
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": True}]},
            "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running"}}


class FakeApi:
    def __init__(self, nodes, pods=()):
        self.nodes, self.pods, self.patches = nodes, list(pods), []

    def list_node(self):
        return types.SimpleNamespace(items=self.nodes)

    def list_pod_for_all_namespaces(self, **kwargs):
        return types.SimpleNamespace(items=self.pods)

    def patch_node(self, name, body):
        self.patches.append((name, body))


CLIENT = types.SimpleNamespace(sanitize_for_serialization=lambda item: item)


def params(**overrides):
    p = dict((k, v.get("default")) for k, v in ARGUMENT_SPEC.items())
    p.update(overrides)
    return p


def test_a_node_without_gpu_pods_is_labelled_and_a_second_run_changes_nothing():
    api = FakeApi([node("a"), node("b", "true")])
    out = sharing_mode.switch(CLIENT, params(nodes={"a": "yes", "b": True}), False, api=api)
    assert api.patches == [("a", {"metadata": {"labels": {"cgpu": "true"}}})]
    assert out["changed"] is True and out["switched"] == [{"node": "a", "retired": "nvidia.com/gpu"}]
    assert out["diff"] == {"before": "a: cgpu=(unset)\n", "after": "a: cgpu=true\n"}
    api.nodes[0]["metadata"]["labels"]["cgpu"] = "true"
    again = sharing_mode.switch(CLIENT, params(nodes={"a": "yes", "b": True}), False, api=api)
    assert again["changed"] is False and len(api.patches) == 1


def test_check_mode_patches_nothing():
    api = FakeApi([node("a")])
    out = sharing_mode.switch(CLIENT, params(nodes={"a": True}), True, api=api)
    assert out["changed"] is True and out["msg"].startswith("would set cgpu on a") and api.patches == []


def test_a_switch_that_takes_a_running_pods_gpu_is_refused_with_the_plan():
    api = FakeApi([node("a")], [gpu_pod("train", "a")])
    with pytest.raises(sharing_mode.SwitchRefused) as caught:
        sharing_mode.switch(CLIENT, params(nodes={"a": True}), False, api=api)
    assert api.patches == []
    assert caught.value.result["plan"][0]["blocking_pods"] == ["ml/train"]
    assert "ml/train" in str(caught.value)


@pytest.mark.parametrize("field,value", [("drain_timeout", 0), ("drain_timeout", -5)])
def test_a_drain_timeout_that_is_not_positive_is_refused_by_name(field, value):
    with pytest.raises(ParameterError, match=field):
        sharing_mode.switch(CLIENT, params(nodes={"a": True}, **{field: value}), False, api=FakeApi([node("a")]))


def test_a_mode_that_is_not_a_boolean_is_refused_by_name():
    with pytest.raises(ParameterError, match="nodes.a"):
        sharing_mode.switch(CLIENT, params(nodes={"a": "maybe"}), False, api=FakeApi([node("a")]))


def test_the_refusal_reaches_fail_json_with_its_plan():
    from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_watch import failure
    assert failure(sharing_mode.SwitchRefused("refused: ml/train", [{"node": "a"}])) == {"msg": "refused: ml/train", "plan": [{"node": "a"}]}
    assert failure(ParameterError("nodes", "is bad")) == {"msg": str(ParameterError("nodes", "is bad"))}
