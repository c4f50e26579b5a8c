# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which Nodes the k8s_gpu_nodes inventory takes, and what it says of each (pure logic)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import gpu_nodes as sel


def node(name, allocatable=None, labels=None, unschedulable=False, ready="True", ip="10.0.0.1"):
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"unschedulable": unschedulable} if unschedulable else {},
            "status": {"allocatable": allocatable or {"cpu": "8"}, "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
                       "conditions": [{"type": "Ready", "status": ready}], "nodeInfo": {"kubeletVersion": "v1.20.2"}}}


def test_only_nodes_with_an_allocatable_gpu_resource_are_taken():
    nodes = [node("cpu-1"), node("gpu-0", {"nvidia.com/gpu": "0"}), node("gpu-2", {"nvidia.com/gpu": "2", "cpu": "8"}),
             node("mig-1", {"nvidia.com/mig-1g.5gb": "7"}), node("share-1", {"aliyun.com/gpu-mem": "30", "aliyun.com/gpu-count": "2"})]
    found = sel.gpu_nodes(nodes)
    assert [n["name"] for n in found] == ["gpu-2", "mig-1", "share-1"]
    by_name = dict((n["name"], n) for n in found)
    assert by_name["gpu-2"]["gpu_count"] == 2 and by_name["gpu-2"]["sharing"] == "none" and by_name["gpu-2"]["gpu_resources"] == {"nvidia.com/gpu": 2}
    assert by_name["mig-1"]["sharing"] == "mig"
    assert by_name["share-1"]["sharing"] == "gpushare" and by_name["share-1"]["gpu_count"] == 2


def test_a_label_selected_node_is_taken_whatever_its_resources():
    assert sel.gpu_node(node("new-gpu"), by_label=True)["gpu_count"] == 0
    assert sel.gpu_node(node("new-gpu")) is None


@pytest.mark.parametrize("labels, product, sharing", [
    ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}, "NVIDIA-A100-SXM4-40GB", "none"),
    ({"aliyun.accelerator/nvidia_name": "Tesla-T4"}, "Tesla-T4", "none"),
    ({"nvidia.com/gpu.sharing-strategy": "time-slicing"}, "unknown", "time-slicing"),
    ({"nvidia.com/gpu.sharing-strategy": "none"}, "unknown", "none"),
])
def test_product_and_sharing_from_the_labels(labels, product, sharing):
    found = sel.gpu_node(node("g", {"nvidia.com/gpu": "1"}, labels))
    assert (found["product"], found["sharing"]) == (product, sharing)


def test_cordon_ready_and_address():
    found = sel.gpu_node(node("g", {"nvidia.com/gpu": "1"}, unschedulable=True, ready="Unknown", ip="10.1.2.3"))
    assert found["cordoned"] and not found["ready"] and found["address"] == "10.1.2.3" and found["kubelet_version"] == "v1.20.2"


def test_a_quantity_that_is_not_a_whole_number_counts_as_none():
    assert sel.gpu_node(node("g", {"nvidia.com/gpu": "1k"})) is None


@pytest.mark.parametrize("resources, selector, field", [
    ([], "", "gpu_resources"), ("nvidia.com/gpu", "", "gpu_resources"), ([""], "", "gpu_resources"),
    (["nvidia.com/gpu"], "a=b;rm -rf /", "label_selector"), (["nvidia.com/gpu"], 5, "label_selector"),
])
def test_bad_options_are_named(resources, selector, field):
    with pytest.raises(sel.InventoryConfigError, match=field):
        sel.check_options(resources, selector)


def test_good_options_pass():
    sel.check_options(["nvidia.com/gpu", "nvidia.com/mig-*"], "nvidia.com/gpu.present=true,!gpuops.io/skip")
    sel.check_options(list(sel.DEFAULT_RESOURCES), "")


@pytest.mark.parametrize("name", ["localhost", "LOCALHOST", "localhost.", "127.0.0.1", "127.1.2.3", "::1", "localhost.localdomain"])
def test_a_name_ansible_keeps_for_the_controller_is_refused_naming_it(name):
    reason = sel.reserved_name(name)
    assert reason and repr(name) in reason and "controller" in reason


@pytest.mark.parametrize("name", ["gpu-1", "localhost-gpu", "node127.0.0.1.example", "127-0-0-1"])
def test_other_names_are_kept(name):
    assert sel.reserved_name(name) is None
