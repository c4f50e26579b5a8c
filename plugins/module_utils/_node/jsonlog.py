# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the node command's JSON-line log.

One JSON object per line (``level``, ``msg``, ``time``, ``event``, then indexable
fields) to stdout, i.e. the journal. A log that cannot be written (stdout closed,
a broken pipe, ``/dev/full``) never changes what the command decides or its exit
code: the first failure is remembered and the stream is pointed at ``/dev/null``,
so that Python's own flush at exit does not fail either.
"""

from __future__ import annotations

import json
import os
import time


def rfc3339(now):
    """Local time with offset and milliseconds, e.g. 2026-11-21T14:41:17.031+08:00."""
    seconds, millis = divmod(int(round(now * 1000)), 1000)
    local = time.localtime(seconds)
    offset = local.tm_gmtoff or 0
    sign = "+" if offset >= 0 else "-"
    offset = abs(offset)
    return "%s.%03d%s%02d:%02d" % (
        time.strftime("%Y-%m-%dT%H:%M:%S", local),
        millis,
        sign,
        offset // 3600,
        (offset % 3600) // 60,
    )


class JsonLog:
    """One JSON object per line: level, msg, time, event, then structured fields."""

    def __init__(self, stream, clock=time.time):
        self.stream = stream
        self.clock = clock
        self.started = clock()
        # why the log stopped being written (None while it works)
        self.broken = None if stream is not None else "no output stream (stdout closed)"

    def emit(self, level, event, msg, **fields):
        now = self.clock()
        record = {"level": level, "msg": msg, "time": rfc3339(now), "event": event}
        record.update(fields)
        if self.broken:
            return
        try:
            self.stream.write(json.dumps(record, sort_keys=False, separators=(",", ":")) + "\n")
            self.stream.flush()
        except (OSError, ValueError) as exc:  # EPIPE, ENOSPC, EBADF; ValueError: closed file
            self._give_up(exc)

    def _give_up(self, exc):
        self.broken = str(exc) or type(exc).__name__
        try:
            fd = self.stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
        except (OSError, ValueError, AttributeError):
            return
        try:
            os.dup2(devnull, fd)
        except OSError:
            pass
        finally:
            os.close(devnull)

    def elapsed_ms(self):
        return int(round((self.clock() - self.started) * 1000))
