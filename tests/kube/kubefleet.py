# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real control plane (hack/kube-cluster.sh) with SIMULATED GPU nodes, for tests and benchmarks.

Each Fleet gets its own namespace, node names and a node label, so DaemonSets of different
fleets never select each other's nodes. GPU "nodes" for Ansible are local sysroots holding
kubelet's files, with the fake NVML for gpu_uuid_facts. The role runs as the API user
``gpuops`` (role.kubeconfig), so its calls can be counted in the audit log.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "fakes"))
import fakenode  # noqa: E402  pylint: disable=wrong-import-position

BIN = os.path.dirname(sys.executable)
COUNTER = itertools.count(1)
KUBELET_CONFIG = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
KUBEADM_FLAGS = 'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock"\n'


SCRIPT = os.path.join(ROOT, "hack", "kube-cluster.sh")


def start_cluster(workdir, rbac=False):
    """A control plane in ``workdir``; with ``rbac``, the API user gpuops holds only what RBAC objects grant it."""
    subprocess.run([SCRIPT, "start", str(workdir)] + (["--rbac"] if rbac else []), check=True)
    return Cluster(str(workdir))


def stop_cluster(workdir):
    subprocess.run([SCRIPT, "stop", str(workdir)], check=False)


def collect_connections(api_clients, why):
    """``api_clients``' pooled connections closed, then what is left to the garbage collector collected here, each
    ResourceWarning of it written to the log ("``why``: ...") instead of raised: under ``filterwarnings = error`` an
    unclosed socket collected later fails whichever test (or, after the last, the session) the collector runs in."""
    import gc
    import warnings

    for api_client in api_clients:
        api_client.rest_client.pool_manager.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    for warning in seen:
        sys.__stderr__.write("%s: %s\n" % (why, warning.message))
    return [str(warning.message) for warning in seen]


def close_left_connections():
    """At the end of a session's control plane: the connections its in-process API clients still hold, closed, and what the
    session left to the garbage collector collected now (``collect_connections``).

    Left to pytest's own last ``gc.collect()`` (pytest_unconfigure, after every test and fixture), an unclosed socket in a
    reference cycle is a ResourceWarning that ``filterwarnings = error`` turns into a failed session (exit 1) with no test
    named: stop 69's CI, kube lane, 62 passed. The clients kubernetes.core caches for the whole process (the event source's
    ``follow`` runs here, in threads) keep their keep-alive connections to the stopped control plane; those are closed. A
    test that leaks within its own run still fails (pytest collects after each test)."""
    try:
        from ansible_collections.kubernetes.core.plugins.module_utils.k8s import client as k8s_client
        cached = list(getattr(k8s_client, "_pool", {}).values())
    except ImportError:
        cached = []
    api_clients = [dynamic.client for dynamic in cached if getattr(getattr(dynamic, "client", None), "rest_client", None) is not None]
    return collect_connections(api_clients, "the session left to the garbage collector (closed now)")


class Cluster:
    def __init__(self, workdir):
        from kubernetes import client, config
        self.workdir = workdir
        self.kubeconfig = os.path.join(workdir, "kubeconfig")
        api_client = config.new_client_from_config(self.kubeconfig)
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.extensions = client.ApiextensionsV1Api(api_client)
        self._node_clients = []

    def close(self):
        """Every connection of this cluster's clients (the admin's and the nodes' own identities') closed, before the control
        plane stops: a pooled keep-alive connection left to the garbage collector when the session's fixtures are dropped is a
        ResourceWarning (an error under filterwarnings), which pytest raised at the end of a kube lane whose 54 tests passed."""
        for api_client in [self.api_client] + self._node_clients:
            api_client.close()
        self._node_clients = []

    def node_kubeconfig(self, name, folder):
        """A kubeconfig of node ``name``'s own kubelet identity (system:node:<name>, group system:nodes: a client certificate of
        the cluster's client CA) in ``folder``; its path. The API server's Node authorizer and NodeRestriction limit it as they
        limit a real kubelet."""
        os.makedirs(str(folder), exist_ok=True)
        path = os.path.join(str(folder), name + ".kubeconfig")
        if not os.path.exists(path):
            subprocess.run([SCRIPT, "node-kubeconfig", self.workdir, name, path], check=True)
        return path

    def as_node(self, name, folder):
        """The CoreV1Api of node ``name``'s kubelet identity (its kubeconfig made in ``folder`` where it is not yet)."""
        from kubernetes import client, config
        api_client = config.new_client_from_config(self.node_kubeconfig(name, folder))
        self._node_clients.append(api_client)
        return client.CoreV1Api(api_client)

    def crd(self, group, version, kind, plural, scope):
        """A CRD (any spec) created once, returned when the API serves it."""
        from kubernetes.client.rest import ApiException
        body = {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "%s.%s" % (plural, group)},
            "spec": {"group": group, "scope": scope,
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": kind + "List"},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
        }
        try:
            self.extensions.create_custom_resource_definition(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
        deadline = time.time() + 30
        while time.time() < deadline:  # served once Established
            try:
                self.custom.list_cluster_custom_object(group, version, plural)
                return
            except ApiException:
                time.sleep(0.2)
        raise AssertionError("the %s CRD was not served in time" % kind)

    def cluster_policy_crd(self):
        """The GPU Operator's ClusterPolicy CRD (nvidia.com/v1, cluster-scoped, any spec)."""
        self.crd("nvidia.com", "v1", "ClusterPolicy", "clusterpolicies", "Cluster")

    def prometheus_operator_crds(self):
        """The Prometheus Operator's ServiceMonitor and PrometheusRule CRDs (monitoring.coreos.com/v1, any spec)."""
        self.crd("monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors", "Namespaced")
        self.crd("monitoring.coreos.com", "v1", "PrometheusRule", "prometheusrules", "Namespaced")

    def namespace(self, name):
        self.core.create_namespace({"metadata": {"name": name}})
        deadline = time.time() + 30
        while time.time() < deadline:  # the serviceaccount controller creates "default"
            if any(sa.metadata.name == "default" for sa in self.core.list_namespaced_service_account(name).items):
                return name
            time.sleep(0.2)
        raise AssertionError("no default service account in %s" % name)

    # -- faults of the control plane (the event source's tests) -----------------------------------------------
    def _pids(self):
        with open(os.path.join(self.workdir, "pids")) as handle:
            return [line.strip() for line in handle if line.strip()]  # etcd, kube-apiserver, controller-manager, scheduler

    @staticmethod
    def _cmdline(pid):
        with open("/proc/%s/cmdline" % pid, "rb") as handle:
            return [arg.decode() for arg in handle.read().split(b"\0") if arg]

    @staticmethod
    def _gone(pid):
        try:
            with open("/proc/%s/stat" % pid) as handle:
                return handle.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie nobody reaps is gone too
        except OSError:
            return True

    def restart_apiserver(self, flags=None, down=0.0):
        """Kill kube-apiserver, wait ``down`` seconds, start it again on the same port with the same flags (``flags``:
        {name: value} replaced or added, value None removed); returns when it is ready again. The flags it ran with are
        kept, so a second call with ``flags`` of the first's names as they were restores it."""
        import signal

        pids = self._pids()
        args = self._cmdline(pids[1])
        for name, value in (flags or {}).items():
            args = [a for a in args if not a.startswith(name + "=")] + ([name + "=" + value] if value is not None else [])
        os.kill(int(pids[1]), signal.SIGKILL)  # a crash: SIGTERM waits for the open watches to end
        deadline = time.monotonic() + 60
        while not self._gone(pids[1]):
            assert time.monotonic() < deadline, "kube-apiserver did not stop"
            time.sleep(0.1)
        time.sleep(down)
        # detached, as hack/kube-cluster.sh starts it (not this process's child: the cluster's stop kills it)
        started = subprocess.run(["bash", "-c", 'log=$1; shift; "$@" >>"$log" 2>&1 </dev/null & echo $!', "start",
                                  os.path.join(self.workdir, "kube-apiserver.log")] + args, check=True, capture_output=True, text=True)
        pids[1] = started.stdout.strip()
        with open(os.path.join(self.workdir, "pids"), "w") as handle:
            handle.write("\n".join(pids) + "\n")
        while True:
            try:
                self.core.list_namespace(limit=1, _request_timeout=2)
                break
            except Exception:  # noqa: BLE001 (not up yet)
                assert time.monotonic() < deadline + 60, "kube-apiserver did not come back"
                time.sleep(0.2)
        self._drop_dead_connections()

    def _drop_dead_connections(self):
        """This client's connections to the killed server, closed and collected here: left to the garbage collector, one
        was closed unclosed in a later test, whose ResourceWarning (an error under filterwarnings) failed that test (seen
        in a CI-equivalent run: test_gpu_quarantine after test_gpu_nodes_events' restarts)."""
        # the nodes' own identities' clients too
        collect_connections([self.api_client] + self._node_clients, "a connection to the restarted API server (closed now)")

    def compact_etcd(self):
        """Compact etcd's history up to its current revision (every older resourceVersion gone: a watch from one gets
        410); etcd's gRPC gateway on its client URL. Returns the revision."""
        import base64
        import urllib.request

        args = self._cmdline(self._pids()[0])  # etcd ... --listen-client-urls URL ...
        url = args[args.index("--listen-client-urls") + 1].split(",")[0]

        def post(path, body):
            request = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as answer:
                return json.loads(answer.read())

        revision = int(post("/v3/kv/range", {"key": base64.b64encode(b"/registry").decode()})["header"]["revision"])
        post("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def audit_offset(self):
        path = os.path.join(self.workdir, "audit.log")
        return os.path.getsize(path) if os.path.exists(path) else 0

    def audit_events(self, offset=0, user="gpuops"):
        """Completed requests of ``user`` logged after byte ``offset``."""
        with open(os.path.join(self.workdir, "audit.log")) as handle:
            handle.seek(offset)
            events = [json.loads(line) for line in handle if line.strip()]
        return [e for e in events if e.get("stage") == "ResponseComplete" and e["user"]["username"] == user]


class Fleet:
    """SIMULATED GPU nodes: Node objects (simulated kubelet) + sysroots (kubelet files, fake NVML)."""

    def __init__(self, cluster, tmp_path, fake_lib_dir, nodes, prefix=None, **sim_options):
        run = next(COUNTER)
        self.cluster = cluster
        self.tmp = tmp_path
        self.label = {"gpuops.test/run": "r%d-%d" % (os.getpid(), run)}
        self.namespace = cluster.namespace("gpuops-t%d-%d" % (os.getpid(), run))
        self.prefix = prefix or "t%d-" % run  # the nodes' names: the prefix and each spec's name (the demo's lab-gpu-a)
        self.nodes = []
        hosts = {}
        for spec in nodes:
            name = self.prefix + spec["name"]
            root = tmp_path / "nodes" / name
            (root / "var/lib/kubelet").mkdir(parents=True)
            policy = spec.get("policy", "static")
            config = KUBELET_CONFIG + ("cpuManagerPolicy: %s\n" % policy if policy else "")
            (root / "var/lib/kubelet/config.yaml").write_text(config)
            (root / "var/lib/kubelet/kubeadm-flags.env").write_text(KUBEADM_FLAGS)
            gpus = spec.get("gpus", [])
            cfg = fakenode.write_config(str(root / "fake_nvml.cfg"),
                                        [fakenode.gpu(u, minor=i, bus="00000000:00:%02x.0" % (7 + i)) for i, u in enumerate(gpus)])
            checkpoint = root / "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
            node = {"name": name, "gpus": gpus, "labels": dict(self.label, **spec.get("labels", {})),
                    "taints": spec.get("taints", []), "faults": spec.get("faults", []),
                    "fault_images": spec.get("fault_images"), "driver_version": spec.get("driver_version"),
                    "checkpoint": str(checkpoint), "gpu_mem_gib": spec.get("gpu_mem_gib", 15),
                    # a simulated reboot: a command that creates this file (simkubelet.py's reboots())
                    "reboot_request": str(root / "reboot-request"), "nvml_config": cfg}
            self.nodes.append(node)
            if spec.get("in_inventory", True):
                hosts[name] = dict(spec.get("host_vars") or {})
                hosts[name].update({
                    "gpu_sharing_checkpoint_path": str(checkpoint),
                    "gpu_sharing_backup_dir": str(root / "var/lib/gpuops/backups"),
                    "gpu_sharing_lock_dir": str(root / "run/gpuops"),
                    "gpu_sharing_kubelet_unit": "",  # no systemd: the simulated kubelet keeps running
                    "gpu_sharing_node_environment": fakenode.environ(fake_lib_dir, cfg, base={}),
                })
                hosts[name].update({
                    "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                    "device_plugin_node_name": name, "device_plugin_kubelet_root": str(root),
                    "device_plugin_node_environment": fakenode.environ(fake_lib_dir, cfg, base={}),
                    "driver_installer_node_name": name,
                    "driver_installer_node_environment": fakenode.environ(fake_lib_dir, cfg, base={}),
                })
        self.hosts = hosts
        self.inventory = tmp_path / "inventory.yml"
        self.write_inventory()
        nodes_file = tmp_path / "nodes.json"
        nodes_file.write_text(json.dumps(self.nodes))
        # each node's writes go through its own kubelet identity, as a real kubelet's (the control plane runs the Node
        # authorizer and NodeRestriction): minted a few at a time
        self.identities = tmp_path / "identities"
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: cluster.node_kubeconfig(n["name"], self.identities), self.nodes))
        args = [sys.executable, os.path.join(HERE, "simkubelet.py"), "--kubeconfig",
                os.path.join(cluster.workdir, "simkubelet.kubeconfig"), "--nodes", str(nodes_file),
                "--node-kubeconfigs", str(self.identities)]
        for key, value in sim_options.items():
            args += ["--" + key.replace("_", "-"), str(value)]
        self.sim_log = open(str(tmp_path / "simkubelet.log"), "w")  # noqa: SIM115 (closed in stop(), after the process)
        self.sim = subprocess.Popen(args, stdout=self.sim_log, stderr=subprocess.STDOUT)
        self.wait(lambda: all(self.node(n["name"]) for n in self.nodes), "the simulated nodes")

    def as_node(self, name):
        """The API as node ``name``'s own kubelet (system:node:<name>): what a compromised node may write, and no more."""
        return self.cluster.as_node(name, self.identities)

    def write_inventory(self):
        self.inventory.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": self.hosts}}))

    def set_host_vars(self, host, **values):
        """Change a host's inventory variables (the next play reads them)."""
        self.hosts[host].update(values)
        self.write_inventory()

    def checkpoint(self, name):
        """The node's kubelet device checkpoint as the simulated kubelet wrote it (decoded), or None."""
        sys.path.insert(0, os.path.join(ROOT, "build", "collections"))
        from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec
        path = [n for n in self.nodes if n["name"] == name][0]["checkpoint"]
        if not os.path.exists(path):
            return None
        with open(path, "rb") as handle:
            decoded = codec.decode(handle.read())
        assert decoded.valid, decoded.error
        return decoded.checkpoint

    def node(self, name):
        from kubernetes.client.rest import ApiException
        try:
            return self.cluster.core.read_node(name)
        except ApiException:
            return None

    def wait(self, predicate, what, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.sim.poll() is not None:
                raise AssertionError("simkubelet exited: %s" % (self.tmp / "simkubelet.log").read_text())
            if predicate():
                return
            time.sleep(0.2)
        raise AssertionError("timed out waiting for %s" % (what() if callable(what) else what))

    def stop(self):
        """End the node simulator: SIGTERM, and SIGKILL where it has not ended in 60 s (a run under a load of about 10
        saw it take more than 10 s, and the test's teardown failed for that alone)."""
        self.sim.terminate()
        try:
            self.sim.wait(60)
        except subprocess.TimeoutExpired:
            self.sim.kill()
            self.sim.wait(30)
        self.sim_log.close()
        self.clean_up()

    def clean_up(self):
        """What the fleet leaves in the session's API server, gone: its namespace (its controllers with it), then every pod
        bound to its nodes (at once: no kubelet is left to end them) and its Nodes, as a cluster's go with their machines. The
        remediation's scope is every GPU Node the API shows; and every simulated kubelet lists all pods each 0.2 s, so pods
        left by the session's earlier tests cost each later test (500 pods: 0.12 s of CPU a list)."""
        from kubernetes.client.rest import ApiException
        core = self.cluster.core
        names = set(n["name"] for n in self.nodes)
        try:
            core.delete_namespace(self.namespace)
        except ApiException:
            pass
        pods = [p for p in core.list_pod_for_all_namespaces().items if p.spec.node_name in names or p.metadata.namespace == self.namespace]
        for pod in pods:
            try:
                core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
            except ApiException:
                pass  # gone already
        for name in names:
            try:
                core.delete_node(name)
            except ApiException:
                pass

    def plugin_pods(self):
        pods = self.cluster.core.list_namespaced_pod(self.namespace, label_selector="name=nvidia-device-plugin-ds").items
        return sorted((p for p in pods if p.metadata.deletion_timestamp is None), key=lambda p: p.spec.node_name or "")  # unbound pods (nodeName unset) first

    def install_old_plugin(self, image="nvidia/k8s-device-plugin:1.0.0-beta4", affinity=None):
        """A hand-made upstream-style DaemonSet (RollingUpdate, no --pass-device-specs), as in field report 002;
        ``affinity`` (a pod affinity) keeps it off some nodes."""
        body = {
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": self.namespace},
            "spec": {"selector": {"matchLabels": {"name": "nvidia-device-plugin-ds"}},
                     "updateStrategy": {"type": "RollingUpdate"},
                     "template": {"metadata": {"labels": {"name": "nvidia-device-plugin-ds"}},
                                  "spec": {"nodeSelector": self.label,
                                           "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                                           "containers": [{"name": "nvidia-device-plugin-ctr", "image": image}]}}},
        }
        if affinity:
            body["spec"]["template"]["spec"]["affinity"] = affinity
        self.cluster.apps.create_namespaced_daemon_set(self.namespace, body)
        self.wait(lambda: len([p for p in self.plugin_pods() if p.status.phase == "Running"]) == len(self.nodes)
                  and all(self.allocatable(n["name"]) == len(n["gpus"]) for n in self.nodes), "the old plugin on every node")

    def allocatable(self, name):
        alloc = (self.node(name).status.allocatable or {})
        return int(alloc.get("nvidia.com/gpu", "0"))

    def role_vars(self, **extra):
        values = {"device_plugin_namespace": self.namespace, "device_plugin_node_selector": self.label,
                  "device_plugin_poll_interval": 0.5, "device_plugin_pod_ready_timeout": 20,
                  "device_plugin_gpu_ready_timeout": 20, "device_plugin_verify_timeout": 20}
        values.update(extra)
        return values

    def module(self, name, args):
        """One task of module ``name`` (FQCN) with ``args`` on localhost against the cluster; returns its result."""
        playbook = self.tmp / ("module-%d.yml" % next(COUNTER))
        playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False,
                                         "tasks": [{"name": "the module", name: args, "ignore_errors": True}]}]))
        dummy, run = self.play({}, playbook=str(playbook))
        return run.localhost("the module")

    def play(self, extra_vars, *args, playbook="device_plugin.yml"):
        """Run playbooks/<playbook> (device_plugin.yml; an absolute path runs that file); returns (rc, json callback output)."""
        vars_file = self.tmp / ("vars-%d.json" % next(COUNTER))
        vars_file.write_text(json.dumps(extra_vars))
        env = dict(os.environ, K8S_AUTH_KUBECONFIG=os.path.join(self.cluster.workdir, "role.kubeconfig"),
                   ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                   ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_NOCOLOR="1")
        offset = self.cluster.audit_offset()
        started = time.monotonic()
        proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(self.inventory), "-e", "@%s" % vars_file,
                               os.path.join(ROOT, "playbooks", playbook)] + list(args),  # an absolute playbook stays itself
                              cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        elapsed = time.monotonic() - started
        try:
            out = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError("ansible-playbook output is not JSON:\n%s\n%s" % (proc.stdout[-3000:], proc.stderr[-3000:])) from None
        return proc.returncode, Run(out, elapsed, self.cluster.audit_events(offset))


class Run:
    """Results of one ansible-playbook run (json callback)."""

    def __init__(self, out, elapsed=None, api_calls=None):
        self.out = out
        self.elapsed = elapsed
        self.api_calls = api_calls or []

    def tasks(self, name):
        # the json callback names role tasks "<role> : <task>"
        return [t["hosts"] for play in self.out["plays"] for t in play["tasks"]
                if t["task"]["name"] == name or t["task"]["name"].endswith(" : " + name)]

    def localhost(self, name):
        found = [h["localhost"] for h in self.tasks(name) if "localhost" in h]
        return found[-1] if found else None

    @property
    def report(self):
        res = self.localhost("Keep the rollout report (device_plugin_report)")
        return res["ansible_facts"]["device_plugin_report"] if res else None

    @property
    def changed(self):
        return sum(s["changed"] for s in self.out["stats"].values())

    def failure(self):
        for play in self.out["plays"]:
            for task in play["tasks"]:
                for host, res in task["hosts"].items():
                    if res.get("failed"):
                        items = [r.get("msg") for r in res.get("results") or () if r.get("failed")]
                        return "%s: %s" % (host, "; ".join(items) if items else res.get("msg"))
        return None
