# Test stand-in for systemd-run on the lab's sysroot nodes: the one form gpuops.fleet uses,
# a transient timer (`systemd-run --unit=NAME --on-active=Ns ... -- COMMAND...`). It marks
# NAME.timer active in $GPUOPS_FAKE_SYSTEMD_DIR (the fake systemctl's state directory) and
# leaves a detached process that sleeps, then, unless `systemctl stop NAME.timer` came first,
# runs COMMAND as NAME.service (its PID in NAME.service.pid, so `systemctl stop NAME.service`
# kills it, as systemd would). Real timers on real systemd are tested by Molecule.
import json
import os
import subprocess
import sys
import time


def set_state(root, unit, value, verb):
    path = os.path.join(root, unit + ".state")
    with open(path + ".tmp", "w") as handle:
        handle.write(value + "\n")
    os.replace(path + ".tmp", path)
    with open(os.path.join(root, "journal.jsonl"), "a") as handle:
        handle.write(json.dumps({"time": time.time(), "unit": unit, "verb": verb, "state": value, "pid": os.getpid()}) + "\n")


def state(root, unit):
    try:
        with open(os.path.join(root, unit + ".state")) as handle:
            return handle.read().strip() or "inactive"
    except FileNotFoundError:
        return "inactive"


def fire(root, name, seconds, command):
    time.sleep(seconds)
    if state(root, name + ".timer") != "active":
        return 0  # stopped (disarmed) before it elapsed
    set_state(root, name + ".timer", "inactive", "elapse")
    set_state(root, name + ".service", "active", "timer")
    proc = subprocess.Popen(command, start_new_session=True)
    with open(os.path.join(root, name + ".service.pid"), "w") as handle:
        handle.write(str(proc.pid))
    proc.wait()
    os.unlink(os.path.join(root, name + ".service.pid"))
    set_state(root, name + ".service", "inactive", "exit")
    return 0


def main(argv):
    root = os.environ.get("GPUOPS_FAKE_SYSTEMD_DIR")
    if not root:
        sys.stderr.write("Failed to connect to bus: Host is down\n")
        return 1
    if argv and argv[0] == "--fire":  # the detached child
        return fire(root, argv[1], float(argv[2]), argv[3:])
    name, seconds = None, None
    rest = list(argv)
    while rest and rest[0].startswith("--"):
        arg = rest.pop(0)
        if arg == "--":
            break
        if arg.startswith("--unit="):
            name = arg.split("=", 1)[1]
        elif arg.startswith("--on-active="):
            seconds = float(arg.split("=", 1)[1].rstrip("s"))
    if not name or seconds is None or not rest:
        sys.stderr.write("fake systemd-run: only --unit=NAME --on-active=Ns -- COMMAND is modelled\n")
        return 1
    if state(root, name + ".timer") == "active":
        sys.stderr.write("Failed to start transient timer unit: Unit %s.timer already exists.\n" % name)
        return 1
    set_state(root, name + ".timer", "active", "systemd-run")
    subprocess.Popen([sys.executable, os.path.abspath(__file__), "--fire", name, str(seconds)] + rest,
                     start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sys.stdout.write("Running timer as unit: %s.timer\nWill run service as unit: %s.service\n" % (name, name))
    return 0


sys.exit(main(sys.argv[1:]))
