# Stand-in for kubelet in the Molecule scenarios (no kubelet in a test container): it logs,
# once, what a starting kubelet would find in its device checkpoint, then stays running.
import json
import signal

PATH = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
try:
    with open(PATH) as handle:
        doc = json.load(handle)
    state, registered = "present", doc["Data"]["RegisteredDevices"]
except FileNotFoundError:
    state, registered = "absent", None
except (ValueError, KeyError, TypeError) as exc:
    state, registered = "unreadable: %s" % exc, None
print(json.dumps({"msg": "kubelet stand-in started", "checkpoint": state, "registered": registered}), flush=True)
signal.pause()
