# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuops.fleet.k8s_node on the REAL kubelet node: tasks reach the node's host through the API alone.

No SSH and no local connection: every task runs as ``kubectl exec`` (or, with gpuops_node_exec_transport api, the
controller's own websocket; then the real kubelet's streaming server, then containerd) into the run's node pod, chrooted
to the host's ``/``.
This machine is the node's host, so the test reads what a task wrote there directly.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
import uuid

import hostile_python
import realnode
from realnode import wait

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import node_pod

ROOT = realnode.ROOT
BIN = os.path.dirname(sys.executable)
NS = "node-pods"
KUBECTL_DIR = realnode.KUBECTL_DIR


def inventory(node, tmp, transport="kubectl"):
    host = dict(realnode.through_api(node, NS), ansible_python_interpreter="/usr/bin/python3", gpuops_node_exec_transport=transport)
    path = tmp / "inventory.json"
    path.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": {"knode": host}}}}}))
    return str(path)


def playbook(tmp, marker, admin, pause=0):
    """A command, a file copied to the host, a module reading it back, the node pods listed, then the run's pods deleted."""
    plays = [
        {"name": "on the node through its node pod", "hosts": "gpu_nodes", "gather_facts": False, "tasks": [
            {"name": "who runs", "ansible.builtin.command": "id -u", "register": "who", "changed_when": False},
            {"name": "a file on the host", "ansible.builtin.copy": {"content": marker, "dest": "/tmp/gpuops-k8s-node-" + marker, "mode": "0600"}},
            {"name": "read back by a module", "ansible.builtin.slurp": {"src": "/tmp/gpuops-k8s-node-" + marker}, "register": "back"},
            {"name": "show", "ansible.builtin.debug": {"msg": "UID={{ who.stdout }} BACK={{ back.content | b64decode }}"}},
        ] + ([{"name": "wait (the test kills the run here)", "ansible.builtin.pause": {"seconds": pause}}] if pause else [])},
        {"name": "the node pods of the run", "hosts": "localhost", "gather_facts": False, "tasks": [
            {"name": "list", "ansible.builtin.command": {"argv": [os.path.join(KUBECTL_DIR, "kubectl"), "--kubeconfig", admin,
                                                                   "-n", NS, "get", "pods", "-l", node_pod.LABEL + "=true", "-o", "name"]},
             "register": "listed", "changed_when": False},
            {"name": "show", "ansible.builtin.debug": {"msg": "PODS={{ listed.stdout_lines | join(',') }}"}},
            {"name": "the run's node pods deleted", "gpuops.fleet.node_pods": {"state": "absent"},
             "delegate_to": "{{ item }}", "loop": "{{ groups['gpu_nodes'] }}"},
        ]},
    ]
    path = tmp / ("play-%s.yml" % marker)
    path.write_text(json.dumps(plays))
    return str(path)


def ansible(node, tmp, play, transport="kubectl", **popen):
    env = realnode.ansible_env(tmp)
    cmd = [os.path.join(BIN, "ansible-playbook"), "-vvv", "-i", inventory(node, tmp, transport), play]
    if popen:
        return subprocess.Popen(cmd, cwd=str(tmp), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)
    proc = subprocess.run(cmd, cwd=str(tmp), env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def transport_cost(node, tmp, marker, transport):
    """The same playbook with each command over ``transport``: its wall and controller CPU seconds (ansible-playbook and
    every process it started, kubectl's included) and the API server's requests for the node pods (figures, not limits)."""
    before, offset, started = resource.getrusage(resource.RUSAGE_CHILDREN), node.cluster.audit_offset(), time.monotonic()
    rc, out = ansible(node, tmp, playbook(tmp, marker, node.cluster.kubeconfig), transport)
    seconds, after = time.monotonic() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    assert rc == 0 and "UID=0 BACK=%s" % marker in out, out[-3000:]
    assert "EXEC TRANSPORT %s" % transport in out, out[-3000:]
    calls = realnode.api_calls(node.cluster, offset, NS)
    return {"seconds": round(seconds, 1), "controller_cpu_seconds": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
            "api_calls": calls, "requests": sum(calls.values())}


def hostile_run(node, tmp):
    """Issue 48, item 1, through the API alone: the node's first module (ping, by a wrapper around the host's python3) renames
    it after another node (a Node object beside it), points the connection at another API server with a token and names a
    kubeconfig of the controller's. Its next task is refused before any request, naming those facts: no node pod is made on
    the other node (the pod of that node would run as root with the host's / read-write), and no request of the connection
    follows the refusal. Then the run's own pod, which the refused run could not delete, is deleted here."""
    victim = "victim-node"
    node.cluster.core.create_node({"metadata": {"name": victim, "labels": {"gpuops.test/victim": "true"}}})
    facts = {"gpuops_node_name": victim, "ansible_host": victim, "ansible_kubectl_host": "https://127.0.0.1:9",
             "ansible_kubectl_token": "stolen", "ansible_kubectl_kubeconfig": "/nonexistent"}
    log = tmp / "hostile-rewrites"
    interpreter = hostile_python.install(str(tmp / "hostile"), "/usr/bin/python3", facts, log=str(log), runner="/usr/bin/python3")
    host = dict(realnode.through_api(node, NS), ansible_python_interpreter=interpreter)
    inventory = tmp / "inventory-hostile.json"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": {"knode": host}}}}}))
    play = tmp / "hostile.yml"
    play.write_text(json.dumps([{"hosts": "gpu_nodes", "gather_facts": False, "tasks": [
        {"name": "any module", "ansible.builtin.ping": {}},
        {"name": "MARK the next task", "ansible.builtin.debug": {"msg": "NEXT"}, "delegate_to": "localhost"},
        {"name": "the next task on the node", "ansible.builtin.command": "true"}]}]))
    offset = node.cluster.audit_offset()
    try:
        proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-vvv", "-i", str(inventory), str(play)], cwd=str(tmp),
                              env=realnode.ansible_env(tmp), capture_output=True, text=True, timeout=300, check=False)
        out = proc.stdout + proc.stderr
        assert log.read_text().split() == ["ping"], out[-3000:]
        after = out.split("TASK [the next task on the node]", 1)[1]
        assert "UNREACHABLE" in after and "host knode returned facts named as variables the controller acts on" in after, out[-3000:]
        # the connection logs each kubectl call and exec it makes (-vvv): none for the refused task
        assert [line for line in after.splitlines() if re.match(r"<knode> (NODE POD|EXEC|POD EXEC)", line)] == [], after[:3000]
        assert node.cluster.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=" + victim).items == []
        made = [e for e in node.cluster.audit_events(offset) if e["verb"] == "create" and (e.get("objectRef") or {}).get("resource") == "pods"
                and not (e.get("objectRef") or {}).get("subresource")]
        assert len(made) == 1, made  # the ping's pod, on this node; none after the refusal
    finally:
        for name in live_pods(node):
            node.cluster.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
        wait(lambda: node_pods(node) == {}, "the hostile run's node pod deleted")
        node.cluster.core.delete_node(victim)


def pods_listed(out):
    """The node pods the playbook's second play listed while the run's pod was up (its PODS= line)."""
    found = [line.split("PODS=", 1)[1].strip('"') for line in out.splitlines() if "PODS=" in line]
    assert len(found) == 1, out[-3000:]
    return found[0].split(",")


def node_pods(node):
    return dict((p.metadata.name, p) for p in node.cluster.core.list_namespaced_pod(NS, label_selector=node_pod.LABEL + "=true").items)


def live_pods(node):
    """The node pods not being deleted."""
    return dict((n, p) for n, p in node_pods(node).items() if p.metadata.deletion_timestamp is None)


def test_tasks_reach_the_host_through_the_api_alone_and_no_node_pod_is_left(real_node, tmp_path):
    node = real_node
    # the RBAC the README documents is what a real API server takes (this rig authorizes everything, so it
    # checks the objects, not the verbs)
    kubectl = [os.path.join(KUBECTL_DIR, "kubectl"), "--kubeconfig", node.cluster.kubeconfig]
    node.namespace("gpuops-system")  # a server dry run creates nothing, so its namespaced objects need the namespace
    applied = subprocess.run(kubectl + ["apply", "--dry-run=server", "-f", os.path.join(ROOT, "docs", "rbac", "k8s-node-connection.yml")],
                             capture_output=True, text=True, timeout=60, check=False)
    assert applied.returncode == 0 and applied.stdout.count("(server dry run)") == 6, applied.stdout + applied.stderr
    node.namespace(NS)
    node.up(["GPU-0a0a0a0a-1111-4111-8111-00000000000a"])
    marker, marker2 = uuid.uuid4().hex[:12], uuid.uuid4().hex[:12]
    try:
        started, offset = time.monotonic(), node.cluster.audit_offset()
        rc, out = ansible(node, tmp_path, playbook(tmp_path, marker, node.cluster.kubeconfig))
        seconds = time.monotonic() - started
        assert rc == 0, out[-5000:]
        api_calls = realnode.api_calls(node.cluster, offset)
        # the command and the module ran on the host, as root, not in the pod's filesystem
        assert "UID=0 BACK=%s" % marker in out, out[-3000:]
        with open("/tmp/gpuops-k8s-node-" + marker) as handle:
            assert handle.read() == marker
        assert oct(os.stat("/tmp/gpuops-k8s-node-" + marker).st_mode & 0o777) == "0o600"
        calls = dict((what, len(re.findall(r"^<knode> %s \[" % what, out, re.M))) for what in ("NODE POD", "EXEC"))
        # the default transport: a kubectl exec per command (kubectl 1.20's SPDY stream, a POST: create pods/exec)
        assert "EXEC TRANSPORT kubectl" in out and calls["EXEC"] >= 3 and api_calls.get("create pods/exec", 0) >= 3, out[-3000:]
        # the same playbook by each transport, one after the other: the exec stream from the controller is a GET of
        # pods/exec, with no read of the pod before it
        transports = {"api": transport_cost(node, tmp_path, marker, "api"), "kubectl": transport_cost(node, tmp_path, marker, "kubectl")}
        assert transports["api"]["api_calls"].get("get pods/exec", 0) >= 3 and "create pods/exec" not in transports["api"]["api_calls"]
        assert transports["kubectl"]["api_calls"].get("create pods/exec", 0) >= 3 and "get pods/exec" not in transports["kubectl"]["api_calls"]
        assert transports["api"]["requests"] < transports["kubectl"]["requests"], transports
        # one pod per node per run, pinned to the node, deleted at the run's end
        listed = pods_listed(out)
        assert len(listed) == 1 and listed[0].startswith("pod/gpuops-node-127-0-0-1-"), listed
        assert node_pods(node) == {}

        # a run killed mid-way leaves its node pod running; the next run deletes it, then leaves none
        killed = ansible(node, tmp_path, playbook(tmp_path, marker2, node.cluster.kubeconfig, pause=300), start_new_session=True)
        # the first run's pod may still be terminating (a CI run listed it Running): only pods not being deleted count
        orphan = wait(lambda: next((n for n, p in live_pods(node).items() if p.status.phase == "Running"), None) if os.path.exists(
            "/tmp/gpuops-k8s-node-" + marker2) else None, "the killed run's node pod Running, its file written", timeout=120)
        os.killpg(killed.pid, signal.SIGKILL)
        killed.communicate(timeout=30)
        time.sleep(2)
        assert list(live_pods(node)) == [orphan], "the killed run's pod should be left running"
        started = time.monotonic()
        rc, out = ansible(node, tmp_path, playbook(tmp_path, marker, node.cluster.kubeconfig))
        seconds_after_orphan = time.monotonic() - started
        assert rc == 0, out[-5000:]
        listed = pods_listed(out)
        assert len(listed) == 1 and "pod/" + orphan not in listed, ("the orphan was not deleted before the new run's pod", listed)
        assert node_pods(node) == {}

        hostile_run(node, tmp_path)

        # a node pod of a run that may still be working (another controller's) is refused, never deleted. Issue 32 item 3:
        # that controller has this one's short name (ctl.dc1 and ctl.dc2) and its ansible-playbook's PID is dead here;
        # before, the run label was that name and PID, so this run took the pod for a dead run of its own and deleted it
        gone = subprocess.Popen(["true"])
        gone.wait()
        twin = "%s-%d" % (node_pod.run_id(os.uname()[1], "0" * 16).rsplit("-", 1)[0], gone.pid)
        theirs = node_pod.pod_manifest("gpuops-node-busy", realnode.NAME, NS, realnode.BUSYBOX, 60, 300, twin,
                                       run_origin=node_pod.origin("another-controller-boot", "4026531836", gone.pid, "1"))
        node.cluster.core.create_namespaced_pod(NS, theirs)
        wait(lambda: node_pods(node)["gpuops-node-busy"].status.phase == "Running", "the other run's pod Running")
        rc, out = ansible(node, tmp_path, playbook(tmp_path, marker, node.cluster.kubeconfig))
        assert rc != 0 and "gpuops-node-busy of another run still running" in out, out[-3000:]
        assert list(node_pods(node)) == ["gpuops-node-busy"]
        os.makedirs(os.path.join(ROOT, "out"), exist_ok=True)
        with open(os.path.join(ROOT, "out", "knode-node-pods.json"), "w") as handle:
            json.dump({"run_seconds": round(seconds, 1), "run_after_orphan_seconds": round(seconds_after_orphan, 1),
                       "kubectl_calls_per_node": calls, "api_calls_per_node": api_calls, "tasks_on_node": 3,
                       "by_transport": transports}, handle, indent=1, sort_keys=True)
    finally:
        for path in ("/tmp/gpuops-k8s-node-" + marker, "/tmp/gpuops-k8s-node-" + marker2):
            if os.path.exists(path):
                os.remove(path)
