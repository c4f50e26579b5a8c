# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint codec against real kubelet files and Go encoding/json rules."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils import _checkpoint as codec

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
    raw = b'{"data":{"registereddevices":{"nvidia.com/gpu":["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]},"Extra":1},"CHECKSUM":3952659280,"Unknown":[1,2]}'
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
    value = codec.checksum("v2", entries, None)
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
        (b'{"Data":{"PodDeviceEntries":[{"AllocResp":"not base64!"}]}}', "illegal base64 data in AllocResp"),
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
    entries = [codec.PodDevicesEntry(u"\ufffd", "c", "r", None, None)]
    value = codec.checksum("v2", entries, None)
    raw = ('{"Data":{"PodDeviceEntries":[{"PodUID":"\\ud800","ContainerName":"c","ResourceName":"r"}]},"Checksum":%d}' % value).encode()
    assert codec.decode(raw).valid


def test_encode_escapes_like_go():
    data, dummy = codec.encode(codec.Checkpoint("v2", None, {"a<b>&": [u"\u2028"]}))
    assert b'"a\\u003cb\\u003e\\u0026":["\\u2028"]' in data
    assert codec.decode(data).valid


@pytest.mark.parametrize("size", [0, 1, 3, 4, 5, 1027])
def test_fnv32a_matches_reference(size):
    data = bytes((i * 7 + 3) % 256 for i in range(size))
    h = 0x811C9DC5
    for c in data:
        h = ((h ^ c) * 0x01000193) & 0xFFFFFFFF
    assert codec.fnv32a(data) == h
