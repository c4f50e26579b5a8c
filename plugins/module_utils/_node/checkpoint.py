# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: kubelet device-manager checkpoint codec.

Reads and writes ``/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint``
the way kubelet does:

* decoding is as strict as Go's ``encoding/json`` into kubelet's structs
  (``checkpoint.Data`` for v2/newest, ``checkpoint.DataV1`` for <= 1.19):
  case-insensitive field names, unknown fields ignored, ``null`` keeps a
  scalar but clears a slice or map, numbers must fit the Go type, ``[]byte``
  is base64 (Go's ``StdEncoding``, as strict), duplicate keys merge into the
  value decoded so far (slices keep their backing array, as Go's do);
* kubelet decodes into a checkpoint it made with
  ``make([]PodDevicesEntry, 0)`` and ``make(map[string][]string)``
  (``getCheckpoint`` in ``pkg/kubelet/cm/devicemanager/manager.go``), so an
  absent ``PodDeviceEntries``/``RegisteredDevices``/``Data`` is an empty
  slice/map (``[]``, ``map[]`` in the dump), not nil (``<nil>``);
* the scanner is Go's: up to 10000 nested levels (``maxNestingDepth`` in
  ``encoding/json/scanner.go``), every invalid UTF-8 byte in a string becomes
  one U+FFFD (``unquoteBytes``), a number of any length is a type error, never
  a Python ``ValueError``;
* the checksum is FNV-32a over go-spew's ``%#v`` dump of ``Data`` with
  ``ConfigState{Indent: " ", SortKeys: true, DisableMethods: true,
  SpewKeys: true}`` (``k8s.io/apiserver/pkg/util/hash.DeepHashObject``);
  v1 files are hashed with the v1 structs and the type-name rewrite of
  ``checkpointv1.go``.

No AnsibleModule here: this file is also used by the node-side ``gpuops``
command.
"""

from __future__ import annotations

import base64
import codecs
import json
import re

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import CheckpointDecodeError

LAYOUT_V1 = "v1"
LAYOUT_V2 = "v2"

_UINT64_MAX = (1 << 64) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193
_MASK32 = 0xFFFFFFFF
_BYTE_DEC = [str(i) for i in range(256)]
_DIGITS = re.compile(r"\A[0-9]+\Z")
_SIGNED_DIGITS = re.compile(r"\A[+-]?[0-9]+\Z")
_SURROGATE = re.compile("[\ud800-\udfff]")


class PodDevicesEntry:
    """One container's allocation (``checkpoint.PodDevicesEntry`` / ``PodDevicesEntryV1``).

    ``device_ids`` is ``{numa_node: [ids] or None}`` for v2 and ``[ids]`` for v1;
    ``None`` stands for Go's nil (JSON ``null`` or an absent field).
    """

    __slots__ = ("pod_uid", "container_name", "resource_name", "device_ids", "alloc_resp")

    def __init__(self, pod_uid="", container_name="", resource_name="", device_ids=None, alloc_resp=None):
        self.pod_uid = pod_uid
        self.container_name = container_name
        self.resource_name = resource_name
        self.device_ids = device_ids
        self.alloc_resp = alloc_resp

    def copy(self):
        ids = self.device_ids
        if isinstance(ids, dict):
            ids = dict((k, None if v is None else list(v)) for k, v in ids.items())
        elif ids is not None:
            ids = list(ids)
        return PodDevicesEntry(self.pod_uid, self.container_name, self.resource_name, ids, self.alloc_resp)

    def flat_device_ids(self):
        """All device IDs of the entry in file order (NUMA nodes in ascending order for v2)."""
        ids = self.device_ids
        if ids is None:
            return []
        if isinstance(ids, dict):
            out = []
            for node in sorted(ids):
                out.extend(ids[node] or ())
            return out
        return list(ids)


class Checkpoint:
    """A decoded checkpoint: layout, data, stored checksum and boot ID."""

    __slots__ = ("layout", "entries", "registered", "checksum", "boot_id")

    def __init__(self, layout, entries, registered, checksum=0, boot_id=""):
        self.layout = layout
        self.entries = entries
        self.registered = registered
        self.checksum = checksum
        self.boot_id = boot_id

    def computed_checksum(self):
        return checksum(self.layout, self.entries, self.registered)

    def checksum_valid(self):
        return self.checksum == self.computed_checksum()


# ---------------------------------------------------------------------------
# Go encoding/json emulation
# ---------------------------------------------------------------------------

# encoding/json/scanner.go: "This limits the max nesting depth to prevent stack
# overflow"; pushParseState fails once len(parseState) > maxNestingDepth.
MAX_NESTING_DEPTH = 10000


class _Num(str):
    """A JSON number kept as its literal text, as Go's decoder sees it."""


class _Obj(list):
    """A JSON object kept as its (key, value) pairs in file order, duplicates included."""


class _Slice(list):
    """A decoded Go slice: the visible elements plus ``tail``, the elements of the
    backing array beyond the length that an earlier (duplicate-key) decode left there.

    Go decodes a JSON array into an existing slice element by element and only
    truncates the length afterwards, so the array's capacity keeps those elements:
    ``decodeState.array`` in ``encoding/json/decode.go`` decodes element ``i`` into
    ``v.Index(i)`` after ``SetLen(i + 1)`` whenever ``i < v.Cap()``. A backing array
    is at least as long as the longest length it ever had, so which old elements
    come back is the same in every Go version; growth (``Grow``, or ``MakeSlice``
    plus ``Copy`` in older Go) only ever happens past all of them.
    """

    __slots__ = ("tail",)

    def __init__(self, items=(), tail=()):
        super().__init__(items)
        self.tail = list(tail)


def _reject_constant(name):
    raise CheckpointDecodeError("invalid character %r looking for beginning of value" % name[0], "")


def _fold(name):
    # Go matches struct fields with a Unicode simple fold; the long s and the
    # Kelvin sign are the non-ASCII runes that fold into ASCII letters.
    return name.lower().replace("\u017f", "s").replace("\u212a", "k")


def _type_name(value):
    if value is None:
        return "null"
    if isinstance(value, _Num):
        return "number " + (value if len(value) <= 40 else value[:20] + "..." + value[-8:])
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, _Obj):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _type_error(path, value, go_type):
    return CheckpointDecodeError("cannot unmarshal %s into Go value of type %s" % (_type_name(value), go_type), path)


def _go_string(value):
    # Go's decoder turns unpaired surrogate escapes into U+FFFD.
    if not value.isascii() and _SURROGATE.search(value):
        return _SURROGATE.sub("\ufffd", value)
    return value


def _is_string(value):
    # the parsers give JSON strings as exact str; numbers are _Num, objects _Obj
    return type(value) is str  # pylint: disable=unidiomatic-typecheck


def _dec_string(value, old, path):
    if type(value) is str:  # pylint: disable=unidiomatic-typecheck
        return _go_string(value)
    if value is None:
        return old
    raise _type_error(path, value, "string")


def _fits(digits, bits):
    """``digits`` (ASCII 0-9 only) as an int when it is below 2**bits, else None; any length."""
    # Python refuses int() of 4301+ digits (ValueError): bound the length first.
    stripped = digits.lstrip("0") or "0"
    if len(stripped) > (bits * 3) // 10 + 1:
        return None
    value = int(stripped)
    return value if value < (1 << bits) else None


def _dec_uint(value, old, path, bits, go_type):
    if value is None:
        return old
    if isinstance(value, _Num) and _DIGITS.match(value):
        number = _fits(value, bits)
        if number is not None:
            return number
    raise _type_error(path, value, go_type)


def _dec_byte(value, old, path):
    return _dec_uint(value, old, path, 8, "uint8")


def _dec_slice(value, old, path, element, zero, go_type):
    """Decode a JSON array into the Go slice ``old`` (a _Slice, bytes or None), as Go does."""
    if value is None:
        return None
    if not isinstance(value, list) or isinstance(value, _Obj):
        raise _type_error(path, value, go_type)
    if not value:
        # "if i == 0 && v.Kind() == reflect.Slice { v.Set(reflect.MakeSlice(v.Type(), 0, 0)) }"
        return _Slice()
    if not old:
        # a nil or empty slice has no backing elements: _dec_slice returns an empty
        # result only for [], which drops the backing array (tail is empty then)
        return _Slice(element(item, zero, "%s[%d]" % (path, i)) for i, item in enumerate(value))
    backing = list(old) + list(getattr(old, "tail", ()))
    for i, item in enumerate(value):
        sub = "%s[%d]" % (path, i)
        if i < len(backing):
            backing[i] = element(item, backing[i], sub)
        else:
            backing.append(element(item, zero, sub))
    return _Slice(backing[: len(value)], backing[len(value):])


def _dec_string_slice(value, old, path):
    if not old and type(value) is list and all(type(v) is str for v in value):  # pylint: disable=unidiomatic-typecheck
        # the common case, a fresh slice of strings: what _dec_slice would build, without per-element paths
        return _Slice([_go_string(v) for v in value])
    return _dec_slice(value, old, path, _dec_string, "", "[]string")


# encoding/base64 StdEncoding alphabet; decodeQuantum skips \r and \n anywhere.
_B64 = dict((c, i) for i, c in enumerate(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"))
_B64_PLAIN = re.compile(br"\A(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?\Z")


def go_base64(data):
    """``base64.StdEncoding.DecodeString`` of Go: returns bytes, or raises ValueError
    naming the input byte offset exactly as Go's ``CorruptInputError`` does."""
    if _B64_PLAIN.match(data):
        return base64.b64decode(data)
    # The slow path only for input Go rejects or with line breaks: a port of
    # decodeQuantum (encoding/base64/base64.go), to report Go's offset.
    out = bytearray()
    si, n = 0, len(data)
    while True:
        buf = [0, 0, 0, 0]
        dlen = 4
        j = 0
        while j < 4:
            if si == n:
                if j == 0:
                    return bytes(out)
                raise ValueError("illegal base64 data at input byte %d" % (si - j))
            c = data[si]
            si += 1
            if c in _B64:
                buf[j] = _B64[c]
                j += 1
                continue
            if c in (10, 13):
                continue
            if c != 61:  # '='
                raise ValueError("illegal base64 data at input byte %d" % (si - 1))
            if j in (0, 1):
                raise ValueError("illegal base64 data at input byte %d" % (si - 1))
            if j == 2:
                while si < n and data[si] in (10, 13):
                    si += 1
                if si == n:
                    raise ValueError("illegal base64 data at input byte %d" % n)
                if data[si] != 61:
                    raise ValueError("illegal base64 data at input byte %d" % (si - 1))
                si += 1
            while si < n and data[si] in (10, 13):
                si += 1
            if si < n:
                raise ValueError("illegal base64 data at input byte %d" % si)
            dlen = j
            break
        val = (buf[0] << 18) | (buf[1] << 12) | (buf[2] << 6) | buf[3]
        out.extend(bytes(((val >> 16) & 0xFF, (val >> 8) & 0xFF, val & 0xFF))[: dlen - 1])
        if dlen < 4:
            return bytes(out)


def _dec_bytes(value, old, path):
    if value is None:
        return None
    if isinstance(value, list) and not isinstance(value, _Obj):
        return _dec_slice(value, old, path, _dec_byte, 0, "[]uint8")
    if _is_string(value):
        try:
            return go_base64(value.encode("utf-8", "surrogatepass"))
        except ValueError as exc:
            raise CheckpointDecodeError(str(exc), path) from exc
    raise _type_error(path, value, "[]uint8")


def _int64_key(key):
    """strconv.ParseInt(key, 10, 64): optional sign, decimal digits, any number of leading zeros."""
    if not _SIGNED_DIGITS.match(key):
        return None
    negative = key[0] == "-"
    number = _fits(key.lstrip("+-"), 64)
    if number is None:
        return None
    number = -number if negative else number
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def _dec_numa_map(value, old, path):
    if value is None:
        return None
    if not isinstance(value, _Obj):
        raise _type_error(path, value, "checkpoint.DevicesPerNUMA")
    out = old if old is not None else {}
    for key, item in value:
        node = _int64_key(key)
        if node is None:
            raise CheckpointDecodeError("cannot unmarshal number %s into Go value of type int64" % json.dumps(key[:40]), path)
        # a map element is decoded into a zeroed value (mapElem.SetZero()), never the old one
        out[node] = _dec_string_slice(item, None, "%s[%s]" % (path, key[:40]))
    return out


def _dec_string_map(value, old, path):
    if value is None:
        return None
    if not isinstance(value, _Obj):
        raise _type_error(path, value, "map[string][]string")
    out = old if old is not None else {}
    for key, item in value:
        key = _go_string(key)
        out[key] = _dec_string_slice(item, None, "%s[%s]" % (path, json.dumps(key)))
    return out


class _Fields(dict):
    """A struct's fields: name -> decoder, plus their case-folded names (Go matches keys case-insensitively)."""

    def __init__(self, fields):
        super().__init__(fields)
        self.folded = dict((_fold(name), name) for name in fields)


def _dec_struct(value, old, path, fields, go_type):
    """Decode an object into ``old`` (a dict of field values) like Go decodes into a struct."""
    if value is None:
        return old
    if not isinstance(value, _Obj):
        raise _type_error(path, value, go_type)
    folded = fields.folded
    for key, item in value:
        name = key if key in fields else folded.get(_fold(key))
        if name is None:
            continue  # Go ignores unknown fields
        old[name] = fields[name](item, old.get(name), path + "." + name if path else name)
    return old


def _entry_decoder(v2):
    ids_decoder = _dec_numa_map if v2 else _dec_string_slice
    fields = _Fields({
        "PodUID": _dec_string,
        "ContainerName": _dec_string,
        "ResourceName": _dec_string,
        "DeviceIDs": ids_decoder,
        "AllocResp": _dec_bytes,
    })
    go_type = "checkpoint.PodDevicesEntry" if v2 else "checkpoint.PodDevicesEntryV1"

    def decode(value, old, path):
        # Go decodes into the slice element in place: a null element keeps it.
        # A new element starts as the struct's zero value ("" for strings, nil for the rest).
        if old is None:
            old = {"PodUID": "", "ContainerName": "", "ResourceName": "", "DeviceIDs": None, "AllocResp": None}
        return _dec_struct(value, old, path, fields, go_type)

    return decode


def _entries_decoder(v2):
    entry = _entry_decoder(v2)
    go_type = "[]checkpoint.PodDevicesEntry" if v2 else "[]checkpoint.PodDevicesEntryV1"

    def decode(value, old, path):
        return _dec_slice(value, old, path, entry, None, go_type)

    return decode


def _data_decoder(v2):
    fields = _Fields({"PodDeviceEntries": _entries_decoder(v2), "RegisteredDevices": _dec_string_map})

    def decode(value, old, path):
        return _dec_struct(value, old, path, fields, "checkpoint.checkpointData")

    return decode


def _top_fields(v2):
    fields = {
        "Data": _data_decoder(v2),
        "Checksum": lambda v, o, p: _dec_uint(v, o, p, 64, "checksum.Checksum"),
    }
    if v2:
        fields["BootID"] = _dec_string
    return _Fields(fields)


_TOP_FIELDS = {LAYOUT_V1: _top_fields(False), LAYOUT_V2: _top_fields(True)}


def _go_utf8(error):
    # Go's unquote writes one U+FFFD per invalid byte (utf8.DecodeRune returns
    # RuneError with size 1); Python's "replace" folds a truncated sequence into one.
    return "\ufffd", error.start + 1


codecs.register_error("gpuops-go-utf8", _go_utf8)

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_LITERALS = (("true", True), ("false", False), ("null", None))


def _syntax(pos, what):
    return CheckpointDecodeError("invalid JSON: %s at character %d" % (what, pos), "")


def _parse_deep(text):
    """An iterative JSON parser with Go's nesting limit, for what Python's recursive
    ``json`` cannot take (deeper than its recursion limit). Same tree as parse_json."""
    stack = []  # (container, pending key or None)
    pos = _WS.match(text, 0).end()
    n = len(text)
    value = None
    while True:
        if pos >= n:
            raise _syntax(pos, "unexpected end of input")
        c = text[pos]
        if c in "[{":
            if len(stack) >= MAX_NESTING_DEPTH:
                raise CheckpointDecodeError("invalid character %r exceeded max depth (%d levels)" % (c, MAX_NESTING_DEPTH), "")
            container = _Obj() if c == "{" else []
            pos = _WS.match(text, pos + 1).end()
            close = "}" if c == "{" else "]"
            if pos < n and text[pos] == close:
                value = container
                pos += 1
            else:
                stack.append([container, None])
                if c == "{":
                    pos = _parse_key(text, pos, stack[-1])
                continue
        elif c == '"':
            value, pos = _json_string(text, pos + 1)
        else:
            match = _NUMBER.match(text, pos)
            if match:
                value, pos = _Num(match.group()), match.end()
            else:
                for word, literal in _LITERALS:
                    if text.startswith(word, pos):
                        value, pos = literal, pos + len(word)
                        break
                else:
                    if text.startswith("NaN", pos) or text.startswith("Infinity", pos):
                        _reject_constant(text[pos:pos + 3])
                    raise _syntax(pos, "invalid character %r looking for beginning of value" % c)
        # a complete value: attach it, then close every container that ends here
        while True:
            pos = _WS.match(text, pos).end()
            if not stack:
                if pos != n:
                    raise _syntax(pos, "invalid character %r after top-level value" % text[pos])
                return value
            frame = stack[-1]
            container = frame[0]
            if isinstance(container, _Obj):
                container.append((frame[1], value))
            else:
                container.append(value)
            close = "}" if isinstance(container, _Obj) else "]"
            if pos < n and text[pos] == ",":
                pos = _WS.match(text, pos + 1).end()
                if isinstance(container, _Obj):
                    pos = _parse_key(text, pos, frame)
                break
            if pos < n and text[pos] == close:
                stack.pop()
                value = container
                pos += 1
                continue
            raise _syntax(pos, "expected ',' or %r" % close)


def _parse_key(text, pos, frame):
    if pos >= len(text) or text[pos] != '"':
        raise _syntax(pos, "expected a string key")
    key, pos = _json_string(text, pos + 1)
    pos = _WS.match(text, pos).end()
    if pos >= len(text) or text[pos] != ":":
        raise _syntax(pos, "expected ':'")
    frame[1] = key
    return _WS.match(text, pos + 1).end()


def _json_string(text, pos):
    try:
        return json.decoder.scanstring(text, pos, True)
    except ValueError as exc:
        raise _syntax(pos, str(exc)) from exc


def parse_json(raw):
    """Parse bytes into the raw JSON tree (objects as pair lists, numbers as literals).

    Raises CheckpointDecodeError for anything Go's scanner rejects.
    """
    if raw[:3] == b"\xef\xbb\xbf":
        raise CheckpointDecodeError("invalid character '\\u00ef' looking for beginning of value (UTF-8 BOM)", "")
    text = raw.decode("utf-8", "gpuops-go-utf8")
    try:
        return json.loads(
            text,
            object_pairs_hook=_Obj,
            parse_int=_Num,
            parse_float=_Num,
            parse_constant=_reject_constant,
        )
    except RecursionError:
        # deeper than Python's recursion limit: Go still takes up to 10000 levels
        return _parse_deep(text)
    except ValueError as exc:
        raise CheckpointDecodeError("invalid JSON: %s" % exc, "") from exc


def _empty_data():
    # getCheckpoint: checkpoint.New(make([]checkpoint.PodDevicesEntry, 0), make(map[string][]string), "")
    return {"PodDeviceEntries": _Slice(), "RegisteredDevices": {}}


def decode_tree(tree, layout):
    """Decode a parsed JSON tree as the given layout; returns a Checkpoint (checksum not verified)."""
    v2 = layout == LAYOUT_V2
    top = {"Data": _empty_data(), "Checksum": 0, "BootID": ""}
    top = _dec_struct(tree, top, "", _TOP_FIELDS[layout], "checkpoint.Data" if v2 else "checkpoint.DataV1")
    data = top["Data"]
    raw_entries = data.get("PodDeviceEntries")
    entries = None
    if raw_entries is not None:
        entries = []
        for e in raw_entries:
            ids = e["DeviceIDs"]
            if ids is not None and not v2:
                ids = list(ids)
            elif ids is not None:
                ids = dict((node, None if v is None else list(v)) for node, v in ids.items())
            alloc = e["AllocResp"]
            entries.append(PodDevicesEntry(e["PodUID"], e["ContainerName"], e["ResourceName"], ids, None if alloc is None else bytes(alloc)))
    registered = data.get("RegisteredDevices")
    if registered is not None:
        registered = dict((k, None if v is None else list(v)) for k, v in registered.items())
    return Checkpoint(layout, entries, registered, top["Checksum"], top["BootID"])


class DecodeResult:
    """Outcome of reading a checkpoint the way kubelet does."""

    __slots__ = ("checkpoint", "error")

    def __init__(self, checkpoint, error):
        self.checkpoint = checkpoint
        self.error = error

    @property
    def valid(self):
        return self.checkpoint is not None and self.error is None


def decode(raw):
    """Decode checkpoint bytes like kubelet: v2 (current struct) first, then v1.

    Returns a DecodeResult. ``checkpoint`` is None when the file cannot be
    decoded at all; ``error`` names what kubelet would reject (decode error or
    checksum mismatch) and is None for a file kubelet accepts.
    """
    try:
        tree = parse_json(raw)
    except CheckpointDecodeError as exc:
        return DecodeResult(None, str(exc))
    attempts = []
    for layout in (LAYOUT_V2, LAYOUT_V1):
        try:
            cp = decode_tree(tree, layout)
        except CheckpointDecodeError as exc:
            if exc.path == "BootID":
                # Only the kubelets that write BootID read it: checkpoint.Data.BootID in
                # kubernetes master as of commit 11626e98 (2026), the first source in reach
                # with the field; its readCheckpoint (getCheckpoint) has no v1 fallback, so
                # json.Unmarshal fails and the file is corrupt.
                return DecodeResult(None, str(exc))
            attempts.append((layout, None, exc))
            continue
        if cp.checksum_valid():
            return DecodeResult(cp, None)
        attempts.append((layout, cp, None))
    decoded = [a for a in attempts if a[1] is not None]
    if decoded:
        layout, cp, dummy = decoded[0]
        return DecodeResult(cp, "checksum mismatch: stored %d, computed %d (%s layout)" % (cp.checksum, cp.computed_checksum(), layout))
    # Neither struct accepted the file: report the v1 error when v2 stumbled
    # on a v1-style DeviceIDs list, else the v2 error.
    v2_err, v1_err = attempts[0][2], attempts[1][2]
    err = v1_err if "DeviceIDs" in v2_err.path and "array" in v2_err.reason else v2_err
    return DecodeResult(None, str(err))


# ---------------------------------------------------------------------------
# go-spew dump and checksum
# ---------------------------------------------------------------------------

def _spew_strings(values):
    if values is None:
        return "<nil>"
    return "[" + " ".join(values) + "]"


def spew_dump(layout, entries, registered):
    """go-spew ``%#v`` of checkpointData (v2) or checkpointDataV1 after kubelet's type-name rewrite (v1)."""
    v1 = layout == LAYOUT_V1
    sfx = "V1" if v1 else ""
    out = ["(checkpoint.checkpointData", sfx, "){PodDeviceEntries:([]checkpoint.PodDevicesEntry", sfx, ")"]
    if entries is None:
        out.append("<nil>")
    else:
        out.append("[")
        first = True
        for e in entries:
            if not first:
                out.append(" ")
            first = False
            out.append("{PodUID:(string)")
            out.append(e.pod_uid)
            out.append(" ContainerName:(string)")
            out.append(e.container_name)
            out.append(" ResourceName:(string)")
            out.append(e.resource_name)
            ids = e.device_ids
            if v1:
                out.append(" DeviceIDs:([]string)")
                out.append(_spew_strings(ids))
            else:
                out.append(" DeviceIDs:(checkpoint.DevicesPerNUMA)")
                if ids is None:
                    out.append("<nil>")
                else:
                    out.append("map[")
                    out.append(" ".join("%d:%s" % (node, _spew_strings(ids[node])) for node in sorted(ids)))
                    out.append("]")
            out.append(" AllocResp:([]uint8)")
            if e.alloc_resp is None:
                out.append("<nil>")
            else:
                out.append("[")
                out.append(" ".join(map(_BYTE_DEC.__getitem__, e.alloc_resp)))
                out.append("]")
            out.append("}")
        out.append("]")
    out.append(" RegisteredDevices:(map[string][]string)")
    if registered is None:
        out.append("<nil>")
    else:
        out.append("map[")
        # Go sorts string keys bytewise; for valid UTF-8 that is code point order.
        out.append(" ".join("%s:%s" % (key, _spew_strings(registered[key])) for key in sorted(registered)))
        out.append("]")
    out.append("}")
    text = "".join(out)
    if v1:
        text = text.replace("checkpointDataV1", "checkpointData", 1).replace("PodDevicesEntryV1", "PodDevicesEntry")
    return text.encode("utf-8")


def fnv32a(data):
    """FNV-1a 32-bit hash (Go's hash/fnv New32a), unrolled four bytes a step."""
    h = _FNV_OFFSET
    p = _FNV_PRIME
    it = iter(data)
    for c0, c1, c2, c3 in zip(it, it, it, it):
        h = ((((((h ^ c0) * p) ^ c1) * p ^ c2) * p ^ c3) * p) & _MASK32
    rest = len(data) % 4
    if rest:
        for c in data[-rest:]:
            h = ((h ^ c) * p) & _MASK32
    return h


def checksum(layout, entries, registered):
    return fnv32a(spew_dump(layout, entries, registered))


# ---------------------------------------------------------------------------
# Encoding (what kubelet's json.Marshal writes)
# ---------------------------------------------------------------------------

def _go_json_string(value):
    # encoding/json escapes <, >, & and U+2028/U+2029 (HTML-safe output).
    text = json.dumps(value, ensure_ascii=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _json_strings(values):
    if values is None:
        return "null"
    return "[" + ",".join(_go_json_string(v) for v in values) + "]"


def encode(cp):
    """Serialise a Checkpoint as kubelet would, with a freshly computed checksum.

    Returns ``(bytes, checksum)``. Map keys are sorted as encoding/json sorts
    them (by their string form); BootID is written only when non-empty.
    """
    value = checksum(cp.layout, cp.entries, cp.registered)
    out = ['{"Data":{"PodDeviceEntries":']
    if cp.entries is None:
        out.append("null")
    else:
        parts = []
        for e in cp.entries:
            ids = e.device_ids
            if ids is None:
                ids_json = "null"
            elif isinstance(ids, dict):
                keys = sorted(ids, key=str)
                ids_json = "{" + ",".join('"%d":%s' % (k, _json_strings(ids[k])) for k in keys) + "}"
            else:
                ids_json = _json_strings(ids)
            alloc = "null" if e.alloc_resp is None else '"%s"' % base64.b64encode(e.alloc_resp).decode("ascii")
            parts.append(
                '{"PodUID":%s,"ContainerName":%s,"ResourceName":%s,"DeviceIDs":%s,"AllocResp":%s}'
                % (_go_json_string(e.pod_uid), _go_json_string(e.container_name), _go_json_string(e.resource_name), ids_json, alloc)
            )
        out.append("[" + ",".join(parts) + "]")
    out.append(',"RegisteredDevices":')
    if cp.registered is None:
        out.append("null")
    else:
        out.append("{" + ",".join("%s:%s" % (_go_json_string(k), _json_strings(cp.registered[k])) for k in sorted(cp.registered)) + "}")
    out.append('},"Checksum":%d' % value)
    if cp.layout == LAYOUT_V2 and cp.boot_id:
        out.append(',"BootID":%s' % _go_json_string(cp.boot_id))
    out.append("}")
    return "".join(out).encode("utf-8"), value


# -- AllocResp ------------------------------------------------------------------------------------
# AllocResp holds the device plugin's ContainerAllocateResponse as protobuf bytes (kubelet
# pkg/kubelet/cm/devicemanager/pod_devices.go stores resp.Marshal()). Its field 1 is
# ``map<string, string> envs`` (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto); a map
# entry is a nested message with key = 1 and value = 2. Only the envs are read here.
ALLOC_ENV_PREFIXES = ("NVIDIA_", "ALIYUN_COM_GPU_MEM_", "CUDA_")


def _varint(data, pos):
    shift = result = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint at byte %d" % pos)
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data):
    """(field number, wire type, value) of each field of a protobuf message; value is bytes for length-delimited."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ValueError("field %d runs past the end" % number)
            value, pos = bytes(data[pos:pos + size]), pos + size
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type %d at field %d" % (wire, number))
        yield number, wire, value


def alloc_envs(alloc_resp, prefixes=ALLOC_ENV_PREFIXES):
    """The ``envs`` of an AllocResp whose names start with one of ``prefixes`` (the device plugins'
    own: which GPU a container was given), or None when there is no AllocResp or it does not
    decode. Other envs are not returned: a plugin may pass anything there."""
    if not alloc_resp:
        return None
    envs = {}
    try:
        for number, wire, value in _fields(bytes(alloc_resp)):
            if number != 1 or wire != 2:
                continue
            key = val = ""
            for sub_number, sub_wire, sub_value in _fields(value):
                if sub_wire == 2 and sub_number in (1, 2):
                    text = sub_value.decode("utf-8", "replace")
                    if sub_number == 1:
                        key = text
                    else:
                        val = text
            if key.startswith(tuple(prefixes)):
                envs[key] = val
    except ValueError:
        return None
    return envs
