# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint codec against real kubelet files and Go encoding/json rules."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "checkpoints")
SEED = b'{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"nvidia.com/gpu":["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]}},"Checksum":3952659280}'


def fixture(name):
    with open(os.path.join(FIXTURES, name), "rb") as handle:
        return handle.read()


def with_checksum(layout, entries, registered, boot_id=""):
    data, dummy = codec.encode(codec.Checkpoint(layout, entries, registered, 0, boot_id))
    return data


@pytest.mark.parametrize(
    "name, layout, stored, entries",
    [
        ("seed_000_v1_no_entries.json", "v2", 3952659280, 0),
        ("kind_tegra_numa_minus1.json", "v2", 3660592824, 1),
        ("blog_3gpu_numa0.json", "v2", 133412836, 1),
    ],
)
def test_real_kubelet_files_verify_and_reencode_byte_for_byte(name, layout, stored, entries):
    raw = fixture(name)
    result = codec.decode(raw)
    assert result.error is None
    assert result.valid
    cp = result.checkpoint
    assert (cp.layout, cp.checksum, len(cp.entries or ())) == (layout, stored, entries)
    assert cp.computed_checksum() == stored
    data, value = codec.encode(cp)
    assert value == stored
    assert data == raw


def test_seed_is_the_literal_text_of_the_field_report():
    assert fixture("seed_000_v1_no_entries.json") == SEED
    assert codec.decode(SEED).valid


def test_seed_checksum_is_the_same_under_the_v1_struct():
    cp = codec.decode(SEED).checkpoint
    assert codec.checksum("v1", cp.entries, cp.registered) == 3952659280


def test_kind_fixture_keeps_negative_numa_node():
    cp = codec.decode(fixture("kind_tegra_numa_minus1.json")).checkpoint
    assert cp.entries[0].device_ids == {-1: ["tegra"]}
    assert cp.entries[0].alloc_resp.startswith(b"\n\x1f\n\x16NVIDIA_VISIBLE_DEVICES")


def test_spew_dump_v2_exact_text():
    entry = codec.PodDevicesEntry("u1", "c", "nvidia.com/gpu", {1: ["b", "a"], 0: None}, b"\x01\x02")
    dump = codec.spew_dump("v2", [entry], {"z": [], "a": None})
    assert dump == (
        b"(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)"
        b"[{PodUID:(string)u1 ContainerName:(string)c ResourceName:(string)nvidia.com/gpu "
        b"DeviceIDs:(checkpoint.DevicesPerNUMA)map[0:<nil> 1:[b a]] AllocResp:([]uint8)[1 2]}] "
        b"RegisteredDevices:(map[string][]string)map[a:<nil> z:[]]}"
    )


def test_spew_dump_v1_uses_v1_struct_and_kubelet_type_rewrite():
    entry = codec.PodDevicesEntry("u1", "c", "r", ["x"], None)
    dump = codec.spew_dump("v1", [entry], {})
    assert dump == (
        b"(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)"
        b"[{PodUID:(string)u1 ContainerName:(string)c ResourceName:(string)r "
        b"DeviceIDs:([]string)[x] AllocResp:([]uint8)<nil>}] RegisteredDevices:(map[string][]string)map[]}"
    )


def test_v1_rewrite_also_touches_data_like_kubelet_does():
    # checkpointv1.go rewrites the whole dump text, data included.
    entry = codec.PodDevicesEntry("PodDevicesEntryV1", "c", "r", [], None)
    assert b"PodUID:(string)PodDevicesEntry " in codec.spew_dump("v1", [entry], None)


def test_v1_file_with_entries_is_read_as_v1():
    raw = with_checksum("v1", [codec.PodDevicesEntry("p", "c", "nvidia.com/gpu", ["GPU-a"], b"x")], {"nvidia.com/gpu": ["GPU-a"]})
    assert b'"DeviceIDs":["GPU-a"]' in raw
    result = codec.decode(raw)
    assert result.valid and result.checkpoint.layout == "v1"


def test_v2_file_with_entries_is_read_as_v2_and_differs_from_v1_checksum():
    entries = [codec.PodDevicesEntry("p", "c", "nvidia.com/gpu", {0: ["GPU-a"]}, None)]
    raw = with_checksum("v2", entries, {"nvidia.com/gpu": ["GPU-a"]})
    result = codec.decode(raw)
    assert result.valid and result.checkpoint.layout == "v2"
    v1_entries = [codec.PodDevicesEntry("p", "c", "nvidia.com/gpu", ["GPU-a"], None)]
    assert codec.checksum("v1", v1_entries, {"nvidia.com/gpu": ["GPU-a"]}) != result.checkpoint.checksum


BASE = '{"Data":{"PodDeviceEntries":[{"PodUID":"p","DeviceIDs":{"0":["a"]},"AllocResp":"AQ=="}],"RegisteredDevices":{"r":["a"]}}}'


@pytest.mark.parametrize(
    "old, null, empty",
    [
        ('"PodDeviceEntries":[{"PodUID":"p","DeviceIDs":{"0":["a"]},"AllocResp":"AQ=="}]', '"PodDeviceEntries":null', '"PodDeviceEntries":[]'),
        ('"RegisteredDevices":{"r":["a"]}', '"RegisteredDevices":{"r":null}', '"RegisteredDevices":{"r":[]}'),
        ('"AllocResp":"AQ=="', '"AllocResp":null', '"AllocResp":""'),
        ('"DeviceIDs":{"0":["a"]}', '"DeviceIDs":null', '"DeviceIDs":{}'),
    ],
)
def test_null_and_empty_hash_differently(old, null, empty):
    assert old in BASE
    one = codec.decode_tree(codec.parse_json(BASE.replace(old, null).encode()), "v2")
    two = codec.decode_tree(codec.parse_json(BASE.replace(old, empty).encode()), "v2")
    assert one.computed_checksum() != two.computed_checksum()


def test_boot_id_is_outside_the_checksum_and_kept_on_encode():
    raw = SEED[:-1] + b',"BootID":"8c9a2b1e-1111-2222-3333-444455556666"}'
    result = codec.decode(raw)
    assert result.valid
    assert result.checkpoint.boot_id == "8c9a2b1e-1111-2222-3333-444455556666"
    data, dummy = codec.encode(result.checkpoint)
    assert data == raw


def test_go_accepts_case_insensitive_keys_and_ignores_unknown_fields():
    # PodDeviceEntries is null here, as in the seed: an absent key would be [] (see the missing-key rows)
    raw = (
        b'{"data":{"registereddevices":{"nvidia.com/gpu":["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]},"Extra":1,"poddeviceentries":null},'
        b'"CHECKSUM":3952659280,"Unknown":[1,2]}'
    )
    assert codec.decode(raw).valid


def test_duplicate_keys_merge_like_go():
    raw = with_checksum("v2", [], {"a": ["x"], "b": ["y"]})
    tree = json.loads(raw)
    text = '{"Data":{"RegisteredDevices":{"a":["x"]}},"Data":{"PodDeviceEntries":[],"RegisteredDevices":{"b":["y"]}},"Checksum":%d}' % tree["Checksum"]
    result = codec.decode(text.encode())
    assert result.valid, result.error
    assert result.checkpoint.registered == {"a": ["x"], "b": ["y"]}


def test_null_on_scalar_keeps_value_but_null_on_slice_clears():
    raw = b'{"Checksum":5,"Checksum":null,"Data":{"PodDeviceEntries":[],"PodDeviceEntries":null}}'
    cp = codec.decode(raw).checkpoint
    assert cp.checksum == 5
    assert cp.entries is None


def test_alloc_resp_as_number_array_is_go_compatible():
    entries = [codec.PodDevicesEntry("p", "c", "r", {0: ["a"]}, b"\x01\xff")]
    # no RegisteredDevices key: kubelet's empty map stays, map[] in the dump
    value = codec.checksum("v2", entries, {})
    raw = (
        '{"Data":{"PodDeviceEntries":[{"PodUID":"p","ContainerName":"c","ResourceName":"r",'
        '"DeviceIDs":{"0":["a"]},"AllocResp":[1,255]}]},"Checksum":%d}' % value
    ).encode()
    assert codec.decode(raw).valid


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"", "invalid JSON"),
        (b"\xef\xbb\xbf{}", "BOM"),
        (b'{"Data":{}} trailing', "invalid JSON"),
        (b'{"Checksum":NaN}', "looking for beginning of value"),
        (b'{"Checksum":1.0}', "cannot unmarshal number 1.0 into Go value of type checksum.Checksum"),
        (b'{"Checksum":1e3}', "cannot unmarshal number 1e3"),
        (b'{"Checksum":-1}', "cannot unmarshal number -1"),
        (b'{"Checksum":18446744073709551616}', "cannot unmarshal number 18446744073709551616"),
        (b'{"Checksum":"1"}', "cannot unmarshal string into Go value of type checksum.Checksum"),
        (b"[]", "cannot unmarshal array into Go value of type checkpoint.Data"),
        (b'{"Data":[]}', "Data: cannot unmarshal array"),
        (b'{"Data":{"RegisteredDevices":{"r":[1]}}}', 'Data.RegisteredDevices["r"][0]: cannot unmarshal number 1 into Go value of type string'),
        (b'{"Data":{"RegisteredDevices":{"r":"GPU-a"}}}', "cannot unmarshal string into Go value of type []string"),
        (b'{"Data":{"PodDeviceEntries":[{"PodUID":7}]}}', "Data.PodDeviceEntries[0].PodUID: cannot unmarshal number 7"),
        (b'{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"zero":["a"]}}]}}', 'cannot unmarshal number "zero" into Go value of type int64'),
        (b'{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"9223372036854775808":[]}}]}}', "int64"),
        (b'{"Data":{"PodDeviceEntries":[{"AllocResp":"not base64!"}]}}', "AllocResp: illegal base64 data at input byte 3"),
        (b'{"Data":{"PodDeviceEntries":[{"AllocResp":"AQ"}]}}', "illegal base64"),
        (b'{"Data":{"PodDeviceEntries":[{"AllocResp":[256]}]}}', "uint8"),
        (b'{"Data":{"PodDeviceEntries":[{"PodUID":true}]}}', "cannot unmarshal bool"),
        (SEED.replace(b"3952659280", b"3952659281"), "checksum mismatch: stored 3952659281, computed 3952659280"),
        (SEED.replace(b"3952659280", b"8247626576"), "checksum mismatch"),
    ],
)
def test_what_kubelet_rejects_is_corrupt(raw, message):
    result = codec.decode(raw)
    assert not result.valid
    assert message in result.error


def test_list_device_ids_error_reported_against_v1_struct():
    raw = b'{"Data":{"PodDeviceEntries":[{"PodUID":1,"DeviceIDs":["a"]}]}}'
    assert "PodUID: cannot unmarshal number 1" in codec.decode(raw).error


def test_lone_surrogate_becomes_replacement_character_like_go():
    entries = [codec.PodDevicesEntry("\ufffd", "c", "r", None, None)]
    value = codec.checksum("v2", entries, {})
    raw = ('{"Data":{"PodDeviceEntries":[{"PodUID":"\\ud800","ContainerName":"c","ResourceName":"r"}]},"Checksum":%d}' % value).encode()
    assert codec.decode(raw).valid


def test_encode_escapes_like_go():
    data, dummy = codec.encode(codec.Checkpoint("v2", None, {"a<b>&": ["\u2028"]}))
    assert b'"a\\u003cb\\u003e\\u0026":["\\u2028"]' in data
    assert codec.decode(data).valid


@pytest.mark.parametrize("size", [0, 1, 3, 4, 5, 1027])
def test_fnv32a_matches_reference(size):
    data = bytes((i * 7 + 3) % 256 for i in range(size))
    h = 0x811C9DC5
    for c in data:
        h = ((h ^ c) * 0x01000193) & 0xFFFFFFFF
    assert codec.fnv32a(data) == h


# ---------------------------------------------------------------------------
# Section 1 of issue 9: one row per Go/kubelet fact, each with its upstream source.
# ---------------------------------------------------------------------------

REG = {"nvidia.com/gpu": ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]}
REG_JSON = '{"nvidia.com/gpu":["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]}'


def test_empty_slice_and_map_dump_as_go_spew_prints_them():
    # go-spew prints a non-nil empty slice as [] and an empty map as map[], nil as <nil>.
    assert codec.spew_dump("v2", [], {}) == (
        b"(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[] RegisteredDevices:(map[string][]string)map[]}"
    )
    assert codec.checksum("v2", [], {}) != codec.checksum("v2", None, None)


# kubelet's getCheckpoint (pkg/kubelet/cm/devicemanager/manager.go) decodes into
# checkpoint.New(make([]checkpoint.PodDevicesEntry, 0), make(map[string][]string), ""),
# and json.Unmarshal leaves a field that is absent from the file as it was: [] and map[].
@pytest.mark.parametrize(
    "body, entries, registered",
    [
        ('{"Data":{"RegisteredDevices":%s},"Checksum":%%d}' % REG_JSON, [], REG),
        ('{"Data":{"PodDeviceEntries":null},"Checksum":%d}', None, {}),
        ('{"Data":{},"Checksum":%d}', [], {}),
        ('{"Checksum":%d}', [], {}),
        ('{"Data":null,"Checksum":%d}', [], {}),
    ],
)
def test_a_missing_key_is_kubelets_empty_value_not_nil(body, entries, registered):
    good = codec.checksum("v2", entries, registered)
    result = codec.decode((body % good).encode())
    assert result.valid, result.error
    assert (result.checkpoint.entries, result.checkpoint.registered) == (entries, registered)
    nil_entries = None if entries == [] else entries
    nil_registered = None if registered == {} else registered
    if (nil_entries, nil_registered) != (entries, registered):
        # the checksum computed as if absent meant nil is what kubelet rejects
        wrong = codec.checksum("v2", nil_entries, nil_registered)
        assert "checksum mismatch" in codec.decode((body % wrong).encode()).error


HUGE = "9" * 5000


# Go's decoder turns any number that does not fit into an UnmarshalTypeError
# (decode.go literalStore: strconv.ParseUint / OverflowUint), whatever its length;
# map keys of an int64 map go through strconv.ParseInt(key, 10, 64), which takes
# leading zeros and a sign. Python's int() refuses 4301+ digits with ValueError.
@pytest.mark.parametrize(
    "raw, message",
    [
        ('{"Checksum":%s}' % HUGE, "cannot unmarshal number 99999999999999999999...99999999 into Go value of type checksum.Checksum"),
        ('{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"%s":[]}}]}}' % HUGE, "into Go value of type int64"),
        ('{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"-%s":[]}}]}}' % HUGE, "into Go value of type int64"),
        ('{"Data":{"PodDeviceEntries":[{"AllocResp":[%s]}]}}' % HUGE, "into Go value of type uint8"),
        ('{"Checksum":1%s}' % ("0" * 4400), "cannot unmarshal number"),
    ],
)
def test_numbers_of_any_length_are_a_corrupt_verdict(raw, message):
    result = codec.decode(raw.encode())
    assert result.checkpoint is None
    assert message in result.error


def test_numa_key_with_thousands_of_leading_zeros_is_numa_node_one_like_parseint():
    entries = [codec.PodDevicesEntry("p", "c", "r", {1: ["a"]}, None)]
    value = codec.checksum("v2", entries, {})
    raw = '{"Data":{"PodDeviceEntries":[{"PodUID":"p","ContainerName":"c","ResourceName":"r","DeviceIDs":{"+%s1":["a"]}}]},"Checksum":%d}' % (
        "0" * 5000,
        value,
    )
    result = codec.decode(raw.encode())
    assert result.valid, result.error
    assert result.checkpoint.entries[0].device_ids == {1: ["a"]}


# encoding/json decodes a string into []byte with base64.StdEncoding.Decode
# (decode.go literalStore), whose CorruptInputError names the input byte
# (encoding/base64/base64.go decodeQuantum); \r and \n are skipped anywhere,
# padding is required, non-zero trailing bits are accepted (StdEncoding is not Strict()).
@pytest.mark.parametrize(
    "text, expected",
    [
        ("QUJD", b"ABC"),
        ("QUJD=", "illegal base64 data at input byte 4"),
        ("QQ", "illegal base64 data at input byte 0"),
        ("QQ=", "illegal base64 data at input byte 3"),
        ("Q===", "illegal base64 data at input byte 1"),
        ("QQ==QQ==", "illegal base64 data at input byte 4"),
        ("QUJD\r\nRA==", b"ABCD"),
        ("Q\nU\rJ\nD", b"ABC"),
        ("QR==", b"A"),
        ("", b""),
        ("QU JD", "illegal base64 data at input byte 2"),
        ("QUJ\u00e9", "illegal base64 data at input byte 3"),
    ],
)
def test_base64_is_as_strict_as_go(text, expected):
    if isinstance(expected, bytes):
        assert codec.go_base64(text.encode("utf-8")) == expected
    else:
        with pytest.raises(ValueError, match="^%s$" % expected):
            codec.go_base64(text.encode("utf-8"))
        raw = '{"Data":{"PodDeviceEntries":[{"AllocResp":%s}]}}' % json.dumps(text)
        assert codec.decode(raw.encode()).error == "Data.PodDeviceEntries[0].AllocResp: " + expected


def _nested(levels):
    # the top-level object is one level, the arrays the rest
    arrays = levels - 1
    return ('{"Data":{"PodDeviceEntries":null,"RegisteredDevices":%s},"Checksum":3952659280,"X":%s%s}' % (REG_JSON, "[" * arrays, "]" * arrays)).encode()


def test_nesting_up_to_go_max_depth_is_accepted_one_more_is_not():
    # encoding/json/scanner.go: maxNestingDepth = 10000, checked in pushParseState.
    assert codec.decode(_nested(10000)).valid
    result = codec.decode(_nested(10001))
    assert result.checkpoint is None
    assert "exceeded max depth" in result.error
    assert codec.decode(_nested(1200)[:-5]).error.startswith("invalid JSON")


# encoding/json unquoteBytes: utf8.DecodeRune returns (RuneError, 1) for each
# invalid byte, and each becomes one U+FFFD.
@pytest.mark.parametrize(
    "raw_uid, go_uid",
    [
        (b"\xff", "\ufffd"),
        (b"a\xe2\x82b", "a\ufffd\ufffdb"),
        (b"\xed\xa0\x80", "\ufffd\ufffd\ufffd"),
        (b"\xf0\x9f\x98", "\ufffd\ufffd\ufffd"),
        (b"\xc0\xaf", "\ufffd\ufffd"),
    ],
)
def test_invalid_utf8_becomes_one_replacement_per_byte_like_go(raw_uid, go_uid):
    value = codec.checksum("v2", [codec.PodDevicesEntry(go_uid, "c", "r", None, None)], {})
    raw = b'{"Data":{"PodDeviceEntries":[{"PodUID":"' + raw_uid + b'","ContainerName":"c","ResourceName":"r"}]},"Checksum":%d}' % value
    result = codec.decode(raw)
    assert result.valid, result.error
    assert result.checkpoint.entries[0].pod_uid == go_uid


E3 = '{"PodUID":"p1","ContainerName":"c1","ResourceName":"r","DeviceIDs":{"0":["a"]},"AllocResp":"AQ=="}'
E3B = '{"PodUID":"p2","ContainerName":"c2","ResourceName":"r","DeviceIDs":{"1":["b"]}}'


def test_duplicate_arrays_decode_into_the_same_backing_array_like_go():
    # decode.go array(): elements i < len are decoded into in place (fields the new
    # object lacks survive); after SetLen(i) the elements past the length stay in the
    # backing array, and a later, longer array decodes into them again.
    raw = (
        '{"Data":{"PodDeviceEntries":[%s,%s],"PodDeviceEntries":[{"PodUID":"x"}],'
        '"PodDeviceEntries":[{"ContainerName":"y"},{"PodUID":"z"},null],"RegisteredDevices":{}},"Checksum":%%d}' % (E3, E3B)
    )
    expected = [
        codec.PodDevicesEntry("x", "y", "r", {0: ["a"]}, b"\x01"),
        codec.PodDevicesEntry("z", "c2", "r", {1: ["b"]}, None),
        codec.PodDevicesEntry("", "", "", None, None),
    ]
    value = codec.checksum("v2", expected, {})
    result = codec.decode((raw % value).encode())
    assert result.valid, result.error
    assert [codec.spew_dump("v2", [e], {}) for e in result.checkpoint.entries] == [codec.spew_dump("v2", [e], {}) for e in expected]


def test_duplicate_string_arrays_keep_stale_elements_for_null_like_go():
    # v1 DeviceIDs is a []string: null keeps the element; the third array's second
    # element is the "b" the first array left in the backing array.
    raw = (
        '{"Data":{"PodDeviceEntries":[{"PodUID":"p","DeviceIDs":["a","b","c"],"DeviceIDs":["x"],"DeviceIDs":[null,null]}],'
        '"RegisteredDevices":{}},"Checksum":%d}'
    )
    value = codec.checksum("v1", [codec.PodDevicesEntry("p", "", "", ["x", "b"], None)], {})
    result = codec.decode((raw % value).encode())
    assert result.valid, result.error
    assert result.checkpoint.layout == "v1" and result.checkpoint.entries[0].device_ids == ["x", "b"]


def test_an_empty_array_drops_the_backing_array_like_go():
    # "if i == 0 && v.Kind() == reflect.Slice { v.Set(reflect.MakeSlice(v.Type(), 0, 0)) }"
    raw = '{"Data":{"PodDeviceEntries":[{"PodUID":"p","DeviceIDs":["a","b"],"DeviceIDs":[],"DeviceIDs":[null,null]}],"RegisteredDevices":{}},"Checksum":%d}'
    value = codec.checksum("v1", [codec.PodDevicesEntry("p", "", "", ["", ""], None)], {})
    assert codec.decode((raw % value).encode()).valid


def test_duplicate_alloc_resp_array_over_base64_keeps_decoded_bytes():
    raw = '{"Data":{"PodDeviceEntries":[{"PodUID":"p","DeviceIDs":{},"AllocResp":"AQID","AllocResp":[9,null,null,null]}],"RegisteredDevices":{}},"Checksum":%d}'
    value = codec.checksum("v2", [codec.PodDevicesEntry("p", "", "", {}, b"\x09\x02\x03\x00")], {})
    assert codec.decode((raw % value).encode()).valid


# checkpoint.Data.BootID is a string; only kubelets that have the field (kubernetes
# master as of commit 11626e98, 2026) read it, and their readCheckpoint has no v1
# fallback: a wrong type fails json.Unmarshal, so the file is corrupt, even where
# the v1 struct (which has no BootID) would have accepted it.
@pytest.mark.parametrize(
    "boot_id, valid, boot",
    [
        ('"8c9a2b1e"', True, "8c9a2b1e"),
        ("null", True, ""),
        ("5", False, None),
        ("true", False, None),
        ('["x"]', False, None),
        ('{"a":1}', False, None),
    ],
)
def test_boot_id_is_judged_by_the_kubelet_that_writes_it(boot_id, valid, boot):
    raw = SEED[:-1] + b',"BootID":' + boot_id.encode() + b"}"
    result = codec.decode(raw)
    assert result.valid is valid
    if valid:
        assert result.checkpoint.boot_id == boot
    else:
        assert result.checkpoint is None
        assert result.error.startswith("BootID: cannot unmarshal")


def test_null_string_field_of_a_new_element_is_the_zero_string():
    # found by the fuzz test: "PodUID":null in a new slice element is Go's "" (literalStore ignores null for a string)
    value = codec.checksum("v2", [codec.PodDevicesEntry("", "c", "r", None, None)], {})
    raw = '{"Data":{"PodDeviceEntries":[{"PodUID":null,"ContainerName":"c","ResourceName":"r"}]},"Checksum":%d}' % value
    result = codec.decode(raw.encode())
    assert result.valid, result.error
    assert result.checkpoint.entries[0].pod_uid == ""
