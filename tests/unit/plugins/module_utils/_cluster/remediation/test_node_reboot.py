# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_reboot without a cluster: the Node's watch is scripted, so the proof of a reboot (a new bootID with Ready True in
the same status), its refusals (the bootID never changed; the node came back NotReady) and bad input are checked on their
own. The real API server's test is tests/kube/test_gpu_quarantine.py's reboot test."""

from __future__ import annotations


import pytest

import kube_list

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import k8s_watch as kw
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import node_reboot as nr
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

OLD, NEW = "5b0e6f0a-0000-4000-8000-000000000001", "5b0e6f0a-0000-4000-8000-000000000002"


def node(boot, ready, version):
    return {"metadata": {"name": "gpu-a", "resourceVersion": str(version)},
            "status": {"nodeInfo": {"bootID": boot}, "conditions": [{"type": "Ready", "status": "True" if ready else "Unknown"}]}}


class Api:
    def __init__(self, first):
        self.first, self.calls = first, []

    def list_node(self, **kwargs):
        self.calls.append(kwargs)
        return kube_list.listed([self.first], self.first["metadata"]["resourceVersion"])


def scripted(monkeypatch, streams):
    class FakeWatch:
        def stream(self, func, *args, **kwargs):
            yield from ({"type": "MODIFIED", "raw_object": o} for o in streams.pop(0))

        def stop(self):
            pass

    monkeypatch.setattr(kw.k8s_watch, "Watch", FakeWatch)


def clock(times):
    it = iter(times)
    last = [0.0]

    def now():
        last[0] = next(it, last[0])
        return last[0]
    return now


P = {"node": "gpu-a", "previous_boot_id": OLD, "timeout": 60}


def test_a_new_boot_id_counts_only_once_the_node_is_ready_in_the_same_status(monkeypatch):
    # kubelet of the new boot reports the bootID first NotReady (runtime not up yet), then Ready
    scripted(monkeypatch, [[node(OLD, False, 2), node(NEW, False, 3), node(NEW, True, 4)]])
    api = Api(node(OLD, True, 1))
    result = nr.wait_rebooted(api, P, False, clock=clock([0.0, 0.0, 1.0, 2.0, 3.0, 42.0]))
    assert (result["rebooted"], result["ready"], result["boot_id"], result["changed"]) == (True, True, NEW, False)
    assert api.calls[0]["field_selector"] == "metadata.name=gpu-a" and result["api_calls"] == 2  # one list, one watch


def test_an_unchanged_boot_id_fails_the_step_naming_it(monkeypatch):
    scripted(monkeypatch, [[node(OLD, True, 2)], []])
    with pytest.raises(nr.NodeRebootError) as err:
        nr.wait_rebooted(Api(node(OLD, True, 1)), P, False, clock=clock([0.0, 0.0, 1.0, 30.0, 61.0, 61.0]))
    assert "did not reboot: its bootID is still %s" % OLD in str(err.value)
    assert err.value.result["rebooted"] is False


def test_a_node_back_with_a_new_boot_but_not_ready_fails(monkeypatch):
    scripted(monkeypatch, [[node(NEW, False, 2)], []])
    with pytest.raises(nr.NodeRebootError) as err:
        nr.wait_rebooted(Api(node(OLD, True, 1)), P, False, clock=clock([0.0, 0.0, 1.0, 30.0, 61.0, 61.0]))
    assert "rebooted (bootID %s) but is not Ready" % NEW in str(err.value)
    assert (err.value.result["rebooted"], err.value.result["ready"]) == (True, False)


def test_check_mode_reads_once_and_never_waits(monkeypatch):
    scripted(monkeypatch, [])  # a watch would pop from an empty script and fail
    api = Api(node(OLD, True, 1))
    result = nr.wait_rebooted(api, P, True)
    assert result["rebooted"] is False and "would wait up to 60 s" in result["msg"] and len(api.calls) == 1


@pytest.mark.parametrize("bad, field", [
    ({"node": "Bad_Node"}, "node"),
    ({"previous_boot_id": ""}, "previous_boot_id"),
    ({"previous_boot_id": "x\ny"}, "previous_boot_id"),
    ({"timeout": 0}, "timeout"),
])
def test_bad_input_names_the_option(bad, field):
    with pytest.raises(ParameterError) as err:
        nr.check_params(dict(P, **bad))
    assert err.value.field == field
