# Test stand-in for systemctl on the lab's sysroot nodes (no systemd runs there): the few
# verbs gpuops.fleet uses, with unit states in $GPUOPS_FAKE_SYSTEMD_DIR/<unit>.state and one
# JSON line per state change in $GPUOPS_FAKE_SYSTEMD_DIR/journal.jsonl (time, unit, verb,
# state), so the lab can show which kubelets were stopped and started, and when. Without
# that variable it answers as systemctl does on a host not booted with systemd. The real
# order against real systemd is tested by the Molecule scenarios. A file <unit>.fail holding
# a verb (e.g. "stop") makes that verb fail for the unit, as a hung or broken kubelet would; a
# file <unit>.delay holding seconds makes a start take that long.
# A file <unit>.command (JSON: {"start": argv, "start-no-block": argv, "stop": argv, "is-active":
# argv}) puts a real process behind the unit: the verbs run those commands (hack/kube-node.sh's
# kubelet-start/-stop/-status for the REAL kubelet node), is-active is "active" when its command
# exits 0, and the journal still gets a line per start and stop.
import json
import os
import subprocess
import sys
import time

RUNNING = ("active", "activating", "reloading", "deactivating")


def main(argv):
    root = os.environ.get("GPUOPS_FAKE_SYSTEMD_DIR")
    if not root:
        sys.stderr.write("System has not been booted with systemd as init system (PID 1). Can't operate.\nFailed to connect to bus: Host is down\n")
        return 1
    args = [a for a in argv if not a.startswith("-")]
    quiet = "--quiet" in argv or "-q" in argv
    verb, units = (args[0], args[1:]) if args else ("list-units", [])

    def state_path(unit):
        return os.path.join(root, unit + ".state")

    def commands(unit):
        try:
            with open(os.path.join(root, unit + ".command")) as handle:
                return json.load(handle)
        except FileNotFoundError:
            return None

    def state(unit):
        real = commands(unit)
        if real is not None:
            return "active" if subprocess.call(real["is-active"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0 else "inactive"
        try:
            with open(state_path(unit)) as handle:
                return handle.read().strip() or "inactive"
        except FileNotFoundError:
            return "inactive"

    def journal(unit, value):
        with open(os.path.join(root, "journal.jsonl"), "a") as handle:
            handle.write(json.dumps({"time": time.time(), "unit": unit, "verb": verb, "state": value, "pid": os.getpid()}) + "\n")

    def set_state(unit, value):
        with open(state_path(unit) + ".tmp", "w") as handle:
            handle.write(value + "\n")
        os.replace(state_path(unit) + ".tmp", state_path(unit))
        journal(unit, value)

    if verb == "is-active":
        states = [state(u) for u in units]
        if not quiet:
            sys.stdout.write("".join(s + "\n" for s in states))
        return 0 if states and all(s == "active" for s in states) else 3
    for unit in units:
        try:
            with open(os.path.join(root, unit + ".fail")) as handle:
                if handle.read().strip() == verb:
                    sys.stderr.write("Job for %s failed because the control process exited with error code.\n" % unit)
                    return 1
        except FileNotFoundError:
            pass
    behind = dict((unit, commands(unit)) for unit in units)
    if verb in ("start", "stop", "restart"):
        start = "start-no-block" if "--no-block" in argv else "start"
        steps = {"start": [start], "stop": ["stop"], "restart": ["stop", "start"]}[verb]
        for unit, real in behind.items():
            if real is not None:
                if any(subprocess.call(real[step], stdin=subprocess.DEVNULL) for step in steps):
                    sys.stderr.write("Job for %s failed because the control process exited with error code.\n" % unit)
                    return 1
                journal(unit, state(unit))
    units = [unit for unit in units if behind[unit] is None]
    if verb in ("start", "restart"):
        for unit in units:
            try:  # <unit>.delay: seconds a start takes (a real kubelet takes seconds), so stops of several nodes overlap
                with open(os.path.join(root, unit + ".delay")) as handle:
                    time.sleep(float(handle.read().strip() or 0))
            except (FileNotFoundError, ValueError):
                pass
            set_state(unit, "active")
        return 0
    if verb == "stop":
        for unit in units:
            pid_file = os.path.join(root, unit + ".pid")
            if os.path.exists(pid_file):  # a service of the fake systemd-run: stopping it kills it
                try:
                    with open(pid_file) as handle:
                        os.killpg(int(handle.read()), 15)
                except (OSError, ValueError):
                    pass
            if state(unit) in RUNNING:
                set_state(unit, "inactive")
        return 0
    if verb in ("daemon-reload", "enable", "disable", "show", "list-units"):
        return 0
    sys.stderr.write("Unknown command verb %s.\n" % verb)
    return 1


sys.exit(main(sys.argv[1:]))
