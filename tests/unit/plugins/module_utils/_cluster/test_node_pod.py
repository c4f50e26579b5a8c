# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node pod of gpuops.fleet.k8s_node as data, and which pods a run may delete."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import node_pod
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.node_pod import NodePodError
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
IMAGE = "registry.example/busybox@sha256:" + "0" * 64


def test_pod_names_are_dns1123_unique_per_node_and_run_and_fit():
    names = {node_pod.pod_name(node, run) for node in ("gpu-1", "gpu-1.example.com", "x" * 253) for run in ("ctl-1", "ctl-2")}
    assert len(names) == 6
    assert all(DNS1123.match(n) and len(n) <= 63 for n in names), names


def test_run_ids_are_label_values_with_a_random_token():
    token = node_pod.new_token()
    run = node_pod.run_id("AWX-Task-7f9.example.com", token)
    assert run == "awx-task-7f9-" + token and len(run) <= 63 and DNS1123.match(run)
    assert node_pod.new_token() != token, "each run draws its own"
    # issue 32 item 3: two controllers ctl.dc1 and ctl.dc2 (or two containers whose ansible-playbook is PID 1) are two runs
    assert node_pod.run_id("ctl.dc1.example", node_pod.new_token()) != node_pod.run_id("ctl.dc2.example", node_pod.new_token())
    for bad in ("4242", "", "g" * 20, "0" * 15):
        with pytest.raises(NodePodError, match="run token"):
            node_pod.run_id("ctl", bad)


def test_origins_parse_back():
    text = node_pod.origin("b00t", "4026531836", 1, "12345")
    assert node_pod.parse_origin(text) == ("b00t", "4026531836", 1, "12345")
    assert node_pod.parse_origin("ctl-9") is None and node_pod.parse_origin(None) is None and node_pod.parse_origin("a/b/x/1") is None


def test_the_manifest_pins_the_node_mounts_only_the_host_root_and_is_not_privileged():
    m = node_pod.pod_manifest("p", "gpu-1", "ops", IMAGE, 900, 3600, "ctl-1")
    spec = m["spec"]
    assert spec["nodeName"] == "gpu-1" and spec["hostPID"] is True and spec["activeDeadlineSeconds"] == 3600
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["volumes"] == [{"name": "host", "hostPath": {"path": "/", "type": "Directory"}}]
    container = spec["containers"][0]
    assert container["securityContext"] == {"privileged": False, "runAsUser": 0, "runAsGroup": 0,
                                            "capabilities": {"add": ["SYS_CHROOT"]}}, "chroot's one capability, nothing else"
    assert container["image"] == IMAGE and container["volumeMounts"] == [{"name": "host", "mountPath": "/host"}]
    assert m["metadata"]["labels"] == {node_pod.LABEL: "true", node_pod.RUN_LABEL: "ctl-1"}


def test_the_pod_stops_when_idle(tmp_path):
    """The pod's script, run by this machine's sh with a 1 s idle: it exits once the heartbeat is old."""
    script = node_pod.pod_command(1, 300)[2].replace(node_pod.HEARTBEAT, str(tmp_path / "hb")).replace("sleep 5", "sleep 0.2")
    proc = subprocess.run(["/bin/sh", "-c", script], timeout=20, check=False)
    assert proc.returncode == 0 and (tmp_path / "hb").exists()


FAKE_CHROOT = """#!/bin/sh
echo "chroot $*" >> "$FAKE_CHROOT_LOG"
case "$*" in *"command -v python3"*) [ -n "$FAKE_HOST_WITHOUT_PYTHON" ] && exit 127;; esac
shift; exec "$@"
"""


def run_in_pod(argv, tmp_path, exec_on, without_python=False):
    """An exec_argv() script run by this machine's sh, as kubectl exec runs it in the node pod: the pod's /tmp files
    in tmp_path, and ``chroot`` a fake that logs its arguments, then runs the command here (``/host`` is this machine)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "chroot").write_text(FAKE_CHROOT)
    (bindir / "chroot").chmod(0o755)
    script = argv[2].replace(node_pod.HEARTBEAT, str(tmp_path / "hb")).replace(node_pod.EXEC_ON_FILE, str(tmp_path / "exec-on"))
    env = {"PATH": "%s:/usr/bin:/bin" % bindir, node_pod.EXEC_ON_ENV: exec_on, "FAKE_CHROOT_LOG": str(tmp_path / "chroot.log")}
    if without_python:
        env["FAKE_HOST_WITHOUT_PYTHON"] = "1"
    proc = subprocess.run(["/bin/sh", "-c", script] + argv[3:], env=env, capture_output=True, text=True, timeout=20, check=False)
    log = (tmp_path / "chroot.log").read_text() if (tmp_path / "chroot.log").exists() else ""
    (tmp_path / "chroot.log").unlink(missing_ok=True)
    return proc, log


COMMAND = ["/bin/sh", "-c", "echo \"root=$GPUOPS_HOST_ROOT home=$HOME\"; echo 'a b'"]


def test_a_command_touches_the_heartbeat_then_runs_chrooted_on_the_host_with_its_argv_unchanged(tmp_path):
    argv = node_pod.exec_argv(COMMAND)
    assert argv[4:] == COMMAND, "Ansible's command is passed as arguments, never re-quoted"
    proc, log = run_in_pod(argv, tmp_path, "host")
    assert proc.returncode == 0 and proc.stdout == "root= home=/root\na b\n", proc
    assert log == "chroot /host %s\n" % " ".join(COMMAND) and (tmp_path / "hb").exists()


def test_beside_the_host_the_command_runs_in_the_pod_told_where_the_host_is(tmp_path):
    proc, log = run_in_pod(node_pod.exec_argv(COMMAND), tmp_path, "pod")
    assert proc.returncode == 0 and proc.stdout == "root=/host home=/root\na b\n" and log == "", (proc, log)


def test_auto_asks_the_host_for_python3_once_per_pod_and_keeps_the_answer(tmp_path):
    proc, log = run_in_pod(node_pod.exec_argv(COMMAND), tmp_path, "auto", without_python=True)
    assert proc.stdout.startswith("root=/host ") and "command -v python3" in log, (proc, log)
    assert (tmp_path / "exec-on").read_text() == "pod\n"
    # the answer is the pod's: a later command neither asks again nor changes side (the host did not change)
    proc, log = run_in_pod(node_pod.exec_argv(COMMAND), tmp_path, "auto")
    assert proc.stdout.startswith("root=/host ") and log == "", (proc, log)
    # a host with python3 (this machine): on the host
    (tmp_path / "exec-on").unlink()
    proc, log = run_in_pod(node_pod.exec_argv(COMMAND), tmp_path, "auto")
    assert proc.stdout.startswith("root= ") and log.splitlines()[-1] == "chroot /host %s" % " ".join(COMMAND), (proc, log)


def test_the_pod_carries_where_the_modules_run():
    for exec_on in node_pod.EXEC_ON:
        container = node_pod.pod_manifest("p", "gpu-1", "ops", IMAGE, 900, 3600, "ctl-1", exec_on=exec_on)["spec"]["containers"][0]
        assert {"name": node_pod.EXEC_ON_ENV, "value": exec_on} in container["env"]
    with pytest.raises(ParameterError, match="gpuops_node_exec_on: must be one of auto, host, pod"):
        node_pod.check_options("gpu-1", "ops", IMAGE, 900, 3600, exec_on="ssh")


@pytest.mark.parametrize("field,kwargs", [
    ("gpuops_node_name", dict(node="gpu-1\nprivileged: true")),
    ("gpuops_node_name", dict(node="GPU_1")),
    ("gpuops_node_pod_namespace", dict(namespace="Ops")),
    ("gpuops_node_pod_image", dict(image="busybox; rm -rf /")),
    ("gpuops_node_pod_idle", dict(idle="soon")),
    ("gpuops_node_pod_idle", dict(idle=5)),
    ("gpuops_node_pod_deadline", dict(deadline=10)),
    ("shorter than gpuops_node_pod_deadline", dict(idle=4000, deadline=3600)),
])
def test_bad_options_name_the_field(field, kwargs):
    args = dict(node="gpu-1", namespace="gpuops-system", image=IMAGE, idle=900, deadline=3600)
    args.update(kwargs)
    with pytest.raises(ParameterError, match=re.escape(field)):
        node_pod.check_options(**args)


def test_ready_only_when_running_and_ready():
    assert node_pod.ready({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
    assert not node_pod.ready({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}})
    assert not node_pod.ready({"status": {"phase": "Pending"}}) and not node_pod.ready(None)


def test_survey_strings_are_numbers():
    assert node_pod.check_options("gpu-1", "ops", IMAGE, "900", " 3600 ") == (900, 3600)


@pytest.mark.parametrize("image", ["busybox:1.36", "docker.io/library/busybox", "registry.example/busybox:latest"])
def test_a_node_pod_image_by_tag_is_refused_naming_the_variable(image):
    """Issue 32 item 5: the node pod runs as root with the host's / read-write; its image is taken by digest only."""
    with pytest.raises(ParameterError, match=r"gpuops_node_pod_image: .*names no digest"):
        node_pod.check_options("gpu-1", "ops", image, 900, 3600)


def test_the_default_node_pod_image_is_a_digest_and_the_connection_documents_it():
    import yaml
    from ansible_collections.gpuops.fleet.plugins.connection import k8s_node
    documented = yaml.safe_load(k8s_node.DOCUMENTATION)["options"]["gpuops_node_pod_image"]["default"]
    assert documented == node_pod.DEFAULT_IMAGE and re.search(r"@sha256:[0-9a-f]{64}$", documented)
    assert node_pod.check_options("gpu-1", "ops", documented, 900, 3600) == (900, 3600)


def pod(name, node, run, phase="Running", deleting=False, origin=None):
    meta = {"name": name, "labels": {node_pod.LABEL: "true", node_pod.RUN_LABEL: run}}
    if origin:
        meta["annotations"] = {node_pod.ORIGIN_ANNOTATION: origin}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-24T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}


HERE = node_pod.origin("boot", "ns", 9, "100")


def test_sweep_deletes_what_ended_and_what_a_dead_run_here_left_keeps_its_own_and_other_nodes():
    pods = [pod("mine", "n1", "ctl-" + "a" * 20), pod("ended", "n1", "awx-7", "Succeeded"), pod("dead-here", "n1", "ctl-" + "b" * 20, origin=HERE),
            pod("elsewhere", "n2", "ctl-9"), pod("going", "n1", "awx-8", deleting=True)]
    assert node_pod.sweep(pods, "n1", "ctl-" + "a" * 20, origin_alive=lambda found: found[2] != 9) == ["ended", "dead-here", "going"]


def test_sweep_refuses_a_node_that_a_run_may_still_use():
    # another controller's or container's running pod (None: its process cannot be checked from here), a pod without an
    # origin (an older version's), and a live run of this controller
    for origin, alive in ((HERE, None), (None, False), (HERE, True)):
        with pytest.raises(NodePodError, match="busy-pod.*kubectl -n NAMESPACE delete pod busy-pod"):
            node_pod.sweep([pod("busy-pod", "n1", "ctl-" + "b" * 20, origin=origin)], "n1", "ctl-" + "a" * 20,
                           origin_alive=lambda found, alive=alive: alive)


def test_two_runs_of_one_short_name_and_pid_never_take_each_other_s_pod():
    """Issue 32 item 3: ctl.dc1 and ctl.dc2, both with ansible-playbook as PID 1 (containers): before, both were run
    'ctl-1', so B found A's live pod as its own, and after A's pod ended B's sweep deleted A's next one."""
    a, b = node_pod.run_id("ctl.dc1", node_pod.new_token()), node_pod.run_id("ctl.dc2", node_pod.new_token())
    assert node_pod.pod_name("n1", a) != node_pod.pod_name("n1", b), "never one pod for two runs"
    a_pod = pod(node_pod.pod_name("n1", a), "n1", a, origin=node_pod.origin("boot-dc1", "ns", 1, "50"))
    with pytest.raises(NodePodError, match="of another run still running"):
        # B cannot see A's process (another machine): A's pod is never deleted while it runs
        node_pod.sweep([a_pod], "n1", b, origin_alive=lambda found: None)


def run_job_script(argv, tmp_path, stdin=b""):
    """A node pod's job script run by this machine's sh: the pod's /tmp and the chroot into /host replaced by tmp_path."""
    script = argv[2].replace("chroot /host ", "").replace(node_pod.HEARTBEAT, str(tmp_path / "hb")).replace(
        node_pod.EXEC_ON_FILE, str(tmp_path / "exec-on"))
    args = [a.replace(node_pod.JOBS, str(tmp_path / "jobs")) for a in argv[3:]]
    return subprocess.run(["/bin/sh", "-c", script] + args, input=stdin, capture_output=True, timeout=20, check=False)


def test_a_detached_command_runs_with_its_stdin_and_its_status_and_streams_are_read_back(tmp_path):
    job = "0123456789abcdef"
    command = ["/bin/sh", "-c", 'read line; echo "out:$line"; echo "err:$HOME" >&2; sleep 1; exit 7']
    launched = run_job_script(node_pod.job_launch_argv(job, command), tmp_path, b"from stdin\n")
    assert launched.returncode == 0 and launched.stdout.strip() == b"gpuops-launched", launched
    assert node_pod.job_state(run_job_script(node_pod.job_poll_argv(job), tmp_path).stdout) == ("running", None)
    deadline = time.monotonic() + 10
    while node_pod.job_state(run_job_script(node_pod.job_poll_argv(job), tmp_path).stdout)[0] != "done":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert node_pod.job_state(run_job_script(node_pod.job_poll_argv(job), tmp_path).stdout) == ("done", 7)
    collected = run_job_script(node_pod.job_collect_argv(job), tmp_path)
    assert (collected.returncode, collected.stdout, collected.stderr) == (0, b"out:from stdin\n", b"err:/root\n")
    assert not (tmp_path / "jobs" / job).exists(), "its files are removed once read"
    assert node_pod.job_state(run_job_script(node_pod.job_poll_argv(job), tmp_path).stdout) == ("lost", None)


def test_a_broken_poll_says_nothing_and_job_ids_are_checked():
    assert node_pod.job_state(b"") is None and node_pod.job_state(b"error: unable to upgrade connection") is None
    assert node_pod.job_state(b"gpuops-rc=abc") is None
    with pytest.raises(NodePodError, match="detached command's id"):
        node_pod.job_launch_argv("../../etc", ["true"])


def test_gpu_access_nvidia_runtime_by_default_privileged_only_when_asked():
    default = node_pod.pod_manifest("p", "gpu-1", "ops", IMAGE, 900, 3600, "ctl-1")
    container = default["spec"]["containers"][0]
    assert container["env"][1:] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}]
    assert "resources" in container and "nvidia.com/gpu" not in json.dumps(container["resources"]), "no GPU is requested: none is taken"
    assert "runtimeClassName" not in default["spec"]
    classed = node_pod.pod_manifest("p", "gpu-1", "ops", IMAGE, 900, 3600, "ctl-1", "nvidia-runtime", "nvidia")
    assert classed["spec"]["runtimeClassName"] == "nvidia"
    privileged = node_pod.pod_manifest("p", "gpu-1", "ops", IMAGE, 900, 3600, "ctl-1", "privileged")["spec"]["containers"][0]
    nvidia = set(e["name"] for e in node_pod.NVIDIA_ENV)
    assert privileged["securityContext"] == {"privileged": True, "runAsUser": 0, "runAsGroup": 0} and not nvidia & set(e["name"] for e in privileged["env"])
    none = node_pod.pod_manifest("p", "gpu-1", "ops", IMAGE, 900, 3600, "ctl-1", "none")["spec"]["containers"][0]
    assert none["securityContext"] == {"privileged": False, "runAsUser": 0, "runAsGroup": 0, "capabilities": {"add": ["SYS_CHROOT"]}}
    assert not nvidia & set(e["name"] for e in none["env"])


@pytest.mark.parametrize("field,kwargs", [
    ("gpuops_node_pod_gpu_access", dict(gpu_access="all")),
    ("gpuops_node_pod_gpu_access", dict(gpu_access="")),
    ("gpuops_node_pod_runtime_class", dict(runtime_class="Nvidia")),
    ("gpuops_node_pod_runtime_class", dict(runtime_class="nvidia\nprivileged: true")),
])
def test_bad_gpu_access_options_name_the_field(field, kwargs):
    args = dict(node="gpu-1", namespace="gpuops-system", image=IMAGE, idle=900, deadline=3600)
    args.update(kwargs)
    with pytest.raises(ParameterError, match=re.escape(field)):
        node_pod.check_options(**args)
