# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the NVIDIA driver's lines in the kernel log since boot.

Sources, in the order ``auto`` tries them:

* ``journal``: ``journalctl -k -b -o json`` (this boot's kernel messages). Each entry's ``MESSAGE`` (a
  string, or a list of bytes where it is not UTF-8), ``__MONOTONIC_TIMESTAMP`` (µs since boot) and
  ``SYSLOG_FACILITY``;
* ``kmsg``: ``/dev/kmsg`` read without blocking, one record per ``read()``:
  ``<prio>,<seq>,<µs since boot>,<flags>;<text>`` (Documentation/ABI/testing/dev-kmsg; the lent H200's
  records read ``4,356,1279435,c;NVRM: ...``, hack/real-gpu/h200-2026-11-26-health-probe.json);
* ``file``: a file in the kmsg format, or ``dmesg`` lines (``[  12.345678] NVRM: ...``): a saved log, a sysroot.

**Only the kernel's own lines count.** Anyone with write access to ``/dev/kmsg`` can add a line; such a
line carries the facility it was written with (``LOG_USER`` and up), never 0 (``kern``). A record whose
facility is not 0 is dropped, and only a message that *starts* with ``NVRM:`` is read, so a process
name inside an XID line (``name=...``) can never be taken for a line of its own.

**Lines matched** (formats from the NVIDIA XID docs and the issue logs quoted in ``../shared/specs/gpu-health.md``):

* ``NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.``;
  MIG adds ``GPU-I:<n>`` inside the parentheses (``NVRM: Xid (PCI:0000:07:00 GPU-I:05): 43, ...``);
* ``NVRM: Xid (PCI:0000:c3:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)``;
* ``NVRM: GPU at PCI:0000:3b:00: GPU-<uuid>`` (the driver names each GPU's UUID at load: bus -> UUID);
* ``NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.``

**Joined by PCI bus ID**, exactly: an XID is attached to the GPU whose NVML bus ID is the line's, and to
no other. A line naming a bus ID no GPU has (a forged or a removed device) stays ``unattributed``. A
message is read up to MAX_MESSAGE characters (a longer one is cut there, never split into more lines),
and text that is not UTF-8 is replaced, not fatal.
"""

from __future__ import annotations

import collections
import errno
import json
import os
import re
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import xid_catalog
from ansible_collections.gpuops.fleet.plugins.module_utils._node import hostroot, nodefile

SOURCES = ("auto", "journal", "kmsg", "file", "none")
MAX_MESSAGE = 2048
MAX_LINE_REPORTED = 400
# per GPU: every XID whose bucket asks for an action is kept (the newest MAX_XIDS_OTHER of them), and the newest
# MAX_XIDS_PER_GPU routine ones (an application's faults: xid_catalog.ROUTINE_BUCKETS); what is dropped is counted
MAX_XIDS_PER_GPU = 200
MAX_XIDS_OTHER = 1000
# the most of a saved kernel log file read: its end (the newest lines)
MAX_FILE = 64 * 1024 * 1024
MAX_KMSG_RECORDS = 200000
KMSG = "/dev/kmsg"
MARK = "/var/lib/gpuops/health/last-remediation.json"
MARK_VERSION = 2

_BUS = r"(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?"
_XID = re.compile(r"\A\s*NVRM: Xid \(PCI:%s(?: GPU-I:(?P<gi>[0-9]{1,3}))?(?: GPU-C:[0-9]{1,3})?\): (?P<code>[0-9]{1,4})\b,? ?(?P<rest>.*)\Z" % _BUS,
                  re.S)
_AT = re.compile(r"\A\s*NVRM: GPU at PCI:%s: (?P<uuid>GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\b" % _BUS)
_FALLEN = re.compile(r"\A\s*NVRM: GPU %s: GPU has fallen off the bus" % _BUS)
_PID = re.compile(r"\bpid=(?:'?(?P<pid>[0-9]{1,10})'?|'<unknown>')")
_NAME = re.compile(r"\bname=(?P<name>[^,]{0,64})")
_RECOVERY = re.compile(r"recovery action changed from 0x[0-9a-fA-F]{1,8} \([^)]{0,40}\) to 0x(?P<to>[0-9a-fA-F]{1,8}) \((?P<text>[^)]{0,40})\)")
_DMESG = re.compile(r"\A\[\s*(?P<sec>[0-9]{1,10})\.(?P<frac>[0-9]{1,9})\]\s?(?P<msg>.*)\Z", re.S)


def bus_key(bus_id):
    """``0000:3b:00`` from NVML's ``00000000:3B:00.0`` or the log's ``0000:3b:00``: the last 4 digits of the
    domain, bus and device, lower case; the function is not part of it (the driver's XID lines omit it)."""
    if not bus_id:
        return None
    match = re.match(r"\A" + _BUS + r"\Z", bus_id.strip())
    if not match:
        return None
    domain, bus, device = match.group("bus").lower().split(":")
    return "%s:%s:%s" % (domain[-4:].rjust(4, "0"), bus, device)


def _text(raw):
    if isinstance(raw, list):  # journald's JSON for a message that is not UTF-8: its bytes
        try:
            raw = bytes(b for b in raw[:MAX_MESSAGE] if isinstance(b, int) and 0 <= b < 256)
        except (TypeError, ValueError):
            return ""
    if isinstance(raw, bytes):
        raw = raw[:MAX_MESSAGE].decode("utf-8", "replace")
    if not isinstance(raw, str):
        return ""
    return raw[:MAX_MESSAGE]


def records_from_journal(output):
    """``[(message, usec since boot)]`` of ``journalctl -k -b -o json``'s output, kernel-facility entries only."""
    out = []
    for line in output.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        facility = entry.get("SYSLOG_FACILITY")
        if facility not in (None, "0", 0):
            continue
        transport = entry.get("_TRANSPORT")
        if transport not in (None, "kernel"):
            continue
        usec = entry.get("__MONOTONIC_TIMESTAMP")
        try:
            usec = int(usec) if usec is not None else None
        except (TypeError, ValueError):
            usec = None
        out.append((_text(entry.get("MESSAGE")), usec))
    return out


def _kmsg_record(raw):
    """``(message, usec)`` of one ``/dev/kmsg`` record, or None for a record not from the kernel facility."""
    head, sep, body = raw.partition(b";")
    if not sep:
        return None
    parts = head.split(b",")
    try:
        prio = int(parts[0])
        usec = int(parts[2]) if len(parts) > 2 else None
    except ValueError:
        return None
    if prio >> 3 != 0:  # facility: only the kernel's (0)
        return None
    body = body.split(b"\n", 1)[0]  # continuation lines (" KEY=value") are not the message
    return _text(body), usec


def records_from_kmsg_text(data):
    """Records of kmsg-format text (one record a line), as a saved ``/dev/kmsg`` or a sysroot file has them."""
    out = []
    for raw in data.split(b"\n"):
        if not raw or raw.startswith(b" "):
            continue
        match = _DMESG.match(_text(raw))
        if match:  # dmesg's "[  12.345678] text": no facility left to check
            frac = (match.group("frac") + "000000")[:6]
            out.append((match.group("msg"), int(match.group("sec")) * 1000000 + int(frac)))
            continue
        record = _kmsg_record(raw)
        if record:
            out.append(record)
    return out


def read_kmsg(path=None, limit=MAX_KMSG_RECORDS):
    """Records of ``/dev/kmsg``, without blocking: all of the ring buffer, of which the newest ``limit`` are kept (the newest
    matter most); raises OSError when it cannot be opened."""
    fd = os.open(path or KMSG, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    out = collections.deque(maxlen=limit)
    try:
        while True:
            try:
                raw = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    break
                if exc.errno == errno.EPIPE:  # the ring buffer overwrote the record we were at: go on
                    continue
                raise
            if not raw:
                break
            record = _kmsg_record(raw)
            if record:
                out.append(record)
    finally:
        os.close(fd)
    return list(out)


def read_file(path, limit=None):
    """``(records, reason or None)`` of a saved kernel log: its last ``limit`` (MAX_FILE) bytes where it is larger (the newest
    lines; the first, cut, line dropped), the reason saying how much was left unread."""
    limit = MAX_FILE if limit is None else limit
    with open(hostroot.readable(path), "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size <= limit:
            return records_from_kmsg_text(handle.read(limit + 1)), None
        handle.seek(size - limit)
        data = handle.read(limit)
    data = data.split(b"\n", 1)[1] if b"\n" in data else b""
    return records_from_kmsg_text(data), "%s is %d bytes: only its last %d were read (the newest lines)" % (path, size, limit)


def journal_argv(journalctl):
    return [journalctl, "-k", "-b", "-o", "json", "--no-pager"]


def read(source, run, path=None, journalctl=None):
    """``(records, source used, reason)``: records ``[(message, usec)]`` from ``source`` (SOURCES).

    ``auto`` tries the journal, then ``/dev/kmsg``; what could not be read is in ``reason`` (never raised:
    a node without a readable kernel log still gets its NVML read, its log source ``none``)."""
    reasons = []
    if source == "none":
        return [], "none", "kernel log not read (kernel_log=none)"
    if source == "file":
        try:
            records, why = read_file(path)
        except OSError as exc:
            return [], "none", "cannot read %s: %s" % (path, exc.strerror or exc)
        return records, "file", why
    if source in ("auto", "journal"):
        if journalctl:
            rc, out, err = run(journal_argv(journalctl))
            if rc == 0:
                return records_from_journal(out), "journal", None
            reasons.append("journalctl -k -b exited %d: %s" % (rc, (err or "").strip()[:200]))
        else:
            reasons.append("journalctl not found")
        if source == "journal":
            return [], "none", "; ".join(reasons)
    try:
        return read_kmsg(hostroot.readable(KMSG)), "kmsg", None
    except OSError as exc:
        reasons.append("%s: %s" % (KMSG, exc.strerror or exc))
    return [], "none", "; ".join(reasons)


def read_marks(boot_id, path=MARK):
    """``{GPU UUID (lower case): µs since boot}`` of the remediations recorded on this node in this boot, or {}.

    ``gpu_reset`` writes them after a verified reset (``write_mark``): ``{"version": 2, "boot_id", "gpus": {uuid: µs}}``;
    the XIDs of a GPU logged up to its mark were dealt with (NVSentinel#450: old events re-cordoned nodes after the breaker
    closed; here, a reset GPU's old XID 48 would reset it again, until the repeat rule called it an RMA candidate). A mark
    of another boot, or one that is not what we write, is ignored. The first form, ``{"boot_id", "usec"}``, marks every
    GPU (``"*"``)."""
    try:
        with open(hostroot.readable(path), "rb") as handle:
            mark = json.loads(handle.read(65536).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(mark, dict) or mark.get("boot_id") != boot_id or not boot_id:
        return {}
    if "usec" in mark:
        return {"*": mark["usec"]} if _usec(mark["usec"]) else {}
    gpus = mark.get("gpus")
    if not isinstance(gpus, dict):
        return {}
    return dict((str(uuid).lower(), usec) for uuid, usec in gpus.items() if _usec(usec))


def _usec(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2 ** 63


def now_usec():
    """µs since boot now, as the kernel log stamps its lines (journald's ``__MONOTONIC_TIMESTAMP``; ``/dev/kmsg``'s)."""
    return int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1000000)


def write_mark(boot_id, uuids, usec, path=MARK):
    """Record that ``uuids`` were remediated at ``usec`` (µs since boot) in boot ``boot_id``: atomically (the old file or the
    new one, never none), the same boot's marks of other GPUs kept, another boot's dropped. ``path`` as this process reaches
    it (``hostroot.local``). Returns the marks written."""
    marks = dict((u, s) for u, s in read_marks(boot_id, path).items() if u != "*")
    for uuid in uuids:
        marks[str(uuid).lower()] = usec
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    body = json.dumps({"version": MARK_VERSION, "boot_id": boot_id, "gpus": marks}, sort_keys=True, indent=1) + "\n"
    nodefile.write_file(path, body.encode(), 0o644)
    return marks


def parse(records, overrides=None):
    """What the driver said: ``{xids, bus_uuid, fallen_off, ignored_before_mark}``; XIDs keyed by their bus (bus_key).
    ``ignored_before_mark`` starts at 0: ``attach`` counts there the XIDs a GPU's remediation mark leaves out."""
    xids, bus_uuid, fallen = [], {}, set()
    for message, usec in records:
        if "NVRM:" not in message[:64]:
            continue
        match = _AT.match(message)
        if match:
            bus_uuid[bus_key(match.group("bus"))] = match.group("uuid")
            continue
        match = _FALLEN.match(message)
        if match:
            fallen.add(bus_key(match.group("bus")))
            continue
        match = _XID.match(message)
        if not match:
            continue
        code = int(match.group("code"))
        rest = match.group("rest")
        pid = _PID.search(rest)
        name = _NAME.search(rest)
        xid = {
            "code": code,
            "bucket": xid_catalog.bucket(code, overrides),
            "mnemonic": xid_catalog.mnemonic(code),
            "bus": bus_key(match.group("bus")),
            "gpu_instance": int(match.group("gi")) if match.group("gi") else None,
            "usec": usec,
            "pid": int(pid.group("pid")) if pid and pid.group("pid") else None,
            "process": name.group("name").strip() if name else None,
            "line": message.strip()[:MAX_LINE_REPORTED],
        }
        if code == 154:
            rec = _RECOVERY.search(rest)
            if rec:
                value = int(rec.group("to"), 16)
                text = rec.group("text").strip().lower()
                xid["recovery_action"] = value if value in xid_catalog.RECOVERY_ACTIONS else xid_catalog.RECOVERY_TEXTS.get(text)
        if code == 79:
            fallen.add(xid["bus"])
        xids.append(xid)
    return {"xids": xids, "bus_uuid": bus_uuid, "fallen_off": fallen, "ignored_before_mark": 0}


def attach(parsed, gpus, marks=None):
    """Give each GPU record (``pci_bus_id`` from NVML) its XIDs; returns the XIDs no GPU's bus ID matched (the newest
    MAX_XIDS_PER_GPU).

    A lost GPU (no bus ID from NVML) gets the one bus the driver named at load that no readable GPU has, when
    exactly one such bus and one lost GPU exist; then its UUID too. Otherwise its lines stay unattributed.

    ``marks`` (``read_marks``): a GPU's XIDs logged up to its last remediation in this boot are not its XIDs any more
    (counted in ``xids_before_mark``, and in ``parsed["ignored_before_mark"]``). Of the rest, every XID whose bucket asks
    for an action is kept (the newest MAX_XIDS_OTHER), and the newest MAX_XIDS_PER_GPU routine ones: a burst of killed
    applications' XID 45s never hides a later XID 48. What is dropped is counted (``xids_dropped``), and the decision
    says so."""
    by_bus = {}
    for gpu in gpus:
        key = bus_key(gpu.get("pci_bus_id"))
        if key:
            by_bus[key] = gpu
    lost = [g for g in gpus if not bus_key(g.get("pci_bus_id"))]
    spare = sorted(set(parsed["bus_uuid"]) - set(by_bus))
    if len(lost) == 1 and len(spare) == 1:
        lost[0]["pci_bus_id"] = spare[0]
        lost[0]["uuid"] = lost[0].get("uuid") or parsed["bus_uuid"][spare[0]]
        lost[0]["uuid_source"] = "kernel_log"
        by_bus[spare[0]] = lost[0]
    marks = marks or {}
    unattributed, found = [], {}
    for gpu in gpus:
        gpu.setdefault("xids", [])
        gpu["fallen_off_bus"] = bus_key(gpu.get("pci_bus_id")) in parsed["fallen_off"]
    for xid in parsed["xids"]:
        gpu = by_bus.get(xid["bus"])
        if gpu is None:
            unattributed.append(xid)
            continue
        mark = marks.get(str(gpu.get("uuid") or "").lower(), marks.get("*"))
        if mark is not None and xid.get("usec") is not None and xid["usec"] <= mark:
            gpu["xids_before_mark"] = gpu.get("xids_before_mark", 0) + 1
            parsed["ignored_before_mark"] = parsed.get("ignored_before_mark", 0) + 1
            continue
        found.setdefault(id(gpu), (gpu, []))[1].append(xid)
    for gpu, xids in found.values():
        gpu["xids"], dropped = _newest(xids)
        if dropped:
            gpu["xids_dropped"] = dropped
    return unattributed[-MAX_XIDS_PER_GPU:]


def _newest(xids):
    """``(kept, how many dropped)``: every XID that asks for an action (the newest MAX_XIDS_OTHER) and the newest
    MAX_XIDS_PER_GPU routine ones, in the log's order."""
    routine = [i for i, x in enumerate(xids) if x.get("bucket") in xid_catalog.ROUTINE_BUCKETS]
    other = [i for i, x in enumerate(xids) if x.get("bucket") not in xid_catalog.ROUTINE_BUCKETS]
    keep = set(routine[-MAX_XIDS_PER_GPU:]) | set(other[-MAX_XIDS_OTHER:])
    return [x for i, x in enumerate(xids) if i in keep], len(xids) - len(keep)
