# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster modules' connection options are documented by our own copy of kubernetes.core's k8s_auth_options:
no module's docs need another collection (Galaxy's importer runs ansible-doc with this one alone). The copy must
stay kubernetes.core's, option for option (bar its version_added), and match the argument spec the modules run with."""

from __future__ import annotations

import ast
import os

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MODULES = os.path.join(ROOT, "plugins", "modules")


def _options(module_file):
    with open(module_file, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)
    raise AssertionError("no DOCUMENTATION in %s" % module_file)


def _strip(options):
    return dict((name, dict((k, v) for k, v in spec.items() if k != "version_added")) for name, spec in options.items())


def test_no_module_extends_another_collections_fragment():
    for name in sorted(os.listdir(MODULES)):
        if name.endswith(".py"):
            fragments = _options(os.path.join(MODULES, name)).get("extends_documentation_fragment") or []
            assert all(f.startswith("gpuops.fleet.") for f in fragments), (name, fragments)


def test_the_copy_is_kubernetes_cores_fragment_and_its_argument_spec():
    core = pytest.importorskip("ansible_collections.kubernetes.core.plugins.doc_fragments.k8s_auth_options")
    from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
    from ansible_collections.gpuops.fleet.plugins.doc_fragments.k8s_auth_options import ModuleDocFragment
    ours = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
    theirs = yaml.safe_load(core.ModuleDocFragment.DOCUMENTATION)["options"]
    assert _strip(ours) == _strip(theirs)
    assert all("version_added" not in spec for spec in ours.values())
    assert sorted(ours) == sorted(AUTH_ARG_SPEC)
