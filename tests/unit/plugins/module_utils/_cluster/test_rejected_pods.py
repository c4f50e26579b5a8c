# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which rejected pods are deleted, which are reported (the API's pod dicts, camelCase)."""

from __future__ import annotations

import shlex

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import rejected_pods as rp
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

MSG = "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 1, Available: 0"


def pod(name, node="n1", phase="Failed", reason="UnexpectedAdmissionError", owner=None, ns="ml", deleting=False):
    meta = {"name": name, "namespace": ns, "uid": "uid-" + name}
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": owner, "uid": "rs-1", "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T05:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase, "reason": reason, "message": MSG}}


PODS = [
    pod("train-abc", owner="train"),
    pod("notebook"),
    pod("other-node", node="n2", owner="train"),
    pod("running", phase="Running", reason=None, owner="train"),
    pod("oom", reason="OOMKilled", owner="train"),
    pod("going", owner="train", deleting=True),
    # an owner reference that is not the controller (e.g. a garbage-collection owner) does not count
    dict(pod("adopted"), metadata={"name": "adopted", "namespace": "ml", "uid": "u", "ownerReferences": [{"kind": "ConfigMap", "name": "x"}]}),
]


def test_owned_pods_are_deleted_bare_ones_reported_with_a_working_command():
    rows = rp.classify(PODS, ["n1"])
    assert [(r["name"], r["action"]) for r in rows] == [("adopted", "report"), ("notebook", "report"), ("train-abc", "delete")]
    train = rows[2]
    assert train["controller"] == {"kind": "ReplicaSet", "name": "train", "uid": "rs-1"} and train["recreate_command"] is None
    assert shlex.split(rows[1]["recreate_command"].split("|")[0]) == ["kubectl", "-n", "ml", "get", "pod", "notebook", "-o", "yaml"]
    assert rows[1]["recreate_command"].endswith("| kubectl replace --force -f -")


def test_bare_pods_are_deleted_only_when_asked():
    rows = rp.classify(PODS, ["n1"], bare_pods="delete")
    assert all(r["action"] == "delete" for r in rows)


def test_names_that_need_quoting_are_quoted():
    assert rp.recreate_command("a b", "x;rm") == "kubectl -n 'a b' get pod 'x;rm' -o yaml | kubectl replace --force -f -"


def test_summary_check_mode_says_would_and_changes_only_when_something_goes():
    rows = rp.classify(PODS, ["n1", "n2"])
    planned = rp.summary(rows, [], check_mode=True)
    assert planned["changed"] and planned["deleted"] == []
    assert planned["msg"] == (
        "4 pod(s) rejected at admission on 2 node(s); would delete 2 with a controller (it replaces them); "
        "2 bare pod(s) left for you: recreate_command recreates each"
    )
    done = rp.summary(rows, ["ml/train-abc", "ml/other-node"], check_mode=False)
    assert done["changed"] and done["deleted"] == ["ml/other-node", "ml/train-abc"]
    assert [b["name"] for b in done["bare"]] == ["adopted", "notebook"]
    nothing = rp.summary(rp.classify(PODS, ["n3"]), [], check_mode=False)
    assert not nothing["changed"] and nothing["msg"] == "no pod rejected at admission, and none broken on a gone GPU, on the nodes given"


@pytest.mark.parametrize(
    "nodes, reasons, bare, field",
    [("n1", ["x"], "report", "nodes"), (["n1"], [], "report", "reasons"), (["n1"], ["x"], "recreate", "bare_pods")],
)
def test_bad_parameters_name_the_field(nodes, reasons, bare, field):
    with pytest.raises(ParameterError, match="^%s: " % field):
        rp.validate(nodes, reasons, bare)


# -- Running on a gone GPU (real kubelet v1.20.2: CreateContainerError at every container start) ----

LSTAT = 'failed to generate spec: lstat /dev/fake/GPU-0a0a: no such file or directory'


def broken(name, owner=None, reason="CreateContainerError", phase="Running", init=False):
    p = pod(name, phase=phase, reason=None, owner=owner)
    status = {"name": "cuda", "state": {"waiting": {"reason": reason, "message": LSTAT}}, "restartCount": 1}
    p["status"]["initContainerStatuses" if init else "containerStatuses"] = [status]
    return p


def test_a_running_pod_on_a_gone_gpu_is_brought_back_only_when_the_repair_named_it():
    pods = [broken("stale-rs", owner="train"), broken("stale-bare"), broken("stale-init", owner="train", init=True, phase="Pending"),
            broken("config-error", owner="train"),  # same state, but the repair did not name it
            broken("pull", owner="train", reason="ImagePullBackOff"), pod("train-abc", owner="train")]
    named = ["uid-stale-rs", "uid-stale-bare", "uid-stale-init", "uid-pull"]
    rows = rp.classify(pods, ["n1"], stale_pod_uids=named)
    assert [(r["name"], r["kind"], r["reason"], r["action"]) for r in rows] == [
        ("stale-bare", "gpu_gone", "CreateContainerError", "report"),
        ("stale-init", "gpu_gone", "CreateContainerError", "delete"),
        ("stale-rs", "gpu_gone", "CreateContainerError", "delete"),
        ("train-abc", "rejected", "UnexpectedAdmissionError", "delete")]
    assert rows[2]["message"] == "container cuda: " + LSTAT and rows[2]["phase"] == "Running"
    # without the repair's UIDs nothing Running is touched
    assert [r["name"] for r in rp.classify(pods, ["n1"])] == ["train-abc"]


def test_the_summary_tells_the_two_kinds_apart():
    rows = rp.classify([broken("stale-rs", owner="train"), pod("train-abc", owner="train")], ["n1"], stale_pod_uids=["uid-stale-rs"])
    out = rp.summary(rows, ["ml/stale-rs", "ml/train-abc"], False)
    assert out["msg"].startswith("1 pod(s) rejected at admission and 1 Running but unable to start a container on a gone GPU on 1 node(s)")


@pytest.mark.parametrize("value", ["uid", [""], [3], None])
def test_stale_pod_uids_must_be_a_list_of_uids(value):
    with pytest.raises(ParameterError, match="stale_pod_uids"):
        rp.validate(["n1"], ["UnexpectedAdmissionError"], "report", value)
