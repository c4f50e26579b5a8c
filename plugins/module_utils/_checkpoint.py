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
  is base64, duplicate keys merge into the value decoded so far;
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
import binascii
import json
import re

from ansible_collections.gpuops.fleet.plugins.module_utils._errors import CheckpointDecodeError

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


class PodDevicesEntry(object):
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


class Checkpoint(object):
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

class _Num(str):
    """A JSON number kept as its literal text, as Go's decoder sees it."""


class _Obj(list):
    """A JSON object kept as its (key, value) pairs in file order, duplicates included."""


def _reject_constant(name):
    raise CheckpointDecodeError("invalid character %r looking for beginning of value" % name[0], "")


def _fold(name):
    # Go matches struct fields with a Unicode simple fold; the long s and the
    # Kelvin sign are the non-ASCII runes that fold into ASCII letters.
    return name.lower().replace(u"\u017f", "s").replace(u"\u212a", "k")


def _type_name(value):
    if value is None:
        return "null"
    if isinstance(value, _Num):
        return "number " + value
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
    if _SURROGATE.search(value):
        return _SURROGATE.sub(u"\ufffd", value)
    return value


def _dec_string(value, old, path):
    if value is None:
        return old
    if isinstance(value, str) and not isinstance(value, (_Num, _Obj)):
        return _go_string(value)
    raise _type_error(path, value, "string")


def _dec_uint(value, old, path, bits, go_type):
    if value is None:
        return old
    if isinstance(value, _Num) and _DIGITS.match(value) and int(value) < (1 << bits):
        return int(value)
    raise _type_error(path, value, go_type)


def _dec_string_slice(value, old, path):
    if value is None:
        return None
    if not isinstance(value, list) or isinstance(value, _Obj):
        raise _type_error(path, value, "[]string")
    base = old or []
    return [_dec_string(item, base[i] if i < len(base) else "", "%s[%d]" % (path, i)) for i, item in enumerate(value)]


def _dec_bytes(value, old, path):
    if value is None:
        return None
    if isinstance(value, _Obj) or isinstance(value, _Num):
        raise _type_error(path, value, "[]uint8")
    if isinstance(value, list):
        base = old or b""
        out = bytearray()
        for i, item in enumerate(value):
            out.append(_dec_uint(item, base[i] if i < len(base) else 0, "%s[%d]" % (path, i), 8, "uint8"))
        return bytes(out)
    if isinstance(value, str):
        text = value.replace("\r", "").replace("\n", "")
        try:
            return base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            raise CheckpointDecodeError("illegal base64 data in AllocResp", path)
    raise _type_error(path, value, "[]uint8")


def _dec_numa_map(value, old, path):
    if value is None:
        return None
    if not isinstance(value, _Obj):
        raise _type_error(path, value, "checkpoint.DevicesPerNUMA")
    out = old if old is not None else {}
    for key, item in value:
        if not _SIGNED_DIGITS.match(key) or not _INT64_MIN <= int(key) <= _INT64_MAX:
            raise CheckpointDecodeError("cannot unmarshal number %s into Go value of type int64" % json.dumps(key), path)
        out[int(key)] = _dec_string_slice(item, None, "%s[%s]" % (path, key))
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


def _dec_struct(value, old, path, fields, go_type):
    """Decode an object into ``old`` (a dict of field values) like Go decodes into a struct."""
    if value is None:
        return old
    if not isinstance(value, _Obj):
        raise _type_error(path, value, go_type)
    folded = dict((_fold(name), name) for name in fields)
    for key, item in value:
        name = key if key in fields else folded.get(_fold(key))
        if name is None:
            continue  # Go ignores unknown fields
        old[name] = fields[name](item, old.get(name), path + "." + name if path else name)
    return old


def _entry_decoder(v2):
    ids_decoder = _dec_numa_map if v2 else _dec_string_slice
    fields = {
        "PodUID": _dec_string,
        "ContainerName": _dec_string,
        "ResourceName": _dec_string,
        "DeviceIDs": ids_decoder,
        "AllocResp": _dec_bytes,
    }
    go_type = "checkpoint.PodDevicesEntry" if v2 else "checkpoint.PodDevicesEntryV1"

    def decode(value, old, path):
        base = old if old is not None else {}
        return _dec_struct(value, dict(base), path, fields, go_type)

    return decode


def _entries_decoder(v2):
    entry = _entry_decoder(v2)

    def decode(value, old, path):
        if value is None:
            return None
        if not isinstance(value, list) or isinstance(value, _Obj):
            raise _type_error(path, value, "[]checkpoint.PodDevicesEntry")
        base = old or []
        # Go decodes array elements into the slice's existing elements.
        return [entry(item, base[i] if i < len(base) else None, "%s[%d]" % (path, i)) for i, item in enumerate(value)]

    return decode


def _data_decoder(v2):
    fields = {"PodDeviceEntries": _entries_decoder(v2), "RegisteredDevices": _dec_string_map}

    def decode(value, old, path):
        return _dec_struct(value, old if old is not None else {}, path, fields, "checkpoint.checkpointData")

    return decode


def _top_fields(v2):
    fields = {
        "Data": _data_decoder(v2),
        "Checksum": lambda v, o, p: _dec_uint(v, o, p, 64, "checksum.Checksum"),
    }
    if v2:
        fields["BootID"] = _dec_string
    return fields


_TOP_FIELDS = {LAYOUT_V1: _top_fields(False), LAYOUT_V2: _top_fields(True)}


def parse_json(raw):
    """Parse bytes into the raw JSON tree (objects as pair lists, numbers as literals).

    Raises CheckpointDecodeError for anything Go's scanner rejects.
    """
    if raw[:3] == b"\xef\xbb\xbf":
        raise CheckpointDecodeError("invalid character '\\u00ef' looking for beginning of value (UTF-8 BOM)", "")
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(
            text,
            object_pairs_hook=_Obj,
            parse_int=_Num,
            parse_float=_Num,
            parse_constant=_reject_constant,
        )
    except ValueError as exc:
        raise CheckpointDecodeError("invalid JSON: %s" % exc, "")
    except RecursionError:
        raise CheckpointDecodeError("invalid JSON: nested too deeply", "")


def decode_tree(tree, layout):
    """Decode a parsed JSON tree as the given layout; returns a Checkpoint (checksum not verified)."""
    v2 = layout == LAYOUT_V2
    top = _dec_struct(tree, {}, "", _TOP_FIELDS[layout], "checkpoint.Data" if v2 else "checkpoint.DataV1")
    data = top.get("Data") or {}
    raw_entries = data.get("PodDeviceEntries")
    entries = None
    if raw_entries is not None:
        entries = [
            PodDevicesEntry(
                e.get("PodUID", ""),
                e.get("ContainerName", ""),
                e.get("ResourceName", ""),
                e.get("DeviceIDs"),
                e.get("AllocResp"),
            )
            for e in raw_entries
        ]
    return Checkpoint(layout, entries, data.get("RegisteredDevices"), top.get("Checksum") or 0, top.get("BootID", ""))


class DecodeResult(object):
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
        .replace(u"\u2028", "\\u2028")
        .replace(u"\u2029", "\\u2029")
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
