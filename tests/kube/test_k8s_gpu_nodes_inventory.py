# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpuops.fleet.k8s_gpu_nodes inventory plugin against the real API server, through ansible-inventory.

Nodes are Node objects whose status is set through the status subresource (SIMULATED: no kubelet).
Checked: which nodes are taken (allocatable GPU resources, or a label selector), the groups and host
variables, compose/keyed_groups, the cache (a cached source makes no API call; --flush-cache reads
again, as the audit log shows), and a bad option named.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import kubefleet
import pytest

BIN = os.path.dirname(sys.executable)
NODES = {
    # name: (allocatable, labels, unschedulable)
    "inv-a100-1": ({"nvidia.com/gpu": "8"}, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "pool": "train"}, False),
    "inv-a100-2": ({"nvidia.com/gpu": "8"}, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "pool": "train"}, True),
    "inv-t4-share": ({"aliyun.com/gpu-mem": "30", "aliyun.com/gpu-count": "2"}, {"aliyun.accelerator/nvidia_name": "Tesla-T4", "pool": "infer"}, False),
    "inv-cpu": ({"cpu": "16"}, {"pool": "infer"}, False),
    "inv-plugin-down": ({"nvidia.com/gpu": "0"}, {"nvidia.com/gpu.present": "true", "pool": "train"}, False),
}


@pytest.fixture()
def inv_nodes(cluster):
    """This file's Node objects, deleted afterwards: without a kubelet, a pod the scheduler put there would never run."""
    yield
    for node in cluster.core.list_node().items:
        if node.metadata.name.startswith("inv-"):
            cluster.core.delete_node(node.metadata.name)


def kubelet(cluster, name, tmp_path):
    """The API as node ``name``'s own kubelet (system:node:<name>): a Node registers itself and writes its status, as a real
    kubelet does under the rig's Node authorizer and NodeRestriction."""
    return cluster.as_node(name, tmp_path / "identities")


def make_nodes(cluster, tmp_path):
    for name, (allocatable, labels, unschedulable) in NODES.items():
        api = kubelet(cluster, name, tmp_path)
        api.create_node({"metadata": {"name": name, "labels": labels}, "spec": {"unschedulable": unschedulable}})
        api.patch_node_status(name, {"status": {
            "capacity": dict(allocatable, cpu="16"), "allocatable": dict(allocatable, cpu="16"),
            "addresses": [{"type": "InternalIP", "address": "10.9.0.%d" % (1 + sorted(NODES).index(name))}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "SIMULATED",
                            "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})


def inventory(cluster, tmp_path, source, *args):
    path = tmp_path / "gpu.k8s_gpu_nodes.yml"
    path.write_text(json.dumps(source))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(kubefleet.ROOT, "build", "collections"),
               K8S_AUTH_KUBECONFIG=os.path.join(cluster.workdir, "role.kubeconfig"), ANSIBLE_INVENTORY_ENABLED="gpuops.fleet.k8s_gpu_nodes",
               ANSIBLE_INVENTORY_UNPARSED_FAILED="true")
    proc = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", str(path), "--list"] + list(args), env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def plain(value):
    """ansible-inventory's JSON with ansible-core 2.19+'s unsafe markers taken off."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return dict((k, plain(v)) for k, v in value.items())
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def hosts(listing, group):
    return sorted(listing.get(group, {}).get("hosts", []))


def test_the_inventory_selects_groups_and_caches(cluster, tmp_path, inv_nodes):
    make_nodes(cluster, tmp_path)
    source = {"plugin": "gpuops.fleet.k8s_gpu_nodes", "keyed_groups": [{"key": "gpuops_gpu_product", "prefix": "product"}],
              "compose": {"gpuops_pool_note": "'pool of ' ~ inventory_hostname"}}
    rc, out, err = inventory(cluster, tmp_path, source)
    assert rc == 0, err
    listing = json.loads(out)
    ours = [h for h in hosts(listing, "gpu_nodes") if h.startswith("inv-")]
    assert ours == ["inv-a100-1", "inv-a100-2", "inv-t4-share"], listing
    assert hosts(listing, "gpu_product_NVIDIA_A100_SXM4_40GB") == ["inv-a100-1", "inv-a100-2"]
    assert "inv-t4-share" in hosts(listing, "gpu_sharing_gpushare") and "inv-a100-1" in hosts(listing, "gpu_sharing_none")
    assert "inv-a100-2" in hosts(listing, "gpu_cordoned") and "inv-a100-1" in hosts(listing, "gpu_schedulable")
    assert hosts(listing, "product_Tesla_T4") == ["inv-t4-share"]
    hv = plain(listing["_meta"]["hostvars"])
    assert hv["inv-t4-share"]["gpuops_node_name"] == "inv-t4-share" and hv["inv-t4-share"]["gpuops_gpu_count"] == 2
    assert hv["inv-a100-2"]["gpuops_node_cordoned"] is True and hv["inv-a100-1"]["ansible_host"] == "10.9.0.1"
    assert hv["inv-a100-1"]["gpuops_pool_note"] == "pool of inv-a100-1"
    assert "ansible_connection" not in hv["inv-a100-1"]

    # through the API alone: the connection through a node pod, with this source's kubeconfig
    rc, out, err = inventory(cluster, tmp_path, {"plugin": "gpuops.fleet.k8s_gpu_nodes", "node_connection": "k8s_node",
                                                 "kubeconfig": os.path.join(cluster.workdir, "role.kubeconfig")})
    assert rc == 0, err
    hv = plain(json.loads(out)["_meta"]["hostvars"])["inv-a100-1"]
    assert hv["ansible_connection"] == "gpuops.fleet.k8s_node" and hv["ansible_kubectl_kubeconfig"] == os.path.join(cluster.workdir, "role.kubeconfig")

    # a label selector: only what it selects, each taken whatever its resources (the plugin is not up yet)
    rc, out, err = inventory(cluster, tmp_path, {"plugin": "gpuops.fleet.k8s_gpu_nodes", "label_selector": "pool=train"})
    assert rc == 0, err
    assert hosts(json.loads(out), "gpu_nodes") == ["inv-a100-1", "inv-a100-2", "inv-plugin-down"]

    # the cache: the second read makes no API call; a node added meanwhile shows only after --flush-cache
    cached = dict(source, cache=True, cache_plugin="ansible.builtin.jsonfile", cache_connection=str(tmp_path / "cache"), cache_timeout=600)
    rc, out, err = inventory(cluster, tmp_path, cached)
    assert rc == 0, err
    late = kubelet(cluster, "inv-late", tmp_path)
    late.create_node({"metadata": {"name": "inv-late"}})
    late.patch_node_status("inv-late", {"status": {"capacity": {"nvidia.com/gpu": "1"}, "allocatable": {"nvidia.com/gpu": "1"}}})
    offset = cluster.audit_offset()
    rc, out, err = inventory(cluster, tmp_path, cached)
    assert rc == 0 and "inv-late" not in hosts(json.loads(out), "gpu_nodes")
    assert [e for e in cluster.audit_events(offset) if e["objectRef"]["resource"] == "nodes"] == []
    rc, out, err = inventory(cluster, tmp_path, cached, "--flush-cache")
    assert rc == 0 and "inv-late" in hosts(json.loads(out), "gpu_nodes")
    calls = [(e["verb"], e["objectRef"]["resource"]) for e in cluster.audit_events(offset)]
    assert calls == [("list", "nodes")], calls


def test_a_bad_option_is_named(cluster, tmp_path, inv_nodes):
    rc, out, err = inventory(cluster, tmp_path, {"plugin": "gpuops.fleet.k8s_gpu_nodes", "label_selector": "a=b; rm -rf /"})
    assert rc != 0 and "label_selector must be a Kubernetes label selector" in err, err
    assert "Traceback" not in err


def matrix_bin(major):
    """The bin directory of hack/ansible-matrix.sh's cached venv of PyPI ansible MAJOR (made when missing)."""
    python = subprocess.run([os.path.join(kubefleet.ROOT, "hack", "ansible-matrix.sh"), "--venv", str(major)], cwd=kubefleet.ROOT,
                            capture_output=True, text=True, timeout=1200, check=True).stdout.strip().splitlines()[-1]
    return os.path.dirname(python)


HOSTILE = "{{ lookup('pipe', 'touch %s') }}"


@pytest.mark.parametrize("major", [9, 14], ids=["ansible-core-2.16", "ansible-core-2.21"])
def test_a_nodes_own_status_is_never_templated(cluster, tmp_path, inv_nodes, major):
    """Issue 32 items 1-2: a GPU node's kubelet writes its own Node status. Its kubeletVersion and InternalIP set to a
    template stay text (marked unsafe) through compose, keyed_groups, --graph and a play that prints them, on the
    oldest and the newest ansible-core; a Node named localhost is left out, naming it, and site-style localhost plays
    stay on the controller."""
    bin_dir = matrix_bin(major)
    marks = dict((what, tmp_path / ("ran-" + what)) for what in ("version", "address", "label"))
    evil = kubelet(cluster, "inv-evil", tmp_path)
    evil.create_node({"metadata": {"name": "inv-evil", "labels": {"nvidia.com/gpu.product": "evil"}}})
    evil.patch_node_status("inv-evil", {"status": {
        "capacity": {"nvidia.com/gpu": "1"}, "allocatable": {"nvidia.com/gpu": "1"},
        "nodeInfo": {"kubeletVersion": HOSTILE % marks["version"], "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                     "osImage": "", "containerRuntimeVersion": "", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
        "addresses": [{"type": "InternalIP", "address": HOSTILE % marks["address"]}]}})
    local = kubelet(cluster, "localhost", tmp_path)
    local.create_node({"metadata": {"name": "localhost"}})
    local.patch_node_status("localhost", {"status": {"capacity": {"nvidia.com/gpu": "1"}, "allocatable": {"nvidia.com/gpu": "1"},
                                                     "addresses": [{"type": "InternalIP", "address": "127.0.0.9"}]}})
    try:
        source = {"plugin": "gpuops.fleet.k8s_gpu_nodes", "keyed_groups": [{"key": "gpuops_kubelet_version", "prefix": "v"}],
                  "compose": {"gpuops_seen": "gpuops_kubelet_version ~ ' at ' ~ ansible_host"}}
        path = tmp_path / "gpu.k8s_gpu_nodes.yml"
        path.write_text(json.dumps(source))
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(kubefleet.ROOT, "build", "collections"),
                   K8S_AUTH_KUBECONFIG=os.path.join(cluster.workdir, "role.kubeconfig"), ANSIBLE_INVENTORY_ENABLED="gpuops.fleet.k8s_gpu_nodes",
                   ANSIBLE_INVENTORY_UNPARSED_FAILED="true", ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_PYTHON_INTERPRETER=os.path.join(bin_dir, "python"))
        graph = subprocess.run([os.path.join(bin_dir, "ansible-inventory"), "-i", str(path), "--graph"], env=env, capture_output=True, text=True,
                               timeout=120, check=False)
        assert graph.returncode == 0, graph.stderr
        warned = " ".join(graph.stderr.split())  # ansible-core 2.16 wraps warnings at the terminal's width
        assert "Node 'localhost' left out of the inventory" in warned and "keeps for the controller" in warned, graph.stderr
        assert "inv-evil" in graph.stdout and "localhost" not in graph.stdout.replace("inv-", ""), graph.stdout
        playbook = tmp_path / "play.yml"
        playbook.write_text(json.dumps([
            {"name": "controller", "hosts": "localhost", "gather_facts": False, "tasks": [
                {"name": "print what the node said", "ansible.builtin.debug": {"msg": "{{ hostvars['inv-evil'].gpuops_seen }}"}},
                {"name": "where localhost runs", "ansible.builtin.command": "hostname", "register": "where", "changed_when": False},
                {"name": "say it", "ansible.builtin.debug": {"msg": "LOCALHOST-RAN-ON-{{ ansible_connection | default('?') }}"}}]},
            {"name": "the node", "hosts": "inv-evil", "gather_facts": False, "connection": "local", "tasks": [
                {"name": "use its variables", "ansible.builtin.debug": {"msg": "{{ gpuops_kubelet_version }} {{ ansible_host }} {{ gpuops_gpu_product }}"}}]}]))
        play = subprocess.run([os.path.join(bin_dir, "ansible-playbook"), "-i", str(path), str(playbook)], env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert play.returncode == 0, play.stdout + play.stderr
        for what, mark in marks.items():
            assert not mark.exists(), "a template from the Node's %s ran on the controller" % what
        assert "lookup('pipe', 'touch %s')" % marks["version"] in play.stdout, play.stdout
        assert "LOCALHOST-RAN-ON-" in play.stdout and "LOCALHOST-RAN-ON-local" in play.stdout, play.stdout
    finally:
        for name in ("inv-evil", "localhost"):
            cluster.core.delete_node(name)
