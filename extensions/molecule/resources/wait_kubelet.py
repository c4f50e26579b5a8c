# Waits (at most argv[1] seconds) for kubelet.service to be active again after a run was killed
# while kubelet was stopped, then prints what systemd saw, as JSON: how long we waited, the
# kubelet's stop and start times (systemd's own stamps) and the rescue timer's units.
import json
import subprocess
import sys
import time

bound = float(sys.argv[1])
began = time.time()
state = ""
while time.time() - began < bound:
    state = subprocess.run(["systemctl", "is-active", "kubelet.service"], capture_output=True, text=True, check=False).stdout.strip()
    if state == "active":
        break
    time.sleep(0.1)
waited = time.time() - began


def journal(*args):
    out = subprocess.run(["journalctl", "-o", "json", "--no-pager"] + list(args), capture_output=True, text=True, check=False).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


events = [
    {"t": int(r.get("_SOURCE_REALTIME_TIMESTAMP") or r["__REALTIME_TIMESTAMP"]) / 1e6, "msg": r.get("MESSAGE"), "unit": r.get("UNIT") or r.get("_SYSTEMD_UNIT")}
    for r in journal("_PID=1")
    if str(r.get("UNIT", "")).startswith(("kubelet.service", "gpuops-rescue-")) and isinstance(r.get("MESSAGE"), str)
]
stopped = [e["t"] for e in events if e["unit"] == "kubelet.service" and e["msg"].startswith("Stopped")]
started = [e["t"] for e in events if e["unit"] == "kubelet.service" and e["msg"].startswith("Started")]
last_stop = stopped[-1] if stopped else None
restart = [t for t in started if last_stop is not None and t > last_stop]
units = subprocess.run(["systemctl", "list-units", "--all", "--plain", "--no-legend", "gpuops-rescue-*"], capture_output=True, text=True, check=False).stdout
print(json.dumps({
    "state": state,
    "waited_s": round(waited, 3),
    "down_s": round(restart[0] - last_stop, 3) if restart else None,
    "rescue_events": [e["msg"] for e in events if str(e["unit"]).startswith("gpuops-rescue-")],
    "rescue_units_now": [line.split()[0] for line in units.splitlines() if line.strip()],
}))
