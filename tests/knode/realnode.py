# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The REAL kubelet node of hack/kube-node.sh, driven from the tests.

kubelet v1.20.2 and containerd are real; the GPUs are SIMULATED: the fake libnvidia-ml.so.1 and
the fake device plugin read the same config file (``nvml.cfg`` in the run directory), so NVML
(what our modules read) and kubelet (what the plugin registers) agree on the UUIDs, and
``set_gpus`` replaces a GPU in both at their next start. kubelet is stopped and started through
hack/kube-node.sh, directly or through the ``systemctl`` verbs our code calls (the fake
systemctl of tests/fakes runs kube-node.sh for ``kubelet.service``: see ``systemd_dir``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "tests", "fakes"), os.path.join(ROOT, "tests", "kube")]
import fakenode  # noqa: E402  pylint: disable=wrong-import-position
import kubelet_grpc  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec  # noqa: E402

SCRIPT = os.path.join(ROOT, "hack", "kube-node.sh")
RELAY = os.path.join(ROOT, "tests", "fakes", "host_relay.py")
KUBECTL_DIR = os.path.join(os.environ.get("GPUOPS_CACHE", os.path.expanduser("~/.cache/gpuops")), "kube-v1.20.2")  # kubectl v1.20.2
NAME = "127.0.0.1"  # the node's name (see hack/kube-node.sh)
CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"  # hard-coded in kubelet 1.20
BUSYBOX = "registry.local/busybox:1.35"
RESOURCE = "nvidia.com/gpu"
# A GPU container that prints what it was given, then runs until /tmp/crash exists (the test's way to
# make the application crash: `kubectl exec POD -- touch /tmp/crash`; the restarted container has a fresh
# writable layer, so it runs again)
GPU_COMMAND = ("echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES; ls /dev/nvidia0 2>&1; "
               "while [ ! -e /tmp/crash ]; do sleep 0.5; done; echo crashing; exit 1")


def iptables_rules():
    """The host's iptables rules without comments and counters (None without iptables-save)."""
    try:
        out = subprocess.run(["iptables-save"], capture_output=True, text=True, timeout=30, check=False).stdout
    except FileNotFoundError:
        return None
    return [re.sub(r"\[\d+:\d+\]", "", line) for line in out.splitlines() if not line.startswith("#")]


def unsupported():
    """Why this machine cannot run the node (hack/kube-node.sh check), or None."""
    proc = subprocess.run([SCRIPT, "check"], capture_output=True, text=True, check=False)
    return None if proc.returncode == 0 else (proc.stdout + proc.stderr).strip()


class RealNode:
    def __init__(self, cluster, run_dir, lib_dir):
        self.cluster = cluster
        self.dir = str(run_dir)
        self.lib_dir = lib_dir
        self.nvml_config = os.path.join(self.dir, "nvml.cfg")
        self.systemd_dir = os.path.join(self.dir, "systemd")
        self.pod_resources_socket = os.path.join(self.dir, "kubelet", "pod-resources", "kubelet.sock")
        self.timings = {}
        self.namespaces = []
        self.relay_socket = os.path.join(self.dir, "relay.sock")
        self.relay = None
        self.health = False

    def namespace(self, name):
        """A namespace for this node's pods; deleted with them (and their ReplicaSets) at ``down``."""
        self.cluster.namespace(name)
        self.namespaces.append(name)

    # --- the node's life ---------------------------------------------------------------
    def _script(self, *args, env=None):
        started = time.monotonic()
        proc = subprocess.run([SCRIPT] + list(args), capture_output=True, text=True, timeout=300, check=False, env=env)
        if proc.returncode != 0:
            raise AssertionError("hack/kube-node.sh %s failed (rc %d):\n%s" % (" ".join(args), proc.returncode, proc.stdout + proc.stderr))
        return time.monotonic() - started

    def up(self, gpus, health=False, plugin=True):
        """containerd, kubelet, the host relay, then the device plugin (``health``: with the real plugin's XID health loop;
        ``plugin`` False: none, the test runs it as a pod, plugin_daemonset)."""
        self.health = health
        os.makedirs(self.systemd_dir, exist_ok=True)
        self.set_gpus(gpus)
        self.timings["up_seconds"] = self._script("up", self.dir, self.cluster.workdir)
        # kubelet.service behind the fake systemctl is this real kubelet, started and stopped in the host's
        # context by the relay (tests/fakes/host_relay.py: systemd's part), whoever calls systemctl
        commands = {"start": [SCRIPT, "kubelet-start", self.dir], "start-no-block": [SCRIPT, "kubelet-start", self.dir, "--no-wait"],
                    "stop": [SCRIPT, "kubelet-stop", self.dir], "is-active": [SCRIPT, "kubelet-status", self.dir]}
        with open(os.path.join(self.dir, "relay.json"), "w") as handle:
            json.dump(commands, handle)
        self.relay = subprocess.Popen([sys.executable, RELAY, "serve", self.relay_socket, os.path.join(self.dir, "relay.json")],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait(lambda: os.path.exists(self.relay_socket), "the host relay's socket", timeout=30)
        with open(os.path.join(self.systemd_dir, "kubelet.service.command"), "w") as handle:
            json.dump(dict((verb, [sys.executable, RELAY, "call", self.relay_socket, verb]) for verb in commands), handle)
        if not plugin:
            return
        started = time.monotonic()
        self.plugin_start()
        self.wait_allocatable(len(gpus))
        self.timings["gpus_allocatable_seconds"] = time.monotonic() - started

    def down(self):
        """The namespaces' controllers and pods first (force: kubelet is going), then the node."""
        try:
            for ns in self.namespaces:
                self.cluster.apps.delete_collection_namespaced_daemon_set(ns)
                self.cluster.apps.delete_collection_namespaced_replica_set(ns)
                self.cluster.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
                self.cluster.core.delete_namespace(ns)
        finally:  # the node goes down even where the API did not answer
            if self.relay is not None:
                self.relay.terminate()
                self.relay.wait(timeout=30)
            self._script("down", self.dir)

    def leftovers(self):
        """What a torn-down node left on this machine: processes, mounts, the bridge, cgroups, kubelet's paths."""
        left = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open("/proc/%s/cmdline" % pid, "rb") as handle:
                        cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if self.dir in cmdline:
                    left.append("process %s: %s" % (pid, cmdline[:200]))
        with open("/proc/self/mountinfo") as handle:
            left += ["mount " + line.split()[4] for line in handle if line.split()[4].startswith((self.dir + "/", "/var/lib/kubelet", "/run/containerd"))]
        if os.path.exists("/sys/class/net/gpuopsnode0"):
            left.append("link gpuopsnode0")
        left += ["cgroup " + c for c in ("/sys/fs/cgroup/memory/kubepods", "/sys/fs/cgroup/cpu/kubepods") if os.path.exists(c)]
        left += [p for p in ("/var/lib/kubelet", "/run/containerd", "/var/log/pods", "/run/gpuops-kube-node.dir") if os.path.exists(p)]
        return left

    @property
    def python_image(self):
        """The node's Python image by digest (hack/knode/python_image.py: this host's Debian python3.11, nvidia-ml-py, busybox),
        as a user names theirs."""
        with open(os.path.join(self.dir, "python-image")) as handle:
            return handle.read().strip()

    @property
    def busybox_image(self):
        """The node's busybox image by digest (the node pod's image: gpuops.fleet.k8s_node takes images by digest only)."""
        with open(os.path.join(self.dir, "busybox-image")) as handle:
            return handle.read().strip()

    def kubelet_stop(self):
        self._script("kubelet-stop", self.dir)

    def kubelet_start(self):
        self._script("kubelet-start", self.dir)

    def kubelet_running(self):
        return subprocess.call([SCRIPT, "kubelet-status", self.dir]) == 0

    def plugin_start(self):
        """Start the fake device plugin, and return once it made the GPUs' device nodes and removed a gone GPU's.

        The script starts it in the background; until the new process has run (its Python and gRPC load: seconds on
        a loaded machine), a gone GPU's device node is still there, and a container restarted with that GPU's cached
        allocation starts instead of failing (CreateContainerError, field report 000). A CI run under load met that
        in four story tests of five: the crash came before the plugin's process had removed the node."""
        env = dict(os.environ, GPUOPS_PLUGIN_NVML_LIB=self.lib_dir) if self.health else None
        self._script("plugin-start", self.dir, self.nvml_config, env=env)
        devdir = os.path.join(self.dir, "dev")
        wait(lambda: os.path.isdir(devdir) and sorted(os.listdir(devdir)) == sorted(self.gpus), "the device plugin's device nodes of %s" % self.gpus,
             timeout=90)

    def plugin_daemonset(self, namespace, name="nvidia-device-plugin-daemonset"):
        """The fake device plugin (its health loop on) as the GPU Operator runs one: a DaemonSet's pod on the node, labelled
        as upstream's (name=nvidia-device-plugin-ds), kept off a node labelled gpuops.fleet/gpu-maintenance=true (the
        remediation's pause). Its process runs chrooted into the host, where its Python, gRPC and the fake NVML are: the
        pod asks for CAP_SYS_CHROOT by name and is not privileged; it shares the host's PID namespace (the fake NVML's
        client registry is by process ID). Deleting the pod ends the process (kubelet marks its
        GPUs unavailable); a new pod is a new process, every GPU Healthy."""
        command = ["chroot", "/host", "/usr/bin/env", "LD_LIBRARY_PATH=" + self.lib_dir, "GPUOPS_FAKE_NVML_CONFIG=" + self.nvml_config,
                   os.path.join(ROOT, ".venv", "bin", "python"), os.path.join(ROOT, "tests", "fakes", "fake_device_plugin.py"),
                   "--config", self.nvml_config, "--devdir", os.path.join(self.dir, "dev"), "--dp-dir", "/var/lib/kubelet/device-plugins",
                   "--reregister-delay", "2", "--health"]
        labels = {"name": "nvidia-device-plugin-ds"}
        # hostPID: the fake NVML keeps its clients by process ID and the fake nvidia-smi refuses a reset while one lives;
        # in a PID namespace of its own the plugin would be PID 1, which on the host is init (the real driver counts
        # its clients itself, and the real plugin's DaemonSet needs no hostPID)
        # it tolerates the quarantine's taint, as the collection's device_plugin role's DaemonSet does: the remediation's
        # recovery step needs the plugin's new pod on the quarantined node
        container = {"name": "plugin", "image": self.busybox_image, "imagePullPolicy": "IfNotPresent", "command": command,
                     "securityContext": {"privileged": False, "runAsUser": 0, "capabilities": {"add": ["SYS_CHROOT"]}},
                     "volumeMounts": [{"name": "host", "mountPath": "/host"}]}
        away = {"key": "gpuops.fleet/gpu-maintenance", "operator": "NotIn", "values": ["true"]}
        spec = {"terminationGracePeriodSeconds": 5, "hostPID": True, "containers": [container],
                "tolerations": [{"key": "gpuops.fleet/gpu-unhealthy", "operator": "Exists", "effect": "NoSchedule"}],
                "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [away]}]}}}}
        body = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": namespace},
                # OnDelete, as the collection's device_plugin role deploys it: the remediation's recovery step replaces the pod
                "spec": {"selector": {"matchLabels": labels}, "updateStrategy": {"type": "OnDelete"},
                         "template": {"metadata": {"labels": labels}, "spec": spec}}}
        self.cluster.apps.create_namespaced_daemon_set(namespace, body)
        self.wait_allocatable(len(self.gpus), timeout=120)

    def plugin_stop(self):
        self._script("plugin-stop", self.dir)

    def set_gpus(self, uuids):
        """The node's GPUs (fake NVML and, at the plugin's next start, kubelet's device plugin)."""
        self.gpus = list(uuids)
        fakenode.write_config(self.nvml_config, [fakenode.gpu(u, bus="00000000:00:%02x.0" % (7 + n), minor=n) for n, u in enumerate(uuids)])

    def environ(self):
        """The environment a node-side command (module, guard) runs in: fake NVML, fake systemctl -> real kubelet."""
        env = fakenode.environ(self.lib_dir, self.nvml_config)
        env["GPUOPS_FAKE_SYSTEMD_DIR"] = self.systemd_dir
        return env

    def log(self, name="kubelet"):
        with open(os.path.join(self.dir, "log", name + ".log")) as handle:
            return handle.read()

    # --- what kubelet says -------------------------------------------------------------------
    def checkpoint(self):
        """kubelet's checkpoint, decoded by the project's codec (the checksum must hold)."""
        with open(CHECKPOINT, "rb") as handle:
            raw = handle.read()
        decoded = codec.decode(raw)
        assert decoded.valid, "kubelet wrote a checkpoint our codec rejects: %s" % decoded.error
        assert codec.encode(decoded.checkpoint)[0] == raw, "the codec does not reproduce kubelet's bytes"
        return decoded.checkpoint

    def allocations(self):
        """{pod UID: [device IDs]} of the checkpoint."""
        found = {}
        for entry in self.checkpoint().entries or []:  # kubelet writes "PodDeviceEntries":null when it has none
            found.setdefault(entry.pod_uid, []).extend(d for ids in entry.device_ids.values() for d in ids)
        return found

    def pod_resources(self):
        """kubelet's pod-resources API: {(namespace, pod, container): {resource: [device IDs]}}."""
        return kubelet_grpc.pod_resources(self.pod_resources_socket)

    def allocatable(self):
        node = self.cluster.core.read_node(NAME)
        return int((node.status.allocatable or {}).get(RESOURCE, "0"))

    def wait_allocatable(self, count, timeout=60):
        wait(lambda: self.allocatable() == count, "%s allocatable = %d" % (RESOURCE, count), timeout)

    def ready(self):
        node = self.cluster.core.read_node(NAME)
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

    # --- pods ----------------------------------------------------------------------------------
    def gpu_pod(self, name, namespace, owner=None):
        """A bare pod (or, with ``owner``, a pod template's body) asking for one GPU on this node."""
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
               "spec": {"nodeName": NAME, "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "cuda", "image": BUSYBOX, "imagePullPolicy": "Never", "command": ["/bin/sh", "-c", GPU_COMMAND],
                                        "resources": {"limits": {RESOURCE: "1"}}}]}}
        return pod

    def create_pod(self, name, namespace):
        return self.cluster.core.create_namespaced_pod(namespace, self.gpu_pod(name, namespace))

    def create_replicaset(self, name, namespace):
        pod = self.gpu_pod(name, namespace)
        body = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": namespace},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}}, "spec": pod["spec"]}}}
        return self.cluster.apps.create_namespaced_replica_set(namespace, body)

    def pods(self, namespace):
        return {p.metadata.name: p for p in self.cluster.core.list_namespaced_pod(namespace).items}

    def exec(self, namespace, pod, command, timeout=30):
        """``kubectl exec`` through the API server and the real kubelet (the tests' own kubectl v1.20.2)."""
        kubectl = os.path.join(KUBECTL_DIR, "kubectl")
        proc = subprocess.run([kubectl, "--kubeconfig", self.cluster.kubeconfig, "-n", namespace, "exec", pod, "--"] + command,
                              capture_output=True, text=True, timeout=timeout, check=False)
        return proc.returncode, proc.stdout + proc.stderr

    def crash(self, namespace, pod):
        """Make the pod's application exit (its container restarts, restartPolicy Always)."""
        rc, out = self.exec(namespace, pod, ["touch", "/tmp/crash"])
        assert rc == 0, out

    def logs(self, namespace, pod, previous=False):
        return self.cluster.core.read_namespaced_pod_log(pod, namespace, container="cuda", previous=previous)


def ansible_env(tmp):
    """ansible-playbook's environment in these tests: the checkout's collection, no colour, kubectl v1.20.2 on PATH."""
    return dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"),
                PATH=KUBECTL_DIR + os.pathsep + os.environ.get("PATH", ""))


def grant(cluster, document, namespace):
    """Give the API user gpuops what the collection's ``docs/rbac/<document>`` grants, its namespaced objects in
    ``namespace``: the same rules, bound to the user instead of the ServiceAccount (the knode's control plane runs
    RBAC, and gpuops is in no privileged group). Namespaces and ServiceAccounts are the test's own."""
    import yaml  # pylint: disable=import-outside-toplevel
    from kubernetes import utils  # pylint: disable=import-outside-toplevel
    from kubernetes.client.rest import ApiException  # pylint: disable=import-outside-toplevel

    with open(os.path.join(ROOT, "docs", "rbac", document)) as handle:
        items = yaml.safe_load(handle)["items"]
    for item in items:
        if item["kind"] in ("Namespace", "ServiceAccount"):
            continue
        item = json.loads(json.dumps(item))
        if "namespace" in item["metadata"]:
            item["metadata"]["namespace"] = namespace
        if item["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            item["subjects"] = [{"kind": "User", "name": "gpuops", "apiGroup": "rbac.authorization.k8s.io"}]
        try:
            utils.create_from_dict(cluster.api_client, item)
        except utils.FailToCreateError as exc:
            if not all(isinstance(e, ApiException) and e.status == 409 for e in exc.api_exceptions):
                raise


def through_api(node, namespace):
    """Host variables of this node reached by gpuops.fleet.k8s_node, its node pods in ``namespace``.

    As the API user gpuops (hack/kube-cluster.sh's role.kubeconfig), with exactly docs/rbac/k8s-node-connection.yml's
    grants (in ``namespace``): the audit log tells its calls from the test's, and RBAC refuses any call it does not list."""
    grant(node.cluster, "k8s-node-connection.yml", namespace)
    return {"ansible_connection": "gpuops.fleet.k8s_node", "gpuops_node_name": NAME, "gpuops_node_pod_namespace": namespace,
            "gpuops_node_pod_image": node.busybox_image, "ansible_kubectl_kubeconfig": os.path.join(node.cluster.workdir, "role.kubeconfig")}


def api_calls(cluster, offset, namespace=None):
    """{"verb resource[/subresource]": count} of the API user gpuops' requests since ``offset``: all, or those in
    ``namespace`` and the discovery ones (objectRef-less)."""
    calls = {}
    for event in cluster.audit_events(offset):
        ref = event.get("objectRef") or {}
        if namespace is None or not ref or ref.get("namespace") == namespace:
            key = "%s %s" % (event["verb"], ref["resource"] + ("/" + ref["subresource"] if ref.get("subresource") else "") if ref else "discovery")
            calls[key] = calls.get(key, 0) + 1
    return calls


def wait(predicate, what, timeout=60, interval=0.3):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except Exception as exc:  # pylint: disable=broad-except  # the API or kubelet still starting
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %d s waiting for %s (last: %r)" % (timeout, what, last))


def running(node, namespace, name):
    """The pod if its container runs, else None (a ``wait`` predicate)."""
    pod = node.pods(namespace).get(name)
    return pod if pod is not None and container_state(pod)[0] == "running" else None


def restarted(node, namespace, name, count):
    """The pod if its container runs again after ``count`` restarts, else None (a ``wait`` predicate)."""
    pod = running(node, namespace, name)
    return pod if pod is not None and container_state(pod)[2] == count else None


def settled(node, namespace, names):
    """{name: (phase, container state)} once each pod runs or has Failed, else None (a ``wait`` predicate)."""
    pods = node.pods(namespace)
    states = dict((n, (pods[n].status.phase, container_state(pods[n]))) for n in names)
    return states if all(phase == "Failed" or state[0] == "running" for phase, state in states.values()) else None


def failed(node, namespace, name):
    """The pod if it is Failed, else None (a ``wait`` predicate)."""
    pod = node.pods(namespace).get(name)
    return pod if pod is not None and pod.status.phase == "Failed" else None


def container_state(pod):
    """('running'|'waiting'|'terminated'|None, reason, restart count) of the pod's container."""
    statuses = pod.status.container_statuses or []
    if not statuses:
        return None, None, 0
    state = statuses[0].state
    for word in ("running", "waiting", "terminated"):
        value = getattr(state, word)
        if value is not None:
            return word, getattr(value, "reason", None), statuses[0].restart_count
    return None, None, statuses[0].restart_count
