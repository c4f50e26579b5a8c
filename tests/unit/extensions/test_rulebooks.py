# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rulebooks (extensions/eda/rulebooks) as ansible-rulebook 1.3.2 loads them: its JSON schema and its parser (the
conditions compile), every source ours with only options it knows; the EDA controller variants launch only templates
docs/awx/job_templates.yml creates, which prompt for the limit, with their survey's variables only, and carry the same
sources as the ansible-rulebook twin. The real ansible-rulebook runs the CLI rulebooks in tests/kube; no AWX is reachable
here, so the controller variants' launches are checked against the templates, not run."""

from __future__ import annotations

import json
import os
import sys

import pytest
import yaml

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import options as source_options
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import kinds as event_kinds

validators = pytest.importorskip("ansible_rulebook.validators")
rules_parser = pytest.importorskip("ansible_rulebook.rules_parser")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
RULEBOOKS = os.path.join(ROOT, "extensions", "eda", "rulebooks")
NAMES = sorted(os.listdir(RULEBOOKS))
TWINS = {"gpu_health_controller.yml": "gpu_health.yml", "checkpoint_repair_controller.yml": "checkpoint_repair.yml"}
SOURCE_OPTIONS = {"gpuops.fleet.gpu_nodes": source_options.check_nodes({}), "gpuops.fleet.alertmanager": source_options.check_alerts({"enabled": False})}


def load(name):
    with open(os.path.join(RULEBOOKS, name), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def awx():
    with open(os.path.join(ROOT, "docs", "awx", "job_templates.yml"), encoding="utf-8") as handle:
        (play,) = yaml.safe_load(handle)
    templates = dict((t["name"], t) for t in play["vars"]["gpuops_awx_templates"])
    workflows = dict((t["awx.awx.workflow_job_template"]["name"], t["awx.awx.workflow_job_template"]) for t in play["tasks"]
                     if "awx.awx.workflow_job_template" in t)
    prompts = [t["awx.awx.job_template"] for t in play["tasks"] if "awx.awx.job_template" in t][0]
    return templates, workflows, prompts


def survey(path):
    with open(os.path.join(ROOT, "docs", "awx", path), encoding="utf-8") as handle:
        return set(q["variable"] for q in json.load(handle)["spec"])


def test_every_rulebook_has_a_test_here_or_a_twin():
    assert set(NAMES) == {"gpu_health.yml", "checkpoint_repair.yml"} | set(TWINS)


@pytest.mark.parametrize("name", NAMES)
def test_the_rulebook_is_valid_for_ansible_rulebook_and_its_sources_are_ours(name, monkeypatch):
    # the parser asks ansible-galaxy where a collection's source is: the venv's
    monkeypatch.setattr(pytest.importorskip("ansible_rulebook.conf").settings, "ansible_galaxy_path",
                        os.path.join(os.path.dirname(sys.executable), "ansible-galaxy"))
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", os.path.join(ROOT, "build", "collections"))
    data = load(name)
    validators.Validate.rulebook(data)  # ansible-rulebook's own schema
    variables = {"gpu_remediation_mode": "report", "gpuops_checkpoint_repair": False, "gpuops_awx_organization": "Default"}
    rulesets = rules_parser.parse_rule_sets(data, variables)  # its parser: the conditions compile
    assert [r.name for r in rulesets] == [r["name"] for r in data]
    for ruleset in data:
        for source in ruleset["sources"]:
            (kind,) = [k for k in source if k not in ("name", "filters")]
            assert kind in SOURCE_OPTIONS, kind
            assert set(source[kind]) <= set(SOURCE_OPTIONS[kind]), (kind, set(source[kind]) - set(SOURCE_OPTIONS[kind]))
            receiver = source[kind].get("alertmanager") or {}  # gpu_nodes' receiver: the alertmanager source's options
            assert set(receiver) <= set(SOURCE_OPTIONS["gpuops.fleet.alertmanager"]) - set(source_options.WINDOW_NAMES), receiver
        for rule in ruleset["rules"]:
            kinds = [k for k in event_kinds.KINDS if '"%s"' % k in rule["condition"]]
            assert kinds, rule["condition"]  # each rule on one of the source's event kinds


@pytest.mark.parametrize("name", sorted(TWINS))
def test_a_controller_rulebook_launches_only_templates_of_docs_awx_with_their_survey_variables(name):
    templates, workflows, prompts = awx()
    assert prompts["ask_limit_on_launch"] is True  # every job template takes the window's nodes as its limit
    data = load(name)
    launched = 0
    for rule in data[0]["rules"]:
        action = rule["action"]
        if "run_job_template" in action:
            args = action["run_job_template"]
            template = templates[args["name"]]
            allowed = survey(template["survey"])
        elif "run_workflow_template" in action:
            args = action["run_workflow_template"]
            workflow = workflows[args["name"]]
            assert workflow["ask_limit_on_launch"] is True
            allowed = survey(workflow["survey_spec"].split("'")[3])  # lookup('ansible.builtin.file', 'surveys/....json')
            assert [n["identifier"] for n in workflow["workflow_nodes"]] == ["plan", "approve", "remediate"]
        else:
            assert list(action) == ["shutdown"] and "startup" in rule["condition"]
            continue
        launched += 1
        assert args["organization"] == "{{ gpuops_awx_organization }}" and args["include_events"] is False
        assert set((args.get("job_args") or {}).get("extra_vars") or {}) <= allowed, args
    # gpu_health_controller.yml: the plan job, the workflow, and the workflow again for a waiting remediation (remediation_due)
    assert launched == {"gpu_health_controller.yml": 3}.get(name, 2)


@pytest.mark.parametrize("name", sorted(TWINS))
def test_a_controller_rulebook_watches_as_its_twin_does(name):
    mine, twin = load(name)[0], load(TWINS[name])[0]
    assert mine["sources"] == twin["sources"]
    kinds = sorted(set(k for r in twin["rules"] for k in event_kinds.KINDS if '"%s"' % k in r["condition"]))
    assert kinds == sorted(set(k for r in mine["rules"] for k in event_kinds.KINDS if '"%s"' % k in r["condition"]) - {"startup"})


def test_the_checkpoint_template_for_events_never_installs_the_guard():
    templates, dummy, dummy2 = awx()
    assert templates["gpuops - Repair checkpoints after a reboot"]["extra_vars"] == {"checkpoint_guard_install": False}
    assert load("checkpoint_repair.yml")[0]["rules"][0]["action"]["run_playbook"]["extra_vars"]["checkpoint_guard_install"] is False


@pytest.mark.parametrize("name", ["gpu_health.yml", "gpu_health_controller.yml"])
def test_the_rulebooks_source_as_ansible_rulebook_renders_it_passes_the_check_alerts_off_and_on(name):
    """The one source (issue 58): its options, the receiver's nested ones too, rendered as ansible-rulebook renders a
    source's arguments (util.substitute_variables, recursive), are the check's, with the alerts off (the default) and on."""
    util = pytest.importorskip("ansible_rulebook.util")
    (ruleset,) = load(name)
    (source,) = ruleset["sources"]
    args = source["gpuops.fleet.gpu_nodes"]
    off = source_options.check_nodes(util.substitute_variables(args, {}))
    assert off["alertmanager"]["enabled"] is False and off["settle_seconds"] == 5
    given = {"gpuops_alerts_enabled": True, "gpuops_alerts_token": "t" * 20, "gpuops_events_settle_seconds": 3}
    on = source_options.check_nodes(util.substitute_variables(args, given))
    assert on["alertmanager"]["enabled"] is True and on["alertmanager"]["port"] == 5000 and on["alertmanager"]["settle_seconds"] == 3
    with pytest.raises(ParameterError) as err:
        source_options.check_nodes(util.substitute_variables(args, {"gpuops_alerts_enabled": True}))
    assert err.value.field == "alertmanager.token"
