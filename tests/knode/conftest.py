# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures: one real control plane per session, and a fresh REAL kubelet node (hack/kube-node.sh) per test.

The node needs root, cgroup v1 and Debian's containerd (``hack/kube-node.sh check``). Where the
machine cannot run it, a local run skips these tests with the reason; CI (``GPUOPS_REQUIRE_KUBE_NODE=1``,
which .ci/run exports, or ``CI`` set) fails instead, so a CI run can never pass by skipping them.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import realnode  # noqa: E402  pylint: disable=wrong-import-position
import kubefleet  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture(scope="session")
def node_machine():
    why = realnode.unsupported()
    if why:
        if os.environ.get("GPUOPS_REQUIRE_KUBE_NODE") == "1" or os.environ.get("CI"):
            pytest.fail("CI must run the real kubelet node, and this machine cannot: %s" % why)
        pytest.skip("this machine cannot run the real kubelet node: %s" % why)


@pytest.fixture(scope="session")
def fake_lib_dir():
    return kubefleet.fakenode.build_lib(os.path.join(kubefleet.ROOT, "build", "fakes"))


@pytest.fixture(scope="session")
def cluster(node_machine, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("cluster")
    made = []
    try:
        # RBAC: the API path's tests run as the API user gpuops with only the collection's docs/rbac grants
        made.append(kubefleet.start_cluster(workdir, rbac=True))
        yield made[0]
    finally:
        for item in made:
            item.close()  # its connections closed before the control plane stops (kubefleet.Cluster.close)
        kubefleet.stop_cluster(workdir)
        kubefleet.close_left_connections()  # before pytest's own last gc.collect() (stop 69)


@pytest.fixture()
def real_node(cluster, tmp_path, fake_lib_dir):
    """A fresh real node per test (``real_node.up(gpus)``), torn down after it; nothing may be left behind, iptables untouched."""
    # a short run directory: kubelet's and containerd's unix sockets live under it, and a socket path
    # has at most 107 bytes (pytest's tmp_path under a checkout can be longer); its logs are kept in tmp_path
    run_dir = tempfile.mkdtemp(prefix="gpuops-knode-", dir="/tmp")
    node = realnode.RealNode(cluster, run_dir, fake_lib_dir)
    rules = realnode.iptables_rules()
    try:
        yield node
    finally:
        node.down()
        if os.path.isdir(os.path.join(run_dir, "log")):
            shutil.copytree(os.path.join(run_dir, "log"), str(tmp_path / "node-logs"))
        shutil.rmtree(run_dir, ignore_errors=True)
    assert node.leftovers() == [], "the node's teardown left these behind"
    assert realnode.iptables_rules() == rules, "the node changed the host's iptables rules"
