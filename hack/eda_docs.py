# -*- coding: utf-8 -*-
"""Write docs/docsite/rst/event_sources.rst from the event sources' DOCUMENTATION and EXAMPLES
(extensions/eda/plugins/event_source/*.py). Neither antsibull-docs nor galaxy-importer renders an event source's docs: both
read plugin docs through ansible-doc, which does not know extensions/eda (galaxy-importer lists the sources by name only),
so the docs site carries this page. --check: exit 1 where the page differs (a unit test runs the same comparison)."""

import ast
import os
import sys

import yaml

import docgen

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SOURCES = os.path.join(ROOT, "extensions", "eda", "plugins", "event_source")
PAGE = os.path.join(ROOT, "docs", "docsite", "rst", "event_sources.rst")


def docs(path):
    """``(DOCUMENTATION, EXAMPLES)`` of a source file, parsed (YAML), read without importing it."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    found = {}
    for node in tree.body:
        named = isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
        if named and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES") and isinstance(node.value, ast.Constant):
            found[node.targets[0].id] = node.value.value
    return yaml.safe_load(found["DOCUMENTATION"]), found["EXAMPLES"]


def _text(value):
    """Ansible's markup (C(), O(), M(), V(), RV()) as reStructuredText literals."""
    out = []
    for line in value if isinstance(value, list) else [value]:
        text = str(line)
        for macro in ("RV", "C", "O", "M", "V"):
            text = _macro(text, macro)
        out.append(text)
    return " ".join(out)


def _macro(text, macro):
    start = macro + "("
    while start in text:
        i = text.index(start)
        j = text.index(")", i)
        text = text[:i] + "``" + text[i + len(start):j] + "``" + text[j + 1:]
    return text


def page():
    lines = [".. _ansible_collections.gpuops.fleet.docsite.event_sources:", "", "Event sources", "=============", "",
             "The collection's ansible-rulebook event sources (``extensions/eda/plugins/event_source``), from their "
             "``DOCUMENTATION`` and ``EXAMPLES``: antsibull-docs and galaxy-importer read plugin docs through ansible-doc, "
             "which does not know event sources, so this page is written from the sources by ``hack/eda_docs.py`` (a test "
             "holds it to them). The guide on always-on remediation is :ref:`ansible_collections.gpuops.fleet.docsite.events`.", ""]
    for name in sorted(n[:-3] for n in os.listdir(SOURCES) if n.endswith(".py") and not n.startswith("_")):
        doc, examples = docs(os.path.join(SOURCES, name + ".py"))
        title = "gpuops.fleet.%s" % name
        lines += [title, "-" * len(title), "", _text(doc["short_description"]), ""]
        for paragraph in doc["description"]:
            lines += ["- " + _text(paragraph), ""]
        lines += [".. list-table:: Options of %s" % title, "   :header-rows: 1", "", "   * - Option", "     - Type", "     - Default",
                  "     - Description"]
        for option, spec in doc["options"].items():
            kind = spec["type"] + (" of %s" % spec["elements"] if spec.get("elements") else "")
            default = "``%s``" % yaml.safe_dump(spec["default"], default_flow_style=True).strip().replace("\n...", "") if "default" in spec else "(none)"
            lines += ["   * - ``%s``" % option, "     - %s" % kind, "     - %s" % default, "     - %s" % _text(spec["description"])]
        lines += ["", "Example:", "", ".. code-block:: yaml", ""] + ["   " + x if x else "" for x in examples.strip("\n").split("\n")] + [""]
    return "\n".join(lines)


def main(argv):
    return docgen.write_or_check(PAGE, page(), argv, "python hack/eda_docs.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
