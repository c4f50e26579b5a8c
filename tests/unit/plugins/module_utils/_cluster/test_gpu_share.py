# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU sharing arithmetic and tables (module_utils/_cluster/gpu_share), with field report 003's numbers."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec
from ansible_collections.gpuops.fleet.plugins.module_utils._node import shared_memory
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import gpu_share as gs
from ansible_collections.gpuops.fleet.plugins.module_utils._common import gpushare as vocab
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import whole_quantity
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

G0 = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
G1 = "GPU-1b7d2a3e-5c8f-4e61-9a0d-3f2c4b5a6d7e"
GONE = "GPU-68ce64fb-ea68-5ad6-7e72-31f3f07378df"
FIELD_NODE = "cn-hangzhou.192.168.2.167"


def node(name, mem, count, ip="192.168.2.167", labels=None):
    return {"metadata": {"name": name, "labels": {"cgpu": "true"} if labels is None else dict(labels)},
            "status": {"allocatable": {vocab.MEM: str(mem), vocab.COUNT: str(count)},
                       "addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}]}}


def pod(name, gib, on=FIELD_NODE, idx=0, assigned="true", namespace="default", phase="Running", **extra):
    annotations = {}
    if idx is not None:
        annotations = {vocab.ANN_IDX: str(idx), vocab.ANN_POD: str(gib), vocab.ANN_DEV: "15", vocab.ANN_ASSIGNED: assigned,
                       vocab.ANN_ASSUME_TIME: "1586741590000000000"}
    containers = [{"name": name, "resources": {"limits": {vocab.MEM: str(gib)}}}]
    out = {"metadata": {"name": name, "namespace": namespace, "uid": "uid-" + name, "annotations": annotations},
           "spec": {"nodeName": on, "containers": containers}, "status": {"phase": phase}}
    out["spec"].update(extra)
    return out


# The field report's two outputs (../shared/seeds/003: `kubectl inspect cgpu` before the shared
# workloads, `kubectl inspect cgpu -d` after two pods of 4 GiB), byte for byte.
FIELD_PLAIN = """\
NAME                       IPADDRESS      GPU0(Allocated/Total)  GPU Memory(GiB)
cn-hangzhou.192.168.2.167  192.168.2.167  0/15                   0/15
----------------------------------------------------------------------
Allocated/Total GPU Memory In Cluster:
0/15 (0%)"""

FIELD_DETAILS = """\
NAME:       cn-hangzhou.192.168.2.167
IPADDRESS:  192.168.2.167

NAME         NAMESPACE  GPU0(Allocated)
app-3g-v1-0  default    4
app-3g-v1-1  default    4
Allocated :  8 (53%)
Total :      15
--------------------------------------------------------

Allocated/Total GPU Memory In Cluster:  8/15 (53%)"""


def test_field_report_before_the_shared_workloads():
    report = gs.allocation([node(FIELD_NODE, 15, 1)], [])
    assert report["cluster"] == {"allocated_gib": 0, "total_gib": 15, "percent": 0}
    assert gs.summary_table(report) == FIELD_PLAIN


def test_field_report_two_pods_of_4_gib_on_a_15_gib_gpu():
    report = gs.allocation([node(FIELD_NODE, 15, 1)], [pod("app-3g-v1-0", 4), pod("app-3g-v1-1", 4)])
    assert report["cluster"] == {"allocated_gib": 8, "total_gib": 15, "percent": 53}
    only = report["nodes"][0]
    assert (only["allocated_gib"], only["total_gib"], only["percent"], only["mode"]) == (8, 15, 53, "true")
    assert only["gpus"] == [{"index": 0, "allocated_gib": 8, "total_gib": 15, "pods": ["default/app-3g-v1-0", "default/app-3g-v1-1"]}]
    assert gs.details_table(report) == FIELD_DETAILS
    assert gs.summary_table(report).splitlines()[1] == "cn-hangzhou.192.168.2.167  192.168.2.167  8/15                   8/15"


def test_multi_gpu_node_with_pods_across_gpus_and_every_kind_of_line():
    name = "gpu-a"
    pods = [
        pod("train-0", 4, on=name, idx=0),
        pod("train-1", 8, on=name, idx=1, namespace="ml"),
        pod("infer-0", 2, on=name, idx=1, assigned="false"),  # bound by the extender, not yet allocated by the plugin
        pod("legacy", 3, on=name, idx=None),  # no annotation: upstream's PENDING column
        pod("ghost", 1, on=name, idx=5),  # an index the node does not have
        pod("done", 6, on=name, idx=0, phase="Succeeded"),  # holds nothing
        pod("waiting", 5, on=None, idx=None, phase="Pending"),  # not scheduled: in no total
        {"metadata": {"name": "cpu-only", "namespace": "default", "uid": "u"}, "spec": {"nodeName": name, "containers": [{"name": "c"}]},
         "status": {"phase": "Running"}},
    ]
    report = gs.allocation([node(name, 30, 2, ip="10.0.0.7"), node("whole-gpu-node", 0, 0)], pods)
    assert [n["name"] for n in report["nodes"]] == ["gpu-a"]  # a node without aliyun.com/gpu-mem is not a sharing node
    gpu_a = report["nodes"][0]
    assert [(g["allocated_gib"], g["total_gib"]) for g in gpu_a["gpus"]] == [(4, 15), (8, 15)]
    assert (gpu_a["assumed_gib"], gpu_a["pending_gib"], gpu_a["unknown_gpu_gib"]) == (2, 3, 1)
    # the node holds everything bound to it; a GPU's column only what the plugin allocated there
    assert (gpu_a["allocated_gib"], gpu_a["total_gib"], gpu_a["percent"]) == (18, 30, 60)
    assert report["cluster"] == {"allocated_gib": 18, "total_gib": 30, "percent": 60}
    assert [(u["name"], u["gib"]) for u in report["unscheduled"]] == [("waiting", 5)]
    states = dict((r["name"], r["state"]) for r in gpu_a["pods"])
    assert states == {"train-0": "assigned", "train-1": "assigned", "infer-0": "assumed", "legacy": "pending", "ghost": "unknown_gpu"}
    assert gs.summary_table(report) == """\
NAME   IPADDRESS  GPU0(Allocated/Total)  GPU1(Allocated/Total)  ASSUMED(Allocated)  PENDING(Allocated)  UNKNOWN GPU(Allocated)  GPU Memory(GiB)
gpu-a  10.0.0.7   4/15                   8/15                   2                   3                   1                       18/30
%s
Allocated/Total GPU Memory In Cluster:
18/30 (60%%)
Not scheduled yet (in no total):  5 GiB in 1 pod: default/waiting""" % ("-" * 57)  # upstream: first row + 20
    assert gs.details_table(report) == """\
NAME:       gpu-a
IPADDRESS:  10.0.0.7

NAME         NAMESPACE  GPU0(Allocated)  GPU1(Allocated)  Assumed(Allocated)  Pending(Allocated)  Unknown GPU(Allocated)
train-0      default    4                0                0                   0                   0
train-1      ml         0                8                0                   0                   0
infer-0      default    0                0                2                   0                   0
legacy       default    0                0                0                   3                   0
ghost        default    0                0                0                   0                   1
Allocated :  18 (60%%)
Total :      30
%s

Allocated/Total GPU Memory In Cluster:  18/30 (60%%)
Not scheduled yet (in no total):        5 GiB in 1 pod: default/waiting""" % ("-" * 137)  # upstream: the pod lines + 10


def test_nodes_with_different_gpu_counts_and_a_node_filter():
    nodes = [node("b-two", 30, 2, ip="10.0.0.2"), node("a-one", 15, 1, ip="10.0.0.1")]
    pods = [pod("x", 6, on="b-two", idx=1), pod("y", 15, on="a-one", idx=0)]
    report = gs.allocation(nodes, pods)
    assert gs.summary_table(report).splitlines()[:3] == [
        "NAME   IPADDRESS  GPU0(Allocated/Total)  GPU1(Allocated/Total)  GPU Memory(GiB)",
        "a-one  10.0.0.1   15/15                  0/0                    15/15",
        "b-two  10.0.0.2   0/15                   6/15                   6/30",
    ]
    assert report["cluster"] == {"allocated_gib": 21, "total_gib": 45, "percent": 46}
    only_b = gs.allocation(nodes, pods, node_names=["b-two"])
    assert [n["name"] for n in only_b["nodes"]] == ["b-two"] and only_b["cluster"]["total_gib"] == 30


@pytest.mark.parametrize("value, expected", [
    ("4", 4), (4, 4), ("1k", 1000), ("1Ki", 1024), ("1.5", 2), ("500m", 1), ("0", 0), (None, 0), ("bogus", 0), ("1K", 0),
])
def test_whole_rounds_quantities_up_as_kubernetes_does(value, expected):
    assert whole_quantity(value) == expected


def test_pod_gib_sums_containers_not_init_containers():
    p = pod("a", 2)
    p["spec"]["containers"].append({"name": "b", "resources": {"limits": {vocab.MEM: "3"}}})
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"limits": {vocab.MEM: "7"}}}]
    assert gs.pod_gib(p) == 5


# -- AllocResp and the cross-check --------------------------------------------------------------

def _pb_string(number, text):
    data = text.encode()
    return bytes([number << 3 | 2, len(data)]) + data


def alloc_resp(envs):
    """A ContainerAllocateResponse with ``envs`` and a device spec (field 3), encoded by hand."""
    out = b""
    for key, value in envs.items():
        entry = _pb_string(1, key) + _pb_string(2, value)
        out += bytes([1 << 3 | 2, len(entry)]) + entry
    spec = _pb_string(1, "/dev/nvidia0") + _pb_string(2, "/dev/nvidia0") + _pb_string(3, "rw")
    return out + bytes([3 << 3 | 2, len(spec)]) + spec


def test_alloc_envs_reads_the_plugins_envs_only():
    raw = alloc_resp({"NVIDIA_VISIBLE_DEVICES": G1, vocab.ANN_IDX: "1", "DB_PASSWORD": "hunter2"})
    assert codec.alloc_envs(raw) == {"NVIDIA_VISIBLE_DEVICES": G1, vocab.ANN_IDX: "1"}
    assert codec.alloc_envs(None) is None and codec.alloc_envs(b"") is None
    assert codec.alloc_envs(raw[:-3]) is None  # cut short: not decodable, not a guess


def test_alloc_envs_of_the_lab_gpushare_checkpoint():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "..", "..", "..", "lab", "files", "gpushare_checkpoint.json")
    with open(path, "rb") as handle:
        cp = codec.decode(handle.read()).checkpoint
    envs = [codec.alloc_envs(e.alloc_resp) for e in cp.entries]
    assert [(e["NVIDIA_VISIBLE_DEVICES"], e[vocab.ANN_IDX], e[vocab.ANN_POD]) for e in envs] == [(G0, "0", "3"), (G1, "1", "4")]


def entry(uid, container, gib, device_uuid, given=None, idx=None):
    envs = None
    if given:
        envs = {"NVIDIA_VISIBLE_DEVICES": given}
        if idx is not None:
            envs[vocab.ANN_IDX] = str(idx)
    return {"pod_uid": uid, "container_name": container, "resource_name": vocab.MEM,
            "device_ids": ["%s-_-%d" % (device_uuid, n) for n in range(gib)], "alloc_envs": envs}


GPUS = [{"index": 0, "uuid": G0}, {"index": 1, "uuid": G1}]


def test_cross_check_flags_a_gone_gpu_a_mismatch_and_an_unknown_index():
    pods = [pod("ok", 4, on="n", idx=1), pod("swapped", 2, on="n", idx=0), pod("stale", 3, on="n", idx=0),
            pod("ghost", 1, on="n", idx=7), pod("mixed-ids", 4, on="n", idx=1)]
    records = gs.allocation([node("n", 30, 2)], pods)["nodes"][0]["pods"]
    entries = [
        entry("uid-ok", "ok", 4, G1, given=G1),
        entry("uid-swapped", "swapped", 2, G1, given=G1),  # annotation says GPU 0, the plugin gave GPU 1
        entry("uid-stale", "stale", 3, GONE, given=GONE),  # the GPU was replaced since
        entry("uid-ghost", "ghost", 1, G0, given=G0),
        # kubelet picked fake IDs of GPU 0 for a pod the plugin put on GPU 1: normal, not a finding
        entry("uid-mixed-ids", "mixed-ids", 4, G0, given=G1),
    ]
    findings = gs.cross_check("n", records, GPUS, entries)
    got = sorted((f["pod"], f["kind"]) for f in findings)
    assert got == [("default/ghost", "unknown_gpu"), ("default/stale", "gpu_gone"), ("default/swapped", "annotation_mismatch")]
    by_pod = dict((f["pod"], f["detail"]) for f in findings)
    assert by_pod["default/swapped"] == ("container swapped was given GPU 1 (%s); the pod's ALIYUN_COM_GPU_MEM_IDX annotation says GPU 0 (%s)" % (G1, G0))
    assert GONE in by_pod["default/stale"] and "no longer has" in by_pod["default/stale"]
    assert by_pod["default/ghost"] == "its ALIYUN_COM_GPU_MEM_IDX annotation names GPU 7; the node has GPUs 0, 1"


def test_cross_check_without_alloc_envs_still_finds_gone_gpus():
    records = gs.allocation([node("n", 30, 2)], [pod("a", 2, on="n", idx=0)])["nodes"][0]["pods"]
    assert gs.cross_check("n", records, GPUS, [entry("uid-a", "a", 2, G1)]) == []
    gone = gs.cross_check("n", records, GPUS, [entry("uid-a", "a", 2, GONE)])
    assert [f["kind"] for f in gone] == ["gpu_gone"]


def test_from_checkpoint_is_the_nodes_own_view():
    registered = {vocab.MEM: ["%s-_-%d" % (u, n) for u in (G0, G1) for n in range(15)]}
    entries = [entry("p1", "a", 3, G0, given=G0), entry("p2", "b", 4, G0, given=G1), entry("p3", "c", 2, G1)]
    view = shared_memory.from_checkpoint(entries, registered, GPUS)
    assert [(g["index"], g["allocated_gib"], g["total_gib"], g["pods"]) for g in view["gpus"]] == [(0, 3, 15, 1), (1, 4, 15, 1)]
    assert (view["allocated_gib"], view["total_gib"], view["percent"], view["unattributed_gib"]) == (9, 30, 30, 2)


# -- switching modes ---------------------------------------------------------------------------

def whole_gpu_pod(name, on, phase="Running"):
    return {"metadata": {"name": name, "namespace": "ml", "uid": name},
            "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {"limits": {vocab.WHOLE_GPU: "1"}}}]},
            "status": {"phase": phase}}


def test_mode_plan_names_the_pods_that_block_a_switch():
    nodes = [node("a", 0, 0, labels={}), node("b", 15, 1, labels={"cgpu": "true"}), node("c", 0, 0, labels={"cgpu": "false"})]
    pods = [whole_gpu_pod("train", "a"), whole_gpu_pod("old", "a", phase="Succeeded"), pod("share", 4, on="b"), whole_gpu_pod("x", "c")]
    rows = gs.mode_plan(nodes, pods, {"a": True, "b": False, "c": False})
    assert [(r["node"], r["current"], r["desired"], r["change"], r["removes"], r["blocking_pods"]) for r in rows] == [
        ("a", None, "true", True, "nvidia.com/gpu", ["ml/train"]),
        ("b", "true", "false", True, "aliyun.com/gpu-mem", ["default/share"]),
        ("c", "false", "false", False, None, []),
    ]
    message = gs.refusal(rows)
    assert "2 nodes" in message and "a (unset -> true: nvidia.com/gpu still used by ml/train)" in message
    assert "b (true -> false: aliyun.com/gpu-mem still used by default/share)" in message and "gpu_sharing_drain" in message
    # unset -> false changes the label only: nothing is removed, nothing blocks
    free = gs.mode_plan([node("d", 0, 0, labels={})], [whole_gpu_pod("y", "d")], {"d": False})
    assert (free[0]["change"], free[0]["removes"], gs.refusal(free)) == (True, None, None)


def test_mode_plan_refuses_unknown_nodes_and_bad_labels():
    with pytest.raises(ParameterError, match="no such node in the cluster: nope"):
        gs.mode_plan([node("a", 0, 0)], [], {"nope": True})
    with pytest.raises(ParameterError) as err:
        gs.check_mode_params("cgpu", "on", "on")
    assert err.value.field == "false_value"
    with pytest.raises(ParameterError) as err:
        gs.check_mode_params("bad label!", "true", "false")
    assert err.value.field == "label"


def test_a_pod_still_pending_with_its_gpu_assigned_is_starting_not_in_its_gpus_column():
    # ContainerCreating (an image pull): the plugin allocated it (ASSIGNED=true), but it runs nothing yet
    name = "gpu-a"
    pods = [pod("train-0", 4, on=name, idx=0), pod("pulling", 6, on=name, idx=0, phase="Pending")]
    report = gs.allocation([node(name, 15, 1, ip="10.0.0.7")], pods)
    gpu_a = report["nodes"][0]
    assert gpu_a["gpus"][0]["allocated_gib"] == 4 and gpu_a["gpus"][0]["pods"] == ["default/train-0"]
    assert gpu_a["starting_gib"] == 6 and gpu_a["allocated_gib"] == 10  # the node still holds it: the scheduler counts it
    assert dict((r["name"], r["state"]) for r in gpu_a["pods"]) == {"train-0": "assigned", "pulling": "starting"}
    lines = gs.summary_table(report).splitlines()
    assert lines[0].split("  ")[3].strip() == "STARTING(Allocated)" and lines[1].split() == ["gpu-a", "10.0.0.7", "4/15", "6", "10/15"]
    assert "Starting(Allocated)" in gs.details_table(report)
