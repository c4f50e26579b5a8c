# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the host is for code that runs beside it (_common/beside_host.py): the node pod mounts the host there and says so in
the environment that _node/hostroot.py reads; the guard's DaemonSet mounts it at the same place."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import node_pod
from ansible_collections.gpuops.fleet.plugins.module_utils._common.beside_host import HOST_ROOT, HOST_ROOT_ENV
from ansible_collections.gpuops.fleet.plugins.module_utils._node import hostroot


def test_the_node_pod_mounts_the_host_where_the_node_code_looks_for_it():
    pod = node_pod.pod_manifest("p", "gpu-1", "ops", "registry.example/i@sha256:" + "0" * 64, 900, 3600, "ctl-1")
    container = pod["spec"]["containers"][0]
    assert {"name": "host", "mountPath": HOST_ROOT} in container["volumeMounts"]
    # each command beside the host sets the variable to the mount (the prologue of node_pod's exec)
    assert "%s=%s; export %s" % (HOST_ROOT_ENV, HOST_ROOT, HOST_ROOT_ENV) in node_pod._PROLOGUE  # pylint: disable=protected-access
    assert hostroot.ENV == HOST_ROOT_ENV and HOST_ROOT == "/host"
