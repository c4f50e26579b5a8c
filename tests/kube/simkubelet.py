# -*- coding: utf-8 -*-
"""A SIMULATED kubelet for the integration tests (never for real nodes).

It plays the node side of a cluster whose control plane is real (hack/kube-cluster.sh:
kube-apiserver, kube-controller-manager, kube-scheduler), the way kwok does: it creates Node
objects, keeps their status (capacity/allocatable, Ready condition) through the status
subresource, and moves pods bound to its nodes through their lifecycle through the pods'
status subresource. No container runs.

What it models, per node (``--nodes`` JSON: a list of objects):

* ``name``, ``labels``, ``taints``, ``gpus`` (GPU UUIDs the node's "hardware" has). The node is
  Ready at once, without the ``node.kubernetes.io/not-ready`` taint (the node lifecycle
  controller's job, which needs heartbeats and is not run).
* A pod matching ``--plugin-selector`` is the NVIDIA device plugin: after ``--start-delay`` it is
  Running/Ready, and ``--register-delay`` later the node's ``nvidia.com/gpu`` allocatable becomes
  the GPU count (capacity keeps the last registered count, as kubelet's does). When the plugin
  pod is deleted, allocatable drops to 0 at once: kubelet's device manager marks a plugin's
  devices unhealthy when its socket goes away.
* The plugin's health loop (the real plugin's, reproduced by tests/fakes/fake_device_plugin.py on the real kubelet
  node): an XID critical error appended to the node's fake-NVML config (``xid|<gpu>|<code>``; not 13, 31, 43, 45, 68,
  109) after the plugin registered marks that GPU Unhealthy: allocatable drops by one. As upstream, only a new plugin
  process (the pod deleted and recreated) reports it Healthy again.
* A pod that terminates (``restartPolicy: Never``) and requests ``nvidia.com/gpu`` stands for a
  verification pod: it ends Succeeded, its termination message lists the UUIDs of the GPUs
  it was given, one per line (what ``nvidia-smi --query-gpu=uuid --format=csv,noheader``
  prints in a container that got those GPUs). It fails admission (``UnexpectedAdmissionError``,
  as kubelet does) when the node has fewer allocatable GPUs than it requests.
* A reboot: once a node's ``reboot_request`` file appears (a role's reboot command creates it), the node goes NotReady,
  its fake driver (``nvml_config``) is power-cycled (``fake_nvidia_smi.power_cycle``: NVML's clients killed, every GPU
  as a reset leaves it, its XIDs gone), ``status.nodeInfo.bootID`` changes, and ``--start-delay`` later it is Ready.
* While a node carries the label ``gpuops.test/reject-gpu-pods=true``, every pod that requests
  ``nvidia.com/gpu`` fails admission (``Failed``/``UnexpectedAdmissionError``, kubelet's message),
  whatever its restart policy; a test removes the label to "repair" the node. This models the
  window between a real kubelet's start and its device plugin's registration, the only time a
  real kubelet rejects them (see below); it is not what a stale entry does once the plugin is back.
* A GPU pod annotated ``gpuops.test/gpu-gone=true`` (its checkpoint entry names a GPU the node no
  longer has) stays ``Running`` with its container waiting in ``CreateContainerError``, as a real
  kubelet leaves it after the container's first restart.

What a real kubelet does, and where this model stops (kubelet v1.20.2 with containerd 1.6.20,
tested on a real node by ``make kube-node``: tests/knode/, hack/kube-node.sh):

* ``UnexpectedAdmissionError`` comes only while the checkpoint names the resource and the plugin
  has not registered since kubelet started. Once it has, a stale entry does not block new pods
  (available = healthy devices - in use; a gone GPU is not among the healthy ones).
* A running pod whose entry names a gone GPU is re-admitted from the checkpoint across kubelet's
  restart, with no call to the plugin, and kept Running. At every later container start kubelet
  reuses the gone GPU's cached allocation and the container cannot be created
  (``CreateContainerError``), for ever.
* Deleting the checkpoint (the field report's fix) leaves each running GPU pod to a race inside
  kubelet's start: admitted with no allocation, or with another arbitrary GPU, or killed
  (``OutOfnvidia.com/gpu``); in the first two the GPU its container still uses is handed to the
  next pod (tests/knode/test_field_report_story.py).
* Pruning with the collection's codec keeps a valid pod's entry (kubelet reads it back), and the
  pod on the gone GPU is rejected at re-admission and killed, or brought back by ``rejected_pods``.
* Pods being deleted are removed (grace period 0) after ``--stop-delay``, as kubelet does once
  the containers are gone.
* Init containers run to completion (exit 0) before the pod's containers start. One whose
  environment has ``NVIDIA_DRIVER_VERSION`` is a driver installer (the GKE-style installer
  DaemonSet): its log is what upstream's entrypoint prints, with nvidia-smi's header naming the
  driver version installed: the node's ``driver_version`` when set (a node whose installer
  installs something else than asked), else the one asked for.
* Container logs are served as kubelet serves them, over HTTPS on the port each Node's
  ``status.daemonEndpoints.kubeletEndpoint`` names (the Node's InternalIP is 127.0.0.1), at
  ``/containerLogs/<namespace>/<pod>/<container>``, so ``pods/log`` reads go through the real
  API server's node proxy (kube-apiserver ``--kubelet-preferred-address-types=InternalIP``).
* ``faults`` (a list) injects failures: ``plugin_crash`` (the plugin container never becomes
  Ready: CrashLoopBackOff), ``no_gpus`` (the plugin registers 0 healthy GPUs),
  ``wrong_gpus`` (a verification pod sees a GPU the node's inventory does not list),
  ``installer_fail`` (a driver installer's init container exits 1 and is restarted:
  Init:CrashLoopBackOff, with the installer's error in its log).
  ``fault_images`` limits the faults to pods whose image is in that list (a bad new version).
* A pod matching ``--gpushare-selector`` is the gpushare device plugin (AliyunContainerService
  gpushare-device-plugin): once Ready, the node offers ``aliyun.com/gpu-mem`` (``gpu_mem_gib``
  per GPU, default 15, in GiB) and ``aliyun.com/gpu-count``; deleting it zeroes the memory's
  allocatable. A pod with an ``aliyun.com/gpu-mem`` limit, once the real scheduler bound it, is
  placed the way the extender and the plugin do it (gpushare-scheduler-extender pkg/utils/pod.go,
  gpushare-device-plugin pkg/gpu/nvidia/allocate.go): the first GPU with room (binpack), the
  annotations ``ALIYUN_COM_GPU_MEM_IDX``/``_POD``/``_DEV``/``_ASSIGNED=false``/``_ASSUME_TIME``,
  then ``_ASSIGNED=true`` when "allocated"; the pod's annotation ``gpuops.test/gpushare`` =
  ``no-annotation`` (a pod the extender never saw) or ``assumed`` (the plugin has not allocated it:
  the pod stays Pending) stops it halfway. Fault ``gpushare_index_order`` gives containers the GPU
  of the other end of the list (the plugin maps an index by /dev/nvidia<minor>, the extender by
  NVML order: they disagree on a node whose minors are not in NVML order).
* With ``checkpoint`` (a path), the node's kubelet device checkpoint is written as kubelet does
  (v2 layout, with the collection's codec): every resource a plugin registered (kept after the
  plugin is gone, as kubelet keeps them), and one entry per container holding devices, its
  AllocResp carrying the envs the plugin returned; a deleted pod's entries go with it. For
  ``aliyun.com/gpu-mem`` kubelet picks the fake IDs ``<uuid>-_-<n>`` without regard to the GPU
  (the plugin ignores which ones): the first free ones, in registration order.

Run: python tests/kube/simkubelet.py --kubeconfig K --nodes nodes.json
"""

import argparse
import heapq
import http.server
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone

from kubernetes import client, config
from kubernetes.client.rest import ApiException

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "build", "collections"))
from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec  # noqa: E402  pylint: disable=wrong-import-position
sys.path.insert(0, os.path.join(ROOT, "tests", "fakes"))
import fake_nvidia_smi  # noqa: E402  pylint: disable=wrong-import-position

GPU = "nvidia.com/gpu"
MEM = "aliyun.com/gpu-mem"
COUNT = "aliyun.com/gpu-count"


def _pb_bytes(number, data):
    out, size = bytearray([number << 3 | 2]), len(data)
    while True:
        if size < 0x80:
            out.append(size)
            break
        out.append(size & 0x7F | 0x80)
        size >>= 7
    return bytes(out) + data


def alloc_resp(envs):
    """A ContainerAllocateResponse (deviceplugin v1beta1 api.proto) with ``envs`` (field 1, map entries key=1 value=2)."""
    return b"".join(_pb_bytes(1, _pb_bytes(1, k.encode()) + _pb_bytes(2, v.encode())) for k, v in sorted(envs.items()))


def now_iso():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_selector(text):
    out = {}
    for part in filter(None, (text or "").split(",")):
        key, dummy, value = part.partition("=")
        out[key.strip()] = value.strip()
    return out


# what upstream's installer entrypoint (container-engine-accelerators nvidia-driver-installer/
# ubuntu/entrypoint.sh) prints, with nvidia-smi's header; SIMULATED
INSTALLER_LOG = """Checking cached version
Cache file /usr/local/nvidia/.cache not found.
Downloading kernel sources... DONE.
Configuring installation directories... DONE.
Downloading Nvidia installer... DONE.
Running Nvidia installer...
Running Nvidia installer... DONE.
Verifying Nvidia installation...
+-----------------------------------------------------------------------------+
| NVIDIA-SMI {version}    Driver Version: {version}    CUDA Version: 12.2     |
+-----------------------------------------------------------------------------+
Verifying Nvidia installation... DONE.
Updating host's ld cache... DONE.
"""
INSTALLER_FAIL_LOG = """Checking cached version
Cache file /usr/local/nvidia/.cache not found.
Downloading kernel sources... DONE.
Running Nvidia installer...
ERROR: Unable to build the NVIDIA kernel module. (SIMULATED fault installer_fail)
"""


class LogServer:
    """kubelet's /containerLogs endpoint over HTTPS (self-signed: kube-apiserver is not given a kubelet CA)."""

    def __init__(self):
        self.logs = {}
        workdir = tempfile.mkdtemp(prefix="simkubelet-")
        cert, key = os.path.join(workdir, "tls.crt"), os.path.join(workdir, "tls.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=simkubelet",
                        "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
        logs = self.logs

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                parts = self.path.split("?", 1)[0].strip("/").split("/")
                text = logs.get(tuple(parts[1:4])) if len(parts) == 4 and parts[0] == "containerLogs" else None
                body = (text if text is not None else "no log for %s (SIMULATED kubelet)\n" % self.path).encode()
                self.send_response(200 if text is not None else 404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        shutil.rmtree(workdir)  # the key is loaded: nothing stays in /tmp
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


class SimKubelet:
    def __init__(self, api, nodes, plugin_selector, start_delay, register_delay, stop_delay, log_server=None,
                 gpushare_selector=None, node_apis=None):
        self.api = api  # the cluster's side: reads, and what a cluster user or controller writes (taints, others' labels)
        self.node_apis = node_apis or {}  # each node's own kubelet identity (system:node:<name>): that node's writes
        self.log_server = log_server
        self.nodes = {n["name"]: n for n in nodes}
        self.plugin_selector = plugin_selector
        self.gpushare_selector = gpushare_selector or {"component": "gpushare-device-plugin"}
        self.allocatable = {}  # node -> {resource: allocatable}
        self.registered = {}  # node -> {resource: [device IDs]} (the checkpoint's RegisteredDevices)
        self.entries = {}  # node -> [(pod uid, container, resource, [ids], envs)]
        self.written = {}  # node -> the checkpoint bytes last written
        self.start_delay = start_delay
        self.register_delay = register_delay
        self.stop_delay = stop_delay
        self.capacity = {}  # node -> {resource: last registered count}
        self.handled = {}  # pod uid -> what was done (started / deleting)
        self.timers = []  # heap of (when, seq, fn, args)
        self.seq = 0
        self.boot_ids = dict((name, str(uuid.uuid4())) for name in self.nodes)  # status.nodeInfo.bootID
        self.xid_seen = {}  # node -> the config's XID lines when its plugin registered (the health loop sees later ones)
        self.unhealthy = {}  # node -> GPU indexes the running plugin marked Unhealthy
        self.not_ready = set()  # nodes rebooting

    def kubelet(self, node):
        """The API as ``node``'s kubelet: its own identity where the harness gave one (the Node authorizer and NodeRestriction
        then limit it as they limit a real kubelet), else the cluster's."""
        return self.node_apis.get(node, self.api)

    # -- nodes -------------------------------------------------------------------------------
    def register_nodes(self):
        for name, node in self.nodes.items():
            labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
            labels.update(node.get("labels") or {})
            # a kubelet registers its Node with the labels it may set (NodeRestriction: none of the kubernetes.io and k8s.io
            # namespaces but its own few); a cluster user (or provisioner) adds the others, and the taints
            own = dict((k, v) for k, v in labels.items() if k in KUBELET_LABELS or "/" not in k or not
                       k.split("/", maxsplit=1)[0].endswith(("kubernetes.io", "k8s.io")))
            body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": own}}
            try:
                self.kubelet(name).create_node(body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                self.kubelet(name).patch_node(name, {"metadata": {"labels": own}})
            self.set_node_status(name, allocatable_gpus=0)
            # the API server taints new nodes node.kubernetes.io/not-ready; the node lifecycle controller (not run here: it
            # needs kubelet heartbeats) lifts it once the node is Ready; a cluster user's labels and taints
            self.api.patch_node(name, {"metadata": {"labels": labels}, "spec": {"taints": node.get("taints") or []}})

    def set_node_status(self, name, allocatable_gpus, registered=False):
        self.set_resource(name, GPU, allocatable_gpus, registered)

    def set_resource(self, name, resource, allocatable, registered=False):
        """Registration sets capacity and allocatable; a plugin going away only zeroes allocatable."""
        if registered:
            self.capacity.setdefault(name, {})[resource] = allocatable
        self.allocatable.setdefault(name, {})[resource] = allocatable
        capacity = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}
        allocatable_all = dict(capacity)
        for res, count in sorted(self.capacity.get(name, {}).items()):
            capacity[res] = str(count)
            allocatable_all[res] = str(self.allocatable.get(name, {}).get(res, 0))
        allocatable = allocatable_all
        stamp = now_iso()
        status = {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "SIMULATED kubelet: rebooting",
                 "lastHeartbeatTime": stamp, "lastTransitionTime": stamp} if name in self.not_ready else
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "SIMULATED kubelet (gpuops tests)",
                 "lastHeartbeatTime": stamp, "lastTransitionTime": stamp},
            ],
            "nodeInfo": {"kubeletVersion": "v1.20.2", "kubeProxyVersion": "v1.20.2", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "simulated://0",
                         "kernelVersion": "", "osImage": "SIMULATED", "machineID": "", "systemUUID": "",
                         "bootID": self.boot_ids.setdefault(name, str(uuid.uuid4()))},
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
        }
        if self.log_server:
            status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.log_server.port}}
        self.kubelet(name).patch_node_status(name, {"status": status})

    # -- timers ------------------------------------------------------------------------------
    def later(self, delay, fn, *args):
        self.seq += 1
        heapq.heappush(self.timers, (time.monotonic() + delay, self.seq, fn, args))

    def run_due(self):
        while self.timers and self.timers[0][0] <= time.monotonic():
            _when, _seq, fn, args = heapq.heappop(self.timers)
            try:
                fn(*args)
            except ApiException as exc:
                if exc.status not in (404, 409):
                    raise

    # -- pods --------------------------------------------------------------------------------
    def is_plugin(self, pod):
        labels = pod.metadata.labels or {}
        return all(labels.get(k) == v for k, v in self.plugin_selector.items())

    def faults(self, node, pod):
        spec = self.nodes[node]
        images = spec.get("fault_images")
        if images and not any(c.image in images for c in list(pod.spec.containers) + list(pod.spec.init_containers or ())):
            return set()
        return set(spec.get("faults") or [])

    def reboots(self):
        """A node whose ``reboot_request`` file appeared reboots: NotReady at once, the fake driver power-cycled (its
        NVML clients killed, every GPU as a reset leaves it), a new bootID, Ready ``--start-delay`` later."""
        for name, node in self.nodes.items():
            request = node.get("reboot_request")
            if not request or not os.path.exists(request):
                continue
            os.unlink(request)
            self.not_ready.add(name)
            self.set_resource(name, GPU, self.allocatable.get(name, {}).get(GPU, 0))
            if node.get("nvml_config"):
                fake_nvidia_smi.power_cycle(node["nvml_config"])
            self.boot_ids[name] = str(uuid.uuid4())
            self.later(self.start_delay, self.booted, name)

    def booted(self, name):
        self.not_ready.discard(name)
        self.set_resource(name, GPU, self.allocatable.get(name, {}).get(GPU, 0))

    def xids(self, node):
        try:
            with open(self.nodes[node]["nvml_config"]) as handle:
                return [line.strip().split("|") for line in handle if line.startswith("xid|")]
        except (KeyError, OSError):
            return []

    def plugin_health(self):
        """The registered plugins' health loops: a critical XID since a plugin registered withholds that GPU."""
        for node, seen in self.xid_seen.items():
            bad = set(int(x[1]) for x in self.xids(node)[seen:] if len(x) == 3 and x[2].isdigit() and int(x[2]) not in PLUGIN_IGNORED_XIDS)
            if bad - self.unhealthy.get(node, set()):
                self.unhealthy[node] = self.unhealthy.get(node, set()) | bad
                self.set_node_status(node, allocatable_gpus=max(0, self.capacity.get(node, {}).get(GPU, 0) - len(self.unhealthy[node])))

    def sync(self):
        self.reboots()
        self.plugin_health()
        pods = self.api.list_pod_for_all_namespaces().items
        live = set()
        for pod in pods:
            node = pod.spec.node_name
            if node not in self.nodes:
                continue
            uid = pod.metadata.uid
            live.add(uid)
            state = self.handled.get(uid)
            if pod.metadata.deletion_timestamp is not None:
                if state != "deleting":
                    self.handled[uid] = "deleting"
                    if self.is_plugin(pod):
                        self.set_node_status(node, allocatable_gpus=0)
                        self.xid_seen.pop(node, None)  # its health loop ends with it
                    if self.is_gpushare(pod):
                        self.set_resource(node, MEM, 0)
                    self.later(self.stop_delay, self.finish_delete, pod.metadata.namespace, pod.metadata.name, uid, node)
            elif state is None:
                self.handled[uid] = "started"
                self.later(self.start_delay, self.start_pod, pod)
        for uid in list(self.handled):
            if uid not in live:
                del self.handled[uid]

    def finish_delete(self, namespace, name, uid, node=None):
        self.kubelet(node).delete_namespaced_pod(name, namespace, grace_period_seconds=0,
                                                 body=client.V1DeleteOptions(grace_period_seconds=0, preconditions={"uid": uid}))
        for node, entries in list(self.entries.items()):
            self.reload_checkpoint(node)
            entries = self.entries.get(node, [])
            if any(e[0] == uid for e in entries):
                self.entries[node] = [e for e in entries if e[0] != uid]
                self.write_checkpoint(node)

    # -- gpushare and the device checkpoint --------------------------------------------------
    def is_gpushare(self, pod):
        labels = pod.metadata.labels or {}
        return all(labels.get(k) == v for k, v in self.gpushare_selector.items())

    def write_checkpoint(self, node):
        path = self.nodes[node].get("checkpoint")
        if not path:
            return
        entries = [codec.PodDevicesEntry(uid, ctr, res, {-1: list(ids)}, alloc_resp(envs)) for uid, ctr, res, ids, envs in self.entries.get(node, [])]
        registered = dict((res, list(ids)) for res, ids in self.registered.get(node, {}).items())
        data, dummy = codec.encode(codec.Checkpoint("v2", entries, registered))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
        self.written[node] = data

    def reload_checkpoint(self, node):
        """Called before each change: a checkpoint changed underneath us (kubelet_checkpoint repaired it)
        is read back, as kubelet reads it when it starts again (the module restarts kubelet around
        its write; with no systemd here, kubelet_unit "", the stand-in picks the new content up)."""
        path = self.nodes[node].get("checkpoint")
        if not path or node not in self.written:
            return
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            data = None
        if data == self.written[node]:
            return
        decoded = codec.decode(data).checkpoint if data else None
        self.registered[node] = dict((r, list(v or ())) for r, v in ((decoded.registered or {}).items() if decoded else ()))
        keep = set((e.pod_uid, e.container_name, e.resource_name) for e in (decoded.entries or ())) if decoded else set()
        self.entries[node] = [e for e in self.entries.get(node, []) if (e[0], e[1], e[2]) in keep]

    def register(self, node, resource, ids):
        """A plugin's devices into the checkpoint's RegisteredDevices (kept after the plugin is gone)."""
        self.reload_checkpoint(node)
        self.registered.setdefault(node, {})[resource] = list(ids)
        self.write_checkpoint(node)

    def mem_per_gpu(self, node):
        return int(self.nodes[node].get("gpu_mem_gib") or 15)

    def register_gpushare(self, node, uid):
        if self.handled.get(uid) != "started":
            return
        gpus = list(self.nodes[node].get("gpus") or [])
        per = self.mem_per_gpu(node)
        self.register(node, MEM, ["%s-_-%d" % (u, n) for u in gpus for n in range(per)])
        self.set_resource(node, COUNT, len(gpus), registered=True)
        self.set_resource(node, MEM, per * len(gpus), registered=True)

    def share_limits(self, pod):
        return [(c.name, int(((c.resources.limits if c.resources else None) or {}).get(MEM, 0))) for c in pod.spec.containers
                if int(((c.resources.limits if c.resources else None) or {}).get(MEM, 0))]

    def place_shared(self, pod, node, faults):
        """The extender's and the plugin's part for a pod holding aliyun.com/gpu-mem; False while it stays Pending."""
        namespace, name = pod.metadata.namespace, pod.metadata.name
        mode = (pod.metadata.annotations or {}).get("gpuops.test/gpushare")
        limits = self.share_limits(pod)
        gib = sum(n for dummy, n in limits)
        gpus = list(self.nodes[node].get("gpus") or [])
        per = self.mem_per_gpu(node)
        if mode != "no-annotation":
            used = [0] * len(gpus)
            for other in self.api.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node).items:
                ann = other.metadata.annotations or {}
                if other.metadata.uid != pod.metadata.uid and ann.get("ALIYUN_COM_GPU_MEM_IDX", "").isdigit():
                    idx = int(ann["ALIYUN_COM_GPU_MEM_IDX"])
                    if idx < len(used):
                        used[idx] += int(ann.get("ALIYUN_COM_GPU_MEM_POD") or 0)
            fits = [i for i in range(len(gpus)) if per - used[i] >= gib]
            idx = fits[0] if fits else -1
            self.api.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {
                "ALIYUN_COM_GPU_MEM_IDX": str(idx), "ALIYUN_COM_GPU_MEM_POD": str(gib), "ALIYUN_COM_GPU_MEM_DEV": str(per),
                "ALIYUN_COM_GPU_MEM_ASSIGNED": "false", "ALIYUN_COM_GPU_MEM_ASSUME_TIME": str(time.time_ns())}}})
            if mode == "assumed":
                return False
        else:
            idx = 0
        self.reload_checkpoint(node)
        given = gpus[len(gpus) - 1 - idx] if "gpushare_index_order" in faults and gpus else (gpus[idx] if 0 <= idx < len(gpus) else "")
        taken = set(i for e in self.entries.get(node, []) if e[2] == MEM for i in e[3])
        free = [i for i in self.registered.get(node, {}).get(MEM, []) if i not in taken]
        for ctr, count in limits:
            envs = {"NVIDIA_VISIBLE_DEVICES": given, "ALIYUN_COM_GPU_MEM_IDX": str(idx), "ALIYUN_COM_GPU_MEM_POD": str(gib),
                    "ALIYUN_COM_GPU_MEM_CONTAINER": str(count), "ALIYUN_COM_GPU_MEM_DEV": str(per)}
            ids, free = free[:count], free[count:]
            self.entries.setdefault(node, []).append((pod.metadata.uid, ctr, MEM, ids, envs))
        self.write_checkpoint(node)
        if mode != "no-annotation":
            self.api.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {
                "ALIYUN_COM_GPU_MEM_ASSIGNED": "true", "ALIYUN_COM_GPU_MEM_ASSIGN_TIME": str(time.time_ns())}}})
        return True

    def allocate_gpus(self, pod, node):
        """Whole GPUs for a long-running pod: the first ones no other entry holds (else the first ones), into the checkpoint."""
        wanted = self.gpu_request(pod)
        self.reload_checkpoint(node)
        held = set(i for entry in self.entries.get(node, []) if entry[2] == GPU for i in entry[3])
        gpus = list(self.nodes[node].get("gpus") or [])
        free = [u for u in gpus if u not in held]
        uuids = (free if len(free) >= wanted else gpus)[:wanted]
        self.entries.setdefault(node, []).append((pod.metadata.uid, pod.spec.containers[0].name, GPU, uuids,
                                                  {"NVIDIA_VISIBLE_DEVICES": ",".join(uuids)}))
        self.write_checkpoint(node)

    def gpu_request(self, pod):
        total = 0
        for ctr in pod.spec.containers:
            limits = (ctr.resources.limits if ctr.resources else None) or {}
            total += int(limits.get(GPU, 0))
        return total

    @staticmethod
    def gpu_gone(pod):
        return ((pod.metadata.annotations or {}).get("gpuops.test/gpu-gone") == "true")

    def rejects_gpu_pods(self, node):
        labels = self.api.read_node(node).metadata.labels or {}
        return labels.get("gpuops.test/reject-gpu-pods") == "true"

    def start_pod(self, pod):
        node = pod.spec.node_name
        faults = self.faults(node, pod)
        stamp = now_iso()
        namespace, name = pod.metadata.namespace, pod.metadata.name
        if self.gpu_request(pod) and self.rejects_gpu_pods(node):
            status = {"phase": "Failed", "reason": "UnexpectedAdmissionError",
                      "message": "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. "
                                 "Requested: %d, Available: 0, which is unexpected (SIMULATED)" % self.gpu_request(pod)}
            self.kubelet(node).patch_namespaced_pod_status(name, namespace, {"status": status})
            return
        if pod.spec.restart_policy == "Never" and self.gpu_request(pod):
            self.run_to_completion(pod, node, faults)
            return
        if self.share_limits(pod) and not self.place_shared(pod, node, faults):
            return  # assumed by the extender, not allocated: Pending
        if self.gpu_request(pod):
            self.allocate_gpus(pod, node)
        init_statuses = self.run_init_containers(pod, node, faults, stamp)
        if init_statuses is not None and any(s["state"].get("waiting") for s in init_statuses):
            status = {"phase": "Pending", "startTime": stamp, "hostIP": "127.0.0.1", "podIP": "10.244.0.1",
                      "conditions": [{"type": t, "status": s, "lastTransitionTime": stamp}
                                     for t, s in (("Initialized", "False"), ("Ready", "False"), ("ContainersReady", "False"),
                                                  ("PodScheduled", "True"))],
                      "initContainerStatuses": init_statuses,
                      "containerStatuses": [{"name": c.name, "image": c.image, "imageID": "", "ready": False, "restartCount": 0,
                                             "state": {"waiting": {"reason": "PodInitializing"}}} for c in pod.spec.containers]}
            self.kubelet(node).patch_namespaced_pod_status(name, namespace, {"status": status})
            return
        ready = not (self.is_plugin(pod) and "plugin_crash" in faults)
        gone = self.gpu_request(pod) and self.gpu_gone(pod)
        ready = ready and not gone
        statuses = []
        for ctr in pod.spec.containers:
            if gone:
                state = {"waiting": {"reason": "CreateContainerError",
                                     "message": "failed to generate spec: lstat /dev/gpuops-gone-gpu: no such file or directory (SIMULATED)"}}
            elif ready:
                state = {"running": {"startedAt": stamp}}
            else:
                state = {"waiting": {"reason": "CrashLoopBackOff",
                                     "message": "back-off 10s restarting failed container (SIMULATED fault plugin_crash)"}}
            statuses.append({"name": ctr.name, "image": ctr.image, "imageID": "", "ready": ready,
                             "restartCount": 0 if ready and not gone else (1 if gone else 3), "started": ready, "state": state})
        cond = "True" if ready else "False"
        status = {
            "phase": "Running", "startTime": stamp, "hostIP": "127.0.0.1", "podIP": "10.244.0.1",
            "conditions": [{"type": t, "status": s, "lastTransitionTime": stamp}
                           for t, s in (("Initialized", "True"), ("Ready", cond), ("ContainersReady", cond),
                                        ("PodScheduled", "True"))],
            "containerStatuses": statuses,
        }
        if init_statuses is not None:
            status["initContainerStatuses"] = init_statuses
        self.kubelet(node).patch_namespaced_pod_status(name, namespace, {"status": status})
        if ready and self.is_plugin(pod):
            gpus = 0 if "no_gpus" in faults else len(self.nodes[node].get("gpus") or [])
            self.later(self.register_delay, self.register_plugin, node, pod.metadata.uid, gpus)
        if ready and self.is_gpushare(pod):
            self.later(self.register_delay, self.register_gpushare, node, pod.metadata.uid)

    def run_init_containers(self, pod, node, faults, stamp):
        """Statuses of the pod's init containers (None without any); a driver installer logs its install."""
        if not pod.spec.init_containers:
            return None
        statuses = []
        for ctr in pod.spec.init_containers:
            env = dict((e.name, e.value) for e in ctr.env or ())
            log = "init container %s: done (SIMULATED)\n" % ctr.name
            failed = False
            if "NVIDIA_DRIVER_VERSION" in env:
                installed = self.nodes[node].get("driver_version") or env["NVIDIA_DRIVER_VERSION"]
                failed = "installer_fail" in faults
                log = INSTALLER_FAIL_LOG if failed else INSTALLER_LOG.format(version=installed)
            if self.log_server:
                self.log_server.logs[(pod.metadata.namespace, pod.metadata.name, ctr.name)] = log
            if failed:
                statuses.append({"name": ctr.name, "image": ctr.image, "imageID": "", "ready": False, "restartCount": 3,
                                 "state": {"waiting": {"reason": "CrashLoopBackOff",
                                                       "message": "back-off 40s restarting failed container (SIMULATED)"}},
                                 "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": stamp, "finishedAt": stamp}}})
                break  # later init containers do not run
            statuses.append({"name": ctr.name, "image": ctr.image, "imageID": "", "ready": True, "restartCount": 0,
                             "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": stamp, "finishedAt": stamp}}})
        return statuses

    def register_plugin(self, node, uid, gpus):
        if self.handled.get(uid) == "started":
            self.register(node, GPU, list(self.nodes[node].get("gpus") or [])[:gpus])
            self.set_node_status(node, allocatable_gpus=gpus, registered=True)
            self.xid_seen[node], self.unhealthy[node] = len(self.xids(node)), set()  # a new process: every GPU Healthy

    def run_to_completion(self, pod, node, faults):
        stamp = now_iso()
        wanted = self.gpu_request(pod)
        current = self.api.read_node_status(node).status.allocatable or {}
        if int(current.get(GPU, "0")) < wanted:
            status = {"phase": "Failed", "reason": "UnexpectedAdmissionError",
                      "message": "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. "
                                 "Requested: %d, Available: %s (SIMULATED)" % (wanted, current.get(GPU, "0"))}
        else:
            uuids = list(self.nodes[node].get("gpus") or [])[:wanted]
            if "wrong_gpus" in faults and uuids:
                uuids[-1] = "GPU-00000000-dead-beef-0000-000000000000"
            ctr = pod.spec.containers[0]
            status = {
                "phase": "Succeeded", "startTime": stamp,
                "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": stamp}],
                "containerStatuses": [{
                    "name": ctr.name, "image": ctr.image, "imageID": "", "ready": False, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": stamp,
                                             "finishedAt": stamp, "message": "\n".join(uuids) + "\n"}},
                }],
            }
        self.kubelet(node).patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {"status": status})


# the labels a kubelet may set on its own Node in the kubernetes.io namespaces (kubelet's own, k8s.io/kubelet/pkg/apis
# well_known_labels.go; NodeRestriction refuses the others)
KUBELET_LABELS = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
                  "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone", "topology.kubernetes.io/region")


# the XIDs the real plugin's health loop ignores (k8s-device-plugin internal/rm/health.go: application errors)
PLUGIN_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", required=True, help="JSON file: list of node objects")
    parser.add_argument("--plugin-selector", default="name=nvidia-device-plugin-ds")
    parser.add_argument("--gpushare-selector", default="component=gpushare-device-plugin")
    parser.add_argument("--start-delay", type=float, default=0.5, help="seconds from bind to Running (image pull)")
    parser.add_argument("--register-delay", type=float, default=0.5, help="seconds from plugin Ready to GPUs allocatable")
    parser.add_argument("--stop-delay", type=float, default=0.3, help="seconds to stop a pod's containers")
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--node-kubeconfigs", help="a folder of <node>.kubeconfig: each node's own kubelet identity (hack/kube-cluster.sh "
                                                   "node-kubeconfig); its writes go through it")
    args = parser.parse_args(argv)
    config.load_kube_config(args.kubeconfig)
    with open(args.nodes) as handle:
        nodes = json.load(handle)
    node_apis = {}
    for node in nodes if args.node_kubeconfigs else ():
        path = os.path.join(args.node_kubeconfigs, node["name"] + ".kubeconfig")
        node_apis[node["name"]] = client.CoreV1Api(config.new_client_from_config(path))
    sim = SimKubelet(client.CoreV1Api(), nodes, parse_selector(args.plugin_selector),
                     args.start_delay, args.register_delay, args.stop_delay, LogServer(), parse_selector(args.gpushare_selector),
                     node_apis)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    sim.register_nodes()
    print("simkubelet: %d SIMULATED nodes registered" % len(nodes), flush=True)
    while True:
        sim.sync()
        sim.run_due()
        time.sleep(args.interval)


if __name__ == "__main__":
    main()
