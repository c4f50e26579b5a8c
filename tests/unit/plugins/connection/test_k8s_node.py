# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuops.fleet.k8s_node against a fake kubectl: the calls it makes, and a detached command across broken streams; and
its commands over the API's exec stream (gpuops_node_exec_transport api) against a fake stream that, like the API
server's v4.channel.k8s.io, never closes a command's stdin.

The fake kubectl keeps pods in a JSON file and runs ``exec`` locally (the pod's scripts, with the
chroot into /host and the pod's /tmp replaced by the test's directory); it can break a number of
polls the way kubectl does while kubelet restarts. The real kubectl, API server and kubelet are in
tests/knode/test_node_pod_connection.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import time

import pytest
import yaml

from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleOptionsError
from ansible.playbook.play_context import PlayContext
from ansible import constants as C

from ansible_collections.gpuops.fleet.plugins.connection import k8s_node
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import node_pod

FAKE_KUBECTL = r'''#!%(python)s
import json, os, subprocess, sys, time
state_file, log = os.environ["FAKE_KUBECTL_STATE"], os.environ["FAKE_KUBECTL_LOG"]
argv = sys.argv[1:]
with open(log, "a") as handle:
    handle.write(json.dumps(argv) + "\n")
state = json.load(open(state_file)) if os.path.exists(state_file) else {"pods": {}, "break_polls": int(os.environ.get("FAKE_KUBECTL_BREAK", "0"))}
def save():
    json.dump(state, open(state_file, "w"))
while argv and (argv[0] in ("--kubeconfig", "--context", "-n", "--server", "--token") or argv[0].startswith("--request-timeout=")):
    argv = argv[1:] if argv[0].startswith("--request-timeout=") else argv[2:]
verb = argv[0]
if verb == "get" and argv[1] == "pod" and "--watch" in argv:  # the pod becomes Ready (kubectl get --watch prints each change)
    pod = state["pods"][argv[2]]
    print(pod["status"]["phase"] + " " + pod["status"]["conditions"][0]["status"], flush=True)
    if os.environ.get("FAKE_KUBECTL_NEVER_READY"):
        time.sleep(30); sys.exit(0)
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    save(); print("Running True", flush=True); time.sleep(30); sys.exit(0)
if verb == "get" and argv[1] == "pod":
    pod = state["pods"].get(argv[2])
    if pod is None:
        sys.stderr.write('Error from server (NotFound): pods "%%s" not found\n' %% argv[2]); sys.exit(1)
    print(json.dumps(pod)); sys.exit(0)
if verb == "get" and argv[1] == "pods" and "--field-selector" in argv:
    name = argv[argv.index("--field-selector") + 1].split("=", 1)[1]
    print(json.dumps({"items": [p for n, p in state["pods"].items() if n == name]})); sys.exit(0)
if verb == "get" and argv[1] == "pods":
    print(json.dumps({"items": list(state["pods"].values())})); sys.exit(0)
if verb == "create":
    pod = json.load(sys.stdin)
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    state["pods"][pod["metadata"]["name"]] = pod; save(); sys.exit(0)
if verb == "delete":
    for name in [a for a in argv[2:] if not a.startswith("-")]:
        if state["pods"].pop(name, None) is not None:
            print('pod "%%s" deleted' %% name)
    save(); sys.exit(0)
if verb == "wait":  # the pod is Ready from now on
    for pod in state["pods"].values():
        pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    save(); sys.exit(0)
if verb == "exec":
    command = argv[argv.index("--") + 1:]
    script = command[2]
    if "gpuops-running" in script and state["break_polls"] > 0:  # a poll while kubelet restarts
        state["break_polls"] -= 1; save()
        sys.stderr.write("error: unable to upgrade connection: container not found\n"); sys.exit(1)
    launch = "gpuops-launched" in script
    if launch and os.environ.get("FAKE_KUBECTL_LAUNCH") == "refused":  # the stream never reached the pod
        sys.stderr.write("error: unable to upgrade connection: container not found\n"); sys.exit(1)
    root = os.environ["FAKE_KUBECTL_ROOT"]
    script = (script.replace("chroot /host ", "").replace("%(heartbeat)s", root + "/hb").replace("HOME=/root", "HOME=" + root)
              .replace("%(exec_on)s", root + "/exec-on"))
    args = [a.replace("%(jobs)s", root + "/jobs") for a in command[3:]]
    done = subprocess.run(["/bin/sh", "-c", script] + args, stdin=sys.stdin, capture_output=True)
    if launch and os.environ.get("FAKE_KUBECTL_LAUNCH") == "cut":  # launched, then the stream broke before it said so
        sys.stderr.write("error: lost connection to pod\n"); sys.exit(1)
    sys.stdout.buffer.write(done.stdout); sys.stderr.buffer.write(done.stderr); sys.exit(done.returncode)
sys.stderr.write("fake kubectl: unexpected %%r\n" %% argv); sys.exit(2)
'''


@pytest.fixture()
def kubectl(tmp_path, monkeypatch):
    path = tmp_path / "kubectl"
    path.write_text(FAKE_KUBECTL % {"python": sys.executable, "heartbeat": node_pod.HEARTBEAT, "jobs": node_pod.JOBS,
                                    "exec_on": node_pod.EXEC_ON_FILE})
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("FAKE_KUBECTL_STATE", str(tmp_path / "state.json"))
    monkeypatch.setenv("FAKE_KUBECTL_LOG", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("FAKE_KUBECTL_ROOT", str(tmp_path))
    return path


def state(tmp_path):
    with open(tmp_path / "state.json") as handle:
        return json.load(handle)


def calls(tmp_path):
    with open(tmp_path / "calls.jsonl") as handle:
        return [json.loads(line) for line in handle]


def connection(kubectl, **variables):
    """The plugin as the loader makes it (its option definitions registered under its name), without a play."""
    C.config.initialize_plugin_configuration_definitions("connection", k8s_node.__name__, yaml.safe_load(k8s_node.DOCUMENTATION)["options"])
    context = PlayContext()
    context.remote_addr = "gpu-1"
    conn = k8s_node.Connection(context, None, kubectl_command=str(kubectl))
    conn._load_name = k8s_node.__name__
    # the fake kubectl runs the commands too (gpuops_node_exec_transport kubectl); the exec stream's tests set api
    options = {"gpuops_node_pod_namespace": "gpuops-system", "ansible_kubectl_kubeconfig": "/etc/ops/kubeconfig",
               "gpuops_node_exec_transport": "kubectl"}
    options.update(variables)
    conn.set_options(var_options=options)
    return conn


def test_the_first_command_makes_the_run_s_pod_then_every_command_runs_chrooted_on_the_host(kubectl, tmp_path):
    conn = connection(kubectl)
    rc, out, err = conn.exec_command("echo hello")
    assert (rc, out, err) == (0, b"hello\n", b"")
    rc, out, err = conn.exec_command("exit 3")
    assert rc == 3
    made = calls(tmp_path)
    name = node_pod.pod_name("gpu-1", node_pod.run_id(os.uname()[1], k8s_node.run_token()))
    assert made[0] == ["-n", "gpuops-system", "--kubeconfig", "/etc/ops/kubeconfig", "get", "pods", "--field-selector", "metadata.name=" + name,
                       "-o", "json"]
    # issue 36: the manifest unvalidated (no OpenAPI fetch), then one watch of the pod until Ready (not kubectl wait's three requests)
    assert [c[4:7] for c in made[1:4]] == [["get", "pods", "-l"], ["create", "--validate=false", "-f"], ["get", "pod", name]]
    assert made[3][7:9] == ["--watch", "-o"] and made[3][9] == k8s_node.READY_LINE
    execs = [c for c in made if "exec" in c]
    assert len(execs) == 2 and all(c[4:10] == ["exec", "-i", name, "-c", node_pod.CONTAINER, "--"] for c in execs)
    assert all(c[12] == node_pod.exec_argv([])[2] for c in execs), "every command goes through the node pod's prologue (host or beside it)"
    pod = state(tmp_path)["pods"][name]
    assert pod["spec"]["nodeName"] == "gpu-1" and pod["metadata"]["namespace"] == "gpuops-system"
    origin = node_pod.parse_origin(pod["metadata"]["annotations"][node_pod.ORIGIN_ANNOTATION])
    assert origin[:3] == k8s_node.local_origin() + (os.getppid(),), "the run's process, where a later run can check it"


def test_a_later_task_finds_the_run_s_pod_ready_with_one_call(kubectl, tmp_path):
    connection(kubectl).exec_command("true")
    before = len(calls(tmp_path))
    rc, out, err = connection(kubectl).exec_command("echo again")  # a new task: Ansible makes a new connection
    assert (rc, out) == (0, b"again\n")
    later = [c[4:6] for c in calls(tmp_path)[before:]]
    assert later == [["get", "pods"], ["exec", "-i"]], "no sweep, create or wait for a pod already Ready"


def test_a_worker_that_outlived_its_killed_run_starts_no_pod_and_deletes_none(kubectl, tmp_path, monkeypatch):
    """ansible-playbook SIGKILLed while a worker ran a task: the worker, reparented, must not take another run's
    identity (a CI run saw it sweep its own run's pod as gone and start a new one, left behind)."""
    connection(kubectl).exec_command("true")  # the run's pod
    before = len(calls(tmp_path))
    gone = __import__("subprocess").Popen(["true"])
    gone.wait()
    monkeypatch.setattr(k8s_node, "run_pid", lambda: gone.pid)
    with pytest.raises(AnsibleConnectionFailure, match=r"this task's run \(ansible-playbook, pid %d\) is gone" % gone.pid):
        connection(kubectl).exec_command("true")
    assert calls(tmp_path)[before:] == [] and len(state(tmp_path)["pods"]) == 1, "no call: nothing created or deleted"


def test_every_worker_of_a_run_shares_one_random_token_and_another_run_draws_its_own(tmp_path):
    """Issue 32 item 3: the run is a random token kept in the run's own temporary directory, not the short host name and
    PID (which two controllers, or two containers with ansible-playbook as PID 1, share)."""
    import multiprocessing
    run_dir = tmp_path / "ansible-local-1abc"
    run_dir.mkdir()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    workers = [ctx.Process(target=lambda: queue.put(k8s_node.run_token(str(run_dir)))) for dummy in range(6)]
    for worker in workers:
        worker.start()
    tokens = {queue.get(timeout=30) for dummy in workers}
    for worker in workers:
        worker.join(30)
    assert len(tokens) == 1, "every worker of the run, however they race, has the same token"
    other = tmp_path / "ansible-local-1xyz"  # another run, same PID
    other.mkdir()
    assert k8s_node.run_token(str(other)) not in tokens
    (other / k8s_node.RUN_TOKEN_FILE).write_text("ctl-1\n")
    with pytest.raises(AnsibleConnectionFailure, match="cannot be read.*run token"):
        k8s_node.run_token(str(other))


def test_a_run_s_origin_is_checked_only_where_its_process_can_be_seen(tmp_path):
    """The sweep's liveness: a process of this kernel boot and PID namespace, with its start time (a reused PID is not
    the run); another boot or namespace (another controller or container) cannot be checked: None, and the pod stays."""
    boot, namespace = k8s_node.local_origin()
    me = os.getpid()
    start = k8s_node.process_start(me)
    assert boot and namespace and start
    assert k8s_node.origin_alive((boot, namespace, me, start)) is True
    assert k8s_node.origin_alive((boot, namespace, me, str(int(start) + 1))) is False, "the PID reused by another process"
    gone = __import__("subprocess").Popen(["true"])
    gone.wait()
    assert k8s_node.origin_alive((boot, namespace, gone.pid, "1")) is False
    assert k8s_node.origin_alive(("another-boot", namespace, me, start)) is None
    assert k8s_node.origin_alive((boot, "4026530000", gone.pid, "1")) is None, "another PID namespace: its PID 1 is not ours"


def test_the_run_is_the_worker_s_parent_as_started():
    assert k8s_node.run_pid() == os.getppid(), "outside a worker: the parent"
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    worker = ctx.Process(target=lambda: queue.put(k8s_node.run_pid()))
    worker.start()
    assert queue.get(timeout=30) == os.getpid(), "a worker's run is the process that started it"
    worker.join(30)


def test_a_detached_command_comes_back_whole_across_broken_polls(kubectl, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_KUBECTL_BREAK", "3")  # three polls fail as kubectl does while kubelet restarts
    conn = connection(kubectl, gpuops_node_exec_detached=True)
    rc, out, err = conn.exec_command("cat; sleep 1; echo done; echo warn >&2; exit 4", in_data=b"module source\n")
    assert (rc, out, err) == (4, b"module source\ndone\n", b"warn\n")
    polls = [c for c in calls(tmp_path) if "exec" in c and "gpuops-running" in c[12]]
    assert len(polls) >= 4, "the broken polls were asked again"
    assert not os.listdir(tmp_path / "jobs"), "the job's files are removed once read"


def test_a_launch_whose_stream_broke_is_found_running_and_one_that_never_reached_the_pod_fails(kubectl, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_KUBECTL_LAUNCH", "cut")
    conn = connection(kubectl, gpuops_node_exec_detached=True)
    assert conn.exec_command("echo ran once >> %s/ran; echo ok" % tmp_path) == (0, b"ok\n", b"")
    assert (tmp_path / "ran").read_text() == "ran once\n", "launched once, never twice"
    monkeypatch.setenv("FAKE_KUBECTL_LAUNCH", "refused")
    with pytest.raises(AnsibleConnectionFailure, match="could not launch a detached command.*container not found"):
        connection(kubectl, gpuops_node_exec_detached=True).exec_command("true")


def test_a_detached_command_with_no_result_in_time_fails_and_says_its_outcome_is_unknown(kubectl, tmp_path):
    conn = connection(kubectl, gpuops_node_exec_detached=True, gpuops_node_exec_timeout=2)
    with pytest.raises(AnsibleConnectionFailure, match="no result after 2 s.*outcome is unknown"):
        conn.exec_command("sleep 8")


def test_a_node_held_by_a_live_run_is_refused_and_its_pod_kept(kubectl, tmp_path):
    busy = node_pod.pod_manifest("gpuops-node-other", "gpu-1", "gpuops-system", "busybox:1.36", 900, 3600, "awx-task-2-77")
    busy["status"] = {"phase": "Running"}
    (tmp_path / "state.json").write_text(json.dumps({"pods": {"gpuops-node-other": busy}, "break_polls": 0}))
    conn = connection(kubectl)
    with pytest.raises(AnsibleConnectionFailure, match="gpuops-node-other of another run still running"):
        conn.exec_command("true")
    assert list(state(tmp_path)["pods"]) == ["gpuops-node-other"]
    assert not any("create" in c for c in calls(tmp_path))


def test_bad_options_fail_before_any_call_and_name_the_variable(kubectl, tmp_path):
    conn = connection(kubectl, gpuops_node_name="gpu_1;reboot")
    with pytest.raises(AnsibleConnectionFailure, match="gpuops_node_name: 'gpu_1;reboot' is not a DNS-1123 subdomain"):
        conn.exec_command("true")
    assert not os.path.exists(tmp_path / "calls.jsonl")


def test_the_pod_s_gpu_access_comes_from_the_variables(kubectl, tmp_path):
    connection(kubectl, gpuops_node_pod_runtime_class="nvidia").exec_command("true")
    pod = list(state(tmp_path)["pods"].values())[0]
    assert pod["spec"]["runtimeClassName"] == "nvidia"
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in pod["spec"]["containers"][0]["env"]
    # ansible-core checks the documented choices (AnsibleOptionsError); node_pod.check_options checks them again for any other caller
    with pytest.raises((AnsibleOptionsError, AnsibleConnectionFailure), match="gpuops_node_pod_gpu_access"):
        connection(kubectl, gpuops_node_pod_gpu_access="everything").exec_command("true")


def test_the_run_s_pod_is_deleted_by_node_pods_as_no_change_said_apart(kubectl, tmp_path):
    """Issue 32 item 11: the run's own transport deleted is not a change to the user's cluster (before: changed=1 on
    localhost in every run through the API, --check included); ``deleted`` says it apart."""
    conn = connection(kubectl)
    conn.exec_command("true")
    planned = conn.remove_node_pod(check_mode=True)
    assert (planned["changed"], planned["deleted"]) == (False, False) and "would be deleted" in planned["msg"]
    assert len(state(tmp_path)["pods"]) == 1, "check mode deletes nothing"
    done = conn.remove_node_pod()
    assert (done["changed"], done["deleted"]) == (False, True)
    assert state(tmp_path)["pods"] == {}
    again = conn.remove_node_pod()
    assert (again["changed"], again["deleted"]) == (False, False) and again["msg"].startswith("no node pod of this run")


def test_modules_are_pipelined_unless_the_user_turns_it_off(kubectl, monkeypatch):
    """Issue 36: one exec per module call (the module on the stream's stdin), not four or five (a temp directory, the file,
    the run, the clean-up), each kubectl exec a request for the pod and one for the stream. ansible-core's own default
    (off) does not apply here; the user's ansible_pipelining or ANSIBLE_PIPELINING does."""
    monkeypatch.delenv("ANSIBLE_PIPELINING", raising=False)
    assert connection(kubectl).is_pipelining_enabled() is True
    assert connection(kubectl).is_pipelining_enabled(wrap_async=True) is False, "async still writes its files"
    assert connection(kubectl, ansible_pipelining=False).is_pipelining_enabled() is False
    monkeypatch.setenv("ANSIBLE_PIPELINING", "false")
    assert connection(kubectl).is_pipelining_enabled() is False


def test_a_node_pod_that_never_gets_ready_fails_at_the_timeout_and_says_what_was_seen(kubectl, monkeypatch):
    monkeypatch.setenv("FAKE_KUBECTL_NEVER_READY", "1")
    conn = connection(kubectl, gpuops_node_pod_ready_timeout=2)
    started = time.monotonic()
    with pytest.raises(AnsibleConnectionFailure, match=r"not running after 2 s .*last seen: phase and Ready 'Running False'"):
        conn.exec_command("true")
    assert time.monotonic() - started < 20, "the watch is ended at the timeout, not left to kubectl"


def test_the_run_s_pod_is_deleted_without_a_read_first(kubectl, tmp_path):
    conn = connection(kubectl)
    conn.exec_command("true")
    before = len(calls(tmp_path))
    assert conn.remove_node_pod()["deleted"] is True
    assert [c[4:5] for c in calls(tmp_path)[before:]] == [["delete"]], "the delete alone says whether there was one"
    assert connection(kubectl).remove_node_pod()["deleted"] is False


# ---- the exec stream (gpuops_node_exec_transport api) ----

class FakeStream:
    """A kubernetes.stream WSClient (binary) for one exec: runs the pod's command here as the fake kubectl does (no chroot,
    the pod's files under the test's directory) and, like v4.channel.k8s.io, never closes its stdin: a command that reads
    its stdin to the end would never end (it is killed after 20 s and the test fails)."""

    def __init__(self, command, stdin, root, status=None):
        script = (command[2].replace("chroot /host ", "").replace(node_pod.HEARTBEAT, root + "/hb").replace("HOME=/root", "HOME=" + root)
                  .replace(node_pod.EXEC_ON_FILE, root + "/exec-on"))
        args = [a.replace(node_pod.JOBS, root + "/jobs") for a in command[3:]]
        # output to files, not pipes: the stream's buffers never fill
        self.out, self.err = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self.proc = subprocess.Popen(["/bin/sh", "-c", script] + args, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                     stdout=self.out, stderr=self.err)
        self.channels, self.open, self.status, self.started = {}, True, status, time.monotonic()
        self.stdin = b""

    def write_stdin(self, data):
        assert isinstance(data, bytes) and len(data) <= 64 * 1024, "bytes, in frames"
        self.stdin += data
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def is_open(self):
        return self.open

    def update(self, timeout=0):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            if time.monotonic() - self.started > 20:
                self.proc.kill()
                raise AssertionError("the command waited for the end of a stdin the stream never closes") from None
            return
        for channel, handle in ((1, self.out), (2, self.err)):
            handle.seek(0)
            self.channels[channel] = handle.read()
        rc = self.proc.returncode
        self.channels[3] = self.status if self.status is not None else json.dumps(
            {"metadata": {}, "status": "Success"} if rc == 0 else
            {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode", "message": "command terminated with non-zero exit code",
             "details": {"causes": [{"reason": "ExitCode", "message": str(rc)}]}}).encode()
        self.open = False

    def read_channel(self, channel):
        return self.channels.pop(channel, b"")

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for handle in (self.proc.stdin, self.out, self.err):
            if handle:
                handle.close()


@pytest.fixture()
def stream(kubectl, tmp_path, monkeypatch):
    """The exec stream faked at kubernetes.stream's ``stream``: records each exec (pod, namespace, container, argv, stdin)."""
    from ansible_collections.gpuops.fleet.plugins.plugin_utils import _pod_stream
    _pod_stream.unsupported()  # the client imported first, so the fakes below stay in place
    made = []

    def fake_stream(method, pod, namespace, **kwargs):
        assert kwargs["binary"] is True and kwargs["_preload_content"] is False and kwargs["tty"] is False
        made.append({"pod": pod, "namespace": namespace, "container": kwargs["container"], "command": kwargs["command"],
                     "stdin": kwargs["stdin"]})
        fake = FakeStream(kwargs["command"], kwargs["stdin"], str(tmp_path))
        made[-1]["stream"] = fake
        return fake

    monkeypatch.setattr(_pod_stream, "k8s_stream", fake_stream)
    monkeypatch.setattr(_pod_stream, "configuration", lambda *args: ("configured", args))
    monkeypatch.setattr(_pod_stream, "api", lambda cfg: __import__("types").SimpleNamespace(connect_get_namespaced_pod_exec=None, cfg=cfg))
    return made


def test_over_the_exec_stream_a_command_runs_with_no_kubectl_exec_and_reads_exactly_its_stdin(kubectl, stream, tmp_path):
    conn = connection(kubectl, gpuops_node_exec_transport="api", ansible_kubectl_context="prod", ansible_kubectl_token="s3cret")
    module = b"import sys\n" * 5000 + b"\xff\x00 binary tail"  # more than one frame of stdin, and not UTF-8
    rc, out, err = conn.exec_command("wc -c; echo warn >&2; exit 3", in_data=module)
    assert (rc, out.strip(), err) == (3, str(len(module)).encode(), b"warn\n")
    assert stream[-1]["stream"].stdin == module, "the module went whole, in frames"
    name = node_pod.pod_name("gpu-1", node_pod.run_id(os.uname()[1], k8s_node.run_token()))
    made = stream[-1]
    assert (made["pod"], made["namespace"], made["container"], made["stdin"]) == (name, "gpuops-system", node_pod.CONTAINER, True)
    assert stream[-1]["command"] == node_pod.exec_argv(["/bin/sh", "-c", "wc -c; echo warn >&2; exit 3"], len(module))
    assert not any("exec" in c for c in calls(tmp_path)), "kubectl made the pod, and ran no command"
    assert conn._exec_api().cfg[1][1:4] == ("prod", "", "s3cret"), "the connection's own auth options configure the client"
    assert conn.exec_command("echo no stdin") == (0, b"no stdin\n", b"")
    assert stream[-1]["stdin"] is False and stream[-1]["command"] == node_pod.exec_argv(["/bin/sh", "-c", "echo no stdin"])


def test_over_the_exec_stream_files_go_and_come_back_as_bytes(kubectl, stream, tmp_path):
    conn = connection(kubectl, gpuops_node_exec_transport="api")
    data = bytes(range(256)) * 600
    src, back = tmp_path / "src.bin", tmp_path / "back.bin"
    src.write_bytes(data)
    conn.put_file(str(src), str(tmp_path / "on-node.bin"))
    assert (tmp_path / "on-node.bin").read_bytes() == data
    (tmp_path / "empty").write_bytes(b"")
    conn.put_file(str(tmp_path / "empty"), str(tmp_path / "on-node-empty"))
    assert (tmp_path / "on-node-empty").read_bytes() == b""
    conn.fetch_file(str(tmp_path / "on-node.bin"), str(back))
    assert back.read_bytes() == data
    with pytest.raises(AnsibleError, match="failed to fetch"):
        conn.fetch_file(str(tmp_path / "missing"), str(back))


def test_over_the_exec_stream_a_detached_command_reads_its_stdin_by_size_and_comes_back(kubectl, stream, tmp_path):
    conn = connection(kubectl, gpuops_node_exec_transport="api", gpuops_node_exec_detached=True)
    rc, out, err = conn.exec_command("cat; echo done; exit 4", in_data=b"module source\n")
    assert (rc, out, err) == (4, b"module source\ndone\n", b"")
    launch = [e for e in stream if "gpuops-launched" in e["command"][2]]
    assert len(launch) == 1 and "head -c 14 >" in launch[0]["command"][2] and launch[0]["stdin"] is True
    assert not any("exec" in c for c in calls(tmp_path))


def test_a_broken_or_refused_stream_fails_the_task_by_name_and_a_status_without_exit_code_is_no_exit_status(kubectl, stream, monkeypatch):
    from ansible_collections.gpuops.fleet.plugins.plugin_utils import _pod_stream
    conn = connection(kubectl, gpuops_node_exec_transport="api")
    conn.exec_command("true")

    def refused(method, pod, namespace, **kwargs):
        raise _pod_stream.ApiException(status=0, reason='Handshake status 404 Not Found -+-+- {"reason":"NotFound"}')

    monkeypatch.setattr(_pod_stream, "k8s_stream", refused)
    with pytest.raises(AnsibleConnectionFailure, match="exec: Handshake status 404 Not Found.*NotFound"):
        conn.exec_command("true")
    assert _pod_stream.exit_status(b"") == (None, "the exec stream ended without the command's status")
    assert _pod_stream.exit_status(b'{"status":"Failure","reason":"InternalError","message":"executable file not found"}') == (
        None, "executable file not found")
    assert _pod_stream.exit_status(b'{"status":"Success"}') == (0, "")


def test_kubectl_is_the_default_and_imports_no_kubernetes_client_and_api_refuses_what_it_cannot_honour(kubectl, stream, tmp_path, monkeypatch):
    from ansible_collections.gpuops.fleet.plugins.plugin_utils import _pod_stream

    def no_import():
        raise AssertionError("kubectl exec must not import the kubernetes client (half a second per task's worker)")

    loader = _pod_stream._load
    monkeypatch.setattr(_pod_stream, "_load", no_import)
    default = connection(kubectl)
    default.set_options(var_options={"gpuops_node_exec_transport": None})
    assert default.get_option("gpuops_node_exec_transport") == "kubectl"
    assert default.exec_command("echo by kubectl") == (0, b"by kubectl\n", b"")
    assert not stream and any("exec" in c for c in calls(tmp_path))
    monkeypatch.setattr(_pod_stream, "_load", loader)
    with pytest.raises(AnsibleConnectionFailure, match="api cannot be used: kubectl_extra_args shape a kubectl process.*set it to kubectl"):
        connection(kubectl, gpuops_node_exec_transport="api", ansible_kubectl_extra_args="--request-timeout=30s").exec_command("true")
    monkeypatch.setattr(_pod_stream, "_MISSING", "this kubernetes Python client (before 30) cannot carry bytes on an exec stream")
    with pytest.raises(AnsibleConnectionFailure, match="api cannot be used: this kubernetes Python client .before 30."):
        connection(kubectl, gpuops_node_exec_transport="api").exec_command("true")
    assert not stream
