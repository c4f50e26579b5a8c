# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every version_added in the docs (modules, plugins, filters, doc fragments, role argument specs, options at any
depth) names a release this collection has made or is making: one at or below galaxy.yml's version."""

from __future__ import annotations

import ast
import os

import yaml

from ansible.module_utils.compat.version import LooseVersion

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _galaxy_version():
    with open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)["version"]


def _docs(path):
    """The YAML documents a plugin file holds: DOCUMENTATION (and fragments' class attributes) in Python,
    the whole file for a filter's .yml or a role's meta/argument_specs.yml."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    if path.endswith((".yml", ".yaml")):
        return [yaml.safe_load(text)]
    found = []
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                and any(isinstance(t, ast.Name) and t.id == "DOCUMENTATION" for t in node.targets)):
            found.append(yaml.safe_load(node.value.value))
    return found


def _version_added(doc, where):
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key == "version_added":
                yield where, str(value)
            else:
                yield from _version_added(value, "%s.%s" % (where, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield from _version_added(value, "%s[%d]" % (where, index))


def _all_version_added():
    paths = []
    for top in ("plugins", "roles"):
        for directory, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                path = os.path.join(directory, name)
                plugin = top == "plugins" and name.endswith((".py", ".yml")) and "module_utils" not in path and "plugin_utils" not in path
                if plugin or (top == "roles" and path.endswith(os.path.join("meta", "argument_specs.yml"))):
                    paths.append(path)
    for path in sorted(paths):
        for doc in _docs(path):
            yield from _version_added(doc, os.path.relpath(path, ROOT))


def test_every_version_added_is_at_most_the_version_galaxy_yml_builds():
    release = LooseVersion(_galaxy_version())
    found = list(_all_version_added())
    # every module, documented plugin and role says when it came
    documented = set(where.split(".DOCUMENTATION")[0].split(".argument_specs")[0] for where, _value in found)
    for kind, suffix in (("modules", ".py"), ("filter", ".yml"), ("connection", ".py"), ("inventory", ".py"), ("lookup", ".py")):
        for name in os.listdir(os.path.join(ROOT, "plugins", kind)):
            if name.endswith(suffix) and name != "__init__.py":
                assert "plugins/%s/%s" % (kind, name) in documented, name
    for role in os.listdir(os.path.join(ROOT, "roles")):
        assert "roles/%s/meta/argument_specs.yml" % role in documented, role
    later = [(where, value) for where, value in found if LooseVersion(value) > release]
    assert not later, "version_added after galaxy.yml's %s: %s" % (release, later)


def test_the_check_sees_a_version_from_the_future(tmp_path):
    plugin = tmp_path / "future.py"
    plugin.write_text('DOCUMENTATION = """\nmodule: future\nversion_added: 0.1.0\noptions:\n  x:\n    version_added: 9.0.0\n"""\n')
    assert list(_version_added(_docs(str(plugin))[0], "future.py")) == [("future.py", "0.1.0"), ("future.py.options.x", "9.0.0")]
