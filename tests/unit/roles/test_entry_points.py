# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Roles are called only through their declared entry points.

Every ``import_role``/``include_role`` in the playbooks, the roles and the Molecule/test plays names a
``tasks_from`` that the role declares in ``meta/argument_specs.yml`` (so ansible-core validates its
variables), and nothing outside a role sets that role's private ``__<role>_`` variables.
"""

from __future__ import annotations

import os
import re

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLES = sorted(d for d in os.listdir(os.path.join(ROOT, "roles")) if os.path.isdir(os.path.join(ROOT, "roles", d)))
SEARCHED = ("playbooks", "roles", "extensions", "tests")


def _yaml_files():
    for top in SEARCHED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = [d for d in dirnames if d not in ("__pycache__", ".venv", "build")]
            for name in filenames:
                if name.endswith((".yml", ".yaml")):
                    yield os.path.join(dirpath, name)


def _walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def role_calls():
    """(file, role, entry point, the task's vars) of every role call in the tree's YAML."""
    calls = []
    for path in _yaml_files():
        with open(path) as handle:
            try:
                doc = yaml.safe_load(handle)
            except yaml.YAMLError:
                continue
        for task in _walk(doc):
            for key in ("ansible.builtin.import_role", "ansible.builtin.include_role", "import_role", "include_role"):
                args = task.get(key)
                if isinstance(args, dict) and str(args.get("name", "")).startswith("gpuops.fleet."):
                    entry = re.sub(r"\.ya?ml\Z", "", str(args.get("tasks_from", "main")))
                    calls.append((os.path.relpath(path, ROOT), args["name"].split(".")[-1], entry, task.get("vars") or {}))
    return calls


def declared(role):
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as handle:
        return set(yaml.safe_load(handle)["argument_specs"])


def test_the_tree_calls_roles_at_all():
    # the scan itself finds what it must (site.yml's repair step, recover_pods' verification)
    calls = set((path, role, entry) for path, role, entry, dummy in role_calls())
    assert ("playbooks/site.yml", "checkpoint_guard", "repair") in calls
    assert ("playbooks/recover_pods.yml", "device_plugin", "verify") in calls


def test_every_role_call_names_a_declared_entry_point():
    wrong = ["%s: %s has no entry point %r" % (path, role, entry) for path, role, entry, dummy in role_calls()
             if entry not in declared(role)]
    assert wrong == []


def test_no_role_call_sets_a_private_variable_of_a_role():
    wrong = []
    for path, role, entry, variables in role_calls():
        for name in variables:
            if any(name.startswith("__%s_" % r) for r in ROLES):
                wrong.append("%s: sets %s for %s:%s" % (path, name, role, entry))
    assert wrong == []


def test_every_host_variable_the_action_plugins_read_is_declared_and_registered_where_it_says():
    """The action plugins read the GPU hosts' variables through one reader (plugin_utils/_host_facts_action.py,
    HOST_VARIABLES): each role-set name is a ``register:`` of the task file it names, and no plugin reads a host
    variable past that reader."""
    import ast  # pylint: disable=import-outside-toplevel

    from ansible_collections.gpuops.fleet.plugins.plugin_utils._host_facts_action import HOST_VARIABLES

    for name, source in HOST_VARIABLES.items():
        if source == "inventory":
            continue
        kind, path = source.split(": ")
        assert kind == "register", (name, source)
        with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
            tasks = yaml.safe_load(handle)
        assert name in [t.get("register") for t in _walk(tasks)], (name, path)
    action_dir = os.path.join(ROOT, "plugins", "action")
    for plugin in sorted(os.listdir(action_dir)):
        if not plugin.endswith(".py"):
            continue
        with open(os.path.join(action_dir, plugin), encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        # hostvars are reached only by handing them to host_variables, never indexed or .get() here; "gpus", "health" and
        # "untrusted" (why a host's facts are refused) are the reader's own keys
        reads = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get"
                 and isinstance(n.func.value, ast.Name) and n.func.value.id in ("found", "hostvars", "hv")
                 and isinstance(n.args[0], ast.Constant) and n.args[0].value not in HOST_VARIABLES
                 and n.args[0].value not in ("gpus", "health", "untrusted")]
        assert reads == [], (plugin, [ast.unparse(r) for r in reads])
