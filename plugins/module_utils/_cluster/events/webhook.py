# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: Alertmanager's webhook, served: the receiver's answers (``Receiver``: only the
bearer token gets in, each alert an event, a fault alert into the fault window), the window's flushing, and ``serve``, which
runs it on ``receiver.py``'s HTTP server. The source ``gpuops.fleet.gpu_nodes`` runs it beside its Node watch with its own
window (its ``alertmanager`` option); the source ``gpuops.fleet.alertmanager`` runs it alone."""

from __future__ import annotations

import asyncio
import json
import ssl
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import alerts, options as settings, receiver
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError


HEALTH, READY = settings.PROBES
WAITING = "the Node watch has not listed the GPU Nodes yet: send it again"


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def read(path):
    """A token file's text (its first 4 KiB)."""
    with open(path, encoding="utf-8") as handle:
        return handle.read(4096)


class Receiver:
    """The webhook's answers and the window's flushing, around ``emit`` (an async put on the queue); served by
    receiver.py (deadlines, a connection cap, logs that never hold a request)."""

    def __init__(self, options, emit, window, clock=time.monotonic):
        self.options, self.emit, self.window, self.clock = options, emit, window, clock
        self.wake = asyncio.Event()

    def authorize(self, headers):
        return alerts.authorized(headers.get("authorization"), self.options["token"])

    async def handle(self, method, path, headers, body):
        if method == "GET":
            if path == READY:
                return (200, "ready") if self.window.ready() else (503, WAITING)
            return 200, "up"
        if not self.window.ready():
            # before the Node watch's first list every node would be unknown, its fault lost until Alertmanager's
            # repeat_interval: a 5xx is one Alertmanager retries (notify/util.go, Retrier.Check)
            return 503, WAITING
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
        raise ParameterError("certfile", "cannot load the certificate and key: %s" % exc) from None
    return context


async def serve(options, emit, window, ready=None):
    """Serve until cancelled; ``ready(port)`` is called once listening (tests give port 0)."""
    hook = Receiver(options, emit, window)
    server = receiver.Server(hook, {HEALTH: ("GET",), READY: ("GET",), options["path"]: ("POST",)},
                             dict((k, options[k]) for k in ("max_bytes", "read_timeout", "max_connections")))
    port = await server.start(options["host"], options["port"], _tls(options))
    if ready is not None:
        ready(port)
    try:
        await hook.flushing()
    finally:
        await server.close()
