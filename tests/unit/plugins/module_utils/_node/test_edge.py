# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node modules' one error edge (_node/edge.py): a typed error becomes one fail_json, alike in every module."""

from __future__ import annotations

import ast
import os

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import KubeletControlError, ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._node import edge

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))))
OURS = "ansible_collections.gpuops.fleet.plugins.module_utils."


class Failed(Exception):
    pass


class Module:
    def __init__(self):
        self.calls = []

    def fail_json(self, **kwargs):
        self.calls.append(kwargs)
        raise Failed()


def test_a_typed_error_fails_once_with_context_the_errors_result_and_host_paths(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUOPS_HOST_ROOT", str(tmp_path))
    module = Module()
    context = {"checkpoint_path": "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", "gpus": None}

    def work():
        context["gpus"] = {"available": True}
        error = KubeletControlError("kubelet did not start: see %s/var/log/x" % tmp_path)
        error.result = {"kubelet": {"restarted": False}, "diff": {"before": "a", "after": "b"}}
        raise error

    with pytest.raises(Failed):
        edge.run(module, work, context)
    assert module.calls == [{"checkpoint_path": "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", "gpus": {"available": True},
                             "kubelet": {"restarted": False}, "msg": "kubelet did not start: see /var/log/x"}]


def _raises(error):
    def work():
        raise error
    return work


def test_the_value_passes_through_and_an_untyped_error_is_not_ours_to_dress(monkeypatch):
    monkeypatch.delenv("GPUOPS_HOST_ROOT", raising=False)
    module = Module()
    assert edge.run(module, lambda: 42) == 42
    with pytest.raises(ZeroDivisionError):
        edge.run(module, lambda: 1 / 0)
    with pytest.raises(Failed):
        edge.run(module, _raises(ParameterError("backend", "'x' is not one of auto, nvml, nvidia-smi")))
    assert module.calls == [{"msg": "backend: 'x' is not one of auto, nvml, nvidia-smi"}]


def _node_modules():
    folder = os.path.join(ROOT, "plugins", "modules")
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                tree = ast.parse(handle.read())
            imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and (n.module or "").startswith(OURS + "_node")]
            if imports:
                yield name, tree


def test_every_node_module_fails_through_the_edge_and_catches_none_of_our_errors_itself():
    errors = set(n for n in dir(__import__(OURS + "_common.errors", fromlist=["x"])) if n.endswith("Error") or n == "BackendUnavailable")
    seen = []
    for name, tree in _node_modules():
        seen.append(name)
        caught = [ast.unparse(h.type) for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler) and h.type is not None
                  and any(isinstance(n, ast.Name) and n.id in errors for n in ast.walk(h.type))]
        assert caught == [], (name, caught)
        runs = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "run"
                and isinstance(c.func.value, ast.Name) and c.func.value.id == "edge"]
        assert len(runs) == 1, (name, len(runs))
    assert set(seen) == {"gpu_diag.py", "gpu_health_info.py", "gpu_reset.py", "gpu_rma_evidence.py", "gpu_uuid_facts.py", "guard_install.py",
                         "kubelet_checkpoint.py", "kubelet_checkpoint_info.py", "kubelet_config_info.py"}
