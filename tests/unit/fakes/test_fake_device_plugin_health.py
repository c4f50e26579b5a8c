# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fake device plugin's health loop on the fake NVML's XID events, through unmodified pynvml.

The real kubelet node (tests/knode/test_gpu_health_node.py) relies on both: an XID appended to the node's
fake-NVML config reaches the plugin's event set, and only a critical, non-application XID marks its GPU
Unhealthy. The loop runs in a child process, because the fake library is found by LD_LIBRARY_PATH at start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import fakenode

FAKES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "fakes")
A = "GPU-aaaaaaaa-1111-4111-8111-00000000000a"
B = "GPU-bbbbbbbb-2222-4222-8222-00000000000b"

# the child: start the loop, then append the events the parent passes, and report what the plugin would send
CHILD = r"""
import json, logging, sys, threading, time
logging.basicConfig(level=logging.INFO)
sys.path.insert(0, sys.argv[1])
import fake_device_plugin as plugin
import fakenode
config, uuids, events = sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
health, done = plugin.Health(), threading.Event()
loop = threading.Thread(target=plugin.health_loop, args=(health, uuids, done))
loop.start()
time.sleep(0.5)  # the event set exists: the events below happen after registration
fakenode.append_config(config, *events)
deadline = time.monotonic() + 10
while time.monotonic() < deadline and len(health.unhealthy) < int(sys.argv[5]):
    time.sleep(0.1)
time.sleep(1.5)  # time for a wrong extra event to land
done.set()
loop.join(10)
print(json.dumps({"unhealthy": sorted(health.unhealthy), "devices": [[d.ID, d.health] for d in health.devices(uuids)],
                  "generation": health.generation}))
"""


def run(env, config, events, expect):
    proc = subprocess.run([sys.executable, "-c", CHILD, FAKES, config, json.dumps([A, B]), json.dumps(events), str(expect)],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1]), proc.stderr


def test_a_critical_xid_marks_only_its_gpu_unhealthy(tmp_path, fake_lib_dir):
    # an XID written before the plugin started is history: the real library delivers only events after registration
    records = [fakenode.gpu(A, minor=0), fakenode.gpu(B, bus="00000000:00:08.0", minor=1), fakenode.xid(0, 79)]
    config = fakenode.write_config(str(tmp_path / "nvml.cfg"), records)
    env = fakenode.environ(fake_lib_dir, config)
    # 13 and 31 are application errors (upstream's ignored list); 48 (DBE) on GPU 1 is critical
    result, log = run(env, config, [fakenode.xid(1, 13), fakenode.xid(1, 31), fakenode.xid(1, 48)], expect=1)
    assert result["unhealthy"] == [B], log
    assert result["devices"] == [[A, "Healthy"], [B, "Unhealthy"]]
    assert result["generation"] == 1
    assert "XidCriticalError: Xid=48 on Device=%s" % B in log
    assert "skipping event type 0x8 data 13" in log and "skipping event type 0x8 data 31" in log


def test_only_application_xids_leave_every_gpu_healthy(tmp_path, fake_lib_dir):
    config = fakenode.write_config(str(tmp_path / "nvml.cfg"), [fakenode.gpu(A, minor=0), fakenode.gpu(B, bus="00000000:00:08.0", minor=1)])
    env = fakenode.environ(fake_lib_dir, config)
    result, log = run(env, config, [fakenode.xid(0, 43), fakenode.xid(1, 109)], expect=0)
    assert result["unhealthy"] == [], log
    assert result["generation"] == 0
