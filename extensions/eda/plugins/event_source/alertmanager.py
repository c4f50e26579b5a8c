# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpuops.fleet.alertmanager: an ansible-rulebook event source that receives Alertmanager's webhook notifications, with a
token, and turns the gpu_monitoring role's GPU alerts into GPU events of their node.

``ansible.eda.alertmanager`` is not installable here (Galaxy only, not on PyPI) and takes every request: it has no
authentication and puts the request's headers, an ``Authorization`` header included, into every event. This source:

- answers ``POST <path>`` (``/alerts``) only with ``Authorization: Bearer <token>`` (Alertmanager's ``http_config.authorization``;
  the token from ``token`` or ``token_file``, compared in constant time); any other request gets 401 and emits nothing;
  ``GET /healthz`` answers ``up`` (a probe, no data);
- holds a port anyone may reach (module_utils/_cluster/receiver.py): headers and body each within ``read_timeout`` seconds
  (10), at most ``max_connections`` (256) at once, a new one taking the place of the oldest that has not sent its headers;
  no request line, header or body is ever logged, and refusals are logged once a minute, not per connection;
- bounds a notification (``max_bytes``, 1 MiB; 1,000 alerts) and answers 400 to one that is not Alertmanager's payload;
- emits one ``gpu_alert`` event per alert (``gpuops``: alert, status, node, labels, fault, starts_at, fingerprint), never a
  header; ``meta.hosts`` is the alert's node (the first of ``node_labels`` it carries: ``node``, ``Hostname``,
  ``kubernetes_node``) and the controller, only where that is a GPU Node that the ruleset's ``gpuops.fleet.gpu_nodes``
  source knows (a label's value is the exporter's word, and dcgm-exporter's ``Hostname`` is written on the node itself: it
  never names a host the Node watch does not know, nor an Ansible pattern such as ``all``); another is ``unknown_node``,
  an event and never a fault;
- adds a firing alert of ``fault_alerts`` (GPUXidErrors, GPURecoveryActionRequired, GPURowRemapFailure, GPULost) to the
  ruleset's fault window, shared with ``gpuops.fleet.gpu_nodes``: ``gpu_faults`` once per ``settle_seconds`` window for all
  its nodes, each node at most once per ``flap_seconds`` (module_utils/_cluster/node_events.py FaultWindow);
- serves TLS with ``certfile`` and ``keyfile``.

Options: DOCUMENTATION below, as ansible.eda declares its sources' (the docs site's "Event sources" page is written
from it, hack/eda_docs.py); a bad option fails the source, naming it.

Example::

    sources:
      - gpuops.fleet.alertmanager:
          host: 0.0.0.0
          port: 5000
          token_file: /run/secrets/alertmanager-token
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
short_description: Alertmanager's webhook notifications of GPU alerts, with a token, as GPU events of their node
description:
  - "Answers C(POST) on O(path) only with C(Authorization: Bearer <token>) (Alertmanager's C(http_config.authorization); the
    token compared in constant time); any other request gets 401 and emits nothing; C(GET /healthz) answers C(up)."
  - Holds a port anyone may reach - headers and body each within O(read_timeout), at most O(max_connections) at once; no
    request line, header or body is ever logged; refusals are logged once a minute.
  - Emits one C(gpu_alert) event per alert (C(gpuops) - alert, status, node, labels, fault, starts_at, fingerprint), never a
    header. C(meta.hosts) is the alert's node (the first of O(node_labels) it carries) and the controller, only where that
    is a GPU Node that the ruleset's M(gpuops.fleet.gpu_nodes) source knows; another is C(unknown_node), an event and never
    a fault.
  - A firing alert of O(fault_alerts) joins the ruleset's fault window shared with M(gpuops.fleet.gpu_nodes) (one
    C(gpu_faults) per O(settle_seconds), each node at most once per O(flap_seconds)).
  - A bad option fails the source, naming it; the token never appears in a message.
options:
  host:
    description: The address to listen on (C(0.0.0.0) in an EDA controller activation).
    type: str
    default: 127.0.0.1
  port:
    description: The port to listen on.
    type: int
    default: 5000
  path:
    description: The URL path Alertmanager posts to.
    type: str
    default: /alerts
  token:
    description: The bearer token Alertmanager sends (at least 16 characters); give O(token) or O(token_file).
    type: str
  token_file:
    description: An absolute path of a file that holds the token.
    type: str
  node_labels:
    description: The alert labels that name its node, the first found wins (a comma-separated string too).
    type: list
    elements: str
    default: [node, Hostname, kubernetes_node]
  fault_alerts:
    description: The alerts that are GPU faults (the others are events only).
    type: list
    elements: str
    default: [GPUXidErrors, GPURecoveryActionRequired, GPURowRemapFailure, GPULost]
  max_bytes:
    description: The largest notification body, in bytes (1024 to 67108864).
    type: int
    default: 1048576
  read_timeout:
    description: Seconds a request's headers, then its body, may take (1 to 300).
    type: int
    default: 10
  max_connections:
    description: Connections held at once (8 to 4096); a new one takes the place of the oldest that has not sent its headers.
    type: int
    default: 256
  certfile:
    description: An absolute path of the TLS certificate (with O(keyfile)).
    type: str
  keyfile:
    description: An absolute path of the TLS key (with O(certfile)).
    type: str
  settle_seconds:
    description: As M(gpuops.fleet.gpu_nodes)'s (the ruleset's sources share it).
    type: int
    default: 5
  flap_seconds:
    description: As M(gpuops.fleet.gpu_nodes)'s.
    type: int
    default: 600
  retry_max_seconds:
    description: As M(gpuops.fleet.gpu_nodes)'s.
    type: int
    default: 3600
  enabled:
    description: False, the source waits and emits nothing (a rulebook may carry it switched off).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: GPU alerts and the Node watch in one ruleset (one fault window)
  hosts: all
  sources:
    - gpuops.fleet.gpu_nodes:
        label_selector: nvidia.com/gpu.present=true
    - gpuops.fleet.alertmanager:
        host: 0.0.0.0
        port: 5000
        token_file: /run/secrets/alertmanager-token
  rules:
    - name: Remediate the faulty GPU nodes
      condition: event.gpuops.kind == "gpu_faults"
      action:
        run_playbook:
          name: gpuops.fleet.gpu_remediation
"""

import asyncio
import json
import os
import ssl
import sys
import time


def _import():
    """The collection's code: from the installed collections, else from the tree this file is in (ansible-rulebook loads
    a source by its path: the folder that holds ansible_collections/ is seven folders above this file's)."""
    try:
        from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import alerts, node_events, receiver
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.abspath(os.path.join(here, *[os.pardir] * 7)))
        from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import alerts, node_events, receiver
    return alerts, node_events, receiver


alerts, node_events, http = _import()


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read(4096)


class Receiver:
    """The webhook's answers and the window's flushing, around ``emit`` (an async put on the queue); served by
    module_utils/_cluster/receiver.py (deadlines, a connection cap, logs that never hold a request)."""

    def __init__(self, options, emit, window, clock=time.monotonic):
        self.options, self.emit, self.window, self.clock = options, emit, window, clock
        self.wake = asyncio.Event()

    def authorize(self, headers):
        return alerts.authorized(headers.get("authorization"), self.options["token"])

    async def handle(self, method, path, headers, body):
        if method == "GET":
            return 200, "up"
        try:
            payload = json.loads(body)
            found = alerts.events(payload, self.options, _now(), known=self.window.known)
        except (ValueError, RecursionError, alerts.PayloadError) as exc:
            return 400, str(exc) if isinstance(exc, alerts.PayloadError) else "not JSON"
        for event in found:
            await self.emit(event)
            self.window.alert(event)  # a firing fault alert keeps its node offered again until it is resolved
            if event["gpuops"]["fault"]:
                self.window.add(event, self.clock())
                self.wake.set()
        return 202, "received %d alerts" % len(found)

    async def flushing(self):
        """Close the window when it is due (the Node watch closes it too: whichever comes first emits it, once)."""
        while True:
            due = self.window.due()
            try:
                await asyncio.wait_for(self.wake.wait(), None if due is None else max(0.0, due - self.clock()) + 0.05)
            except asyncio.TimeoutError:
                pass
            self.wake.clear()
            batch = self.window.flush(self.clock(), _now())
            if batch:
                await self.emit(batch)


def _tls(options):
    if not options["certfile"]:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(options["certfile"], options["keyfile"])
    except (OSError, ssl.SSLError) as exc:
        raise alerts.ParameterError("certfile", "cannot load the certificate and key: %s" % exc) from None
    return context


async def serve(options, emit, window, ready=None):
    """Serve until cancelled; ``ready(port)`` is called once listening (tests give port 0)."""
    receiver = Receiver(options, emit, window)
    server = http.Server(receiver.handle, receiver.authorize, {"/healthz": ("GET",), options["path"]: ("POST",)}, options["max_bytes"],
                         read_timeout=options["read_timeout"], max_connections=options["max_connections"])
    port = await server.start(options["host"], options["port"], _tls(options))
    if ready is not None:
        ready(port)
    try:
        await receiver.flushing()
    finally:
        await server.close()


async def main(queue, args):
    """ansible-rulebook's entry point."""
    options = alerts.check_options(args, read=_read)
    if not options["enabled"]:
        await asyncio.Event().wait()  # switched off: a source that returned would end the rulebook
        return
    window = node_events.shared(queue, options["settle_seconds"], options["flap_seconds"], options["retry_max_seconds"])
    await serve(options, queue.put, window)


if __name__ == "__main__":
    # a quick look without ansible-rulebook: print the events (GPUOPS_ALERTS_TOKEN=... python alertmanager.py)

    class _Print:
        async def put(self, event):
            print(event, flush=True)

    asyncio.run(main(_Print(), {"token": os.environ.get("GPUOPS_ALERTS_TOKEN")}))
