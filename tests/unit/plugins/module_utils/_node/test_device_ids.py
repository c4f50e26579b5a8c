# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Device-plugin ID forms mapped to physical GPUs."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node import device_ids as ids
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

GPU0 = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
GPU1 = "GPU-383cd6a5-00a6-b455-62c4-c163d164b837"
GONE = "GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb"
MIG = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
FACTS = {
    "available": True,
    "gpus": [
        {"index": 0, "uuid": GPU0, "mig_devices": []},
        {"index": 1, "uuid": GPU1, "mig_devices": [
            {"index": 0, "uuid": MIG},
            {"index": 1, "uuid": "MIG-GPU-383cd6a5-00a6-b455-62c4-c163d164b837/7/0"},
        ]},
    ],
}


@pytest.mark.parametrize(
    "device_id, form, key",
    [
        (GPU0, "gpu_uuid", GPU0.lower()),
        (GPU0.upper(), "gpu_uuid", GPU0.lower()),
        (GPU0 + "::3", "gpu_uuid", GPU0.lower()),
        (GPU0 + "-_-0", "gpushare", GPU0.lower()),
        (GPU0 + "-_-14", "gpushare", GPU0.lower()),
        (MIG, "mig_uuid", MIG.lower()),
        (MIG + "::1", "mig_uuid", MIG.lower()),
        ("MIG-GPU-383cd6a5-00a6-b455-62c4-c163d164b837/7/0", "mig_uuid", "mig-gpu-383cd6a5-00a6-b455-62c4-c163d164b837/7/0"),
        ("0", "gpu_index", "0"),
        ("12::4", "gpu_index", "12"),
        ("1:0", "mig_index", "1:0"),
        ("1:0::2", "mig_index", "1:0"),
        ("tegra", None, None),
        ("mlx5_0", None, None),
        ("GPU-nothex", None, None),
        ("", None, None),
    ],
)
def test_classify(device_id, form, key):
    assert ids.classify(device_id) == (form, key)


@pytest.mark.parametrize(
    "device_id, state",
    [
        (GPU0, ids.PRESENT),
        (GPU1 + "::7", ids.PRESENT),
        (GPU1 + "-_-3", ids.PRESENT),
        (GONE, ids.STALE),
        (GONE + "::0", ids.STALE),
        (GONE + "-_-0", ids.STALE),
        (MIG, ids.PRESENT),
        ("MIG-11111111-bbbb-cccc-dddd-eeeeeeeeeeee", ids.STALE),
        ("MIG-GPU-383cd6a5-00a6-b455-62c4-c163d164b837/7/0", ids.PRESENT),
        ("MIG-GPU-383cd6a5-00a6-b455-62c4-c163d164b837/8/0", ids.STALE),
        ("0", ids.PRESENT),
        ("1::2", ids.PRESENT),
        ("2", ids.STALE),
        ("1:1", ids.PRESENT),
        ("0:0", ids.STALE),
        ("tegra", ids.UNRECOGNIZED),
    ],
)
def test_inventory_state(device_id, state):
    assert ids.inventory_from_facts(FACTS).state(device_id) == state


@pytest.mark.parametrize(
    "facts, field",
    [
        ([], "gpus"),
        ({"available": True}, "gpus"),
        ({"gpus": "GPU-a"}, "gpus.gpus"),
        ({"gpus": [{"uuid": GPU0}]}, "gpus.gpus[0]"),
        ({"gpus": [{"index": "0", "uuid": GPU0}]}, "gpus.gpus[0].index"),
        ({"gpus": [{"index": 0, "uuid": GPU0, "mig_devices": [{"index": 0}]}]}, "gpus.gpus[0].mig_devices[0]"),
    ],
)
def test_bad_inventory_names_the_field(facts, field):
    with pytest.raises(ParameterError) as err:
        ids.inventory_from_facts(facts)
    assert err.value.field == field


@pytest.mark.parametrize("patterns", [[], ["gpu"], [3]])
def test_bad_resource_patterns(patterns):
    with pytest.raises(ParameterError) as err:
        ids.validate_resource_patterns(patterns)
    assert err.value.field == "resources"


@pytest.mark.parametrize(
    "resource, expected",
    [("nvidia.com/gpu", True), ("nvidia.com/mig-1g.5gb", True), ("aliyun.com/gpu-mem", True), ("rdma/hca", False), ("nvidia.com/gpu-x", False)],
)
def test_default_gpu_resources(resource, expected):
    assert ids.is_gpu_resource(resource, ids.DEFAULT_GPU_RESOURCES) is expected


@pytest.mark.parametrize(
    "facts, field",
    [
        ("GPU-a", "gpus"),
        ({"gpus": []}, "gpus"),
        ({"available": "false", "gpus": []}, "gpus.available"),
        ({"available": 0, "gpus": []}, "gpus.available"),
    ],
)
def test_availability_names_the_field(facts, field):
    with pytest.raises(ParameterError) as err:
        ids.availability(facts)
    assert err.value.field == field


def test_availability():
    assert ids.availability({"available": False, "reason": "driver down"}) == (False, "driver down")
    assert ids.availability(FACTS) == (True, None)
