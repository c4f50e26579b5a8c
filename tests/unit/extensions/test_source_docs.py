# -*- coding: utf-8 -*-
"""The event sources as ansible.eda writes them: DOCUMENTATION and EXAMPLES in each source, held to the options each source's
check accepts (names, types, defaults, bounds by example; the settings tables of events/options.py), and the docs site's page
written from them (hack/eda_docs.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import options as source_options
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import kinds as event_kinds
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SOURCES = os.path.join(ROOT, "extensions", "eda", "plugins", "event_source")
TOKEN = "t" * 32
TABLES = {"gpu_nodes": source_options.NODES, "alertmanager": source_options.ALERTS}
CHECKS = {"gpu_nodes": lambda args: source_options.check_nodes(args, read=lambda path: TOKEN),
          "alertmanager": lambda args: source_options.check_alerts(
              args if {"token", "token_file"} & set(args) else dict(args, token=TOKEN), read=lambda path: TOKEN)}

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
        # each option's type and elements are its row's in the source's settings table
        assert (spec["type"], spec.get("elements")) == (TABLES[name].by_name[option]["type"], TABLES[name].by_name[option]["elements"]), option
        assert spec["description"], option
        if option == "token":
            continue
        assert spec.get("default") == (defaults[option] if defaults[option] != "" or "default" in spec else None), option
        if spec["type"] == "int":  # the documented default is accepted, and so is a rulebook's string of it
            assert CHECKS[name]({option: str(spec["default"])})[option] == spec["default"]
    with pytest.raises(ParameterError, match="no_such_option: is not an option"):
        CHECKS[name]({"no_such_option": 1})


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_example_is_a_ruleset_or_a_source_entry_whose_options_pass_the_check(name):
    doc, examples = eda_docs.docs(os.path.join(SOURCES, name + ".py"))
    used = []
    for item in yaml.safe_load(examples):
        entries = item.get("sources", [item])  # a whole ruleset, or a source's entry as ansible.eda shows it
        if "sources" in item:
            assert item["rules"] and item["hosts"]
            for rule in item["rules"]:
                assert [k for k in event_kinds.KINDS if '"%s"' % k in rule["condition"]], rule["condition"]
        for source in entries:
            ((fqcn, args),) = source.items()
            short = fqcn.split(".")[-1]
            assert fqcn == "gpuops.fleet." + short and short in CHECKS
            CHECKS[short](args)
            used.append(short)
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
