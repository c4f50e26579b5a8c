# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks every role's tests make: argument specs vs defaults, private internals, README coverage."""

from __future__ import annotations

import os

import jinja2
import yaml
from ansible.plugins.filter.core import FilterModule as CoreFilters

from ansible_collections.gpuops.fleet.plugins.filter.checked_values import FilterModule as OurFilters

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
            value = defaults.get(name)
            if isinstance(value, str) and "{{" in value:
                # a default computed at run time: the spec says it in words (a template there is not a value a
                # reader or antsibull-docs can use, and argument validation never applies spec defaults)
                text = " ".join(spec.get("description") if isinstance(spec.get("description"), list) else [spec.get("description") or ""])
                if "default" in spec or "Default: " not in text:
                    problems.append((entry, name, "a computed default is described ('Default: ...'), not given as default: %r" % value))
            elif spec.get("default") != value:
                problems.append((entry, name, "default %r != %r" % (spec.get("default"), value)))
            if not name.startswith(role + "_"):
                problems.append((entry, name, "not prefixed %s_" % role))
    return problems


def non_private_vars(role):
    return [name for name in load(role, "vars", "main.yml") if not name.startswith("__%s_" % role)]


def undocumented_vars(role):
    with open(os.path.join(ROOT, "roles", role, "README.md")) as handle:
        readme = handle.read()
    return [name for name in load(role, "defaults", "main.yml") if "`%s`" % name not in readme]


# --------------------------------------------------------------------------- rendering a role's templates


def template_source(role, name):
    """The template's text as Ansible templates it: a ``#jinja2:`` header line is settings, not text."""
    path = os.path.join(ROOT, "roles", role, "templates", name)
    with open(path) as handle:
        text = handle.read()
    if text.startswith("#jinja2:"):
        text = text.split("\n", 1)[1]
    return text, path, lambda: True


def template_delimiters(role, name):
    with open(os.path.join(ROOT, "roles", role, "templates", name)) as handle:
        first = handle.readline()
    if not first.startswith("#jinja2:"):
        return {}
    return dict((k.strip(), v.strip()) for k, v in (item.split(":", 1) for item in first[len("#jinja2:"):].strip().replace("'", "").split(",")))


def jinja_env(role, delimiters=None):
    """Jinja with Ansible's core filters and this collection's template filters, strict about undefined names."""
    env = jinja2.Environment(loader=jinja2.FunctionLoader(lambda name: template_source(role, name)), undefined=jinja2.StrictUndefined,
                             **(delimiters or {}))
    env.filters.update(CoreFilters().filters())
    env.filters.update(("gpuops.fleet." + name, f) for name, f in OurFilters().filters().items())
    return env


def render_text(role, name, values):
    env = jinja_env(role, template_delimiters(role, name))

    def lookup(kind, template):
        assert kind == "ansible.builtin.template"
        return jinja_env(role, template_delimiters(role, template)).get_template(template).render(**values)

    env.globals["lookup"] = lookup
    return env.get_template(name).render(**values)


def render_docs(role, name, values):
    """A manifest template rendered as Ansible's filters render it, loaded as YAML documents."""
    return list(yaml.safe_load_all(render_text(role, name, values)))
