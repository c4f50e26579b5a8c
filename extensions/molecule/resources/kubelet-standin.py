# Stand-in for kubelet in the Molecule scenarios (no kubelet in a test container): it logs,
# once, what a starting kubelet would find in its device checkpoint, then stays running.
# With KUBELET_STANDIN_WRITE_SECONDS set (replaced_gpu_live), it also behaves as kubelet's
# device manager does with allocations changing: it writes the checkpoint it read at start
# (its "memory") back over the file every that many seconds, atomically (temp + rename),
# logging each write, so a repair done under it would be undone and the journal would show it.
# Each line carries its own wall time ("t"): journald stamps stdout lines when it reads them,
# which on a loaded machine can be after the process is gone and the repair is done.
import hashlib
import json
import os
import signal
import time

STARTED = time.time()
PATH = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
raw = None
try:
    with open(PATH, "rb") as handle:
        raw = handle.read()
    doc = json.loads(raw)
    state, registered = "present", doc["Data"]["RegisteredDevices"]
    entries = dict(
        (e["PodUID"], hashlib.sha256(json.dumps(e, sort_keys=True).encode()).hexdigest()) for e in doc["Data"].get("PodDeviceEntries") or ()
    )
except FileNotFoundError:
    state, registered, entries = "absent", None, {}
except (ValueError, KeyError, TypeError) as exc:
    state, registered, entries = "unreadable: %s" % exc, None, {}
print(json.dumps({"msg": "kubelet stand-in started", "t": STARTED, "checkpoint": state, "registered": registered, "entries": entries}), flush=True)

interval = float(os.environ.get("KUBELET_STANDIN_WRITE_SECONDS") or 0)
if interval <= 0 or raw is None:
    signal.pause()
seq = 0
while True:
    time.sleep(interval)
    seq += 1
    with open(PATH + ".standin-tmp", "wb") as handle:
        handle.write(raw)
        handle.flush()
        os.fsync(handle.fileno())
    os.rename(PATH + ".standin-tmp", PATH)
    print(json.dumps({"msg": "kubelet stand-in wrote its checkpoint", "t": time.time(), "seq": seq, "pods": sorted(entries)}), flush=True)
