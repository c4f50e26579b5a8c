# -*- coding: utf-8 -*-
"""The module_utils tree says where code runs, and the syntax trees prove it.

* ``_node``: what the ``gpuops`` command (plugins/plugin_utils/_guard_code.py) and the node modules
  run on a GPU node, as root, before kubelet; shipped to every node whole.
* ``_cluster``: controller code that talks to the API server; never shipped to a node.
* ``_common``: leaves both use; each is imported on the node side, or it is controller code.
* ``plugin_utils``: the controller's side of the plugins (the guard's settings, file list, layout and
  DaemonSet form, the zip builder); module_utils never import it.
* Filters and action plugins (and the connection, inventory and lookup plugins) never import ``_node``:
  they reach node code only through plugin_utils, which builds what the node reads.
* module_utils start no process; the guard's entry point (roles/checkpoint_guard/files/gpuops_main.py)
  does, and is node code all the same: the standard library and the node packages only, imported by no plugin.

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


CONTROLLER_PLUGINS = ("filter", "action", "connection", "inventory", "lookup")


def _plugin_files(kind):
    directory = os.path.join(ROOT, "plugins", kind)
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if n.endswith(".py") and n != "__init__.py"]


@pytest.mark.parametrize("kind", CONTROLLER_PLUGINS)
def test_controller_plugins_never_import_node_code(kind):
    wrong = ["%s imports %s" % (os.path.relpath(path, ROOT), name)
             for path in _plugin_files(kind) for name in imported(path) if _our_package(name) == "_node"]
    assert wrong == []


def test_each_common_leaf_is_used_on_the_node():
    """A ``_common`` file that no node code imports (itself, or through a ``_common`` file it imports) is controller code
    shipped to every node for nothing."""
    node_side = list(_files("_node")) + [p for p in _plugin_files("modules") if any(_our_package(n) == "_node" for n in imported(p))]
    used = set()
    for path in node_side:
        for name in imported(path):
            if _our_package(name) == "_common":
                used.add(name[len(OURS + ".module_utils._common."):])
    # a leaf by its dotted path below _common (``health.decision``); ``from _common.health import decision`` names it so
    paths = dict((os.path.relpath(p, os.path.join(UTILS, "_common"))[:-3].replace(os.sep, "."), p) for p in _files("_common"))
    leaves = set(leaf for leaf in paths if not leaf.endswith("__init__"))

    def of(name):
        return next((leaf for leaf in leaves if name == leaf or name.startswith(leaf + ".")), None)

    reached, todo = set(), [of(u) for u in used if of(u)]
    while todo:
        leaf = todo.pop()
        if leaf not in reached:
            reached.add(leaf)
            todo.extend(of(n[len(OURS + ".module_utils._common."):]) for n in imported(paths[leaf])
                        if _our_package(n) == "_common" and of(n[len(OURS + ".module_utils._common."):]))
    assert sorted(leaves - reached) == []


def test_module_utils_start_no_process_and_the_guard_entry_point_is_node_code():
    entry = os.path.join(ROOT, "roles", "checkpoint_guard", "files", "gpuops_main.py")
    starting = sorted(os.path.relpath(path, ROOT) for package in PACKAGES for path in _files(package)
                      if any(n.split(".")[0] in ("subprocess", "multiprocessing") for n in imported(path)))
    assert starting == []
    stdlib = set(getattr(sys, "stdlib_module_names", ()))
    if stdlib:
        foreign = [n for n in imported(entry) if n.split(".")[0] not in stdlib | {"__future__"}
                   and _our_package(n) not in ("_node", "_common")]
        assert foreign == []
    assert any(_our_package(n) == "_node" for n in imported(entry))
    importers = [path for kind in ("modules",) + CONTROLLER_PLUGINS for path in _plugin_files(kind) if any("gpuops_main" in n for n in imported(path))]
    assert importers == []


def _code_strings(path):
    """The string constants of a file that are code, not docstrings or plugin docs."""
    with open(path, "rb") as handle:
        tree = ast.parse(handle.read(), path)
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("DOCUMENTATION", "EXAMPLES", "RETURN") for t in node.targets):
            docs.add(id(node.value))
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_where_a_pod_sees_the_host_is_spelled_once():
    """The host's / in our pods (/host) and the variable that says so (GPUOPS_HOST_ROOT): _common/beside_host.py only."""
    home = os.path.join(UTILS, "_common", "beside_host.py")
    spelled = []
    for top, dirs, files in os.walk(os.path.join(ROOT, "plugins")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            path = os.path.join(top, name)
            if name.endswith(".py") and path != home and "doc_fragments" not in path:
                for value in _code_strings(path):
                    if value in ("/host", "GPUOPS_HOST_ROOT") or "GPUOPS_HOST_ROOT=" in value or "chroot /host" in value:
                        spelled.append((os.path.relpath(path, ROOT), value[:60]))
    assert spelled == []


# The tests mirror the rooms (issue 58): each module of these rooms has tests/unit/plugins/module_utils/<room>/test_<module>.py.
# The modules below have none yet; each says where it is tested today. The list must be exactly what is missing: a new module
# without its test file fails here, and so does a gap that a new test file closed but the list still names.
MIRRORED = ("_cluster/remediation", "_cluster/events", "_node/health", "_common/health", "_common")
GAPS = {  # the node's health code is tested as the modules run it on a node (fake NVML, nvidia-smi, dcgmi)
    "_cluster/remediation/outcome": "tests/unit/plugins/filter/test_remediation_targets.py and the role's tests (its filters' wrappers)",
    "_node/health/diag": "tests/unit/plugins/modules/test_gpu_diag.py (the module, its parse and verdict)",
    "_node/health/evidence": "tests/unit/plugins/modules/test_gpu_rma_evidence.py",
    "_node/health/gpu_health": "tests/unit/plugins/modules/test_gpu_health_info.py",
    "_node/health/gpu_reset": "tests/unit/plugins/modules/test_gpu_reset.py",
}


def test_the_tests_mirror_the_rooms():
    missing = set()
    for room in MIRRORED:
        for name in sorted(os.listdir(os.path.join(UTILS, room))):
            if name.endswith(".py") and name != "__init__.py":
                test = os.path.join(ROOT, "tests", "unit", "plugins", "module_utils", room, "test_" + name)
                if not os.path.isfile(test):
                    missing.add("%s/%s" % (room, name[:-3]))
    assert missing == set(GAPS), ("without a test file of their name: %s; named in GAPS but tested now: %s"
                                  % (sorted(missing - set(GAPS)), sorted(set(GAPS) - missing)))
    for where in GAPS.values():  # each gap names a test file that exists
        assert os.path.isfile(os.path.join(ROOT, where.split(" ")[0].rstrip(","))), where


# functions of 7 or more parameters (self aside): 37 in the release before issue 58, 28 after it; a new one fails here (pass one
# object that holds what belongs together: a session, a run's settings, a request's limits)
MANY_PARAMETERS = 28


def test_few_functions_take_seven_or_more_parameters():
    found = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, "plugins")):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                with open(path, "rb") as handle:
                    tree = ast.parse(handle.read(), path)
                for node in ast.walk(tree):
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        args = node.args
                        names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs] + [a.arg for a in (args.vararg, args.kwarg) if a]
                        if len([n for n in names if n not in ("self", "cls")]) >= 7:
                            found.append("%s:%s" % (os.path.relpath(path, ROOT), node.name))
    assert len(found) <= MANY_PARAMETERS, "\n".join(sorted(found))
