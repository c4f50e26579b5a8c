# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the node pod of the ``gpuops.fleet.k8s_node`` connection
(a node reached through the Kubernetes API alone), as data and decisions.

One pod per node per run: pinned by ``nodeName`` (no scheduler: it lands on a cordoned or tainted
node too), ``hostPID``, the host's ``/`` mounted at ``/host``, every taint tolerated, no service
account token, no ``privileged``: ``chroot`` needs only CAP_SYS_CHROOT, which the pod asks for by name
(containerd's default capability set has it, CRI-O's does not).
Every command runs as ``chroot /host /bin/sh -c ...``: the host's own shell and ``python3`` run the
modules on the host's paths, as over SSH; on a host without ``python3`` (``exec_on`` auto or pod) in
the pod, with the image's, beside the host (``GPUOPS_HOST_ROOT=/host``, see ``_node/hostroot.py``).

The GPUs (``gpu_access``): a container that is not privileged gets the runtime's default device
allow list (containerd: ``oci.WithDefaultUnixDevices``; runc enforces it through the devices cgroup),
so NVML cannot open ``/dev/nvidiactl`` even at the host's own path under ``/host``: on an NVIDIA H200
it failed with NVML's "Unknown Error" in such a container, and read the GPU once the NVIDIA character
devices were allowed (``hack/real-gpu/node_pod_devices.py``). Hence:

* ``nvidia-runtime`` (default): ``NVIDIA_VISIBLE_DEVICES=all`` and ``NVIDIA_DRIVER_CAPABILITIES=utility``
  in the container's environment, the contract of NVIDIA's container runtime (the GPU Operator's
  DaemonSets use it): that runtime allows the GPUs' devices without a GPU request, so no pod's GPU is
  taken. It acts only where the NVIDIA runtime runs the pod (the node's default runtime, or
  ``runtime_class``) and honours the variable in a container that is not privileged (NVIDIA's
  ``accept-nvidia-visible-devices-envvar-when-unprivileged``, true by default; Bottlerocket's
  ``visible-devices-envvar-when-unprivileged`` is false by default);
* ``privileged``: ``privileged: true``, every device and capability: only where the first cannot work,
  and only when the user asks;
* ``none``: neither; the modules then find the GPU inventory unknown and change nothing.

The pod ends by itself: its only process exits once no command has touched its heartbeat file for
``idle`` seconds (a run that was killed leaves a pod that soon stops running), and
``activeDeadlineSeconds`` bounds it whatever happens. A run's pods are deleted at its end
(``gpuops.fleet.node_pods``); a later run deletes the pods an earlier one left, once that run is
over (``sweep``), and refuses to take a node from a run still using it.

Pure: no API calls here (the connection runs ``kubectl`` and the exec streams); kubectl's manifest is JSON built from data.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from ansible_collections.gpuops.fleet.plugins.module_utils._common.beside_host import HOST_ROOT, HOST_ROOT_ENV
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import as_int, check_pinned_image, check_value, digits
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError, ParameterError

LABEL = "gpuops.fleet/node-pod"
RUN_LABEL = "gpuops.fleet/run"
# the run's process (origin()): only a run on the same kernel and PID namespace can tell whether it still lives
ORIGIN_ANNOTATION = "gpuops.fleet/run-origin"
TOKEN_MIN, TOKEN_MAX = 16, 32
_TOKEN = re.compile(r"\A[0-9a-f]{%d,%d}\Z" % (TOKEN_MIN, TOKEN_MAX))
CONTAINER = "node"
HEARTBEAT = "/tmp/gpuops-heartbeat"
_NOT_LABEL = re.compile(r"[^a-z0-9-]+")
GPU_ACCESS = ("nvidia-runtime", "privileged", "none")
# where the modules run: chrooted into the host (its python3), beside it (the image's python3, the host's / at HOST_ROOT),
# or auto: on the host where it has python3, else beside it (decided once per pod, by the first command)
EXEC_ON = ("auto", "host", "pod")
EXEC_ON_ENV = "GPUOPS_NODE_EXEC_ON"
EXEC_ON_FILE = "/tmp/gpuops-exec-on"
# busybox 1.36 (Docker Hub's docker.io/library/busybox:1.36 manifest list), pinned: a tag can be moved to other code
DEFAULT_IMAGE = "docker.io/library/busybox:1.36@sha256:73aaf090f3d85aa34ee199857f03fa3a95c8ede2ffd4cc2cdb5b94e566b11662"
# NVIDIA's container runtime: every GPU's device nodes, and the driver's management tools and NVML only
NVIDIA_ENV = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}]


class NodePodError(GpuopsError):
    """A node another run still uses, or a bad detached-command id (names the pod or the id, and the fix)."""


def check_options(node, namespace, image, idle, deadline, gpu_access="nvidia-runtime", runtime_class="", exec_on="auto"):
    """Validate the connection's options; returns (idle, deadline) as ints (AWX survey strings too).

    Raises ParameterError naming the option (the collection's shared checks: DNS-1123 names, image, whole numbers)."""
    check_value("gpuops_node_name", node, "dns_subdomain")
    check_value("gpuops_node_pod_namespace", namespace, "dns_label")
    check_pinned_image("gpuops_node_pod_image", image, "(repository:tag@sha256:... too). The node pod runs as root with the host's / "
                       "read-write, hostPID and SYS_CHROOT: a tag can run other code tomorrow")
    if gpu_access not in GPU_ACCESS:
        raise ParameterError("gpuops_node_pod_gpu_access", "must be one of %s, got %r" % (", ".join(GPU_ACCESS), gpu_access))
    check_value("gpuops_node_pod_runtime_class", runtime_class, "dns_subdomain", empty_ok=True)
    if exec_on not in EXEC_ON:
        raise ParameterError("gpuops_node_exec_on", "must be one of %s, got %r" % (", ".join(EXEC_ON), exec_on))
    values = []
    for name, value, low in (("gpuops_node_pod_idle", idle, 60), ("gpuops_node_pod_deadline", deadline, 300)):
        number = as_int(name, value)
        if number < low:
            raise ParameterError(name, "must be at least %d seconds, got %d" % (low, number))
        values.append(number)
    if values[0] >= values[1]:
        raise ParameterError("gpuops_node_pod_idle", "%d s must be shorter than gpuops_node_pod_deadline (%d s)" % tuple(values))
    return tuple(values)


def run_id(controller, token):
    """The run's label value: the controller's short host name (for people) and the run's random token (the identity).

    The token is drawn once per ansible-playbook run (the connection keeps it in the run's own temporary directory),
    so two controllers of one short name, or two containers whose ansible-playbook is PID 1, are two runs."""
    host = _NOT_LABEL.sub("-", str(controller).split(".", maxsplit=1)[0].lower()).strip("-")[:40] or "controller"
    if not _TOKEN.match(str(token)):
        raise NodePodError("a run token must be %d-%d lowercase hex digits, got %r" % (TOKEN_MIN, TOKEN_MAX, token))
    return "%s-%s" % (host, token)


def new_token():
    """A run's random token (80 bits)."""
    return secrets.token_hex(10)


def origin(boot_id, pid_namespace, pid, start_time):
    """Where a run's ansible-playbook process lives, as the pod's ORIGIN annotation says it: the kernel's boot, the PID
    namespace, the PID and its start time (clock ticks after boot). Another run may check that process only when it
    shares the boot and the PID namespace; the start time tells a reused PID from the run's own."""
    return "%s/%s/%d/%s" % (boot_id, pid_namespace, int(pid), start_time)


def parse_origin(text):
    """(boot_id, pid_namespace, pid, start_time) of an ORIGIN annotation, or None where it is not one."""
    parts = str(text or "").split("/")
    if len(parts) != 4 or digits(parts[2]) is None or parts[2] != parts[2].strip() or not all(parts):
        return None
    return parts[0], parts[1], digits(parts[2]), parts[3]


def pod_name(node, run):
    """A DNS-1123 pod name for (node, run): a readable prefix and a digest, at most 63 characters."""
    digest = hashlib.sha256(("%s/%s" % (node, run)).encode()).hexdigest()[:10]
    return ("gpuops-node-" + _NOT_LABEL.sub("-", node.lower()).strip("-"))[:50].rstrip("-") + "-" + digest


def pod_command(idle, deadline):
    """The pod's only process: it exits when the heartbeat is ``idle`` seconds old (and at ``deadline``)."""
    script = ('touch %(hb)s; end=$(( $(date +%%s) + %(deadline)d )); '
              'while [ $(( $(date +%%s) - $(stat -c %%Y %(hb)s) )) -lt %(idle)d ] && [ $(date +%%s) -lt $end ]; do sleep 5; done'
              % {"hb": HEARTBEAT, "idle": int(idle), "deadline": int(deadline)})
    return ["/bin/sh", "-c", script]


def pod_manifest(name, node, namespace, image, idle, deadline, run, gpu_access="nvidia-runtime", runtime_class="", exec_on="auto",
                 run_origin=""):
    """The node pod, built as data: nothing a node name or an image says can add a key."""
    annotations = {"gpuops.fleet/node": node}
    if run_origin:
        annotations[ORIGIN_ANNOTATION] = run_origin
    manifest = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL: "true", RUN_LABEL: run},
                     "annotations": annotations},
        "spec": {
            "nodeName": node, "hostPID": True, "restartPolicy": "Never", "activeDeadlineSeconds": int(deadline),
            "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": False, "enableServiceLinks": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": CONTAINER, "image": image, "imagePullPolicy": "IfNotPresent",
                            "command": pod_command(idle, deadline),
                            # chroot's one capability, asked for by name: containerd's default set has it, CRI-O's
                            # (since 1.18) does not; nothing else is added (gpu_access privileged replaces it). As root
                            # whatever the image's USER (ansible-builder's EE images run as a user): chroot and the host's files need root
                            "securityContext": {"privileged": False, "runAsUser": 0, "runAsGroup": 0, "capabilities": {"add": ["SYS_CHROOT"]}},
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                            "env": [{"name": EXEC_ON_ENV, "value": exec_on}],
                            "volumeMounts": [{"name": "host", "mountPath": HOST_ROOT}]}],
            "volumes": [{"name": "host", "hostPath": {"path": "/", "type": "Directory"}}],
        },
    }
    spec, container = manifest["spec"], manifest["spec"]["containers"][0]
    if gpu_access == "nvidia-runtime":
        container["env"] += [dict(e) for e in NVIDIA_ENV]
    elif gpu_access == "privileged":
        container["securityContext"] = {"privileged": True, "runAsUser": 0, "runAsGroup": 0}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return manifest


# The prologue of every command: the heartbeat, the host's root user as an SSH login has it (the pod's
# HOME is the image's: Ansible's ~/.ansible would land in /), and where the command runs. On the host:
# ``chroot /host``, the host's shell and python3. Beside it: the image's own, with GPUOPS_HOST_ROOT
# telling the node code where the host's / is (plugins/module_utils/_node/hostroot.py). ``auto`` asks
# once per pod whether the host has python3 and keeps the answer in the pod (EXEC_ON_FILE).
_PROLOGUE = ('touch %(hb)s; HOME=/root; export HOME; cd /; '
             'if [ ! -s %(file)s ]; then case "$%(env)s" in host|pod) on=$%(env)s;; '
             '*) if chroot %(root)s /bin/sh -c "command -v python3" > /dev/null 2>&1; then on=host; else on=pod; fi;; esac; '
             'echo "$on" > %(file)s.$$ && mv %(file)s.$$ %(file)s; fi; read on < %(file)s; '
             'if [ "$on" = pod ]; then %(root_env)s=%(root)s; export %(root_env)s; else set -- chroot %(root)s "$@"; fi; '
             % {"hb": HEARTBEAT, "file": EXEC_ON_FILE, "env": EXEC_ON_ENV, "root": HOST_ROOT, "root_env": HOST_ROOT_ENV})


def ready(pod):
    """Whether a pod (a dict as the API returns it, or None) runs and is Ready: no need to wait for it."""
    status = (pod or {}).get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _reader(stdin_size):
    """What reads a command's stdin in the pod: all of it until its end (``cat``: kubectl closes the stream's stdin once
    it has sent it), or exactly ``stdin_size`` bytes (``head -c``: the API's exec stream, ``v4.channel.k8s.io``, cannot
    close stdin, so a reader that waits for its end would wait forever; kubelet 1.20 speaks no later protocol)."""
    if stdin_size is None:
        return "cat"
    if isinstance(stdin_size, bool) or not isinstance(stdin_size, int) or stdin_size < 0:
        raise NodePodError("a command's stdin size must be a whole number of bytes, got %r" % (stdin_size,))
    return "head -c %d" % stdin_size


def exec_argv(cmd, stdin_size=None):
    """What the node pod's exec runs for Ansible's ``cmd`` (a list): touch the heartbeat, then ``cmd`` on the host (or
    beside it). With ``stdin_size`` (the API's exec stream), ``cmd`` reads exactly that many bytes of stdin, then its end."""
    run = 'exec "$@"' if stdin_size is None else _reader(stdin_size) + ' | "$@"'
    return ["/bin/sh", "-c", _PROLOGUE + run, "gpuops-node"] + list(cmd)


# A detached command: launched in the pod, outliving kubectl's stream (kubelet relays it, and a task
# that restarts kubelet cuts it); its exit status, stdout and stderr land in files of the pod's own
# /tmp, read back once it has ended. Constant scripts: the command comes as arguments ("$@").
JOBS = "/tmp/gpuops-jobs"
_LAUNCH = ('d=$1; shift; ' + _PROLOGUE + 'mkdir -p "$d" && @READ@ > "$d/in" || exit 1; '
           '( "$@" < "$d/in" > "$d/out" 2> "$d/err"; echo $? > "$d/rc.tmp"; mv "$d/rc.tmp" "$d/rc" ) '
           '< /dev/null > /dev/null 2>&1 & echo gpuops-launched')
_POLL = ('d=$1; touch %s; if [ -f "$d/rc" ]; then echo "gpuops-rc=$(cat "$d/rc")"; elif [ -d "$d" ]; then echo gpuops-running; '
         'else echo gpuops-lost; fi' % HEARTBEAT)
_COLLECT = 'd=$1; cat "$d/out" && cat "$d/err" >&2 && rm -rf "$d"'
_JOB_ID = re.compile(r"^[a-z0-9]{8,40}$")


def job_dir(job_id):
    if not _JOB_ID.match(job_id):
        raise NodePodError("a detached command's id must be 8-40 lowercase letters or digits, got %r" % (job_id,))
    return "%s/%s" % (JOBS, job_id)


def _job_argv(script, job_id, *cmd):
    return ["/bin/sh", "-c", script, "gpuops-job", job_dir(job_id)] + list(cmd)


def job_launch_argv(job_id, cmd, stdin_size=None):
    """Run in the pod (not chrooted): start ``cmd`` on the host, detached; its stdin is this exec's stdin (all of it, or
    ``stdin_size`` bytes: see ``exec_argv``). Prints gpuops-launched."""
    return _job_argv(_LAUNCH.replace("@READ@", _reader(stdin_size)), job_id, *cmd)


def job_poll_argv(job_id):
    return _job_argv(_POLL, job_id)


def job_collect_argv(job_id):
    """Prints the command's stdout, its stderr to stderr, and removes its files."""
    return _job_argv(_COLLECT, job_id)


def job_state(poll_stdout):
    """What a poll printed: ("done", rc), ("running", None), ("lost", None), or None (the stream broke: ask again)."""
    text = poll_stdout.decode(errors="replace") if isinstance(poll_stdout, bytes) else str(poll_stdout)
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("gpuops-rc=") and digits(line[len("gpuops-rc="):]) is not None:
            return "done", digits(line[len("gpuops-rc="):])
        if line in ("gpuops-running", "gpuops-lost"):
            return line[len("gpuops-"):], None
    return None


def sweep(pods, node, run, origin_alive):
    """Which node pods of ``node`` (dicts as the API returns them) to delete before this run takes it.

    A pod of this run (its RUN_LABEL is ``run``, whose token is random) is kept. Another run's pod is deleted
    when that run is over: the pod no longer runs (idle or deadline) or is being deleted, or
    ``origin_alive(parse_origin(its ORIGIN_ANNOTATION))`` says False (that run's ansible-playbook is gone; the
    caller answers only for a process it can see: same boot, same PID namespace, same start time). Any other
    answer (None: another controller or container, an older pod without the annotation) means the run may still
    be working, and the node is refused: NodePodError names the pods and how to end them. Returns the names to delete.
    """
    delete, busy = [], []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if (pod.get("spec") or {}).get("nodeName") != node:
            continue
        theirs = (meta.get("labels") or {}).get(RUN_LABEL, "")
        if theirs == run:
            continue
        found = parse_origin((meta.get("annotations") or {}).get(ORIGIN_ANNOTATION))
        over = (status.get("phase") in ("Succeeded", "Failed") or meta.get("deletionTimestamp")
                or (found is not None and origin_alive(found) is False))
        (delete if over else busy).append(meta.get("name"))
    if busy:
        raise NodePodError("node %s: node pod(s) %s of another run still running (label %s); wait for that run to end (its pods stop "
                           "after gpuops_node_pod_idle seconds without a command) or, if it was killed, delete them: "
                           "kubectl -n NAMESPACE delete pod %s" % (node, ", ".join(busy), RUN_LABEL, " ".join(busy)))
    return delete
