# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The k8s_node pod's access to the GPUs' device nodes, on the REAL kubelet node (containerd + runc).

On an NVIDIA H200 (hack/real-gpu/node_pod_devices.py) NVML failed with "Unknown Error" in a runc
container built as containerd builds the node pod, and read the GPU once the NVIDIA character
devices were allowed. Here the same mechanism runs for real: a character device with nvidiactl's
numbers (195:255, nothing behind it on this machine) is made at /dev/nvidiactl, and the fake NVML
opens it first, as the real library does (EPERM: NVML_ERROR_UNKNOWN; ENXIO: nothing behind it, the
rest simulated). The GPUs stay SIMULATED; the device list is the real runtime's.

* ``none``: runc's default device list refuses the node (EPERM, even at the host's own path under
  ``/host``): gpu_uuid_facts reports the inventory unknown and the reason names the variable to set;
* ``nvidia-runtime``: the pod carries NVIDIA_VISIBLE_DEVICES=all, but this node has no NVIDIA container
  runtime, so nothing allows the device: the same refusal, the same reason (what a user without
  NVIDIA's runtime sees);
* ``privileged``: the device opens (ENXIO behind it) and the node's GPU is read.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

import realnode

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import node_pod

BIN = os.path.dirname(sys.executable)
NS = "node-pods"
GPU = "GPU-0b0b0b0b-2222-4222-8222-00000000000b"
DEVICE = "/dev/nvidiactl"


def run(node, tmp, access):
    host = dict(realnode.through_api(node, NS), ansible_python_interpreter=sys.executable, gpuops_node_pod_gpu_access=access)
    inventory = tmp / ("inventory-%s.json" % access)
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": {"knode": host}}}}}))
    env = node.environ()
    facts = tmp / ("facts-%s.json" % access)
    plays = [
        {"name": "read the GPUs through the node pod", "hosts": "gpu_nodes", "gather_facts": False, "tasks": [
            {"name": "gpu facts", "gpuops.fleet.gpu_uuid_facts": {},
             "environment": {"LD_LIBRARY_PATH": env["LD_LIBRARY_PATH"], "GPUOPS_FAKE_NVML_CONFIG": env["GPUOPS_FAKE_NVML_CONFIG"],
                             "GPUOPS_FAKE_NVML_OPEN": DEVICE}},
            {"name": "keep", "ansible.builtin.copy": {"content": "{{ ansible_facts.gpuops_gpus | to_json }}", "dest": str(facts), "mode": "0600"},
             "delegate_to": "localhost", "vars": {"ansible_connection": "local"}},
        ]},
        {"name": "the run's node pods deleted", "hosts": "localhost", "gather_facts": False, "tasks": [
            {"name": "delete", "gpuops.fleet.node_pods": {"state": "absent"}, "delegate_to": "{{ item }}", "loop": "{{ groups['gpu_nodes'] }}"},
        ]},
    ]
    play = tmp / ("play-%s.yml" % access)
    play.write_text(json.dumps(plays))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), str(play)], cwd=str(tmp),
                          env=realnode.ansible_env(tmp), capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return json.loads(facts.read_text())


def test_the_node_pod_opens_the_gpu_devices_only_where_its_device_list_allows(real_node, tmp_path):
    node = real_node
    if os.path.exists(DEVICE):
        pytest.skip("%s exists on this machine (a real GPU host): the test makes its own" % DEVICE)
    node.namespace(NS)
    node.up([GPU])
    os.mknod(DEVICE, stat.S_IFCHR | 0o666, os.makedev(195, 255))
    try:
        facts = dict((access, run(node, tmp_path, access)) for access in ("none", "nvidia-runtime", "privileged"))
    finally:
        os.remove(DEVICE)
    for access in ("none", "nvidia-runtime"):
        got = facts[access]
        assert not got["available"] and got["gpus"] == [], (access, got)
        assert got["reason"].startswith("NVML initialisation failed: Unknown Error"), (access, got["reason"])
        assert "%s exists but this process may not open it (EPERM)" % DEVICE in got["reason"], (access, got["reason"])
        assert "gpuops_node_pod_gpu_access" in got["reason"], (access, got["reason"])
    assert facts["privileged"]["available"] and [g["uuid"] for g in facts["privileged"]["gpus"]] == [GPU], facts["privileged"]
    assert node.cluster.core.list_namespaced_pod(NS, label_selector=node_pod.LABEL + "=true").items == []
