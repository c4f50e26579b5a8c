# Test stand-in for journalctl: `journalctl -k -b -o json [--no-pager]` prints this boot's kernel messages as
# journald's JSON export does (one object per line: MESSAGE, __MONOTONIC_TIMESTAMP, __REALTIME_TIMESTAMP,
# SYSLOG_FACILITY, _TRANSPORT, _BOOT_ID), from $GPUOPS_FAKE_JOURNAL: a file of /dev/kmsg records
# (<prio>,<seq>,<usec>,<flags>;<text>), each one message; a record's facility (prio >> 3) becomes SYSLOG_FACILITY,
# so a line a process wrote (facility 1) reads as journald would record it. A MESSAGE that is not UTF-8 is a list
# of bytes, as journald writes it. Other arguments: journalctl's usage error (exit 1). Without the variable:
# "No journal files were found." and exit 1, as on a host whose journal is not persistent.
import json
import os
import sys


def main(argv):
    if [a for a in argv if a != "--no-pager"] != ["-k", "-b", "-o", "json"]:
        sys.stderr.write("fake journalctl: only -k -b -o json is simulated, got %r\n" % (argv,))
        return 1
    path = os.environ.get("GPUOPS_FAKE_JOURNAL")
    if not path or not os.path.exists(path):
        sys.stderr.write("No journal files were found.\n")
        return 1
    with open(path, "rb") as handle:
        data = handle.read()
    out = sys.stdout
    for raw in data.split(b"\n"):
        head, sep, body = raw.partition(b";")
        if not sep:
            continue
        parts = head.split(b",")
        try:
            prio, usec = int(parts[0]), int(parts[2])
        except (ValueError, IndexError):
            continue
        try:
            message = body.decode("utf-8")
        except UnicodeDecodeError:
            message = list(body)
        out.write(json.dumps({"MESSAGE": message, "__MONOTONIC_TIMESTAMP": str(usec), "__REALTIME_TIMESTAMP": str(1800000000000000 + usec),
                              "SYSLOG_FACILITY": str(prio >> 3), "PRIORITY": str(prio & 7), "_TRANSPORT": "kernel",
                              "_BOOT_ID": "0" * 32}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
