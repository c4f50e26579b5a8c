# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Prometheus test rig (tests and benchmarks/gpu_memory_report.py): loopback exposition servers,
the gpu_monitoring role's render step through ansible-playbook, a Prometheus process."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, ".venv", "bin")
COLLECTIONS = os.path.join(ROOT, "build", "collections")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Exposition:
    """A loopback HTTP server answering /metrics with a text the test sets."""

    def __init__(self, text):
        self.text = text
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                body = owner.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = "127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def render_role(tmp_path, **values):
    play = tmp_path / "render.yml"
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "gpuops.fleet.gpu_monitoring", "tasks_from": "render"}}]}]))
    values = dict(values, gpu_monitoring_render_dir=str(tmp_path / "rendered"), ansible_python_interpreter=sys.executable)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e", json.dumps(values), str(play)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return tmp_path / "rendered"


def start_prometheus(tmp, config, web_config=None, ready=None, extra=()):
    """Debian's prometheus on a free loopback port; returns (process, port, log). ``ready(port)`` polls until it answers;
    ``extra``: more flags."""
    port = free_port()
    log = open(str(tmp / "prometheus.log"), "w")  # noqa: SIM115 (returned to the caller, who closes it)
    args = ["prometheus", "--config.file=%s" % config, "--storage.tsdb.path=%s" % (tmp / "data"), "--web.listen-address=127.0.0.1:%d" % port]
    if web_config:
        args.append("--web.config.file=%s" % web_config)
    args.extend(extra)
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            if ready:
                ready(port)
            else:
                urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % port, timeout=2).read()
            return process, port, log
        except OSError:
            if time.monotonic() > deadline:
                process.terminate()
                raise AssertionError((tmp / "prometheus.log").read_text()[-3000:]) from None
            time.sleep(0.2)
