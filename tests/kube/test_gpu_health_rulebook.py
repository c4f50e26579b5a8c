# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""extensions/eda/rulebooks/gpu_health.yml run by the real ansible-rulebook (its rules engine on Java 17) against a real
kube-apiserver and a SIMULATED fleet: node a (GPU 0's recovery action says reset) beside healthy b and c, the device
plugin deployed. The device plugin's pod on a goes away (the simulated kubelet zeroes a's allocatable, as kubelet's
device manager does); the event source's gpu_faults event runs playbooks/gpu_remediation.yml once, limited to a and the
controller, in the rulebook's default mode, report: the plan names a for a reset, and nothing is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import yaml

import kubefleet
from test_gpu_quarantine import WRITES, remediation_fleet

ROOT = kubefleet.ROOT
BIN = os.path.dirname(sys.executable)
RULEBOOK = os.path.join(ROOT, "extensions", "eda", "rulebooks", "gpu_health.yml")


def rulebook(f, variables, out):
    """ansible-rulebook on the fleet's inventory (its hosts, and the remediation's settings as the inventory's), printing
    each event; returns the process (stdout and stderr to ``out``)."""
    inventory = f.tmp / "rulebook-inventory.yml"
    inventory.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": f.hosts}, "all": {"vars": variables["inventory"]}}))
    rulebook_vars = f.tmp / "rulebook-vars.yml"
    rulebook_vars.write_text(yaml.safe_dump(variables["rulebook"]))
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), ANSIBLE_NOCOLOR="1",
               K8S_AUTH_KUBECONFIG=os.path.join(f.cluster.workdir, "role.kubeconfig"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"))
    return subprocess.Popen([os.path.join(BIN, "ansible-rulebook"), "-i", str(inventory), "--rulebook", RULEBOOK,
                             "--vars", str(rulebook_vars), "--print-events"], cwd=str(f.tmp), env=env,
                            stdout=out, stderr=subprocess.STDOUT)


def wait_text(path, text, timeout, count=1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.read_text(errors="replace").count(text) >= count:
            return True
        time.sleep(0.2)
    return False


def test_a_withheld_gpu_runs_the_report_once_for_its_node_and_the_rulebook_as_shipped_changes_nothing(fleet, fake_lib_dir):
    f, name, plugin, dummy, extra = remediation_fleet(fleet, fake_lib_dir)
    log = f.tmp / "rulebook.log"
    variables = {"inventory": dict((k, v) for k, v in extra.items() if k != "gpu_remediation_report_dir"),
                 "rulebook": {"gpuops_events_label_selector": ",".join("%s=%s" % kv for kv in f.label.items()),
                              "gpuops_events_settle_seconds": 1, "gpuops_events_report_dir": str(f.tmp / "health-report")}}
    offset = f.cluster.audit_offset()
    with open(str(log), "w") as out:
        proc = rulebook(f, variables, out)
        try:
            assert wait_text(log, "'kind': 'startup'", 120), log.read_text()[-3000:]
            pod = [p for p in f.plugin_pods() if p.spec.node_name == name][0]
            faulted = time.monotonic()
            f.cluster.core.delete_namespaced_pod(pod.metadata.name, f.namespace)  # a's GPUs withheld
            assert wait_text(log, "'kind': 'gpu_faults'", 60), log.read_text()[-3000:]
            assert wait_text(log, "PLAY RECAP", 300), log.read_text()[-3000:]
            seconds = time.monotonic() - faulted
            f.wait(lambda: f.allocatable(name) == len(f.nodes[0]["gpus"]), "the plugin back on a")  # gpu_restored: no run
            time.sleep(3)
        finally:
            proc.terminate()
            proc.wait(60)
    text = log.read_text(errors="replace")
    assert text.count("PLAY RECAP") == 1, text[-4000:]
    recap = text[text.index("PLAY RECAP"):].splitlines()[1:]
    hosts = sorted(line.split()[0] for line in recap if ": ok=" in line)
    assert hosts == sorted([name, "localhost"]), recap  # limited to the faulted node and the controller
    assert " failed=0 " in " ".join(recap) + " " and "unreachable=0" in " ".join(recap), recap
    assert text.count("'kind': 'gpu_faults'") == 1 and "'nodes': ['%s']" % name in text  # one window, node a alone
    report = json.loads((f.tmp / "health-report" / "gpu-health.json").read_text())
    row = [r for r in report["plan"]["nodes"] if r["node"] == name][0]
    assert (row["action"], row["batch"]) == ("reset", 1)  # planned, and in report mode acted on by nothing
    calls = [c for c in f.cluster.audit_events(offset) if c["verb"] in WRITES]
    assert calls == [], [(c["verb"], c["objectRef"]) for c in calls]
    print("plugin pod deleted to the report run's end, through ansible-rulebook: %.1f s" % seconds)
