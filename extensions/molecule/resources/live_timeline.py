# Run on the Molecule node by replaced_gpu_live's verify: the order of events around the
# runtime repair, from systemd's journal of kubelet.service (the stand-in's own lines and
# systemd's stop/start lines, with journald's timestamps) and the backup file written right
# before the repair. Prints one JSON object.
# Times are the sources' own: the stand-in's "t" and systemd's _SOURCE_REALTIME_TIMESTAMP.
# journald's __REALTIME_TIMESTAMP is when journald read the line, which under load can be
# after the repair for a line written before it (CI saw the order checks fail that way).
# The repair's time is the one in the backup's name (time.time() when the module wrote it,
# _node.nodefile.backup_name), not the file's mtime: the kernel stamps files from its coarse
# clock, measured up to 10 ms off time.time() on this project's machines.
import calendar
import glob
import json
import os
import re
import subprocess
import time

out = subprocess.run(["journalctl", "--no-pager", "-o", "json", "-u", "kubelet.service"], capture_output=True, text=True, check=True).stdout
entries = [json.loads(line) for line in out.splitlines() if line.strip()]
standin, systemd = [], []
for e in entries:
    t = int(e.get("_SOURCE_REALTIME_TIMESTAMP") or e["__REALTIME_TIMESTAMP"]) / 1e6
    message = e.get("MESSAGE")
    if isinstance(message, list):  # journald sends non-UTF-8 messages as byte arrays
        message = bytes(message).decode("utf-8", "replace")
    if e.get("SYSLOG_IDENTIFIER") == "kubelet":
        record = json.loads(message)
        record.setdefault("t", t)
        record["pid"] = int(e.get("_PID", 0))
        standin.append(record)
    elif e.get("SYSLOG_IDENTIFIER") == "systemd":
        systemd.append({"t": t, "msg": message})
backups = sorted(glob.glob("/var/lib/gpuops/backups/kubelet_internal_checkpoint.*"))
starts = [r for r in standin if r["msg"] == "kubelet stand-in started"]


def named_time(path):
    """kubelet_internal_checkpoint.20261123T190703.813032Z -> seconds since the epoch."""
    match = re.search(r"\.(\d{8}T\d{6})\.(\d{6})Z(?:\.\d+)?$", path)
    return calendar.timegm(time.strptime(match.group(1), "%Y%m%dT%H%M%S")) + int(match.group(2)) / 1e6


repair_t = named_time(backups[-1]) if backups else None
stopping = [s["t"] for s in systemd if s["msg"].startswith("Stopping kubelet")]
started = [s["t"] for s in systemd if s["msg"].startswith("Started kubelet")]
writes = [r for r in standin if r["msg"] == "kubelet stand-in wrote its checkpoint"]
result = {
    "starts": starts,
    "backups": backups,
    "repair_t": repair_t,
    "writes_total": len(writes),
    "writes_before_repair_by_first": len([w for w in writes if starts and w["pid"] == starts[0]["pid"] and repair_t and w["t"] < repair_t]),
    "writes_between_repair_and_restart": [w for w in writes if repair_t and len(starts) > 1 and repair_t <= w["t"] <= starts[1]["t"]],
    "writes_by_first_after_repair": [w for w in writes if starts and repair_t and w["pid"] == starts[0]["pid"] and w["t"] >= repair_t],
    "stopping_t": stopping,
    "started_t": started,
}
if stopping and repair_t and len(starts) > 1:
    # every time the order check compares, relative to systemd's 'Stopping', for the log
    t0 = stopping[0]
    result["order"] = {
        "stopping": 0.0,
        "last_write_by_first": round(max([w["t"] for w in writes if w["pid"] == starts[0]["pid"]] or [t0]) - t0, 6),
        "repair": round(repair_t - t0, 6),
        "backup_mtime": round(os.stat(backups[-1]).st_mtime - t0, 6),
        "second_start": round(starts[1]["t"] - t0, 6),
        "started": [round(s - t0, 6) for s in started],
    }
if stopping and len(started) > 1:
    result["down_ms"] = round((started[-1] - stopping[-1]) * 1000, 1)
print(json.dumps(result))
