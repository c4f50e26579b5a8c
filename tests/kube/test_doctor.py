# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 61, item 1: make demo-doctor's story (lab/doctor.py), on this session's control plane (--cluster: the one control
plane of the test session, left up): it prints each step with the seconds since the fault, in order, ends with the release
and the fleet page written, and leaves nothing of its own running (its simulated kubelet, its ansible-rulebook)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import kubefleet

STEPS = ["fault: XID 79", "device plugin: lab-gpu-a's GPU 0 unhealthy", "event: gpu_unallocatable for lab-gpu-a", "window closed: gpu_faults",
         "plan: lab-gpu-a's GPU health read", "remediation step: draining",
         "quarantine: evicted GPU 0's pod only", "reset: GPU 0 reset on lab-gpu-a", "verification: a pod asked", "released: lab-gpu-a uncordoned"]


def _running(marker):
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if marker in line and "ps -eo" not in line]


def test_the_doctor_prints_the_story_in_order_ends_released_with_the_page_and_leaves_nothing_running(cluster, tmp_path):
    out = tmp_path / "doctor"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, os.path.join(kubefleet.ROOT, "lab", "doctor.py"), "--cluster", cluster.workdir, "--out", str(out)],
                          capture_output=True, text=True, timeout=900, check=False)
    seconds = time.monotonic() - started
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    lines = text.splitlines()
    where = [next((i for i, line in enumerate(lines) if want in line), None) for want in STEPS]
    assert None not in where and where == sorted(where), list(zip(STEPS, where))
    assert "GPU 1's and GPU 2's pods keep running, their UIDs unchanged" in text
    assert "the fleet page: %s" % (out / "gpu-remediation.html") in text and "(NOT written)" not in text
    assert "done: the node was remediated and released; nothing left running." in text
    page = (out / "gpu-remediation.html").read_text()
    data = json.loads(page.split('id="fleet-data">', 1)[1].split("</script>", 1)[0])
    assert dict((n["node"], n["state"]) for n in data["nodes"])["lab-gpu-a"] == "released"
    assert not _running("gpuops-doctor-"), _running("gpuops-doctor-")  # its simulated kubelet and its ansible-rulebook are gone
    print("DOCTOR: the whole demo %.1f s on this session's control plane; its story:\n%s" % (
        seconds, "\n".join(line for line in lines if line[:8].strip().endswith("s") and line[:2] == "  ")))
