# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The forms of a device ID in kubelet's checkpoint (_common/device_forms.py): which physical device each names."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._common.device_forms import classify

U = "0650A168-E770-3EA8-8AC3-8A1D419763E0"


@pytest.mark.parametrize("device_id,form,key", [
    ("GPU-" + U, "gpu_uuid", "gpu-" + U.lower()),
    ("GPU-%s::3" % U, "gpu_uuid", "gpu-" + U.lower()),  # a time-slicing replica: the same GPU
    ("GPU-%s-_-7" % U, "gpushare", "gpu-" + U.lower()),  # gpushare's fake device: the GPU it slices
    ("MIG-" + U, "mig_uuid", "mig-" + U.lower()),
    ("MIG-GPU-%s/1/0" % U, "mig_uuid", ("mig-gpu-%s/1/0" % U).lower()),
    ("3", "gpu_index", "3"),
    ("0:1", "mig_index", "0:1"),
    ("GPU-not-a-uuid", None, None),
    ("", None, None),
])
def test_each_form_names_its_physical_device(device_id, form, key):
    assert classify(device_id) == (form, key)
