# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""AWX/AAP material in docs/awx: survey specs in AWX's format, and the awx.awx playbook that creates the templates."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
AWX = os.path.join(ROOT, "docs", "awx")
SURVEYS = sorted(os.listdir(os.path.join(AWX, "surveys")))
TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}


def documented_variables():
    names = set()
    for role in ("checkpoint_guard", "device_plugin", "gpu_remediation"):
        with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as handle:
            for entry in yaml.safe_load(handle)["argument_specs"].values():
                names.update(entry.get("options") or {})
    with open(os.path.join(ROOT, "playbooks", "vars", "kubelet_restarts.yml")) as handle:
        names.update(yaml.safe_load(handle))
    for playbook in ("recover_pods.yml", "site.yml", "gpu_health.yml"):  # variables read with | default(...) in the playbooks
        with open(os.path.join(ROOT, "playbooks", playbook)) as handle:
            names.update(re.findall(r"\b(gpuops_[a-z_]+) \| default", handle.read()))
    return names


@pytest.mark.parametrize("name", SURVEYS)
def test_survey_specs_are_awx_surveys_of_documented_variables(name):
    with open(os.path.join(AWX, "surveys", name)) as handle:
        survey = json.load(handle)
    assert set(survey) == {"name", "description", "spec"} and survey["spec"]
    known = documented_variables()
    for question in survey["spec"]:
        assert {"question_name", "question_description", "required", "type", "variable", "default"} <= set(question), question
        assert question["type"] in TYPES and question["variable"] in known, question["variable"]
        if question["type"] == "multiplechoice":
            assert question["default"] in question["choices"].split("\n")
        if question["type"] == "integer":
            assert question["min"] <= question["default"] <= question["max"]


def test_job_template_playbook_parses_and_uses_only_real_awx_options():
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"))
    subprocess.run([os.path.join(bindir, "ansible-playbook"), "--syntax-check", os.path.join(AWX, "job_templates.yml")],
                   env=env, check=True, capture_output=True)
    doc = json.loads(subprocess.run([os.path.join(bindir, "ansible-doc"), "-j", "awx.awx.job_template"], env=env,
                                    check=True, capture_output=True, text=True).stdout)
    options = set(doc["awx.awx.job_template"]["doc"]["options"])
    with open(os.path.join(AWX, "job_templates.yml")) as handle:
        (play,) = yaml.safe_load(handle)
    used = set(play["tasks"][0]["awx.awx.job_template"])
    assert used <= options, used - options
    # the workflow: plan (check) -> approval -> act, with options awx.awx.workflow_job_template documents
    flow_doc = json.loads(subprocess.run([os.path.join(bindir, "ansible-doc"), "-j", "awx.awx.workflow_job_template"], env=env,
                                         check=True, capture_output=True, text=True).stdout)["awx.awx.workflow_job_template"]["doc"]["options"]
    flow = play["tasks"][1]["awx.awx.workflow_job_template"]
    assert set(flow) <= set(flow_doc), set(flow) - set(flow_doc)
    node_options = set(flow_doc["workflow_nodes"]["suboptions"])
    nodes = dict((n["identifier"], n) for n in flow["workflow_nodes"])
    assert all(set(n) <= node_options for n in nodes.values())
    assert [(n["unified_job_template"]["type"], [s["identifier"] for s in (n.get("related") or {}).get("success_nodes", [])])
            for n in flow["workflow_nodes"]] == [("job_template", ["approve"]), ("workflow_approval", ["remediate"]), ("job_template", [])]
    by_name = dict((t["name"], t) for t in play["vars"]["gpuops_awx_templates"])
    assert by_name[nodes["plan"]["unified_job_template"]["name"]]["job_type"] == "check"
    assert by_name[nodes["remediate"]["unified_job_template"]["name"]]["job_type"] == "run"
    for template in play["vars"]["gpuops_awx_templates"]:
        assert "survey" not in template or os.path.exists(os.path.join(AWX, template["survey"]))
        assert os.path.exists(os.path.join(AWX, "project", template.get("playbook", "site.yml")))
    # issue 60: only the templates whose fleet-wide limits hold across slices are sliced; the sliced repair ends with
    # one joined report
    sliced = sorted(t["name"] for t in play["vars"]["gpuops_awx_templates"] if "slices" in t)
    assert sliced == ["gpuops - GPU health (report)", "gpuops - Plan (check mode)", "gpuops - Repair checkpoints"], sliced
    assert play["tasks"][0]["awx.awx.job_template"]["job_slice_count"] == "{{ item.slices | default(1) }}"
    (joined,) = [t["awx.awx.workflow_job_template"] for t in play["tasks"][2:] if "awx.awx.workflow_job_template" in t]
    assert set(joined) <= set(flow_doc)
    steps = dict((n["identifier"], n) for n in joined["workflow_nodes"])
    assert by_name[steps["repair"]["unified_job_template"]["name"]].get("slices")
    assert by_name[steps["report"]["unified_job_template"]["name"]]["playbook"] == "fleet_report_merge.yml"
    assert steps["repair"]["related"]["always_nodes"] == [{"identifier": "report"}]
