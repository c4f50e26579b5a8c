# -*- coding: utf-8 -*-
"""The event sources as ansible.eda writes them: DOCUMENTATION and EXAMPLES in each source, held to the options each source's
check accepts (names, defaults, bounds by example), the docs site's page written from them (hack/eda_docs.py), and the kinds
of event spelled only in node_events' declaration."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import alerts, node_events
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SOURCES = os.path.join(ROOT, "extensions", "eda", "plugins", "event_source")
TOKEN = "t" * 32
CHECKS = {"gpu_nodes": node_events.check_options,
          "alertmanager": lambda args: alerts.check_options(args if {"token", "token_file"} & set(args) else dict(args, token=TOKEN),
                                                            read=lambda path: TOKEN)}

sys.path.insert(0, os.path.join(ROOT, "hack"))
try:
    import eda_docs
finally:
    sys.path.pop(0)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_sources_documentation_is_the_options_its_check_accepts(name):
    doc, examples = eda_docs.docs(os.path.join(SOURCES, name + ".py"))
    assert doc["short_description"] and doc["description"]
    defaults = CHECKS[name]({})
    assert sorted(doc["options"]) == sorted(defaults), "DOCUMENTATION's options and check_options' differ"
    for option, spec in doc["options"].items():
        assert spec["type"] in ("str", "int", "bool", "list") and spec["description"], option
        if option == "token":
            continue
        assert spec.get("default") == (defaults[option] if defaults[option] != "" or "default" in spec else None), option
        if spec["type"] == "int":  # the documented default is accepted, and so is a rulebook's string of it
            assert CHECKS[name]({option: str(spec["default"])})[option] == spec["default"]
    with pytest.raises(ParameterError, match="no_such_option: is not an option"):
        CHECKS[name]({"no_such_option": 1})


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_example_is_a_ruleset_whose_source_options_pass_the_check(name):
    doc, examples = eda_docs.docs(os.path.join(SOURCES, name + ".py"))
    rulesets = yaml.safe_load(examples)
    used = []
    for ruleset in rulesets:
        assert ruleset["rules"] and ruleset["hosts"]
        for source in ruleset["sources"]:
            ((fqcn, args),) = source.items()
            short = fqcn.split(".")[-1]
            assert fqcn == "gpuops.fleet." + short and short in CHECKS
            CHECKS[short](args)
            used.append(short)
        for rule in ruleset["rules"]:
            kinds = [k for k in node_events.KINDS if '"%s"' % k in rule["condition"]]
            assert kinds, rule["condition"]
    assert name in used


def test_the_docs_sites_page_is_written_from_the_sources():
    run = subprocess.run([sys.executable, os.path.join(ROOT, "hack", "eda_docs.py"), "--check"], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    with open(eda_docs.PAGE, encoding="utf-8") as handle:
        page = handle.read()
    for name in CHECKS:
        doc, dummy = eda_docs.docs(os.path.join(SOURCES, name + ".py"))
        assert "gpuops.fleet.%s\n" % name in page
        for option in doc["options"]:
            assert "   * - ``%s``" % option in page
    with open(os.path.join(ROOT, "docs", "docsite", "extra-docs.yml")) as handle:
        assert "event_sources" in yaml.safe_load(handle)["sections"][0]["toctree"]


def _kind_strings(path):
    """The string constants of a file that are a kind of event, but for docstrings, DOCUMENTATION/EXAMPLES, dict keys and
    subscripts (``options["heartbeat"]``: the options' vocabulary, which shares the word ``heartbeat``), and node_events'
    option bounds."""
    with open(path, "rb") as handle:
        tree = ast.parse(handle.read(), path)
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("DOCUMENTATION", "EXAMPLES") for t in node.targets):
            skip.add(id(node.value))
        if isinstance(node, ast.Dict):
            skip.update(id(k) for k in node.keys if k is not None)
        if isinstance(node, ast.Subscript):
            skip.add(id(node.slice))
        if isinstance(node, ast.Tuple) and len(node.elts) == 3 and all(isinstance(e, ast.Constant) for e in node.elts) \
                and all(isinstance(e.value, int) for e in node.elts[1:]):
            skip.add(id(node.elts[0]))  # (option, low, high)
    kinds = set(node_events.KINDS) | {node_events.THROTTLED}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in kinds and id(n) not in skip]


def test_every_kind_is_emitted_through_its_declared_constant():
    files = [os.path.join(ROOT, "plugins", "module_utils", "_cluster", n) for n in ("node_events.py", "alerts.py", "receiver.py")]
    files += [os.path.join(SOURCES, n) for n in sorted(os.listdir(SOURCES)) if n.endswith(".py")]
    spelled = dict((os.path.relpath(f, ROOT), _kind_strings(f)) for f in files)
    declared = spelled.pop("plugins/module_utils/_cluster/node_events.py")
    assert spelled == dict((k, []) for k in spelled)
    # node_events spells each kind once, in its declaration; KINDS holds every one, the throttled too
    assert sorted(declared) == sorted([k for k in node_events.KINDS if not k.endswith(node_events.THROTTLED)] + [node_events.THROTTLED])
    assert node_events.GPU_ALERT in node_events.KINDS and len(set(node_events.KINDS)) == len(node_events.KINDS)


def test_the_check_finds_a_spelled_kind(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""gpu_faults in a docstring is fine"""\nDOCUMENTATION = "gpu_alert"\nEVENT = {"kind": "gpu_alert"}\n')
    assert _kind_strings(str(bad)) == ["gpu_alert"]
