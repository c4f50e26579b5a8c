# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_memory_report's pure part: Prometheus answers, and the views' arithmetic (the real Prometheus
runs in tests/prometheus)."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import gpu_memory_report as gmr

GIB = 1024 ** 3


def vector(*items):
    return json.dumps({"status": "success", "data": {"resultType": "vector",
                                                     "result": [{"metric": m, "value": [1700000000.0, str(v)]} for m, v in items]}})


@pytest.mark.parametrize("body, message", [
    ("<html>login</html>", "the answer is not JSON (is url Prometheus' base URL?)"),
    (json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}), "Prometheus says parse error at char 3"),
    (json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}), "expected a vector, got 'matrix'"),
])
def test_parse_response_says_what_is_wrong(body, message):
    with pytest.raises(gmr.PrometheusError, match="query up: .*" + message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        gmr.parse_response(body, "up")


def test_a_whole_gpu_pod_without_a_process_has_no_allocated_memory_to_compare():
    results = {
        "pod_used": [],
        "pod_shared": [],
        "pod_gpus": gmr.parse_response(vector(({"namespace": "ml", "pod": "idle-0", "node": "n"}, 1)), "q"),
        "gpu_used": gmr.parse_response(vector(({"node": "n", "gpu": "0", "uuid": "GPU-a"}, 0)), "q"),
        "gpu_total": gmr.parse_response(vector(({"node": "n", "gpu": "0", "uuid": "GPU-a"}, 16 * GIB)), "q"),
    }
    doc = gmr.report(results)
    (idle,) = doc["pods"]
    # it holds a GPU and runs nothing on it: reported, with no share to compute (which GPU is not known)
    assert (idle["whole_gpus"], idle["used_gib"], idle["allocated_gib"], idle["percent"]) == (1, 0.0, None, None)
    assert doc["gpus"] == [{"node": "n", "gpu": "0", "uuid": "GPU-a", "used_gib": 0.0, "total_gib": 16.0, "percent": 0}]
    assert gmr.table(doc).splitlines()[2].split() == ["ml", "idle-0", "n", "-", "0.0", "-", "(1", "GPU)", "-"]
