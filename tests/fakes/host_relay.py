# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for PID 1's side of ``systemctl``: named commands run in the HOST's context.

    python host_relay.py serve SOCKET COMMANDS_JSON   # {"name": [argv], ...}; runs until SIGTERM
    python host_relay.py call SOCKET NAME             # prints the command's output, exits with its rc

On a real node ``systemctl start kubelet`` asks systemd over a socket, and systemd starts the unit
in its own context (cgroup, namespaces, capabilities), whoever asked. The test rig's fake
``systemctl`` runs the unit's commands itself, which is the same thing while it runs on the host;
through ``gpuops.fleet.k8s_node`` it runs in a node pod (chrooted to the host, but in the pod's
cgroup, network namespace and capability set), and a kubelet started from there dies (no
``/dev/kmsg``, the pod's network). The rig's unit commands therefore ``call`` this relay, which the
test starts on the host: what the relay runs is the node's, as with systemd. Only the names in
COMMANDS_JSON run; a caller sends a name, never a command line.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys


def serve(path, commands_file):
    with open(commands_file) as handle:
        commands = json.load(handle)
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o600)
    server.listen(4)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    try:
        while True:
            conn, dummy = server.accept()
            with conn:
                name = conn.makefile("r").readline().strip()
                if name not in commands:
                    reply = {"rc": 2, "output": "host_relay: no command %r (known: %s)\n" % (name, ", ".join(sorted(commands)))}
                else:
                    proc = subprocess.run(commands[name], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600, check=False)
                    reply = {"rc": proc.returncode, "output": proc.stdout + proc.stderr}
                conn.sendall((json.dumps(reply) + "\n").encode())
    finally:
        server.close()
        if os.path.exists(path):
            os.unlink(path)


def call(path, name):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(660)
        conn.connect(path)
        conn.sendall((name + "\n").encode())
        reply = json.loads(conn.makefile("r").readline())
    sys.stdout.write(reply["output"])
    return reply["rc"]


def main(argv):
    if len(argv) == 3 and argv[0] == "serve":
        serve(argv[1], argv[2])
        return 0
    if len(argv) == 3 and argv[0] == "call":
        return call(argv[1], argv[2])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
