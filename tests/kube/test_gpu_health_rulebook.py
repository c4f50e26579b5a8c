# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""extensions/eda/rulebooks/gpu_health.yml run by the real ansible-rulebook (its rules engine on Java 17) against a real
kube-apiserver and a SIMULATED fleet: node a (GPU 0's recovery action says reset) beside healthy b and c, the device
plugin deployed. The device plugin's pod on a goes away (the simulated kubelet zeroes a's allocatable, as kubelet's
device manager does); the event source's gpu_faults event runs playbooks/gpu_remediation.yml once, limited to a and the
controller, in the rulebook's default mode, report: the plan names a for a reset, and nothing is written."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import yaml

import fakenode
import kubefleet
from test_gpu_health_plan import G, OTHER, faulty, healthy
from test_gpu_quarantine import WRITES, ledger, node_state, remediation_fleet, running

ROOT = kubefleet.ROOT
BIN = os.path.dirname(sys.executable)
RULEBOOKS = os.path.join(ROOT, "extensions", "eda", "rulebooks")
RULEBOOK = os.path.join(RULEBOOKS, "gpu_health.yml")


def rulebook(f, variables, out, path=RULEBOOK):
    """ansible-rulebook on the fleet's inventory (its hosts, and the remediation's settings as the inventory's), printing
    each event; returns the process (stdout and stderr to ``out``)."""
    inventory = f.tmp / "rulebook-inventory.yml"
    inventory.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": f.hosts}, "all": {"vars": variables["inventory"]}}))
    rulebook_vars = f.tmp / "rulebook-vars.yml"
    rulebook_vars.write_text(yaml.safe_dump(variables["rulebook"]))
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), ANSIBLE_NOCOLOR="1",
               K8S_AUTH_KUBECONFIG=os.path.join(f.cluster.workdir, "role.kubeconfig"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"))
    return subprocess.Popen([os.path.join(BIN, "ansible-rulebook"), "-i", str(inventory), "--rulebook", path,
                             "--vars", str(rulebook_vars), "--print-events"], cwd=str(f.tmp), env=env,
                            stdout=out, stderr=subprocess.STDOUT)


TOKEN = "kube-alerts-token-91c7"  # a test's token


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def alert(port, payload):
    """POST an Alertmanager webhook payload to the rulebook's alerts source, with the token; the HTTP status."""
    request = urllib.request.Request("http://127.0.0.1:%d/alerts" % port, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.status


@contextlib.contextmanager
def activation(f, variables, log, path=RULEBOOK):
    """ansible-rulebook running the rulebook for the block, from its startup event on (its output in ``log``); stopped
    after it (terminated)."""
    with open(str(log), "w") as out:
        proc = rulebook(f, variables, out, path)
        try:
            assert wait_text(log, "'kind': 'startup'", 120), log.read_text()[-3000:]
            yield proc
        finally:
            proc.terminate()
            proc.wait(60)


def node_vars(extra):
    """remediation_fleet's playbook variables as the inventory's (the rulebook gives the report's directory)."""
    return dict((k, v) for k, v in extra.items() if k != "gpu_remediation_report_dir")


def shipped(f, inventory, **rulebook):
    """The rulebook's variables for fleet ``f`` (its Nodes by their label) and the inventory's for its hosts."""
    return {"inventory": inventory, "rulebook": dict({"gpuops_events_label_selector": ",".join("%s=%s" % kv for kv in f.label.items())},
                                                     **rulebook)}


def runs(text):
    """How many playbook runs ansible-rulebook made: its output's PLAY RECAPs, less the failed runs' output it logs again
    as the error (run_playbook's _post_process logs the run's stdout when the run failed)."""
    return text.count("PLAY RECAP") - text.count("ansible_rulebook.action.run_playbook - ERROR")


def recap(text):
    """The hosts of the first run's PLAY RECAP."""
    lines = text[text.index("PLAY RECAP"):].splitlines()[1:]
    return sorted(line.split()[0] for line in lines[:64] if ": ok=" in line and not line.startswith("20"))


def wait_text(path, text, timeout, count=1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.read_text(errors="replace").count(text) >= count:
            return True
        time.sleep(0.2)
    return False


def step(f, node):
    """The remediation step ``node``'s record shows, or None."""
    return (node_state(f, node)[1] or {}).get("step")


def released(f, node):
    """``node``'s last ledger entry closed and the node's marks off (False where there is no ledger yet)."""
    try:
        entries = [e for e in ledger(f)["entries"] if e["node"] == node]
    except Exception:  # noqa: BLE001 (no ledger yet)
        return False
    return bool(entries) and bool(entries[-1].get("closed_at")) and node_state(f, node)[:2] == (False, None)


def test_a_withheld_gpu_runs_the_report_once_for_its_node_and_the_rulebook_as_shipped_changes_nothing(fleet, fake_lib_dir):
    f, name, plugin, dummy, extra = remediation_fleet(fleet, fake_lib_dir)
    log = f.tmp / "rulebook.log"
    token, port = f.tmp / "alerts-token", free_port()
    token.write_text(TOKEN)
    variables = shipped(f, node_vars(extra), gpuops_events_settle_seconds=1, gpuops_events_report_dir=str(f.tmp / "health-report"),
                        gpuops_alerts_enabled=True, gpuops_alerts_host="127.0.0.1", gpuops_alerts_port=port, gpuops_alerts_token_file=str(token))
    offset = f.cluster.audit_offset()
    with activation(f, variables, log):
        pod = [p for p in f.plugin_pods() if p.spec.node_name == name][0]
        faulted = time.monotonic()
        f.cluster.core.delete_namespaced_pod(pod.metadata.name, f.namespace)  # a's GPUs withheld
        # ... and its XID alert, through Alertmanager's webhook (its payload, its bearer token): the same window
        assert alert(port, {"alerts": [{"status": "firing", "labels": {"alertname": "GPUXidErrors", "Hostname": name, "xid": "79"},
                                        "annotations": {}, "startsAt": "2026-11-29T10:00:00Z", "fingerprint": "x79"}]}) == 202
        assert wait_text(log, "'kind': 'gpu_faults'", 60), log.read_text()[-3000:]
        assert wait_text(log, "PLAY RECAP", 300), log.read_text()[-3000:]
        seconds = time.monotonic() - faulted
        f.wait(lambda: f.allocatable(name) == len(f.nodes[0]["gpus"]), "the plugin back on a")  # gpu_restored: no run
        # a flaps: its GPUs withheld again within the flap window (600 s): said (gpu_faults_throttled), no second run
        pod = [p for p in f.plugin_pods() if p.spec.node_name == name][0]
        f.cluster.core.delete_namespaced_pod(pod.metadata.name, f.namespace)
        assert wait_text(log, "'kind': 'gpu_faults_throttled'", 60), log.read_text()[-3000:]
        time.sleep(3)
    text = log.read_text(errors="replace")
    assert runs(text) == 1, text[-4000:]
    assert recap(text) == sorted([name, "localhost"]), text[-4000:]  # limited to the faulted node and the controller
    assert "ansible_rulebook.action.run_playbook - ERROR" not in text, text[-4000:]
    # one window, node a alone: its withheld GPU (the Node watch) and its XID alert (Alertmanager) run once
    assert text.count("'kind': 'gpu_faults'") == 1 and "'nodes': ['%s']" % name in text
    assert text.count("'kind': 'gpu_alert'") == 1 and TOKEN not in text
    assert text.count("'kind': 'gpu_unallocatable'") == 2 and "'throttled': ['%s']" % name in text
    report = json.loads((f.tmp / "health-report" / "gpu-health.json").read_text())
    row = [r for r in report["plan"]["nodes"] if r["node"] == name][0]
    assert (row["action"], row["batch"]) == ("reset", 1)  # planned, and in report mode acted on by nothing
    calls = [c for c in f.cluster.audit_events(offset) if c["verb"] in WRITES]
    assert calls == [], [(c["verb"], c["objectRef"]) for c in calls]
    print("plugin pod deleted to the report run's end, through ansible-rulebook: %.1f s" % seconds)


def test_a_storm_of_20_nodes_is_one_run_whose_breaker_trips_and_touches_nothing_even_in_remediate_mode(fleet, fake_lib_dir):
    """20 SIMULATED nodes, each GPU's recovery action "reset" (the same signal, the same driver); their device plugin goes
    away within a second (its DaemonSet deleted): 20 gpu_unallocatable events, one gpu_faults window, one run of
    playbooks/gpu_remediation.yml in remediate mode for the 20 nodes; its plan's same-signal breaker trips (a fleet event)
    and nothing is evicted, cordoned or tainted."""
    uuids = ["GPU-%08x-5555-4555-8555-%012x" % (0x5a000000 + i, i) for i in range(20)]
    f = fleet([{"name": "s%02d" % i, "gpus": [uuid]} for i, uuid in enumerate(uuids)])
    for node in f.nodes:
        cfg = str(f.tmp / "nodes" / node["name"] / "fake_nvml.cfg")
        f.hosts[node["name"]].update(gpuops_node_name=node["name"], checkpoint_guard_checkpoint_path=node["checkpoint"],
                                     checkpoint_guard_environment=fakenode.environ(fake_lib_dir, cfg, base={}),
                                     gpuops_gpu_health_kernel_log="none")
        faulty(f, node["name"], "recovery|0|1")
    f.install_old_plugin()  # every node's GPU allocatable
    log = f.tmp / "rulebook.log"
    variables = shipped(f, {"gpuops_gpu_health_namespace": f.namespace, "gpu_remediation_device_plugin_namespace": f.namespace,
                            "gpu_remediation_drain_timeout": 30},
                        gpuops_events_settle_seconds=5, gpu_remediation_mode="remediate", gpuops_events_report_dir=str(f.tmp / "report"))
    offset = f.cluster.audit_offset()
    with activation(f, variables, log):
        f.cluster.apps.delete_namespaced_daemon_set("nvidia-device-plugin-daemonset", f.namespace)
        assert wait_text(log, "'kind': 'gpu_faults'", 60), log.read_text()[-3000:]
        assert wait_text(log, "PLAY RECAP", 600), log.read_text()[-3000:]
        time.sleep(8)  # a second window would have closed by now
    text = log.read_text(errors="replace")
    assert text.count("'kind': 'gpu_unallocatable'") == 20 and text.count("'kind': 'gpu_faults'") == 1, text[-3000:]
    assert runs(text) == 1, text[-4000:]  # (the run fails: the tripped breaker fails the plan's play)
    assert recap(text) == sorted([n["name"] for n in f.nodes] + ["localhost"]), text[-4000:]
    report = json.loads((f.tmp / "report" / "gpu-health.json").read_text())
    assert report["plan"]["breaker"]["state"] == "tripped" or report["plan"].get("refused"), report["plan"].get("breaker")
    assert sorted(set(r["deferred_reason"] for r in report["plan"]["nodes"])) == ["fleet_event"]
    touched = [(c["verb"], c["objectRef"].get("resource"), c["objectRef"].get("subresource"), c["objectRef"].get("name"))
               for c in f.cluster.audit_events(offset) if c["verb"] in WRITES and c["objectRef"].get("resource") in ("nodes", "pods")]
    assert touched == []  # no cordon, taint, annotation or eviction


def test_a_racks_reboots_are_one_checkpoint_run_and_a_second_reboot_within_the_window_none(fleet, fake_lib_dir):
    """extensions/eda/rulebooks/checkpoint_repair.yml as shipped: two of three SIMULATED nodes reboot (new boot IDs,
    NotReady, Ready again) within the window: one node_reboots event, one run of playbooks/site.yml limited to them and
    the controller, in its default mode (plan and report: no repair, no guard installed, nothing written to the cluster);
    a's second reboot within the flap window is throttled: no second run."""
    f = fleet([{"name": "a", "gpus": [G[0]]}, {"name": "b", "gpus": [OTHER[0]]}, {"name": "c", "gpus": [OTHER[1]]}])
    for node in f.nodes:
        cfg = str(f.tmp / "nodes" / node["name"] / "fake_nvml.cfg")
        root = f.tmp / "nodes" / node["name"]
        f.set_host_vars(node["name"], gpuops_node_name=node["name"], checkpoint_guard_checkpoint_path=node["checkpoint"],
                        checkpoint_guard_backup_dir=str(root / "backups"), checkpoint_guard_lock_dir=str(root / "run"),
                        checkpoint_guard_environment=fakenode.environ(fake_lib_dir, cfg, base={}))
    a, b = f.nodes[0], f.nodes[1]
    log = f.tmp / "rulebook.log"
    variables = shipped(f, {}, gpuops_events_settle_seconds=3, gpuops_events_report_dir=str(f.tmp / "report"))
    offset = f.cluster.audit_offset()
    with activation(f, variables, log, os.path.join(RULEBOOKS, "checkpoint_repair.yml")):
        for node in (a, b):
            open(node["reboot_request"], "w").close()  # the simulated kubelet reboots the node
        assert wait_text(log, "'kind': 'node_reboots'", 60), log.read_text()[-3000:]
        assert wait_text(log, "PLAY RECAP", 600), log.read_text()[-3000:]
        open(a["reboot_request"], "w").close()  # again, within the flap window
        assert wait_text(log, "'kind': 'node_reboots_throttled'", 60), log.read_text()[-3000:]
        time.sleep(3)
    text = log.read_text(errors="replace")
    assert text.count("'kind': 'node_rebooted'") == 3 and text.count("'kind': 'node_reboots'") == 1, text[-3000:]
    assert runs(text) == 1, text[-4000:]
    assert "ansible_rulebook.action.run_playbook - ERROR" not in text, text[-4000:]
    assert recap(text) == sorted([a["name"], b["name"], "localhost"]), text[-4000:]
    summary = json.loads((f.tmp / "report" / "fleet-summary.json").read_text())
    rows = summary["nodes"] if isinstance(summary, dict) else summary
    assert sorted(r["node"] for r in rows) == sorted([a["name"], b["name"]]), rows
    touched = [(c["verb"], c["objectRef"].get("resource"), c["objectRef"].get("name"))
               for c in f.cluster.audit_events(offset) if c["verb"] in WRITES and c["objectRef"].get("resource") in ("nodes", "pods")]
    assert touched == []
    for node in f.nodes:  # no guard installed, no checkpoint written
        assert not os.path.exists(os.path.join(str(f.tmp / "nodes" / node["name"] / "backups")))


def test_a_killed_activation_restarted_finds_the_gpus_withheld_while_it_was_down(fleet, fake_lib_dir):
    """gpu_health.yml's ansible-rulebook killed (SIGKILL), the device plugin gone while it is down (every node's GPUs
    withheld), the rulebook started again: its startup event names the three nodes, their window runs the report once for
    them, and nothing is written."""
    f, name, dummy, dummy2, extra = remediation_fleet(fleet, fake_lib_dir)
    variables = shipped(f, node_vars(extra), gpuops_events_settle_seconds=2, gpuops_events_report_dir=str(f.tmp / "report"))
    first, second = f.tmp / "rulebook-1.log", f.tmp / "rulebook-2.log"
    offset = f.cluster.audit_offset()
    with activation(f, variables, first) as proc:
        proc.kill()  # the activation dies at once: no shutdown of its own
        proc.wait(60)
    f.cluster.apps.delete_namespaced_daemon_set("nvidia-device-plugin-daemonset", f.namespace)
    f.wait(lambda: all(f.allocatable(n["name"]) == 0 for n in f.nodes), "every node's GPUs withheld")
    with activation(f, variables, second):
        assert wait_text(second, "PLAY RECAP", 300), second.read_text()[-3000:]
        time.sleep(4)
    text = second.read_text(errors="replace")
    nodes = sorted(n["name"] for n in f.nodes)
    assert runs(text) == 1 and recap(text) == sorted(nodes + ["localhost"]), text[-4000:]
    assert text.count("'kind': 'gpu_faults'") == 1 and "'kind': 'gpu_unallocatable'" not in text  # from the startup list
    at = text.index("'kind': 'startup'")
    startup = text[max(0, at - 2000):at + 2000]
    assert all("'node': '%s'" % n in startup for n in nodes), startup
    touched = [(c["verb"], c["objectRef"].get("resource"), c["objectRef"].get("name"))
               for c in f.cluster.audit_events(offset) if c["verb"] in WRITES and c["objectRef"].get("resource") in ("nodes", "pods")]
    assert touched == []


def test_the_main_story_in_remediate_mode_a_faulty_gpu_is_reset_and_its_node_released_through_the_rulebook(fleet, fake_lib_dir):
    """Issue 50's main story on the real API server (kubelet SIMULATED, its device plugin's health loop included): node a
    healthy, the rulebook running in remediate mode; an XID 79 with NVML's recovery action "reset" hits GPU 0; the plugin
    withholds it (allocatable 3 -> 2); the event runs playbooks/gpu_remediation.yml for a alone: only GPU 0's pod is
    evicted, the plugin paused, GPU 0 reset, the plugin back, the verification pod, the release; the other pods keep
    their UIDs. The seconds from the fault to the event, to the eviction and to the release go to
    out/kube-rulebook-remediation.json (figures, not asserted)."""
    f, name, dummy, uids, extra = remediation_fleet(fleet, fake_lib_dir)
    healthy(f, name)  # a is healthy when the rulebook starts
    pod0 = running(f, "on-gpu0")[0].metadata.name
    log = f.tmp / "rulebook.log"
    variables = shipped(f, node_vars(extra), gpuops_events_settle_seconds=2, gpu_remediation_mode="remediate",
                        gpuops_events_report_dir=str(f.tmp / "report"))
    seconds = {}

    def gone():
        pods = [p for p in f.cluster.core.list_namespaced_pod(f.namespace).items if p.metadata.name == pod0]
        return not pods or pods[0].metadata.deletion_timestamp is not None

    with activation(f, variables, log):
        faulted = time.monotonic()
        faulty(f, name, "recovery|0|1", "xid|0|79")
        assert wait_text(log, "'kind': 'gpu_unallocatable'", 60), log.read_text()[-3000:]
        seconds["fault to the event"] = time.monotonic() - faulted
        f.wait(gone, "GPU 0's pod evicted", timeout=180)
        seconds["fault to GPU 0's pod evicted"] = time.monotonic() - faulted
        f.wait(lambda: released(f, name), "a released", timeout=300)
        seconds["fault to the node released"] = time.monotonic() - faulted
        assert wait_text(log, "PLAY RECAP", 120), log.read_text()[-3000:]
        time.sleep(3)
    text = log.read_text(errors="replace")
    assert runs(text) == 1 and recap(text) == sorted([name, "localhost"]), text[-4000:]
    assert "ansible_rulebook.action.run_playbook - ERROR" not in text, text[-4000:]
    entry = ledger(f)["entries"][-1]
    assert (entry["node"], entry["result"], entry["gpus"]) == (name, "recovered", [G[0]]), entry
    assert "recovery|0|1" not in (f.tmp / "nodes" / name / "fake_nvml.cfg").read_text()  # reset: NVML's action cleared
    assert [running(f, app)[0].metadata.uid for app in ("on-gpu1", "on-gpu2")] == [uids["on-gpu1"], uids["on-gpu2"]]
    f.wait(lambda: f.allocatable(name) == len(G), "every GPU of a allocatable again")
    print("MAIN STORY (remediate, simulated kubelet): %s" % ", ".join("%s %.1f s" % kv for kv in seconds.items()))
    os.makedirs(os.path.join(ROOT, "out"), exist_ok=True)
    with open(os.path.join(ROOT, "out", "kube-rulebook-remediation.json"), "w") as handle:
        json.dump(dict((k, round(v, 1)) for k, v in seconds.items()), handle, indent=1)


def test_bad_rulebook_variables_stop_the_rulebook_naming_the_option_and_never_echo_the_token(tmp_path):
    """The shipped rulebook with a bad window (gpuops_events_settle_seconds "soon") or a short alerts token: the real
    ansible-rulebook ends at its start, its error naming the source's option; the token itself is never printed."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}))
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), K8S_AUTH_KUBECONFIG=str(tmp_path / "none"))
    for variables, option, secret in (({"gpuops_events_settle_seconds": "soon"}, "settle_seconds", None),
                                      ({"gpuops_alerts_enabled": True, "gpuops_alerts_token": "sh0rt-s3cret"}, "token", "sh0rt-s3cret")):
        path = tmp_path / "vars.yml"
        path.write_text(yaml.safe_dump(variables))
        proc = subprocess.run([os.path.join(BIN, "ansible-rulebook"), "-i", str(inventory), "--rulebook", RULEBOOK, "--vars", str(path)],
                              cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=180, check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "%s:" % option in out, out[-3000:]
        assert secret is None or secret not in out


def test_a_training_pods_remediation_finishes_on_its_own_when_the_pod_ends_with_no_scheduled_run(fleet, fake_lib_dir):
    """Issue 59's acceptance, through the real ansible-rulebook and no play of the test's own: GPU 0's pod is a training
    job's (its namespace's eviction mode allow_completion). The fault's run quarantines node a and stops at awaiting_pods
    (the pod runs on); when the pod ends, the event source offers the node again (remediation_due, pods_gone: from the
    ledger and the API's pods) and that run resets GPU 0 and releases the node. Two runs, no schedule, no person."""
    f, name, dummy, uids, extra = remediation_fleet(fleet, fake_lib_dir)
    healthy(f, name)
    pod0 = running(f, "on-gpu0")[0].metadata.name
    modes = [{"namespace": f.namespace, "mode": "allow_completion"}, {"namespace": "*", "mode": "immediate"}]
    log = f.tmp / "rulebook.log"
    # the remediation's namespace is the rulebook's too (the source reads the ledger there), as the inventory's
    variables = shipped(f, dict(node_vars(extra), gpuops_eviction_modes=modes), gpuops_events_settle_seconds=2, gpuops_events_due_seconds=2,
                        gpu_remediation_mode="remediate", gpuops_events_report_dir=str(f.tmp / "report"),
                        gpuops_gpu_health_namespace=f.namespace)

    with activation(f, variables, log):
        faulty(f, name, "recovery|0|1", "xid|0|79")
        f.wait(lambda: step(f, name) == "awaiting_pods", "a waiting for its training pod", timeout=180)
        assert wait_text(log, "PLAY RECAP", 120), log.read_text()[-3000:]
        time.sleep(5)  # nothing is due while the pod runs: no second run
        assert runs(log.read_text(errors="replace")) == 1 and running(f, "on-gpu0")[0].metadata.name == pod0
        f.cluster.core.delete_namespaced_pod(pod0, f.namespace)  # the training pod ends
        ended = time.monotonic()
        f.wait(lambda: released(f, name), "a released on its own", timeout=300)
        seconds = time.monotonic() - ended
        assert wait_text(log, "PLAY RECAP", 120, count=2), log.read_text()[-3000:]
        time.sleep(3)
    text = log.read_text(errors="replace")
    assert "'kind': 'remediation_due'" in text and "'why': 'pods_gone'" in text, text[-4000:]
    assert runs(text) == 2 and "ansible_rulebook.action.run_playbook - ERROR" not in text, text[-4000:]
    entry = ledger(f)["entries"][-1]
    assert (entry["node"], entry["result"], entry["gpus"]) == (name, "recovered", [G[0]]), entry
    assert "recovery|0|1" not in (f.tmp / "nodes" / name / "fake_nvml.cfg").read_text()  # reset: NVML's action cleared
    assert [running(f, app)[0].metadata.uid for app in ("on-gpu1", "on-gpu2")] == [uids["on-gpu1"], uids["on-gpu2"]]
    print("TRAINING STORY (rulebook, no scheduled run): the pod's end to the node released %.1f s" % seconds)


def test_a_second_nodes_fault_is_remediated_while_the_first_nodes_remediation_still_runs(fleet, fake_lib_dir):
    """Issue 59, item 3, through the real ansible-rulebook: the shipped gpu_health.yml runs its windows in parallel, so node
    b's fault, while node a's run still drains (a PodDisruptionBudget holds a's faulty GPU's pod: the drain waits up to
    gpu_remediation_drain_timeout), has b's pod evicted and b remediated meanwhile; with one run after the other
    (ansible-rulebook's default) b waited for a's whole run. Each run claims its node. The seconds from b's fault to b's
    pod evicted are printed (a figure, not asserted)."""
    from test_gpu_health_plan import pdb, pdb_status, replica_set  # pylint: disable=import-outside-toplevel

    f, name, dummy, uids, extra = remediation_fleet(fleet, fake_lib_dir)
    other = f.nodes[1]["name"]
    healthy(f, name)
    pdb(f, "hold-a-" + f.namespace[-6:], "on-gpu0", 1)
    f.wait(lambda: pdb_status(f, "hold-a-" + f.namespace[-6:]).get("disruptionsAllowed") == 0, "a's PDB holding")
    replica = "on-b-" + f.namespace[-6:]
    replica_set(f, replica, other, True)
    f.wait(lambda: running(f, replica), "b's GPU pod running")
    pod_b = running(f, replica)[0].metadata.name
    log = f.tmp / "rulebook.log"
    # two nodes with one signal are two unrelated faults here (the same-signal breaker's threshold above 2: its own tests
    # trip it), and the fleet's cap has room for both (10% of a 3-node fleet is one node)
    inventory = dict(node_vars(extra), gpuops_gpu_health_same_signal_nodes=5, gpuops_gpu_health_same_signal_percent=100,
                     gpuops_gpu_health_breaker_percent=100, gpu_remediation_drain_timeout=90)
    variables = shipped(f, inventory, gpuops_events_settle_seconds=2, gpu_remediation_mode="remediate",
                        gpuops_events_report_dir=str(f.tmp / "report"), gpuops_gpu_health_namespace=f.namespace)

    def evicted_b():
        pods = [p for p in f.cluster.core.list_namespaced_pod(f.namespace).items if p.metadata.name == pod_b]
        return not pods or pods[0].metadata.deletion_timestamp is not None

    with activation(f, variables, log):
        faulty(f, name, "recovery|0|1", "xid|0|79")
        f.wait(lambda: step(f, name) == "draining", "a draining (its PDB holds)", timeout=120)
        b_fault = time.monotonic()
        faulty(f, other, "recovery|0|1", "xid|0|79")
        f.wait(evicted_b, "b's pod evicted", timeout=180)
        seconds = time.monotonic() - b_fault
        a_then = step(f, name)
        f.wait(lambda: released(f, other), "b released", timeout=300)
    assert a_then == "draining", "a's run was no longer draining when b's pod was evicted (%s): the runs did not overlap" % a_then
    print("SECOND FAULT (rulebook, parallel windows): b's fault to b's pod evicted %.1f s, a's run still draining" % seconds)


def test_a_deadline_pod_is_evicted_when_its_time_comes_and_a_blocked_drain_is_retried_with_no_scheduled_run(fleet, fake_lib_dir):
    """Issue 59's acceptance, the two other waits, through the real ansible-rulebook and no play of the test's own. Node a:
    GPU 0's pod says ``delete_after_timeout:1`` (its annotation), so a's run quarantines a and waits at awaiting_pods; when
    the quarantine is a minute old the event source offers a again (remediation_due, deadline) and that run evicts the
    pod, resets GPU 0 and releases a. Node b: a PodDisruptionBudget holds its GPU pod, so b's run ends at drain_blocked
    (its drain timeout passed); the budget is then lifted, and the source offers b again a minute after the block
    (drain_retry), whose run drains, resets and releases b. Four runs, no schedule, no person."""
    from test_gpu_health_plan import pdb, pdb_status, pdbs, replica_set  # pylint: disable=import-outside-toplevel

    f, name, dummy, uids, extra = remediation_fleet(fleet, fake_lib_dir)
    other = f.nodes[1]["name"]
    healthy(f, name)
    pod0 = running(f, "on-gpu0")[0].metadata.name
    f.cluster.core.patch_namespaced_pod(pod0, f.namespace, {"metadata": {"annotations": {"gpuops.fleet/eviction-mode": "delete_after_timeout:1"}}})
    replica = "on-b-" + f.namespace[-6:]
    budget = "hold-b-" + f.namespace[-6:]
    replica_set(f, replica, other, True)
    f.wait(lambda: running(f, replica), "b's GPU pod running")
    pod_b = running(f, replica)[0].metadata.name
    pdb(f, budget, replica, 1)
    f.wait(lambda: pdb_status(f, budget).get("disruptionsAllowed") == 0, "b's PDB holding")
    log = f.tmp / "rulebook.log"
    # two faulty nodes with one signal are two unrelated faults here (the breakers' own tests trip them)
    inventory = dict(node_vars(extra), gpuops_gpu_health_same_signal_nodes=5, gpuops_gpu_health_same_signal_percent=100,
                     gpuops_gpu_health_breaker_percent=100, gpu_remediation_drain_timeout=15)
    variables = shipped(f, inventory, gpuops_events_settle_seconds=2, gpuops_events_due_seconds=2, gpu_remediation_mode="remediate",
                        gpuops_events_report_dir=str(f.tmp / "report"), gpuops_gpu_health_namespace=f.namespace)
    seconds = {}

    with activation(f, variables, log):
        faulty(f, name, "recovery|0|1", "xid|0|79")
        f.wait(lambda: step(f, name) == "awaiting_pods", "a waiting for its pod's deadline", timeout=180)
        assert running(f, "on-gpu0")[0].metadata.name == pod0
        faulty(f, other, "recovery|0|1", "xid|0|79")
        f.wait(lambda: step(f, other) == "drain_blocked", "b's drain blocked by its PDB", timeout=180)
        blocked = time.monotonic()
        assert [p.metadata.name for p in running(f, replica)] == [pod_b]
        pdbs(f).delete(name=budget, namespace=f.namespace)  # the budget allows it now; nothing else is done
        f.wait(lambda: released(f, name), "a released on its own once its pod's minute passed", timeout=300)
        opened = [e for e in ledger(f)["entries"] if e["node"] == name][-1]
        seconds["a: quarantine to release"] = opened["closed_at"] - opened["at"]
        f.wait(lambda: released(f, other), "b released on its own once its drain was retried", timeout=300)
        seconds["b: drain blocked to release"] = time.monotonic() - blocked
        time.sleep(3)
    text = log.read_text(errors="replace")
    assert "'why': 'deadline'" in text and "'why': 'drain_retry'" in text, text[-4000:]
    closed = dict((e["node"], e) for e in ledger(f)["entries"] if e["node"] in (name, other))
    assert (closed[name]["result"], closed[name]["gpus"]) == ("recovered", [G[0]]), closed[name]
    assert closed[name]["recover_seconds"] >= 60  # the pod was given its minute
    assert closed[other]["result"] == "recovered", closed[other]
    assert pod0 not in [p.metadata.name for p in running(f, "on-gpu0")] and pod_b not in [p.metadata.name for p in running(f, replica)]
    assert [running(f, app)[0].metadata.uid for app in ("on-gpu1", "on-gpu2")] == [uids["on-gpu1"], uids["on-gpu2"]]
    print("WAITS (rulebook, no scheduled run): %s" % ", ".join("%s %.1f s" % kv for kv in seconds.items()))
