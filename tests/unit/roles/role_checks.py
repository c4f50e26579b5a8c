# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks every role's tests make: argument specs vs defaults, private internals, README coverage."""

from __future__ import annotations

import os

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def load(role, *parts):
    with open(os.path.join(ROOT, "roles", role, *parts)) as handle:
        return yaml.safe_load(handle)


def spec_problems(role, entries=("main",)):
    """Where meta/argument_specs.yml and defaults/main.yml disagree (keys of ``main``, every default, the prefix)."""
    defaults = load(role, "defaults", "main.yml")
    specs = load(role, "meta", "argument_specs.yml")["argument_specs"]
    problems = []
    if sorted(specs["main"]["options"]) != sorted(defaults):
        problems.append(("main", "keys", sorted(set(specs["main"]["options"]) ^ set(defaults))))
    for entry in entries:
        for name, spec in specs[entry]["options"].items():
            if spec.get("default") != defaults.get(name):
                problems.append((entry, name, "default %r != %r" % (spec.get("default"), defaults.get(name))))
            if not name.startswith(role + "_"):
                problems.append((entry, name, "not prefixed %s_" % role))
    return problems


def non_private_vars(role):
    return [name for name in load(role, "vars", "main.yml") if not name.startswith("__%s_" % role)]


def undocumented_vars(role):
    with open(os.path.join(ROOT, "roles", role, "README.md")) as handle:
        readme = handle.read()
    return [name for name in load(role, "defaults", "main.yml") if "`%s`" % name not in readme]
