# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: k8s_node
short_description: Run tasks on a Kubernetes node's host through a short-lived node pod (no SSH)
version_added: 0.3.0
author: gpuops.fleet maintainers (@gpuops)
description:
  - For nodes reached through the Kubernetes API alone (managed clusters, image-based OSes, no SSH).
  - Ensures one pod per node per run, pinned to the node (C(nodeName)), with the host's C(/) mounted at C(/host) and
    C(hostPID), tolerating every taint, without C(privileged) (its one added capability is C(SYS_CHROOT); see
    O(gpuops_node_pod_gpu_access) for the GPUs) and without a service account token, then runs each
    command, and puts and fetches each file, as C(chroot /host /bin/sh -c ...) in that pod (over the API server's exec
    stream, see O(gpuops_node_exec_transport)), so the host's own shell and C(python3) run the modules on the host's paths,
    as over SSH.
  - A host without C(python3) (COS, Flatcar, Bottlerocket, Talos) is run from beside it (O(gpuops_node_exec_on)); the
    image's C(sh) and C(python3) run the modules in the pod, and the collection's node modules reach the host's files
    under C(/host) and run its C(systemctl), C(systemd-run) and C(nvidia-smi) chrooted into it.
  - Built on kubernetes.core's C(kubectl) connection (its auth options, pipelining; its exec and C(dd) file transfer
    where O(gpuops_node_exec_transport) is V(kubectl)). C(kubectl) makes, waits for and deletes the node pods.
  - The node pod stops by itself after O(gpuops_node_pod_idle) seconds without a command, and at
    O(gpuops_node_pod_deadline); C(gpuops.fleet.node_pods) deletes a run's pods at its end (C(site.yml) does); a later
    run deletes the pods an earlier run left on the node once that run is over, and refuses a node whose pod belongs
    to a run that may still be working.
  - The identity needs, in O(kubectl_namespace), C(pods) C(create get list watch delete) and C(pods/exec)
    C(create get) (the collection's C(docs/rbac/k8s-node-connection.yml)); the namespace must admit C(hostPID) and C(hostPath) pods
    (Pod Security C(privileged) level).
  - The API server's certificate is always verified (kubeconfig's C(certificate-authority), or O(ca_cert)); this
    connection has no C(validate_certs) switch.
  - Kubelet relays every exec stream, so a task that stops kubelet loses its stream; such a task sets
    O(gpuops_node_exec_detached) (the C(checkpoint_guard) role's repair does).
requirements:
  - kubectl
  - the kubernetes Python client, 30 or later, for O(gpuops_node_exec_transport=api) only
options:
  gpuops_node_name:
    description: The Kubernetes node's name. Default the inventory host's address (C(gpuops.fleet.k8s_gpu_nodes) sets it).
    type: str
    vars:
      - name: gpuops_node_name
  kubectl_namespace:
    description: The namespace of the node pods.
    type: str
    default: gpuops-system
    vars:
      - name: gpuops_node_pod_namespace
  gpuops_node_pod_image:
    description:
      - The node pod's image, by digest (C(repository@sha256:<64 hex>), a tag before the digest allowed); an image named by
        a tag alone is refused, because the node pod runs as root with the host's C(/) read-write, C(hostPID) and
        C(SYS_CHROOT), and a tag can be moved to other code.
      - It needs C(sh), C(chroot), C(touch), C(stat), C(date), C(sleep) (busybox); with O(gpuops_node_exec_on=pod) also
        C(python3) (and C(nvidia-ml-py) to read the GPUs), as the collection's EE image has them.
      - The default is Docker Hub's busybox 1.36, pinned by its digest; mirror it and name your registry's copy where
        nodes cannot reach Docker Hub.
    type: str
    default: docker.io/library/busybox:1.36@sha256:73aaf090f3d85aa34ee199857f03fa3a95c8ede2ffd4cc2cdb5b94e566b11662
    vars:
      - name: gpuops_node_pod_image
  gpuops_node_pod_idle:
    description: The node pod stops after this many seconds without a command (a killed run leaves no running pod).
    type: int
    default: 900
    vars:
      - name: gpuops_node_pod_idle
  gpuops_node_pod_deadline:
    description: The node pod ends after this many seconds whatever happens (C(activeDeadlineSeconds)).
    type: int
    default: 14400
    vars:
      - name: gpuops_node_pod_deadline
  gpuops_node_pod_ready_timeout:
    description: Seconds to wait for the node pod to run (its image pulled).
    type: int
    default: 180
    vars:
      - name: gpuops_node_pod_ready_timeout
  gpuops_node_pod_gpu_access:
    description:
      - How the node pod may open the GPUs' device nodes, which NVML needs. A container that is not privileged gets
        the runtime's default device list only, so even the host's own C(/dev/nvidiactl) cannot be opened from it;
        NVML then fails, the GPU inventory is unknown and nothing is repaired.
      - V(nvidia-runtime) sets C(NVIDIA_VISIBLE_DEVICES=all) and C(NVIDIA_DRIVER_CAPABILITIES=utility) in the pod, and
        NVIDIA's container runtime (the GPU Operator's default) then allows the GPUs' devices without a GPU request, so no
        pod's GPU is taken. It needs that runtime to run the pod (the node's default, or O(gpuops_node_pod_runtime_class))
        and to honour the variable for unprivileged containers (NVIDIA's C(accept-nvidia-visible-devices-envvar-when-unprivileged),
        true by default; false by default on Bottlerocket).
      - V(privileged) runs the pod privileged (every device and capability), only where V(nvidia-runtime) cannot work.
      - V(none) asks for neither (tasks that read no GPU).
    type: str
    default: nvidia-runtime
    choices: [nvidia-runtime, privileged, none]
    vars:
      - name: gpuops_node_pod_gpu_access
  gpuops_node_pod_runtime_class:
    description: The node pod's C(runtimeClassName), e.g. V(nvidia) where NVIDIA's runtime is not the node's default (empty, the default, sets none).
    type: str
    default: ''
    vars:
      - name: gpuops_node_pod_runtime_class
  gpuops_node_exec_on:
    description:
      - Where the modules run. V(host) chroots into the host (its C(sh) and C(python3)), as over SSH. V(pod) runs them in
        the node pod with the image's C(sh) and C(python3) (the image then needs C(nvidia-ml-py) to read the GPUs, as the
        collection's EE image has it), the host's C(/) at C(/host) (C(GPUOPS_HOST_ROOT)).
      - V(auto) chooses V(host) where C(chroot /host /bin/sh -c 'command -v python3') finds one, else V(pod); the
        first command in the pod decides, once per node pod.
      - Beside the host, the collection's node modules (M(gpuops.fleet.kubelet_checkpoint), M(gpuops.fleet.kubelet_checkpoint_info),
        M(gpuops.fleet.gpu_uuid_facts), M(gpuops.fleet.kubelet_config_info)) take and report host paths, and
        M(gpuops.fleet.guard_install) refuses (the boot guard needs the host's Python). Other modules, C(ansible.builtin)'s
        included, act on the pod's own files, so name host paths under C(/host) for them.
    type: str
    default: auto
    choices: [auto, host, pod]
    vars:
      - name: gpuops_node_exec_on
  gpuops_node_exec_detached:
    description:
      - Run each command of the task detached in the node pod and read its result back, asking again while the API
        cannot reach the pod (kubelet relays every exec stream, so a task that restarts kubelet cuts its own). Slower
        (a launch, polls and a read per command); the role sets it on its kubelet repair task only.
    type: bool
    default: false
    vars:
      - name: gpuops_node_exec_detached
  gpuops_node_exec_transport:
    description:
      - How each command reaches the node pod. V(kubectl) runs C(kubectl exec) per command, a process that reads the
        kubeconfig, asks the API server for the pod, then opens the exec stream (two requests). V(api) opens the exec
        stream from the controller's own process with the kubernetes Python client (a websocket), one request per
        command and no process, but each task's worker then loads that client and its core API (1.1 to 1.7 s of the
        controller's CPU per task and node, with and without compiled bytecode), where C(kubectl exec) cost less on the
        real kubelet node measured (see the collection's API guide). Take V(api) where the API server's request count
        matters more than the controller's CPU.
      - With V(api), the auth options are read as kubectl reads them (O(kubectl_kubeconfig) as a file or a mapping, else
        C(KUBECONFIG) or C(~/.kube/config), else the in-cluster service account; O(kubectl_context); then O(kubectl_host),
        O(kubectl_token), O(client_cert), O(client_key) and O(ca_cert) override it); it needs the kubernetes Python
        client 30 or later (bytes on the stream), and refuses O(kubectl_extra_args) and O(kubectl_local_env_vars) (they
        shape a kubectl process). The API's stream (C(v4.channel.k8s.io)) cannot close a command's stdin, so each
        command reads exactly the bytes sent (C(head -c) in the node pod, whose image then needs C(head), as busybox has it).
      - Either way C(kubectl) makes, awaits and deletes the node pods.
    type: str
    default: kubectl
    choices: [kubectl, api]
    version_added: 0.4.0
    vars:
      - name: gpuops_node_exec_transport
  gpuops_node_exec_timeout:
    description: Seconds a detached command may run, kubelet's restart included, before the task fails (its outcome then unknown).
    type: int
    default: 1800
    vars:
      - name: gpuops_node_exec_timeout
  host_facts:
    description:
      - Set by ansible-core (the host's C(ansible_facts)); not an input.
      - A host whose facts name a variable this connection or the controller acts on (C(gpuops_node_name),
        C(ansible_kubectl_*), a role's variables) is refused before any request is made, naming them. A module's result
        can set facts, and facts outrank inventory variables; so a node could otherwise move its node pod (root, the
        host's C(/) read-write) onto another node, or send this connection's credentials to a server it chooses. A
        node's name, and the connection's server and credentials, come from the inventory only.
    type: dict
    default: {}
    version_added: 0.4.0
    vars:
      - name: ansible_facts
  kubectl_pod:
    description: Set by the connection (the node pod's name); not an input.
    default: ''
  kubectl_container:
    description: Set by the connection (the node pod's container); not an input.
    default: ''
  kubectl_extra_args:
    description: Extra arguments to kubectl (as kubernetes.core's C(kubectl) connection).
    default: ''
    vars:
      - name: ansible_kubectl_extra_args
    env:
      - name: K8S_AUTH_EXTRA_ARGS
  kubectl_local_env_vars:
    description: Environment variables for the local kubectl (as kubernetes.core's C(kubectl) connection).
    default: {}
    type: dict
    vars:
      - name: ansible_kubectl_local_env_vars
  kubectl_kubeconfig:
    description: Path to a kubeconfig file.
    default: ''
    vars:
      - name: ansible_kubectl_kubeconfig
      - name: ansible_kubectl_config
    env:
      - name: K8S_AUTH_KUBECONFIG
  kubectl_context:
    description: The kubeconfig context.
    default: ''
    vars:
      - name: ansible_kubectl_context
    env:
      - name: K8S_AUTH_CONTEXT
  kubectl_host:
    description: URL of the API server.
    default: ''
    vars:
      - name: ansible_kubectl_host
      - name: ansible_kubectl_server
    env:
      - name: K8S_AUTH_HOST
      - name: K8S_AUTH_SERVER
  kubectl_token:
    description: A bearer token (shown censored in logs; prefer a kubeconfig file).
    vars:
      - name: ansible_kubectl_token
      - name: ansible_kubectl_api_key
    env:
      - name: K8S_AUTH_TOKEN
      - name: K8S_AUTH_API_KEY
  client_cert:
    description: Path to a client certificate.
    default: ''
    vars:
      - name: ansible_kubectl_cert_file
      - name: ansible_kubectl_client_cert
    env:
      - name: K8S_AUTH_CERT_FILE
  client_key:
    description: Path to a client key.
    default: ''
    vars:
      - name: ansible_kubectl_key_file
      - name: ansible_kubectl_client_key
    env:
      - name: K8S_AUTH_KEY_FILE
  pipelining:
    description:
      - Send each module to the node on the exec stream's stdin (one C(kubectl exec) per module call) instead of as a
        file first (a temp directory, the file, the run and the clean-up, four or five execs, each a request for the pod
        and one for the stream).
      - On by default for this connection, whatever ansible-core's own default; V(false) (here, with
        C(ansible_pipelining), C(ANSIBLE_PIPELINING) or C(pipelining) in C([defaults])) turns it off.
    type: boolean
    default: true
    version_added: 0.4.0
    vars:
      - name: ansible_pipelining
      - name: ansible_k8s_node_pipelining
    env:
      - name: ANSIBLE_PIPELINING
    ini:
      - section: defaults
        key: pipelining
  ca_cert:
    description: Path to the API server's CA certificate.
    default: ''
    vars:
      - name: ansible_kubectl_ssl_ca_cert
      - name: ansible_kubectl_ca_cert
    env:
      - name: K8S_AUTH_SSL_CA_CERT
"""

import json
import multiprocessing
import os
import select
import shlex
import subprocess
import tempfile
import time
import uuid
from collections import namedtuple

from ansible import constants as C
from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleFileNotFound
from ansible.module_utils.common.text.converters import to_bytes
from ansible.utils.display import Display

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import node_pod
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _node_trust
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _pod_stream as pod_stream

try:
    from ansible_collections.kubernetes.core.plugins.connection.kubectl import Connection as KubectlConnection
except ImportError as exc:  # pragma: no cover - kubernetes.core is a declared dependency
    raise ImportError("gpuops.fleet.k8s_node needs the kubernetes.core collection: %s" % exc) from exc

display = Display()

# what the watch of a new node pod prints per change: its phase and its Ready condition's status (kubectl's JSONPath)
READY_LINE = 'jsonpath={.status.phase} {.status.conditions[?(@.type=="Ready")].status}{"\\n"}'


def run_pid():
    """The PID of this run's ansible-playbook process: the worker's parent as the worker was started.

    Not ``os.getppid()`` alone: a worker whose ansible-playbook was killed (SIGKILL) can outlive it, reparented,
    and its next task would then take another run's identity (and sweep the killed run's pod as gone)."""
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None and parent.pid else os.getppid()


def pid_alive(pid):
    """Whether a process of this controller with that PID exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


RUN_TOKEN_FILE = "gpuops-run-token"


def run_token(run_dir=None):
    """This run's random token, the same in every worker of the run: drawn by the first one and kept in the run's own
    temporary directory (ansible-core's DEFAULT_LOCAL_TMP, made by ansible-playbook for this run alone and inherited
    by its forked workers). Written to a temporary name and linked into place, so a second worker reads a whole token."""
    run_dir = run_dir or C.DEFAULT_LOCAL_TMP
    path = os.path.join(run_dir, RUN_TOKEN_FILE)
    for dummy in range(50):
        try:
            with open(path) as handle:
                token = handle.read().strip()
            node_pod.run_id("x", token)  # a token of ours (NodePodError otherwise)
            return token
        except FileNotFoundError:
            pass
        except (GpuopsError, OSError) as exc:
            raise AnsibleConnectionFailure("this run's node pod token (%s) cannot be read: %s" % (path, exc)) from None
        tmp = "%s.%d" % (path, os.getpid())
        try:
            with open(tmp, "w") as handle:
                handle.write(node_pod.new_token() + "\n")
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another worker of the run drew first: read its token
        except OSError as exc:
            raise AnsibleConnectionFailure("this run's node pod token cannot be kept in %s: %s" % (run_dir, exc)) from None
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    raise AnsibleConnectionFailure("this run's node pod token (%s) could not be drawn" % path)


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def process_start(pid, proc="/proc"):
    """A process's start time (clock ticks after boot, /proc/PID/stat's 22nd field), or None where it is gone."""
    text = _read(os.path.join(proc, str(int(pid)), "stat"))
    if not text or ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else None


def local_origin(proc="/proc"):
    """(boot_id, PID namespace) of this controller's kernel and of this process; ("", "") where /proc cannot say."""
    boot = (_read(os.path.join(proc, "sys/kernel/random/boot_id")) or "").strip()
    try:
        namespace = os.readlink(os.path.join(proc, "self/ns/pid")).replace("pid:[", "").rstrip("]")
    except OSError:
        namespace = ""
    return boot, namespace


def origin_alive(found, proc="/proc"):
    """Whether the run of a pod's origin (node_pod.parse_origin) still runs: True, False, or None where this controller
    cannot see that process (another machine or container: another boot or PID namespace)."""
    boot, namespace = local_origin(proc)
    if not boot or not namespace or (found[0], found[1]) != (boot, namespace):
        return None
    return pid_alive(found[2]) and process_start(found[2], proc) == found[3]


# who this run's node pod is: the node, its namespace, the pod's idle and deadline seconds, the run's ID and the pod's name
Identity = namedtuple("Identity", "node namespace idle deadline run name")


class Connection(KubectlConnection):
    """kubernetes.core's kubectl connection, into the run's node pod on the node, chrooted to the host."""

    # kubernetes.core's connection names its options after the transport (kubectl_pod, kubectl_extra_args, ...)
    transport = "kubectl"
    documentation = DOCUMENTATION

    def __init__(self, play_context, new_stdin, *args, **kwargs):
        super().__init__(play_context, new_stdin, *args, **kwargs)
        self._node_pod = None
        self._stream = None  # the exec stream's API (gpuops_node_exec_transport api), False for kubectl; decided once

    def _kubectl(self):
        """kubectl with the auth options (kubernetes.core's own argument builder) and the namespace.

        kubernetes.core's ``_build_exec_cmd`` is private: it ends its argv with ``exec -i POD [-c C] --``
        and the command. That tail is checked, not counted blind, so a kubernetes.core that builds it
        otherwise fails here by name instead of running kubectl with a wrong argv
        (tests/unit/plugins/connection/test_k8s_node_argv.py, on every kubernetes.core ``make matrix`` holds)."""
        argv, censored = super()._build_exec_cmd([])
        container = self.get_option("kubectl_container")
        # the pod: kubectl_pod, else the host's address (kubernetes.core's fallback), whichever it took
        tail = ["exec", "-i", None] + (["-c", container] if container else []) + ["--"]
        for built in (argv, censored):
            got = built[-len(tail):]
            if len(got) != len(tail) or any(want is not None and have != want for have, want in zip(got, tail)):
                raise AnsibleConnectionFailure("kubernetes.core's kubectl connection built %r, not ending in %r: this kubernetes.core "
                                               "is not one gpuops.fleet.k8s_node supports" % (got, ["POD" if w is None else w for w in tail]))
        return argv[:-len(tail)], censored[:-len(tail)]

    def _call(self, argv, data, timeout):
        """Run kubectl: (rc, stdout, stderr) as bytes, rc None when it gave no answer in ``timeout`` seconds."""
        try:
            proc = subprocess.run([to_bytes(a, errors="surrogate_or_strict") for a in argv], input=data or b"", capture_output=True,
                                  timeout=timeout, check=False, env=self._local_env())
        except subprocess.TimeoutExpired:
            return None, b"", b"kubectl: no answer in %d s" % timeout
        finally:
            self.delete_temporary_file()
        return proc.returncode, proc.stdout, proc.stderr

    def _run(self, args, data=None, timeout=60):
        """A kubectl call of the connection's own (get, create, wait, delete): (rc, stdout, stderr) as text."""
        argv, censored = self._kubectl()
        display.vvv("NODE POD %s" % (censored + args,), host=self._play_context.remote_addr)
        rc, out, err = self._call(argv + args, data, timeout)
        if rc is None:
            raise AnsibleConnectionFailure("kubectl %s: no answer in %d s" % (args[0], timeout))
        return rc, out.decode(errors="replace"), err.decode(errors="replace").strip()

    def _own_pod(self, node, namespace, name):
        """This run's node pod as the API has it (a dict), or None where there is none.

        Listed by its name (the API server reads that one key), not read: where it is missing, kubectl 1.20 answers a
        read's 404 with a second request, for the namespace, only to word its error."""
        rc, out, err = self._run(["get", "pods", "--field-selector", "metadata.name=" + name, "-o", "json"])
        if rc != 0:
            raise AnsibleConnectionFailure("node %s: cannot read node pod %s in namespace %s: %s" % (node, name, namespace, err))
        return next(iter(json.loads(out).get("items") or ()), None)

    def _trusted(self):
        """Refuse a host whose facts name a variable this connection or the controller acts on (plugin_utils/_node_trust.py),
        before any request: its gpuops_node_name or ansible_kubectl_* may be what its node returned."""
        why = _node_trust.refusal(self._play_context.remote_addr, self.get_option("host_facts"))
        if why:
            raise AnsibleConnectionFailure(why)

    def _identity(self):
        """The node pod's ``Identity`` (node, namespace, idle, deadline, run, pod name), the options checked."""
        self._trusted()
        node = self.get_option("gpuops_node_name") or self._play_context.remote_addr
        namespace = self.get_option("kubectl_namespace")
        try:
            idle, deadline = node_pod.check_options(node, namespace, self.get_option("gpuops_node_pod_image"),
                                                    self.get_option("gpuops_node_pod_idle"), self.get_option("gpuops_node_pod_deadline"),
                                                    self.get_option("gpuops_node_pod_gpu_access"), self.get_option("gpuops_node_pod_runtime_class"),
                                                    self.get_option("gpuops_node_exec_on"))
        except GpuopsError as exc:
            raise AnsibleConnectionFailure(str(exc)) from None
        # the run: a random token drawn once per ansible-playbook run, so every task of the run finds the same pod and
        # no other run (another controller of the same short name, another container whose ansible-playbook is PID 1) does
        run = node_pod.run_id(os.uname()[1], run_token())
        return Identity(node, namespace, idle, deadline, run, node_pod.pod_name(node, run))

    def remove_node_pod(self, check_mode=False):
        """Delete this run's node pod (gpuops.fleet.node_pods); a result dict.

        ``changed`` is false: the pod was this run's own transport, made by this run, so the cluster is left as the run
        found it; ``deleted`` says whether there was one to delete."""
        who = self._identity()
        node, namespace, name = who.node, who.namespace, who.name
        if check_mode:
            exists = self._own_pod(node, namespace, name) is not None
        else:  # the delete says whether there was one (no read first: a request saved)
            exists = self._delete(node, [name]) > 0
        self._node_pod = None
        if exists:
            msg = "this run's node pod %s %s" % (name, "would be deleted" if check_mode else "deleted")
        else:
            msg = "no node pod of this run on %s" % node
        return dict(pod=name, namespace=namespace, changed=False, deleted=exists and not check_mode, msg=msg)

    def _ensure_node_pod(self):
        who = self._identity()
        node, namespace, idle, deadline, run, name = who
        pid = run_pid()
        if not pid_alive(pid):
            # a worker left behind by a killed run: it starts nothing, so the run's pod stays for the next run to delete
            raise AnsibleConnectionFailure("node %s: this task's run (ansible-playbook, pid %d) is gone; no node pod is started for it" % (node, pid))
        pod = self._own_pod(node, namespace, name)
        status = (pod or {}).get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            display.vv("node %s: this run's node pod %s went idle; a new one replaces it" % (node, name))
            self._delete(node, [name])
            pod = None
        if pod is None:
            rc, out, err = self._run(["get", "pods", "-l", node_pod.LABEL + "=true", "-o", "json"])
            if rc != 0:
                raise AnsibleConnectionFailure("node %s: cannot list node pods in namespace %s: %s" % (node, namespace, err))
            try:
                stale = node_pod.sweep(json.loads(out).get("items") or [], node, run, origin_alive)
            except GpuopsError as exc:
                raise AnsibleConnectionFailure(str(exc)) from None
            if stale:
                display.vv("node %s: deleting the node pods an earlier run left: %s" % (node, ", ".join(stale)))
                self._delete(node, stale)
            manifest = node_pod.pod_manifest(name, node, namespace, self.get_option("gpuops_node_pod_image"), idle, deadline, run,
                                             self.get_option("gpuops_node_pod_gpu_access"), self.get_option("gpuops_node_pod_runtime_class"),
                                             self.get_option("gpuops_node_exec_on"), run_origin=self._origin(pid))
            # the manifest is built here from checked data: no OpenAPI schema fetched to validate it (a request saved)
            rc, out, err = self._run(["create", "--validate=false", "-f", "-"], data=json.dumps(manifest).encode())
            if rc != 0 and "AlreadyExists" not in err:  # another worker of this run created it first
                raise AnsibleConnectionFailure("node %s: could not create node pod %s in namespace %s: %s" % (node, name, namespace, err))
        if not node_pod.ready(pod):  # a pod the run's earlier tasks already use needs no wait
            self._wait_ready(node, namespace, name)
        self.set_option("kubectl_pod", name)
        self.set_option("kubectl_container", node_pod.CONTAINER)
        return name

    @staticmethod
    def _origin(pid):
        """The ORIGIN annotation of this run's pod: where its ansible-playbook lives (node_pod.origin), or "" where /proc cannot say."""
        boot, namespace = local_origin()
        start = process_start(pid)
        return node_pod.origin(boot, namespace, pid, start) if boot and namespace and start else ""

    def _wait_ready(self, node, namespace, name):
        """Until the pod is Ready: one watch of the one pod (``kubectl get --watch``, a read then the watch: two requests,
        where ``kubectl wait`` makes three, a read, a list and the watch)."""
        timeout = int(self.get_option("gpuops_node_pod_ready_timeout"))
        argv, censored = self._kubectl()
        args = ["get", "pod", name, "--watch", "-o", READY_LINE]
        display.vvv("NODE POD %s" % (censored + args,), host=self._play_context.remote_addr)
        seen, err = self._watch(argv + args, timeout)
        if not (seen and seen.split()[-1:] == ["True"]):
            why = err or "last seen: phase and Ready %r" % (seen or "nothing",)
            raise AnsibleConnectionFailure("node %s: node pod %s not running after %d s (image %s pulled? namespace %s admits hostPID and "
                                           "hostPath pods?): %s" % (node, name, timeout, self.get_option("gpuops_node_pod_image"), namespace, why))

    def _watch(self, argv, timeout):
        """Run a ``kubectl get --watch`` printing READY_LINE's lines until one says Ready (``True``) or ``timeout``.

        Returns (the last line seen, or "", kubectl's stderr when it ended by itself)."""
        seen, buf = "", b""
        deadline = time.monotonic() + timeout
        with tempfile.TemporaryFile() as errors:
            proc = subprocess.Popen([to_bytes(a, errors="surrogate_or_strict") for a in argv], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=errors, env=self._local_env())
            try:
                while time.monotonic() < deadline:
                    ready, dummy, dummy2 = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
                    if not ready:
                        break
                    chunk = os.read(proc.stdout.fileno(), 65536)
                    if not chunk:  # kubectl ended (an error, or the watch closed)
                        proc.wait()
                        errors.seek(0)
                        return seen, errors.read().decode(errors="replace").strip()
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        seen = line.decode(errors="replace").strip() or seen
                        if seen.split()[-1:] == ["True"]:
                            return seen, ""
                return seen, ""
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                proc.stdout.close()
                self.delete_temporary_file()

    def _delete(self, node, names):
        """Delete the pods and wait until they are gone; how many there were (kubectl prints a line per pod deleted)."""
        rc, out, err = self._run(["delete", "pod", "--wait=true", "--ignore-not-found"] + list(names), timeout=120)
        if rc != 0:
            raise AnsibleConnectionFailure("node %s: could not delete node pods %s: %s" % (node, ", ".join(names), err))
        return sum(1 for line in out.splitlines() if line.strip().endswith(" deleted"))

    def _connect(self, port=None):
        self._trusted()
        if self._node_pod is None:
            self._node_pod = self._ensure_node_pod()
        return super()._connect(port)

    def _exec_api(self):
        """The exec stream's core API (gpuops_node_exec_transport api), else None: kubectl exec. Decided once per connection;
        only api imports the kubernetes client."""
        if self._stream is None:
            self._stream = False
            if self.get_option("gpuops_node_exec_transport") == "api":
                shaped = [name for name in ("kubectl_extra_args", "kubectl_local_env_vars") if self.get_option(name)]
                why = pod_stream.unsupported() or (shaped and "%s shape a kubectl process, which api does not start" % " and ".join(shaped))
                if why:
                    raise AnsibleConnectionFailure("gpuops_node_exec_transport: api cannot be used: %s; set it to kubectl" % why)
                try:
                    self._stream = pod_stream.api(pod_stream.configuration(
                        self.get_option("kubectl_kubeconfig"), self.get_option("kubectl_context"), self.get_option("kubectl_host"),
                        self.get_option("kubectl_token"), self.get_option("client_cert"), self.get_option("client_key"),
                        self.get_option("ca_cert")))
                except GpuopsError as exc:
                    raise AnsibleConnectionFailure(str(exc)) from None
            display.vvv("EXEC TRANSPORT %s" % ("api" if self._stream else "kubectl"), host=self._play_context.remote_addr)
        return self._stream or None

    def _stream_exec(self, argv, in_data=None, timeout=None):
        """``argv`` (an exec_argv or a job's argv built for the data's size) over the exec stream: (rc, stdout, stderr)."""
        display.vvvv("POD EXEC (api) %s" % (argv,), host=self._play_context.remote_addr)
        return pod_stream.run(self._exec_api(), self.get_option("kubectl_namespace"), self.get_option("kubectl_pod"),
                              self.get_option("kubectl_container"), argv, in_data, timeout)

    def _pod_exec(self, argv, in_data=None, timeout=120):
        """An exec of ``argv`` in the node pod itself (not chrooted): (rc, stdout, stderr), rc None when it hung or broke."""
        if self._exec_api():
            return self._stream_exec(argv, in_data, timeout)
        local_cmd, censored = KubectlConnection._build_exec_cmd(self, argv)
        display.vvvv("POD EXEC %s" % (censored,), host=self._play_context.remote_addr)
        return self._call(local_cmd, in_data, timeout)

    def _host_exec(self, cmd, in_data=None):
        """Ansible's ``cmd`` (a list) run on the host (or beside it) over the exec stream: (rc, stdout, stderr).
        No exit status (the stream was refused or broke) fails the task, as kubectl's own error would. Its callers
        (exec_command, put_file, fetch_file) have connected: the node pod is known."""
        rc, out, err = self._stream_exec(node_pod.exec_argv(cmd, len(in_data) if in_data else None), in_data)
        if rc is None:
            raise AnsibleConnectionFailure("node pod %s: %s" % (self._node_pod, err.decode(errors="replace").strip()))
        return rc, out, err

    def _poll(self, job):
        """A poll of the job: (its state as node_pod.job_state says, kubectl's stderr); state None when the stream broke."""
        rc, out, err = self._pod_exec(node_pod.job_poll_argv(job), timeout=60)
        return (node_pod.job_state(out) if rc == 0 else None), err

    def _exec_detached(self, cmd, in_data):
        """Launch ``cmd`` detached on the host, wait for its end across broken streams (kubelet restarting), read its result."""
        job = uuid.uuid4().hex
        size = len(in_data) if in_data and self._exec_api() else None
        rc, out, err = self._pod_exec(node_pod.job_launch_argv(job, cmd, size), in_data)
        # never launched, or launched and the stream broke before it said so: asking tells which
        if (rc != 0 or b"gpuops-launched" not in out) and not self._job_launched(job):
            raise AnsibleConnectionFailure("node pod %s: could not launch a detached command (rc %s): %s"
                                           % (self._node_pod, rc, err.decode(errors="replace").strip()))
        status = self._wait_job(job, int(self.get_option("gpuops_node_exec_timeout")))
        for _attempt in range(30):
            rc, out, err = self._pod_exec(node_pod.job_collect_argv(job))
            if rc == 0:
                return status, out, err
            time.sleep(1)
        raise AnsibleConnectionFailure("node pod %s: the detached command ended (rc %d) but its output could not be read: %s"
                                       % (self._node_pod, status, err.decode(errors="replace").strip()))

    def _job_launched(self, job, timeout=60):
        """Whether the job exists in the pod (running or ended); asks again while the stream breaks."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state, dummy = self._poll(job)
            if state is not None:
                return state[0] != "lost"
            time.sleep(1)
        return False

    def _wait_job(self, job, timeout):
        """The detached command's exit status once it has ended; polls, asking again while the stream breaks."""
        deadline, broken = time.monotonic() + timeout, 0
        while True:
            state, err = self._poll(job)
            if state is not None and state[0] == "done":
                if broken:
                    display.vv("node pod %s: the detached command's result read after %d broken polls (kubelet restarting)"
                               % (self._node_pod, broken), host=self._play_context.remote_addr)
                return state[1]
            if state is not None and state[0] == "lost":
                raise AnsibleConnectionFailure("node pod %s: the detached command's files are gone (was the pod replaced?); its outcome is unknown: "
                                               "run again (the repair is idempotent)" % self._node_pod)
            if state is None:
                broken += 1
                if b"NotFound" in err:
                    raise AnsibleConnectionFailure("node pod %s is gone while a detached command ran; its outcome is unknown: run again" % self._node_pod)
            if time.monotonic() > deadline:
                raise AnsibleConnectionFailure("node pod %s: a detached command still had no result after %d s (%s); its outcome is unknown"
                                               % (self._node_pod, timeout, err.decode(errors="replace").strip() or "running"))
            time.sleep(1)

    def exec_command(self, cmd, in_data=None, sudoable=False):
        self._connect()
        if not self.get_option("gpuops_node_exec_detached"):
            if not self._exec_api():
                return super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
            display.vvv("EXEC (api) %s" % cmd, host=self._play_context.remote_addr)
            return self._host_exec([self._play_context.executable, "-c", cmd], in_data)
        display.vvv("EXEC (detached) %s" % cmd, host=self._play_context.remote_addr)
        return self._exec_detached([self._play_context.executable, "-c", cmd], in_data)

    def put_file(self, in_path, out_path):
        self._connect()
        if not self._exec_api():
            return super().put_file(in_path, out_path)
        display.vvv("PUT (api) %s TO %s" % (in_path, out_path), host=self._play_context.remote_addr)
        out_path = self._prefix_login_path(out_path)
        try:
            with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            raise AnsibleFileNotFound("file or module does not exist: %s" % in_path) from None
        rc, out, err = self._host_exec([self._play_context.executable, "-c", "cat > %s" % shlex.quote(out_path)], data)
        if rc != 0:
            raise AnsibleError("failed to transfer file %s to %s:\n%s\n%s" % (in_path, out_path, out, err))
        return None

    def fetch_file(self, in_path, out_path):
        self._connect()
        if not self._exec_api():
            return super().fetch_file(in_path, out_path)
        display.vvv("FETCH (api) %s TO %s" % (in_path, out_path), host=self._play_context.remote_addr)
        in_path = self._prefix_login_path(in_path)
        rc, out, err = self._host_exec([self._play_context.executable, "-c", "cat %s" % shlex.quote(in_path)])
        if rc != 0:
            raise AnsibleError("failed to fetch file %s to %s:\n%s" % (in_path, out_path, err))
        with open(to_bytes(out_path, errors="surrogate_or_strict"), "wb") as handle:
            handle.write(out)
        return None

    def _build_exec_cmd(self, cmd):
        if self._node_pod is None:
            self._connect()
        return super()._build_exec_cmd(node_pod.exec_argv(cmd))
