# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubelet's gRPC APIs for the tests: the device-plugin API (v1beta1) and the pod-resources API (v1).

The .proto files beside this one are kubelet v1.20.2's, without the gogoproto hints. They are
compiled with grpc_tools.protoc into ``build/kubelet_api/<digest>/`` on first use (the digest
covers the sources and the grpcio-tools version, so a change rebuilds), then imported.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.join(HERE, "kubelet_api")
ROOT = os.path.dirname(os.path.dirname(HERE))
PROTOS = ("deviceplugin.proto", "podresources.proto")


def _out_dir():
    from importlib import metadata  # pylint: disable=import-outside-toplevel

    digest = hashlib.sha256(metadata.version("grpcio-tools").encode())
    for name in PROTOS:
        with open(os.path.join(PROTO_DIR, name), "rb") as handle:
            digest.update(handle.read())
    return os.path.join(os.environ.get("GPUOPS_KUBELET_API_DIR", os.path.join(ROOT, "build", "kubelet_api")), digest.hexdigest()[:16])


@functools.lru_cache(maxsize=None)
def load():
    """(deviceplugin_pb2, deviceplugin_pb2_grpc, podresources_pb2, podresources_pb2_grpc), compiled on first use.

    Once per process: the tests poll the pod-resources API, which need not hash the .proto files each time."""
    out = _out_dir()
    if not os.path.exists(os.path.join(out, ".done")):
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.exists(os.path.join(out, ".done")):
                from grpc_tools import protoc  # pylint: disable=import-outside-toplevel

                rc = protoc.main(["protoc", "-I" + PROTO_DIR, "--python_out=" + out, "--grpc_python_out=" + out]
                                 + [os.path.join(PROTO_DIR, name) for name in PROTOS])
                if rc != 0:
                    raise RuntimeError("grpc_tools.protoc failed (rc %d) on %s" % (rc, PROTO_DIR))
                open(os.path.join(out, ".done"), "w").close()
    if out not in sys.path:
        sys.path.insert(0, out)
    return tuple(importlib.import_module(name) for name in ("deviceplugin_pb2", "deviceplugin_pb2_grpc", "podresources_pb2", "podresources_pb2_grpc"))


def pod_resources(socket_path, timeout=10):
    """kubelet's pod-resources API ``List``: {(namespace, pod, container): {resource: [device IDs]}}."""
    import grpc  # pylint: disable=import-outside-toplevel

    dummy, dummy2, pb, rpc = load()
    with grpc.insecure_channel("unix://" + socket_path) as channel:
        reply = rpc.PodResourcesListerStub(channel).List(pb.ListPodResourcesRequest(), timeout=timeout)
    found = {}
    for pod in reply.pod_resources:
        for container in pod.containers:
            found[(pod.namespace, pod.name, container.name)] = {
                dev.resource_name: list(dev.device_ids) for dev in container.devices}
    return found
