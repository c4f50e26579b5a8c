# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the small HTTP/1.1 server of the event source ``gpuops.fleet.alertmanager``, on
asyncio's streams (the standard library only), built for a port anyone on the network can reach before they show a token.

What a webhook receiver needs and nothing more: ``GET`` of its probes (``/healthz``, ``/readyz``) and ``POST <path>`` with ``Content-Length`` (what
Alertmanager's Go client sends for a JSON body), one request per connection (``Connection: close``). What it holds against a
peer that does not finish:

* **Deadlines.** The request line and headers must arrive within ``read_timeout`` seconds of the connection (at most
  ``MAX_HEAD`` bytes), the body within ``read_timeout`` more; a peer that is slower is closed. TLS handshakes have the same
  deadline (asyncio's ``ssl_handshake_timeout``).
* **A connection cap.** At most ``max_connections`` at once, far below a process's descriptors. At the cap, a new connection
  takes the place of the oldest one that has not yet sent its headers (no one has shown a token there), so 1,000 half-open
  connections never keep Alertmanager's notification out; where every connection has shown its headers, the new one is
  closed.
* **Logs that say nothing of a request.** No request line, header or body is ever logged (a malformed ``Authorization``
  line would carry its token), and a refusal or a timeout is counted and logged at most once per ``LOG_INTERVAL`` seconds, not
  per connection.

``handle(method, path, headers, body)`` (a coroutine) answers ``(status, text[, headers])``; ``authorize(headers)`` is asked
before the body is read, so an unauthenticated peer never makes the server read ``max_bytes``.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import digits

MAX_HEAD = 16384
LOG_INTERVAL = 60
REASONS = {200: "OK", 202: "Accepted", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           408: "Request Timeout", 411: "Length Required", 413: "Payload Too Large", 431: "Request Header Fields Too Large",
           500: "Internal Server Error", 503: "Service Unavailable"}
LOG = logging.getLogger("gpuops.fleet.alertmanager")


class _Tally:
    """What was refused or timed out, logged at most once per interval: the first at once, then what gathered in the
    interval with the next one after it (a flood is a line a minute, never one per connection)."""

    def __init__(self, log, clock, interval=LOG_INTERVAL):
        self.log, self.clock, self.interval = log, clock, interval
        self.counts, self.since = {}, None

    def add(self, what):
        self.counts[what] = self.counts.get(what, 0) + 1
        now = self.clock()
        if self.since is None or now - self.since >= self.interval:
            self.log.warning("the alerts receiver%s: %s", "" if self.since is None else " in the last %d s" % int(now - self.since),
                             ", ".join("%s: %d" % item for item in sorted(self.counts.items())))
            self.counts, self.since = {}, now


class Server:
    """The receiver; ``start(host, port, ssl)`` listens, ``close()`` stops and closes every connection."""

    def __init__(self, hook, paths, limits, log=LOG, clock=time.monotonic):
        """``hook``: its ``handle(method, path, headers, body)`` answers a request, its ``authorize(headers)`` says whether one
        may be read on; ``paths``: ``{path: (methods)}``; ``limits``: ``max_bytes`` of a body, ``read_timeout`` (seconds, 10)
        and ``max_connections`` (256)."""
        self.handle, self.authorize, self.paths = hook.handle, hook.authorize, paths
        self.max_bytes = limits["max_bytes"]
        self.read_timeout, self.max_connections = limits.get("read_timeout", 10.0), limits.get("max_connections", 256)
        self.clock = clock
        self.tally = _Tally(log, clock)
        self.open = {}  # writer -> {"at": monotonic, "headers": bool}
        self.server = None

    async def start(self, host, port, ssl=None):
        self.server = await asyncio.start_server(self._client, host, port, ssl=ssl, limit=MAX_HEAD,
                                                 ssl_handshake_timeout=self.read_timeout if ssl else None, backlog=128)
        return self.server.sockets[0].getsockname()[1]

    async def close(self):
        if self.server is not None:
            self.server.close()
        for writer in list(self.open):
            writer.close()
        if self.server is not None:
            await self.server.wait_closed()

    def _admit(self, writer):
        """Room for one more connection: the oldest of those that have not sent their headers gives its place at the cap."""
        if len(self.open) < self.max_connections:
            return True
        waiting = [(state["at"], id(w), w) for w, state in self.open.items() if not state["headers"]]
        if not waiting:
            self.tally.add("connections refused at the cap of %d" % self.max_connections)
            return False
        dummy, dummy2, oldest = min(waiting)
        self.open.pop(oldest, None)
        oldest.close()
        self.tally.add("half-open connections closed to make room at the cap of %d" % self.max_connections)
        return True

    async def _client(self, reader, writer):
        if not self._admit(writer):
            writer.close()
            return
        state = self.open[writer] = {"at": self.clock(), "headers": False}
        try:
            await self._serve(reader, writer, state)
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            pass  # the peer went away: nothing to answer, nothing to log
        except Exception:  # noqa: BLE001 (never a traceback of a request's data in the activation's log: counted, answered 500)
            self.tally.add("requests that failed in the receiver")
            await self._answer(writer, 500, "the receiver failed on this request")
        finally:
            self.open.pop(writer, None)
            writer.close()

    async def _serve(self, reader, writer, state):
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.read_timeout)
        except asyncio.TimeoutError:
            self.tally.add("connections that sent no headers within %g s" % self.read_timeout)
            return
        except asyncio.LimitOverrunError:
            await self._answer(writer, 431, "the request's headers are over %d bytes" % MAX_HEAD)
            return
        state["headers"] = True
        parsed = _parse_head(head)
        if parsed is None:
            self.tally.add("malformed requests")
            await self._answer(writer, 400, "a malformed request")
            return
        method, path, headers = parsed
        if path not in self.paths:
            await self._answer(writer, 404, "not found")
            return
        if method not in self.paths[path]:
            await self._answer(writer, 405, "method not allowed", {"Allow": ", ".join(self.paths[path])})
            return
        body = b""
        if method == "POST":
            if not self.authorize(headers):
                self.tally.add("requests without the token")
                await self._answer(writer, 401, "a bearer token is required", {"WWW-Authenticate": "Bearer"})
                return
            if "transfer-encoding" in headers:
                await self._answer(writer, 411, "send the body with Content-Length")
                return
            length = digits(headers.get("content-length"))
            if length is None:
                await self._answer(writer, 411, "Content-Length is required")
                return
            if length > self.max_bytes:
                await self._answer(writer, 413, "the body is over %d bytes" % self.max_bytes)
                return
            try:
                body = await asyncio.wait_for(reader.readexactly(length), self.read_timeout)
            except asyncio.TimeoutError:
                self.tally.add("requests whose body did not arrive within %g s" % self.read_timeout)
                await self._answer(writer, 408, "the body did not arrive in time")
                return
        answer = await self.handle(method, path, headers, body)
        await self._answer(writer, *answer)

    async def _answer(self, writer, status, text, headers=None):
        data = text.encode("utf-8", "replace")
        lines = ["HTTP/1.1 %d %s" % (status, REASONS.get(status, "")), "Content-Type: text/plain; charset=utf-8",
                 "Content-Length: %d" % len(data), "Connection: close"]
        lines += ["%s: %s" % item for item in sorted((headers or {}).items())]
        try:
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data)
            await asyncio.wait_for(writer.drain(), self.read_timeout)
        except (ConnectionError, OSError, asyncio.TimeoutError):
            pass


def _parse_head(head):
    """``(method, path, {lowercased name: value})`` of a request's head, or None where it is not HTTP/1.x as a client sends
    it: a header line without a colon, a name that is no token, a second Content-Length or Authorization, a control byte."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover (latin-1 decodes every byte)
        return None
    lines = text[:-4].split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0].isalpha() or not parts[1].startswith("/"):
        return None
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        name = name.strip().lower()
        if not sep or not name or any(not (c.isalnum() and c.isascii() or c in "-_") for c in name):
            return None
        value = value.strip()
        if any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in value):
            return None
        if name in headers and name in ("content-length", "authorization", "transfer-encoding", "host"):
            return None
        headers[name] = value
    return parts[0], parts[1].split("?", 1)[0], headers
