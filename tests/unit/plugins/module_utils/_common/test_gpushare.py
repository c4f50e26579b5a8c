# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpushare's vocabulary (_common/gpushare.py): its fake device IDs, the GPUs by index, the percentage as upstream prints it."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._common import gpushare

U = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"


def test_a_fake_device_names_its_gpu():
    found = gpushare.GPUSHARE_ID.match(U + "-_-12")
    assert found and found.group("uuid") == U
    assert gpushare.GPUSHARE_ID.match(U) is None and gpushare.GPUSHARE_ID.match(U + "-_-x") is None


def test_the_gpus_by_index_skip_an_entry_without_both():
    gpus = [{"index": 1, "uuid": "GPU-b"}, {"index": "0", "uuid": "GPU-a"}, {"uuid": "GPU-c"}, {"index": 2}, "junk"]
    assert gpushare.gpus_by_index(gpus) == {0: "GPU-a", 1: "GPU-b"} and gpushare.gpus_by_index(None) == {}


def test_a_percentage_is_truncated_as_kubectl_inspect_gpushare_prints_it():
    assert gpushare.pct(2, 3) == 66 and gpushare.pct(3, 3) == 100 and gpushare.pct(1, 0) == 0
