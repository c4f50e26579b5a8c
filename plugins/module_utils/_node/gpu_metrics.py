# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: GPU memory per pod from the node itself (``gpuops metrics``).

Why a node-side source: dcgm-exporter attributes GPU-wide values. Its Kubernetes mapper
(NVIDIA/dcgm-exporter internal/pkg/transformation/kubernetes.go) reads kubelet's pod-resources
API and keeps only ``nvidia.com/gpu``, ``nvidia.com/mig-*`` and configured NVIDIA resource names
(``iterateGPUDevices``), so a pod holding ``aliyun.com/gpu-mem`` gets no pod label; with shared
GPUs (``KubernetesVirtualGPUs``, ``toDeviceToSharingPods``) every container on the GPU gets a deep
copy of the GPU's metric, i.e. the whole GPU's framebuffer figure. Neither says what ONE pod uses.

So, per GPU, NVML's compute processes with the memory each uses (``compute_processes``), and per
process its pod from ``/proc/<pid>/cgroup``:

* cgroup v2: one line ``0::<path>``; v1: ``<id>:<controllers>:<path>`` lines (the ``memory`` or
  ``name=systemd`` one names the container's cgroup).
* Only kubelet's own pod hierarchy counts, from the cgroup root: cgroup driver ``systemd``
  ``/kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid with _>.slice/<container>``,
  with ``cri-containerd-<id>.scope`` (containerd), ``crio-<id>.scope`` (CRI-O) or
  ``docker-<id>.scope``; driver ``cgroupfs`` ``/kubepods[/<qos>]/pod<uid>/<id>`` (Guaranteed pods
  have no QoS level; kubelet's ``pkg/kubelet/cm/cgroup_manager_linux.go`` and ``qos_container_manager_linux.go``).
  A ``pod<uid>`` segment anywhere else (a user's systemd slice, a nested container) is
  anyone's to create and is never taken for a pod: such processes stay unattributed. A
  process in a sub-cgroup of its container (``.../cri-containerd-<id>.scope/init.scope``)
  keeps its container.
* The container's name is in its OCI bundle's ``config.json`` annotations, where the runtime
  keeps it: containerd ``/run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json``
  (``io.kubernetes.cri.container-name``), CRI-O
  ``/run/containers/storage/overlay-containers/<id>/userdata/config.json``
  (``io.kubernetes.container.name``). When no bundle exists, the container ID stands in.
* Everything read per process is untrusted: a ``/proc/<pid>/cgroup`` that is not UTF-8, a
  bundle that is not a JSON object, annotations that are not one, a name that is not a
  Kubernetes container name (a DNS-1123 label) leave that process unattributed; nothing a
  pod writes can end the run or add a series. Only NVML failing sets ``gpuops_metrics_up 0``.

The result is a node_exporter textfile-collector file, written atomically.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._node import gpu_inventory as inventory
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import InventoryError

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_ID = r"[0-9a-f]{64}"
# kubelet's pod cgroups from the hierarchy's root, per cgroup driver; group "rest" is the container's
# own cgroup and anything below it (a sub-cgroup such as init.scope)
_KUBEPODS = (
    re.compile(
        r"\A/kubepods\.slice(?:/kubepods-(?P<qos>besteffort|burstable)\.slice)?"
        r"/kubepods(?:-(?P=qos))?-pod(?P<uid>%s)\.slice(?:/(?P<rest>.*))?\Z" % _UID
    ),
    re.compile(r"\A/kubepods(?:/(?:besteffort|burstable))?/pod(?P<uid>%s)(?:/(?P<rest>.*))?\Z" % _UID),
)
_CONTAINER = re.compile(r"\A(?:(?P<runtime>cri-containerd|crio|docker)-)?(?P<id>%s)(?:\.scope)?\Z" % _ID)
_RUNTIMES = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker"}
# a Kubernetes container name is a DNS-1123 label (k8s.io/apimachinery validation.IsDNS1123Label)
_CONTAINER_NAME = re.compile(r"\A[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?\Z")
BUNDLES = (
    ("containerd", "run/containerd/io.containerd.runtime.v2.task/k8s.io/{id}/config.json", "io.kubernetes.cri.container-name"),
    ("cri-o", "run/containers/storage/overlay-containers/{id}/userdata/config.json", "io.kubernetes.container.name"),
)
BUNDLE_MAX_BYTES = 4 * 1024 * 1024
METRICS = (
    ("gpuops_pod_gpu_memory_used_bytes", "GPU memory used by a pod's processes on one GPU (NVML compute processes)."),
    ("gpuops_gpu_memory_used_bytes", "GPU memory used on one GPU (NVML), every process included."),
    ("gpuops_gpu_memory_total_bytes", "GPU memory of one GPU (NVML)."),
    ("gpuops_gpu_process_memory_unattributed_bytes", "GPU memory of processes on one GPU that belong to no pod (host processes, or gone)."),
    ("gpuops_gpu_recovery_action", "NVML's recovery action for one GPU (field 230): 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, "
     "4 drain and reset, 5 recover IMEX domain, 6 bus reset, 7 system reboot."),
    ("gpuops_gpu_row_remap_pending", "1 when one GPU has a row remap pending (NVML field 144): it takes effect at the next reset."),
    ("gpuops_gpu_row_remap_failure", "1 when row remapping failed on one GPU (NVML field 145): an RMA criterion."),
    ("gpuops_gpu_retired_pages_pending", "1 when one GPU has a page retirement pending (NVML field 31)."),
    ("gpuops_gpu_lost", "1 when NVML says the GPU of this index is lost (fallen off the bus), else 0."),
    ("gpuops_metrics_up", "1 when gpuops metrics read the GPUs, 0 when it could not (reason label)."),
    ("gpuops_metrics_last_run_timestamp_seconds", "When gpuops metrics last wrote this file."),
)


class Unattributable(Exception):
    """What was read for one process cannot be trusted: the process stays unattributed."""


def pod_of_cgroup(text):
    """``(pod_uid, container_id, runtime)`` of a ``/proc/<pid>/cgroup`` text, or None (not a pod's process)."""
    paths = []
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            paths.insert(0, path)  # cgroup v2: the one line that counts
        elif "memory" in controllers.split(",") or controllers == "name=systemd":
            paths.append(path)
    for path in paths:
        for pattern in _KUBEPODS:
            pod = pattern.match(path)
            if pod:
                break
        else:
            continue
        container = _CONTAINER.match((pod.group("rest") or "").split("/", 1)[0])
        runtime = _RUNTIMES.get(container.group("runtime")) if container and container.group("runtime") else None
        return pod.group("uid").replace("_", "-"), container.group("id") if container else None, runtime
    return None


def _read_limited(path, limit):
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise Unattributable("%s is over %d bytes" % (path, limit))
    return data


def container_name(root, container_id, runtime=None):
    """The container's name from its OCI bundle's annotations (see the module docstring), or None.

    None when no bundle exists (the container ID then stands in); Unattributable when a
    bundle exists but is not what a runtime writes.
    """
    if not container_id:
        return None
    for name, template, key in BUNDLES:
        if runtime not in (None, name):
            continue
        path = os.path.join(root, template.format(id=container_id))
        try:
            raw = _read_limited(path, BUNDLE_MAX_BYTES)
        except OSError:
            continue
        try:
            doc = json.loads(raw.decode("utf-8"))
        except ValueError as exc:  # not UTF-8, not JSON
            raise Unattributable("%s: %s" % (path, exc)) from exc
        annotations = doc.get("annotations") if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or not isinstance(annotations, (dict, type(None))):
            raise Unattributable("%s is not an OCI config (an object with an annotations object)" % path)
        value = (annotations or {}).get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not _CONTAINER_NAME.match(value):
            raise Unattributable("%s: %s is not a container name" % (path, key))
        return value
    return None


# NVML's compute-process call by symbol, newest first. pynvml's unversioned
# nvmlDeviceGetComputeRunningProcesses is _v3 and, where the driver's library lacks that symbol,
# raises NVMLLibraryMismatchError, which is not an NVMLError. _v3 came with driver 510 and some 535
# builds dropped it again (NVML header history in XuehaiPan/nvitop#89); 440 and older lack _v2 too
# (gpuopenanalytics/pynvml#43, NVIDIA/k8s-device-plugin#331). Both take pynvml's
# c_nvmlProcessInfo_v2_t, so each is called through pynvml's own wrapper.
PROCESS_CALLS = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2")


def compute_processes(pynvml, handle):
    """``[(pid, bytes)]`` of a GPU's compute processes, through the newest call this driver has.

    Raises InventoryError when the driver has none of PROCESS_CALLS; NVML's other errors propagate.
    """
    for name in PROCESS_CALLS:
        call = getattr(pynvml, name, None)
        if call is None:  # an older nvidia-ml-py without this wrapper
            continue
        try:
            procs = call(handle)
        except pynvml.NVMLError_FunctionNotFound:
            continue
        return [(p.pid, p.usedGpuMemory) for p in procs if p.usedGpuMemory is not None]
    raise InventoryError(
        "this driver's NVML has none of %s, which per-process GPU memory needs (drivers 440 and older have neither): "
        "upgrade the NVIDIA driver on this node" % ", ".join(PROCESS_CALLS), "nvml"
    )


# NVML fields read for the health gauges, in one nvmlDeviceGetFieldValues call (pynvml NVML_FI_DEV_*); each value carries
# its own return code, and one the driver does not support (field 230 before it existed, retired pages from Hopper on)
# is left out, not an error
HEALTH_FIELDS = (
    (230, "gpuops_gpu_recovery_action"),  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
    (144, "gpuops_gpu_row_remap_pending"),  # NVML_FI_DEV_REMAPPED_PENDING
    (145, "gpuops_gpu_row_remap_failure"),  # NVML_FI_DEV_REMAPPED_FAILURE
    (31, "gpuops_gpu_retired_pages_pending"),  # NVML_FI_DEV_RETIRED_PENDING
)


def health_values(pynvml, handle):
    """``{metric: value}`` of HEALTH_FIELDS this GPU's driver answers."""
    call = getattr(pynvml, "nvmlDeviceGetFieldValues", None)
    if call is None:
        return {}
    try:
        values = call(handle, [field for field, dummy in HEALTH_FIELDS])
    except pynvml.NVMLError:
        return {}
    names = dict(HEALTH_FIELDS)
    return dict((names[field], value) for field, (ret, value) in inventory.field_answers(values).items() if ret == 0 and field in names)


def read_gpus(pynvml):
    """Per GPU: index, uuid, total and used bytes, its compute processes ``[(pid, bytes)]`` and its health fields;
    a GPU NVML says is lost is ``{"index", "lost": True}``, and the others are read all the same."""
    inventory.nvml_init(pynvml)
    gpus = []
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            except pynvml.NVMLError_GpuIsLost:
                gpus.append({"index": index, "uuid": "", "lost": True, "total": 0, "used": 0, "processes": [], "health": {}})
                continue
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            procs = compute_processes(pynvml, handle)
            gpus.append({"index": index, "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid, "lost": False,
                         "total": memory.total, "used": memory.used, "processes": procs, "health": health_values(pynvml, handle)})
    except pynvml.NVMLError as exc:
        raise InventoryError("NVML query failed: %s" % exc, "nvml") from exc
    finally:
        inventory.nvml_shutdown(pynvml)
    return gpus


def attribute(gpus, root="/", node=None):
    """Samples ``(metric, labels, value)`` from read_gpus' result, each process mapped to its pod.

    ``node`` (the Kubernetes node name) becomes every series' ``node`` label, so the rules do not
    depend on how a Prometheus labels its node_exporter targets."""
    samples = []
    for gpu in gpus:
        base = {"gpu": str(gpu["index"]), "uuid": gpu["uuid"]}
        if node:
            base["node"] = node
        if gpu.get("lost"):
            lost = {"gpu": str(gpu["index"])}
            if node:
                lost["node"] = node
            samples.append(("gpuops_gpu_lost", lost, 1))
            continue
        samples.append(("gpuops_gpu_lost", dict((k, v) for k, v in base.items() if k != "uuid"), 0))
        for metric, value in sorted((gpu.get("health") or {}).items()):
            samples.append((metric, base, value))
        per_container = {}
        unattributed = 0
        for pid, used in gpu["processes"]:
            found = attribute_process(root, pid)
            if found is None:
                unattributed += used
                continue
            per_container[found] = per_container.get(found, 0) + used
        for (pod_uid, name), used in sorted(per_container.items()):
            samples.append(("gpuops_pod_gpu_memory_used_bytes", dict(base, pod_uid=pod_uid, container=name), used))
        samples.append(("gpuops_gpu_memory_used_bytes", base, gpu["used"]))
        samples.append(("gpuops_gpu_memory_total_bytes", base, gpu["total"]))
        samples.append(("gpuops_gpu_process_memory_unattributed_bytes", base, unattributed))
    return samples


def attribute_process(root, pid):
    """``(pod_uid, container)`` of one process, or None: gone, not a pod's, or nothing trustworthy to go by."""
    try:
        raw = _read_limited(os.path.join(root, "proc", str(pid), "cgroup"), 1 << 20)
        found = pod_of_cgroup(raw.decode("utf-8"))
        if not found:
            return None
        pod_uid, container_id, runtime = found
        return pod_uid, container_name(root, container_id, runtime) or (container_id or "")[:12]
    except (OSError, ValueError, Unattributable):
        # gone, not ours to read, not UTF-8 (a ValueError), or a bundle that is not what a runtime writes
        return None


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(samples, up=True, reason=None, now=None, node=None):
    """The Prometheus text exposition format (0.0.4) of ``samples``, with HELP and TYPE for each metric."""
    own = {"node": node} if node else {}
    samples = list(samples) + [("gpuops_metrics_up", dict(own, reason=reason) if reason else own, 1 if up else 0),
                               ("gpuops_metrics_last_run_timestamp_seconds", own, int(time.time() if now is None else now))]
    lines = []
    for name, text in METRICS:
        rows = [(labels, value) for metric, labels, value in samples if metric == name]
        if not rows:
            continue
        lines.append("# HELP %s %s" % (name, text))
        lines.append("# TYPE %s gauge" % name)
        for labels, value in rows:
            label_text = ",".join('%s="%s"' % (k, _escape(v)) for k, v in sorted(labels.items()))
            lines.append("%s%s %s" % (name, "{%s}" % label_text if label_text else "", value))
    return "\n".join(lines) + "\n"


def write_atomically(path, text):
    """Write ``text`` to ``path`` through a temp file in the same directory and a rename (mode 0644):
    node_exporter never reads a half-written file."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".gpuops-metrics.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
