# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pure half of daemonset_rollout: revision, plan, pod state, checks, rows (no cluster)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.rollout import plan as ro
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

A = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
B = "GPU-68ce64fb-ea68-5ad6-7e72-31f3f07378df"
DEAD = "GPU-00000000-dead-beef-0000-000000000000"
UID = "ds-uid-1"


def _ds(generation=2, observed=2, image="nvcr.io/nvidia/k8s-device-plugin:v0.17.1"):
    return {"metadata": {"namespace": "kube-system", "name": "plugin", "uid": UID, "generation": generation},
            "spec": {"template": {"spec": {"containers": [{"name": "ctr", "image": image}]}}},
            "status": {"observedGeneration": observed}}


def _rev(name, number, owner=UID, label=True):
    meta = {"name": name, "ownerReferences": [{"uid": owner, "controller": True}]}
    if label:
        meta["labels"] = {ro.REVISION_LABEL: name.rsplit("-", 1)[-1]}
    return {"metadata": meta, "revision": number}


def _pod(name, node, rev, image="nvidia/k8s-device-plugin:1.0.0-beta4", ready=True, deleting=False):
    meta = {"name": name, "namespace": "kube-system", "labels": {ro.REVISION_LABEL: rev}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-21T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "ctr", "image": image}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


# -- revision -------------------------------------------------------------------------------------

def test_the_current_revision_is_the_highest_numbered_one_the_daemonset_owns():
    revisions = [_rev("plugin-aaa", 1), _rev("plugin-ccc", 3), _rev("plugin-bbb", 2), _rev("other-zzz", 9, owner="x")]
    assert ro.current_revision(_ds(), revisions) == {"hash": "ccc", "number": 3, "name": "plugin-ccc"}
    # a revision from before the label existed: the controller labels it with its name
    assert ro.current_revision(_ds(), [_rev("plugin-old", 4, label=False)])["hash"] == "plugin-old"
    with pytest.raises(ro.RolloutError, match="no ControllerRevision yet"):
        ro.current_revision(_ds(), [_rev("other-zzz", 9, owner="x")])


def test_observed_means_the_controller_caught_up_with_the_generation():
    assert ro.observed(_ds(2, 2)) and ro.observed(_ds(2, 3))
    assert not ro.observed(_ds(3, 2))


def test_a_pod_is_current_by_its_revision_hash_not_its_image():
    # same image string, older revision (say an env var changed): not current
    pod = _pod("p", "gpu-a", "aaa", image="nvcr.io/nvidia/k8s-device-plugin:v0.17.1")
    assert not ro.pod_is_current(pod, "ccc") and ro.pod_is_current(pod, "aaa")
    assert not ro.pod_is_current(pod, None)


# -- plan -----------------------------------------------------------------------------------------

def test_plan_replaces_old_pods_waits_for_new_ones_and_skips_current_nodes():
    pods = [_pod("p-c", "gpu-c", "aaa"), _pod("p-a", "gpu-a", "aaa"), _pod("p-b", "gpu-b", "ccc"),
            _pod("p-d", "gpu-d", "ccc", ready=False), _pod("gone", "gpu-e", "aaa", deleting=True)]
    plan = ro.plan(_ds(), "ccc", pods, batch_size=2)
    assert [(s["node"], s["action"], s["old_pods"]) for s in plan["steps"]] == [
        ("gpu-a", "replace", ["p-a"]), ("gpu-c", "replace", ["p-c"]), ("gpu-d", "wait", [])]
    assert plan["current"] == ["gpu-b"]
    assert [[s["node"] for s in b] for b in plan["batches"]] == [["gpu-a", "gpu-c"], ["gpu-d"]]
    assert ro.plan_lines(plan, "ctr") == [
        "batch 1: gpu-a: 1.0.0-beta4 -> v0.17.1 (delete p-a)", "batch 1: gpu-c: 1.0.0-beta4 -> v0.17.1 (delete p-c)",
        "batch 2: gpu-d: wait for the pod of the current revision and check it"]


def test_plan_for_named_nodes_waits_for_a_node_without_a_pod():
    plan = ro.plan(_ds(), "ccc", [_pod("p-a", "gpu-a", "ccc")], nodes=["gpu-a", "gpu-new"])
    assert plan["current"] == ["gpu-a"]
    assert [(s["node"], s["action"]) for s in plan["steps"]] == [("gpu-new", "wait")]


def test_a_second_run_has_nothing_to_do_unless_told_to_verify_current_nodes():
    pods = [_pod("p-a", "gpu-a", "ccc"), _pod("p-b", "gpu-b", "ccc")]
    plan = ro.plan(_ds(), "ccc", pods, batch_size=5)
    assert plan["steps"] == [] and plan["current"] == ["gpu-a", "gpu-b"]
    assert ro.plan_lines(plan, "ctr") == ["nothing to replace: 2 node(s) already run nvcr.io/nvidia/k8s-device-plugin:v0.17.1"]
    checked = ro.plan(_ds(), "ccc", pods, verify_current=True)
    assert [(s["node"], s["action"]) for s in checked["steps"]] == [("gpu-a", "wait"), ("gpu-b", "wait")]


def test_check_mode_with_a_changing_template_plans_every_pod():
    plan = ro.plan(_ds(), None, [_pod("p-a", "gpu-a", "ccc")], assume_changed=True)
    assert [s["node"] for s in plan["steps"]] == ["gpu-a"]
    assert ro.plan_lines(plan, "ctr", check_mode=True)[0] == "CHECK MODE: nothing is deleted"


def test_plan_refuses_a_bad_batch_size():
    with pytest.raises(ParameterError, match="batch_size"):
        ro.plan(_ds(), "ccc", [], batch_size=0)


# -- pod state ------------------------------------------------------------------------------------

def _crashing(restarts, init=False):
    pod = _pod("p", "gpu-a", "ccc", ready=False)
    key = "initContainerStatuses" if init else "containerStatuses"
    pod["status"][key] = [{"name": "installer" if init else "ctr", "restartCount": restarts,
                           "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
                           "lastState": {"terminated": {"exitCode": 1}}}]
    return pod


def test_a_crashlooping_container_fails_the_node_at_once_after_enough_restarts():
    early = ro.pod_state(_crashing(1))
    assert (early["done"], early["failed"]) == (False, False)
    late = ro.pod_state(_crashing(3))
    assert (late["ready"], late["done"], late["failed"]) == (False, True, True)
    assert late["reason"] == "ctr: CrashLoopBackOff (back-off 10s)"
    init = ro.pod_state(_crashing(5, init=True))
    assert init["failed"] and init["reason"] == "init container installer: CrashLoopBackOff (back-off 10s)"


def test_a_failed_containers_termination_message_is_its_reason_last_line():
    # terminationMessagePolicy FallbackToLogsOnError: the log's tail; the row says its last line (the error)
    pod = _crashing(3)
    pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["message"] = "started\n" + "x" * 700 + "\n"
    assert ro.pod_state(pod)["reason"] == "ctr: CrashLoopBackOff (back-off 10s); ctr said: " + "x" * ro.LAST_WORDS_MAX
    pod["status"]["containerStatuses"][0]["lastState"]["terminated"] = {"exitCode": 0, "message": "fine"}
    assert ro.pod_state(pod)["reason"] == "ctr: CrashLoopBackOff (back-off 10s)"


def test_require_init_wants_every_init_container_exit_0():
    pod = _pod("p", "gpu-a", "ccc")
    pod["status"]["initContainerStatuses"] = [{"name": "installer", "state": {"terminated": {"exitCode": 0}}}]
    assert ro.pod_state(pod, require_init=True)["ready"]
    pod["status"]["initContainerStatuses"] = [{"name": "installer", "state": {"running": {}}}]
    state = ro.pod_state(pod, require_init=True)
    assert not state["ready"] and "init container" in state["reason"]
    assert ro.pod_state(pod)["ready"]


# -- checks ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("capacity, allocatable, before, ok, reason", [
    ("2", "2", 2, True, None),
    ("2", "0", 2, False, "allocatable nvidia.com/gpu is 0 of capacity 2"),
    ("0", "0", 2, False, "the plugin registered no nvidia.com/gpu (capacity 0)"),
    ("1", "1", 2, False, "capacity nvidia.com/gpu is 1, was 2 before the rollout"),
    ("1", "1", None, True, None),
])
def test_node_resource(capacity, allocatable, before, ok, reason):
    node = {"status": {"capacity": {"nvidia.com/gpu": capacity}, "allocatable": {"nvidia.com/gpu": allocatable}}}
    result = ro.node_resource(node, "nvidia.com/gpu", before)
    assert (result["ok"], result["reason"], result["text"]) == (ok, reason, "%s/%s" % (allocatable, capacity))


def test_log_check_returns_the_last_matching_line_and_its_named_groups():
    log = "+ installing\nVerified installation of driver version 535.104.05\nrestarting\nVerified installation of driver version 550.54.15\ndone\n"
    pattern = ro.check_pattern("log_check.pattern", r"Verified installation of driver version (?P<version>[0-9.]+)")
    found = ro.log_check(log, pattern)
    assert found == {"ok": True, "line": "Verified installation of driver version 550.54.15", "groups": {"version": "550.54.15"}, "reason": None}
    assert ro.log_check("nothing here", pattern)["reason"].startswith("no line of the log matches")
    # the row says what the container said last instead (an installer's error), or that it said nothing
    assert ro.log_check("starting\nerror: disk full\n\n", pattern)["reason"].endswith("; its last line: error: disk full")
    assert ro.log_check("", pattern)["reason"].endswith("; the log is empty")
    with pytest.raises(ParameterError, match="log_check.pattern"):
        ro.check_pattern("log_check.pattern", "(unclosed")


def _finished(message, phase="Succeeded"):
    return {"status": {"phase": phase, "containerStatuses": [{"state": {"terminated": {"exitCode": 0, "message": message}}}]}}


def test_verify_listing_compares_nvidia_smi_output_with_the_inventory():
    listing = "GPU 0: Tesla T4 (UUID: %s)\nGPU 1: Tesla T4 (UUID: %s)\n" % (A, B)
    assert ro.verify_listing(_finished(listing), [B, A])["ok"] is True
    wrong = ro.verify_listing(_finished("%s\n%s\n" % (A, DEAD)), [A, B])
    assert (wrong["ok"], wrong["missing"], wrong["unexpected"]) == (False, [B], [DEAD])
    failed = ro.verify_listing({"status": {"phase": "Failed", "reason": "UnexpectedAdmissionError"}}, [A])
    assert failed["ok"] is False and "UnexpectedAdmissionError" in failed["reason"]
    assert ro.verify_listing(_finished(A), [])["reason"].startswith("no GPUs in gpu_uuid_facts")
    # asked for one GPU: any current one is right, a gone one or two are not
    assert ro.verify_listing(_finished(B), [A, B], requested=1)["ok"] is True
    assert ro.verify_listing(_finished(DEAD), [A, B], requested=1)["ok"] is False
    assert ro.verify_listing(_finished("%s %s" % (A, B)), [A, B], requested="1")["ok"] is False


def test_verify_result_without_expected_gpus_hands_back_the_message():
    assert ro.verify_result(_finished("hello"))["message"] == "hello"
    assert ro.verify_result(_finished("boom", phase="Failed"))["ok"] is False


def test_a_pod_given_every_free_gpu_must_see_the_remediated_one():
    g0, g1 = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0", "GPU-11111111-2222-3333-4444-555555555555"
    assert ro.verify_result(_finished(g1 + "\n" + g0), must_see=[g0])["ok"] is True
    missed = ro.verify_result(_finished(g1), must_see=[g0])
    assert missed["ok"] is False and missed["missing"] == [g0] and "every free GPU of the node (%s) and not %s" % (g1, g0) in missed["reason"]
    assert ro.verify_result(_finished("", phase="Failed"), must_see=[g0])["ok"] is False


def test_free_gpus_is_allocatable_less_what_the_pods_that_have_not_ended_ask_for():
    node = {"status": {"allocatable": {"nvidia.com/gpu": "4"}}}

    def pod(phase, *gpus, init=()):
        ctrs = [{"resources": {"limits": {"nvidia.com/gpu": str(g)}}} for g in gpus]
        inits = [{"resources": {"requests": {"nvidia.com/gpu": str(g)}}} for g in init]
        return {"spec": {"containers": ctrs, "initContainers": inits}, "status": {"phase": phase}}

    pods = [pod("Running", 1), pod("Pending", 1, 0), pod("Succeeded", 2), pod("Failed", 1), pod("Running", init=(1,)), {"spec": {"containers": [{}]}}]
    assert ro.free_gpus(node, pods, "nvidia.com/gpu") == 1
    assert ro.free_gpus(node, pods + [pod("Running", 3)], "nvidia.com/gpu") == 0
    assert ro.free_gpus({"status": {}}, [], "nvidia.com/gpu") == 0


def test_the_verification_pod_is_pinned_named_and_sized_per_node_without_touching_the_template():
    template = {"metadata": {"generateName": "x-", "labels": {"a": "b"}},
                "spec": {"containers": [{"name": "v", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    pod = ro.verify_pod(template, "gpu-a", "verify-gpu-a", gpus=2)
    assert pod["metadata"] == {"labels": {"a": "b"}, "name": "verify-gpu-a"}
    assert (pod["spec"]["nodeName"], pod["spec"]["restartPolicy"]) == ("gpu-a", "Never")
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert template["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}
    with pytest.raises(ParameterError, match="verify_pod.template"):
        ro.verify_pod({"spec": {}}, "gpu-a", "n")


# -- rows -------------------------------------------------------------------------------------------

def test_summary_lists_nodes_by_outcome_and_says_whether_it_stopped():
    plan = ro.plan(_ds(), "ccc", [_pod("p-a", "gpu-a", "aaa"), _pod("p-b", "gpu-b", "aaa"), _pod("p-c", "gpu-c", "ccc")])
    rows = [ro.new_row(s) for s in plan["steps"]]
    rows[0].update(status="updated", gpus="1/1", seconds=6.2)
    rows[1].update(status="failed", reason="the plugin registered no nvidia.com/gpu (capacity 0)")
    out = ro.summary(rows, plan, True, 0, False)
    assert (out["updated"], out["failed_nodes"], out["current"], out["stopped"]) == (["gpu-a"], ["gpu-b"], ["gpu-c"], True)
    assert "failed" not in out  # a "failed" key would fail the Ansible task
    assert out["msg"] == "stopped: 1 updated, 0 ready, 1 failed (max_failed_nodes 0), 0 not started"
    assert ro.report_lines(rows) == ["gpu-a: updated, GPUs 1/1 (6.2 s)",
                                     "gpu-b: failed: the plugin registered no nvidia.com/gpu (capacity 0)"]


def test_log_check_expect_compares_named_groups_and_needs_them_in_the_pattern():
    pattern = ro.check_pattern("log_check.pattern", r"Driver Version: (?P<version>[0-9.]+)[\s\S]*?installation\.\.\. DONE", {"version": "1"})
    log = "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |\nVerifying Nvidia installation... DONE.\n"
    assert ro.log_check(log, pattern, {"version": "535.104.05"})["ok"] is True
    wrong = ro.log_check(log, pattern, {"version": "550.54.15"})
    assert (wrong["ok"], wrong["reason"]) == (False, "version is 535.104.05, expected 550.54.15")
    assert wrong["line"].startswith("| NVIDIA-SMI 535.104.05")
    with pytest.raises(ParameterError, match="log_check.expect"):
        ro.check_pattern("log_check.pattern", r"Driver Version: ([0-9.]+)", {"version": "1"})


def test_check_only_checks_every_named_node_with_the_pod_it_runs_and_deletes_nothing():
    pods = [_pod("p-a", "gpu-a", "aaa"), _pod("p-b", "gpu-b", "ccc")]
    plan = ro.plan(_ds(), "ccc", pods, nodes=["gpu-a", "gpu-b"], check_only=True)
    assert [(s["node"], s["action"], s["old_pods"]) for s in plan["steps"]] == [("gpu-a", "check", []), ("gpu-b", "check", [])]
    assert plan["current"] == []
    assert ro.plan_lines(plan, "ctr")[0] == "batch 1: gpu-a: check the pod it runs (nothing is deleted)"
