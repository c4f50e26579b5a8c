# -*- coding: utf-8 -*-
"""The module_utils tree says where code runs, and the syntax trees prove it.

* ``_node``: what the ``gpuops`` command (plugins/plugin_utils/_guard_code.py) and the node modules
  run on a GPU node, as root, before kubelet; shipped to every node whole.
* ``_cluster``: controller code that talks to the API server; never shipped to a node.
* ``_common``: leaves both use.

The rules read each file's ``import`` statements with ``ast`` (a string in a comment or a docstring
cannot satisfy or break them), including imports inside functions.
"""

from __future__ import annotations

import ast
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
UTILS = os.path.join(ROOT, "plugins", "module_utils")
OURS = "ansible_collections.gpuops.fleet.plugins"
PACKAGES = ("_node", "_cluster", "_common")
ALLOWED = {"_node": {"_node", "_common"}, "_cluster": {"_cluster", "_common"}, "_common": {"_common"}}
# third-party imports a node may meet, each optional (imported in a try, the code says what it does
# without): pynvml, the NVML binding gpu_inventory loads; yaml, which kubelet_config prefers for
# kubelet's config file (JSON and a line scan remain). Nothing of Ansible or kubernetes.
NODE_THIRD_PARTY = {"pynvml", "yaml"}


def _files(package):
    for dirpath, dirnames, filenames in os.walk(os.path.join(UTILS, package)):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield os.path.join(dirpath, name)


def imported(path):
    """Every module name a file imports, dotted in full (``from a.b import c`` gives ``a.b.c``)."""
    with open(path, "rb") as handle:
        tree = ast.parse(handle.read(), path)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "%s: a relative import (the guard's zip and AnsiballZ need absolute ones)" % path
            names.extend("%s.%s" % (node.module, alias.name) for alias in node.names)
    return names


def _our_package(name):
    """``_node`` for ``...module_utils._node.x``; the first part after ``plugins`` otherwise."""
    if not name.startswith(OURS + "."):
        return None
    rest = name[len(OURS) + 1:].split(".")
    if rest[0] == "module_utils" and len(rest) > 1:
        return rest[1]
    return rest[0]


def test_every_module_util_lives_in_one_of_the_three_packages():
    loose = sorted(n for n in os.listdir(UTILS) if n.endswith(".py") and n != "__init__.py")
    assert loose == []
    assert sorted(d for d in os.listdir(UTILS) if not d.startswith((".", "__"))) == sorted(PACKAGES)
    for package in PACKAGES:
        assert os.path.isfile(os.path.join(UTILS, package, "__init__.py")), package


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_only_what_its_rule_allows(package):
    wrong = []
    for path in _files(package):
        for name in imported(path):
            ours = _our_package(name)
            if name.startswith(OURS) and ours not in ALLOWED[package]:
                wrong.append("%s imports %s" % (os.path.relpath(path, ROOT), name))
    assert wrong == []


@pytest.mark.parametrize("package", ("_node", "_common"))
def test_node_code_imports_nothing_of_the_controller(package):
    stdlib = set(getattr(sys, "stdlib_module_names", ()))
    if not stdlib:
        pytest.skip("this Python has no sys.stdlib_module_names (3.10+)")
    foreign = []
    for path in _files(package):
        for name in imported(path):
            top = name.split(".")[0]
            if name.startswith(OURS) or top in stdlib or top == "__future__" or top in NODE_THIRD_PARTY:
                continue
            foreign.append("%s imports %s" % (os.path.relpath(path, ROOT), name))
    assert foreign == []


def test_the_rules_catch_a_wrong_import(tmp_path):
    # the checker itself: a node file importing cluster code, or a text mention, are told apart
    bad = tmp_path / "bad.py"
    bad.write_text('"""mentions ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_watch"""\n'
                   "def f():\n    from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import drain\n")
    names = imported(str(bad))
    assert names == ["ansible_collections.gpuops.fleet.plugins.module_utils._cluster.drain"]
    assert _our_package(names[0]) == "_cluster" and "_cluster" not in ALLOWED["_node"]
