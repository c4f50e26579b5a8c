# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""meta/runtime.yml's action groups: every module of a group takes every option the group is for,
so a module_defaults entry for the group never hands a member an option it does not know."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from ansible_collections.gpuops.fleet.plugins.module_utils._node.options import BACKEND_ARGS, CHECKPOINT_ARGS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# the options each group is for (the argspec dicts its members share)
GROUP_OPTIONS = {"gpu_backend": set(BACKEND_ARGS), "checkpoint": set(CHECKPOINT_ARGS)}


def _runtime():
    with open(os.path.join(ROOT, "meta", "runtime.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _module_options(*names):
    """{module: the options it documents} (DOCUMENTATION and doc fragments), as ansible-doc reads them."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "--json", "-t", "module"]
                          + ["gpuops.fleet." + n for n in names], env=env, capture_output=True, text=True, check=True)
    docs = json.loads(proc.stdout)
    return dict((n, set(docs["gpuops.fleet." + n]["doc"].get("options") or {})) for n in names)


def test_each_group_names_only_modules_that_share_its_options():
    groups = _runtime()["action_groups"]
    assert set(groups) == {"gpu_backend", "checkpoint", "k8s"}
    for group, options in GROUP_OPTIONS.items():
        assert len(groups[group]) >= 2, group
        for module, documented in _module_options(*groups[group]).items():
            assert options <= documented, (group, module, options - documented)


def test_the_k8s_group_extends_kubernetes_core_and_holds_only_modules_with_its_auth_options():
    members = _runtime()["action_groups"]["k8s"]
    assert members[0] == {"metadata": {"extend_group": ["kubernetes.core.k8s"]}}
    for module, documented in _module_options(*members[1:]).items():
        assert {"kubeconfig", "context", "host", "api_key", "validate_certs"} <= documented, module
