# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_diag: DCGM's JSON read as real output has it (the parse, pure), and the module run by ansible-playbook on a fake
node: with the fake dcgmi a failing test fails the task naming it and the GPU, a pass passes, DCGM's runtime error is no
pass; without dcgmi nothing runs and the gate is no_dcgm (the verification pod's)."""

from __future__ import annotations

import json
import os

import fakenode
import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node.health import diag

G = ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0", "GPU-11111111-2222-3333-4444-555555555555"]
# DCGM 3.1's own test of real output (JsonResult: Deserialize real output), cut to two tests: text before the JSON, a null
# between tests, a software test's gpu_ids as one CSV string, per-GPU results with numbers
REAL = """WARNING: THIS SHOULD NOT HAPPEN
{
"DCGM GPU Diagnostic" : {
  "test_categories" : [
    {"category" : "Deployment", "tests" : [
      {"name" : "Denylist", "results" : [{"gpu_ids" : "0,1,2,3,4,5,6,7", "status" : "PASS"}]},
      null,
      {"name" : "NVML Library", "results" : [{"gpu_ids" : "0,1,2,3,4,5,6,7", "status" : "PASS"}]}]},
    {"category" : "Custom", "tests" : [
      {"name" : "software", "results" : [{"gpu_ids" : 0, "status" : "PASS"}, {"gpu_ids" : 1, "status" : "PASS"}]}]}],
  "version" : "3.1.0"
}
}
"""


def test_real_output_parses_and_a_fail_on_our_gpu_fails_while_one_on_another_does_not():
    parsed = diag.parse(REAL)
    assert parsed["version"] == "3.1.0" and len(parsed["results"]) == 4
    assert diag.verdict(parsed, [1]) == (True, [], None)
    failing = json.loads(REAL[REAL.index("{"):])
    failing["DCGM GPU Diagnostic"]["test_categories"][1]["tests"][0]["results"][1] = {
        "gpu_ids": "1", "status": "Fail", "warnings": [{"warning": "Pages retired", "error_id": 83}]}
    parsed = diag.parse(json.dumps(failing))
    passed, failed, reason = diag.verdict(parsed, [1])
    assert not passed and [(f["test"], f["gpus"], f["warnings"]) for f in failed] == [("software", [1], ["Pages retired (error 83)"])]
    assert diag.verdict(parsed, [0])[0]  # GPU 0's results pass: another GPU's failure is not this gate's


# DCGM 4.x's shape, as dcgmi/Diag.cpp (HelperJsonBuildOutput, HelperJsonAddResult; 4.2 to 4.6) writes it and
# testing/python3/dcgm_diag_schema.json describes it: a result names its entity, the version is in metadata, a test has a
# test_summary, and a CPU's result (entity_group_id 7, DCGM_FE_CPU) sits beside the GPUs'
DCGM4 = {
    "DCGM Diagnostic": {"test_categories": [
        {"category": "Deployment", "tests": [{"name": "software", "results": [
            {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
            {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Pass"}], "test_summary": {"status": "Pass"}}]},
        {"category": "Hardware", "tests": [{"name": "memory", "results": [
            {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
            {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Pass"}], "test_summary": {"status": "Pass"}}]},
        {"category": "Stress", "tests": [{"name": "cpu_eud", "results": [
            {"entity_group": "CPU", "entity_group_id": 7, "entity_id": 1, "status": "Fail",
             "warnings": [{"warning": "CPU EUD failed", "error_id": 120, "error_category": 4, "error_severity": 2}]}],
            "test_summary": {"status": "Fail"}}]}]},
    "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1,
                       "entities": [{"entity_id": 0, "device_id": "20b0"}, {"entity_id": 1, "device_id": "20b0"}]}],
    "metadata": {"version": "4.6.0", "Driver Version Detected": "570.124.06"}}


def test_dcgm_4_output_names_its_gpus_by_entity_a_pass_passes_and_a_fail_is_named():
    """Issue 59, item 4: DCGM 4.x names a result's GPU with entity_group/entity_id, not gpu_ids; before, every 4.x pass was
    "no verdict" (the node stayed needs_human after a good reset) and a failing test was not named."""
    parsed = diag.parse(json.dumps(DCGM4, indent=3))
    assert parsed["version"] == "4.6.0"
    assert [(r["test"], r["gpus"], r["status"]) for r in parsed["results"]] == [
        ("software", [0], "pass"), ("software", [1], "pass"), ("memory", [0], "pass"), ("memory", [1], "pass"), ("cpu_eud", [], "fail")]
    assert diag.verdict(parsed, [1]) == (True, [], None)  # the CPU's failure names no GPU of ours
    failing = json.loads(json.dumps(DCGM4))
    failing["DCGM Diagnostic"]["test_categories"][1]["tests"][0]["results"][1] = {
        "entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Fail",
        "warnings": [{"warning": "Pages retired", "error_id": 83, "error_category": 4, "error_severity": 2}]}
    passed, failed, reason = diag.verdict(diag.parse(json.dumps(failing)), [1])
    assert not passed and [(f["test"], f["gpus"], f["warnings"]) for f in failed] == [("memory", [1], ["Pages retired (error 83)"])]
    assert diag.verdict(diag.parse(json.dumps(failing)), [0])[0]


@pytest.mark.parametrize("result", [
    {"entity_group": "GPU", "entity_group_id": 7, "entity_id": 1, "status": "Pass"},  # the name and the number disagree
    {"entity_group": "Switch", "entity_id": 1, "status": "Pass"},
    {"entity_id": 1, "status": "Pass"},  # no entity group: no GPU
    {"entity_group": "GPU", "entity_group_id": 1, "entity_id": "1", "status": "Pass"},
    {"entity_group": "GPU", "entity_group_id": True, "entity_id": 1, "status": "Pass"},
])
def test_a_dcgm_4_result_of_another_entity_or_an_odd_id_names_no_gpu(result):
    text = json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "memory", "results": [result]}]}]}})
    passed, failed, reason = diag.verdict(diag.parse(text), [1])
    assert not passed and reason == "dcgmi's results name none of GPUs 1"


@pytest.mark.parametrize("text, why", [
    ("", "dcgmi wrote no JSON"),
    ("Error: unable to connect to the host engine", "dcgmi wrote no JSON"),
    ('{"DCGM GPU Diagnostic": {"runtime_error": "The GPU is in use", "version": "3.3.5"}}', "DCGM's runtime error: The GPU is in use"),
    ('{"DCGM GPU Diagnostic": {"test_categories": [], "version": "4.2.3"}}', "dcgmi's results name none of GPUs 1"),
    ('{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "GPU Memory", "results": '
     '[{"gpu_ids": "0", "status": "Fail"}]}]}]}}', "dcgmi's results name none of GPUs 1"),
])
def test_no_verdict_is_never_a_pass(text, why):
    passed, failed, reason = diag.verdict(diag.parse(text), [1])
    assert not passed and not failed and reason == why


def test_an_unknown_status_on_our_gpu_fails():
    text = '{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "GPU Memory", "results": ' \
           '[{"gpu_ids": "1", "status": "Broken"}]}]}]}}'
    passed, failed, dummy = diag.verdict(diag.parse(text), [1])
    assert not passed and failed[0]["status"] == "unknown"


def _one(results):
    tests = [{"name": "GPU Memory", "results": results}]
    return json.dumps({"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": tests}]}})


@pytest.mark.parametrize("results", [
    [{"gpu_ids": "1", "status": "SKIPPED"}],
    [{"gpu_ids": "1", "status": "SKIP"}, {"gpu_ids": "1", "status": "NOT RUN"}, {"gpu_ids": "1", "status": "Warn"}],
    [{"gpu_ids": "0,1", "status": "SKIPPED"}, {"gpu_ids": "0", "status": "PASS"}],
])
def test_a_gpu_no_test_passed_on_is_no_verdict_never_a_pass(results):
    """Issue 57, item 13: results that are all SKIPPED (or warned, not run) proved nothing about the GPU: no verdict."""
    passed, failed, reason = diag.verdict(diag.parse(_one(results)), [1])
    assert (passed, failed) == (False, []) and reason.startswith("no test passed on GPU 1"), reason


def test_each_gpu_needs_a_pass_of_its_own():
    parsed = diag.parse(_one([{"gpu_ids": "0", "status": "PASS"}, {"gpu_ids": "1", "status": "SKIPPED"}]))
    assert diag.verdict(parsed, [0]) == (True, [], None)
    assert not diag.verdict(parsed, [0, 1])[0] and "GPU 1" in diag.verdict(parsed, [0, 1])[2]


@pytest.mark.parametrize("gpu_ids", ["\u00b2", "1" * 5000, "\u0661", "1.0", 1.0, "-1", 10 ** 40, [1], {"1": 1}, True, None, "9" * 19])
def test_gpu_ids_that_name_no_gpu_are_no_verdict_never_a_traceback(gpu_ids):
    """A hostile or broken dcgmi's gpu_ids (a superscript digit, 5,000 digits, a float, a list): no GPU, so no verdict."""
    passed, failed, reason = diag.verdict(diag.parse(_one([{"gpu_ids": gpu_ids, "status": "PASS"}])), [1])
    assert (passed, failed) == (False, []) and reason == "dcgmi's results name none of GPUs 1"


def records(*extra):
    return [fakenode.gpu(G[0], fakenode.A100, "00000000:3B:00.0", 40960, 0), fakenode.gpu(G[1], fakenode.A100, "00000000:5E:00.0", 40960, 1)] \
        + list(extra)


def with_dcgm(env, tmp_path):
    env = dict(env)
    env["PATH"] = fakenode.dcgm_dir(str(tmp_path / "dcgm")) + os.pathsep + env["PATH"]
    return env


def test_a_failing_test_on_the_gpu_fails_the_gate_naming_it(fake_node, playbook, tmp_path):
    env = with_dcgm(fake_node(records("dcgm_fail|1|GPU Memory|Memory errors detected on GPU 1 (SIMULATED)|83")), tmp_path)
    playbook("gpu_diag.yml", env, target=G[1])
    got = json.loads((tmp_path / "diag.json").read_text())
    assert got["in_check"]["gate"] == "dcgm" and got["in_check"]["passed"] is None and not got["in_check"]["changed"]
    level2 = got["level2"]
    assert level2["failed"] and level2["gate"] == "dcgm" and level2["passed"] is False and level2["rc"] == 226
    assert level2["msg"] == ("DCGM diagnostic level 2 failed: GPU Memory (Hardware) on GPU 1 (%s): Memory errors detected on GPU 1 "
                             "(SIMULATED) (error 83)" % G[1])
    # it ran once (check mode ran nothing), on GPU 1 only, at level 2, with JSON
    with open(env["GPUOPS_FAKE_NVML_CONFIG"] + ".dcgmi-runs") as handle:
        runs = handle.read().splitlines()
    assert runs == ["diag -r 2 -i 1 -j"]
    assert got["bad_level"]["failed"] and "level" in got["bad_level"]["msg"]
    assert got["not_here"]["failed"] and "GPU-99999999-2222-3333-4444-555555555555 is not on this node" in got["not_here"]["msg"]


def test_a_pass_passes_and_a_runtime_error_does_not(fake_node, playbook, tmp_path):
    env = with_dcgm(fake_node(records("dcgm_fail|0|GPU Memory|another GPU's failure|83")), tmp_path)
    playbook("gpu_diag.yml", env, target=G[1])
    level2 = json.loads((tmp_path / "diag.json").read_text())["level2"]
    assert not level2.get("failed") and level2["passed"] and level2["version"] == "3.3.5" and level2["gpus"] == {G[1]: 1}
    assert {(r["test"], r["status"]) for r in level2["results"] if 1 in r["gpus"]} >= {("GPU Memory", "pass"), ("PCIe", "pass")}
    env = with_dcgm(fake_node(records("dcgm_runtime_error|The GPU is in use by another client (SIMULATED)")), tmp_path)
    playbook("gpu_diag.yml", env, target=G[1])
    level2 = json.loads((tmp_path / "diag.json").read_text())["level2"]
    assert level2["failed"] and "gave no verdict (DCGM's runtime error: The GPU is in use" in level2["msg"]


def test_dcgm_4_through_the_module_a_pass_passes_and_a_failing_test_is_named(fake_node, playbook, tmp_path):
    env = with_dcgm(fake_node(records("dcgm_version|4.6.0", "dcgm_fail|0|GPU Memory|another GPU's failure|83")), tmp_path)
    playbook("gpu_diag.yml", env, target=G[1])
    level2 = json.loads((tmp_path / "diag.json").read_text())["level2"]
    assert not level2.get("failed") and level2["passed"] and level2["version"] == "4.6.0", level2
    env = with_dcgm(fake_node(records("dcgm_version|4.6.0", "dcgm_fail|1|GPU Memory|Memory errors detected on GPU 1 (SIMULATED)|83")), tmp_path)
    playbook("gpu_diag.yml", env, target=G[1])
    level2 = json.loads((tmp_path / "diag.json").read_text())["level2"]
    assert level2["failed"] and level2["passed"] is False and level2["msg"] == (
        "DCGM diagnostic level 2 failed: GPU Memory (Hardware) on GPU 1 (%s): Memory errors detected on GPU 1 (SIMULATED) (error 83)" % G[1])


def test_without_dcgm_nothing_runs_and_the_gate_is_the_verification_pods(fake_node, playbook, tmp_path):
    env = fake_node(records("dcgm_fail|1|GPU Memory|would fail|83"))
    playbook("gpu_diag.yml", env, target=G[1])
    level2 = json.loads((tmp_path / "diag.json").read_text())["level2"]
    assert not level2.get("failed") and (level2["gate"], level2["dcgm"]) == ("no_dcgm", False) and "verification pod" in level2["reason"]
    assert not os.path.exists(env["GPUOPS_FAKE_NVML_CONFIG"] + ".dcgmi-runs")
