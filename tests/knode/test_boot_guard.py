# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The boot guard (``gpuops check``, as /usr/local/bin/gpuops runs it) against a REAL kubelet v1.20.2.

GPUs are SIMULATED (fake NVML, fake device plugin over kubelet's real API). Two GPUs: ``keeper``
runs on one, ``gone`` (bare) on the other, which is then replaced.

* At boot: the guard runs while kubelet is stopped (its unit is ordered before kubelet.service),
  prunes the file, and does not start kubelet itself; kubelet then starts and reads the repaired
  file: keeper keeps its GPU, the gone GPU is nowhere.
* Live, killed: the guard runs while kubelet runs, stops it, and is SIGKILLed at a step boundary
  (``GPUOPS_FAILPOINT``, see tests/unit/.../test_crash_safety.py). The file is whole, the rescue
  timer starts the real kubelet again within its bound, and the next run converges.
"""

from __future__ import annotations

import json
import os
import pathlib
import time

import realnode
from realnode import container_state, running, wait

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec
from ansible_collections.gpuops.fleet.plugins.module_utils._node import nodefile

A = "GPU-0a0a0a0a-1111-4111-8111-00000000000a"
B = "GPU-0b0b0b0b-2222-4222-8222-00000000000b"
NEW = "GPU-0b2b2b2b-4444-4444-8444-0000000000b2"
RESCUE_SECONDS = 2
CHECKPOINT = pathlib.Path(realnode.CHECKPOINT)


def guard(node, tmp, failpoint=None):
    config = tmp / "gpuops.json"
    config.write_text(json.dumps({
        "checkpoint_path": realnode.CHECKPOINT, "backup_dir": str(tmp / "backups"), "lock_dir": str(tmp / "run"),
        "strategy": "auto", "driver_wait_seconds": 0, "kubelet_rescue_seconds": RESCUE_SECONDS}))
    env = node.environ()
    if failpoint:
        env[nodefile.FAILPOINT_ENV] = failpoint
    return realnode.fakenode.run_guard("check", config, env, timeout=120)


finished = realnode.fakenode.finished


def two_pods_then_replace(node, ns):
    """keeper and gone Running, one GPU each; then kubelet and the plugin stopped and gone's GPU replaced."""
    node.namespace(ns)
    node.up([A, B])
    uids = {}
    for name in ("keeper", "gone"):
        node.create_pod(name, ns)
        pod = wait(lambda name=name: running(node, ns, name), name + " Running")
        uids[name] = pod.metadata.uid
    gpu_of = dict((name, node.allocations()[uid][0]) for name, uid in uids.items())
    node.kubelet_stop()
    node.plugin_stop()
    node.set_gpus([NEW if g == gpu_of["gone"] else g for g in (A, B)])
    return uids, gpu_of


def test_the_boot_guard_repairs_the_file_before_the_real_kubelet_reads_it(real_node, tmp_path):
    node, ns = real_node, "guard-boot"
    uids, gpu_of = two_pods_then_replace(node, ns)
    stale = CHECKPOINT.read_bytes()

    code, records, err = guard(node, tmp_path)
    assert code == 0, (records, err)
    done = finished(records)
    assert done["action"] == "pruned" and done["changed"], done
    assert not node.kubelet_running(), "the guard started kubelet: at boot systemd does, after the guard"
    repaired = codec.decode(CHECKPOINT.read_bytes())
    assert repaired.valid and [e.pod_uid for e in repaired.checkpoint.entries] == [uids["keeper"]]
    assert any((tmp_path / "backups" / n).read_bytes() == stale for n in os.listdir(tmp_path / "backups"))

    # systemd now starts kubelet (ordered after the guard), then kubelet starts the plugin's pod
    log_from = len(node.log())
    node.kubelet_start()
    node.plugin_start()
    node.wait_allocatable(2)
    # kubelet read the repaired file: keeper's entry, and nothing of the gone GPU. Waited for, not read once: the
    # device manager logs the entries it read ("Get checkpoint entry", pod_devices.go) after "Recovery completed",
    # and the node's allocatable count can still be the old kubelet's (a CI run read the log before that line)
    entry = "Get checkpoint entry: %s " % uids["keeper"]
    wait(lambda: entry in node.log()[log_from:], "kubelet's checkpoint read (%r in its log)" % entry, timeout=60)
    read = node.log()[log_from:]
    assert gpu_of["keeper"] in read[read.index(entry):].splitlines()[0], read[-3000:]
    assert gpu_of["gone"] not in read, "kubelet still saw the gone GPU"
    keeper = wait(lambda: running(node, ns, "keeper"), "keeper Running")
    assert container_state(keeper)[2] == 0 and keeper.metadata.uid == uids["keeper"]
    assert node.pod_resources()[(ns, "keeper", "cuda")] == {realnode.RESOURCE: [gpu_of["keeper"]]}
    assert gpu_of["gone"] not in json.dumps(node.checkpoint().registered)
    # a second run at the next boot changes nothing
    code, records, err = guard(node, tmp_path)
    assert code == 0 and not finished(records)["changed"], records


def test_a_live_repair_killed_with_the_real_kubelet_stopped(real_node, tmp_path):
    node, ns = real_node, "guard-killed"
    uids, gpu_of = two_pods_then_replace(node, ns)
    # the node as it came back: kubelet and the plugin running, the stale IDs in the file
    node.kubelet_start()
    node.plugin_start()
    node.wait_allocatable(2)
    before = CHECKPOINT.read_bytes()
    assert gpu_of["gone"] in before.decode()

    killed_at = time.monotonic()
    code, records, err = guard(node, tmp_path, failpoint="new_written")
    assert code == -9, "the guard was not killed: %s %s" % (records, err)
    assert not node.kubelet_running(), "killed after stopping kubelet: kubelet is down until the rescue"
    now = CHECKPOINT.read_bytes()
    assert now == before or codec.decode(now).valid, "the checkpoint is neither the old file nor a valid new one"
    # the rescue timer (armed before the stop) starts the real kubelet once the dead run's lock is free
    wait(node.kubelet_running, "kubelet started by the rescue", timeout=RESCUE_SECONDS + 30, interval=0.1)
    back = time.monotonic() - killed_at
    wait(node.ready, "the node Ready again")
    assert back < RESCUE_SECONDS + 30

    code, records, err = guard(node, tmp_path)
    assert code == 0, (records, err)
    done = finished(records)
    assert done["action"] == "pruned", done
    assert node.kubelet_running()
    assert [e.pod_uid for e in node.checkpoint().entries] == [uids["keeper"]]
    keeper = wait(lambda: running(node, ns, "keeper"), "keeper Running")
    assert keeper.metadata.uid == uids["keeper"]
    node.wait_allocatable(2)
    # the guard only queues kubelet's start (as at boot): its pod-resources socket comes a moment later
    listed = wait(node.pod_resources, "kubelet's pod-resources API")
    assert listed[(ns, "keeper", "cuda")] == {realnode.RESOURCE: [gpu_of["keeper"]]}
    code, records, err = guard(node, tmp_path)
    assert code == 0 and not finished(records)["changed"], records
