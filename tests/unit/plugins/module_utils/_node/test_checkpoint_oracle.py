# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Differential test: the codec against kubelet's own decoding, rebuilt from Go's
encoding/json and go-spew (tests/oracle, Debian's golang-go and
golang-github-davecgh-go-spew-dev; compiled once per session).

For every input (the real kubelet files, one per section-1 rule of issue 9, and the
seeded fuzz mutants) and for each layout, the codec and Go agree on whether the file
decodes, and where it does, on the go-spew dump byte for byte, the checksum, the
stored checksum and the BootID.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import CheckpointDecodeError

import test_checkpoint_fuzz as fuzz  # noqa: E402  (same directory)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))))
ORACLE_SRC = os.path.join(ROOT, "tests", "oracle")
GOCODE = "/usr/share/gocode"
SPEW = os.path.join(GOCODE, "src", "github.com", "davecgh", "go-spew", "spew")
REG = '{"nvidia.com/gpu":["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]}'


@pytest.fixture(scope="session")
def oracle(tmp_path_factory):
    missing = [what for what, ok in (("go (golang-go)", shutil.which("go")), ("go-spew (golang-github-davecgh-go-spew-dev)", os.path.isdir(SPEW))) if not ok]
    if missing:
        if os.environ.get("GPUOPS_REQUIRE_GO_ORACLE"):
            pytest.fail("the Go oracle needs %s (make unit installs them on Debian)" % ", ".join(missing))
        pytest.skip("the Go oracle needs %s" % ", ".join(missing))
    out = str(tmp_path_factory.mktemp("oracle") / "checkpoint-oracle")
    env = dict(os.environ, GO111MODULE="off", GOPATH="%s:%s" % (ORACLE_SRC, GOCODE), GOFLAGS="", CGO_ENABLED="0")
    env.setdefault("GOCACHE", os.path.join(ROOT, "build", "gocache"))
    subprocess.run(["go", "build", "-o", out, "oracle"], cwd=ORACLE_SRC, env=env, check=True, timeout=300)

    def ask(inputs):
        payload = json.dumps([base64.b64encode(raw).decode("ascii") for raw in inputs])
        proc = subprocess.run([out], input=payload.encode(), capture_output=True, check=True, timeout=300)
        return json.loads(proc.stdout)

    return ask


def ours(raw, layout):
    try:
        cp = codec.decode_tree(codec.parse_json(raw), layout)
    except CheckpointDecodeError as exc:
        return {"error": str(exc)}
    dump = codec.spew_dump(layout, cp.entries, cp.registered)
    return {"error": "", "stored": cp.checksum, "computed": codec.fnv32a(dump), "dump": dump, "boot_id": cp.boot_id}


def rows():
    """One input per Go/kubelet fact the codec models (issue 9, section 1), and a few more."""
    entry = '{"PodUID":"p1","ContainerName":"c1","ResourceName":"r","DeviceIDs":{"0":["a"]},"AllocResp":"AQ=="}'
    out = [
        # absent keys: kubelet's make([]...,0) and make(map...) stay
        '{"Data":{"RegisteredDevices":%s},"Checksum":1}' % REG,
        '{"Data":{"PodDeviceEntries":null},"Checksum":1}',
        '{"Data":{},"Checksum":1}',
        '{"Checksum":1}',
        '{"Data":null}',
        "null",
        # numbers of any length
        '{"Checksum":%s}' % ("9" * 5000),
        '{"Checksum":18446744073709551615}',
        '{"Checksum":18446744073709551616}',
        '{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"%s1":["a"]}}]}}' % ("0" * 5000),
        '{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"+7":["a"],"-0":["b"],"-9223372036854775808":[]}}]}}',
        '{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"9223372036854775808":[]}}]}}',
        '{"Data":{"PodDeviceEntries":[{"AllocResp":[255,0,%s]}]}}' % ("9" * 4400),
        # base64
        '{"Data":{"PodDeviceEntries":[{"AllocResp":"QUJD="}]}}',
        '{"Data":{"PodDeviceEntries":[{"AllocResp":"QUJD\\r\\nRA=="}]}}',
        '{"Data":{"PodDeviceEntries":[{"AllocResp":"QR=="}]}}',
        '{"Data":{"PodDeviceEntries":[{"AllocResp":"QQ"}]}}',
        '{"Data":{"PodDeviceEntries":[{"AllocResp":""}]}}',
        # nesting
        '{"Data":{},"X":%s%s}' % ("[" * 9998, "]" * 9998),
        '{"Data":{},"X":%s%s}' % ("[" * 9999, "]" * 9999),
        '{"Data":{},"X":%s%s}' % ("[" * 10000, "]" * 10000),
        # duplicate keys and backing arrays
        '{"Data":{"PodDeviceEntries":[%s,%s],"PodDeviceEntries":[{"PodUID":"x"}],'
        '"PodDeviceEntries":[{"ContainerName":"y"},{"PodUID":"z"},null]}}' % (entry, entry.replace("p1", "p2")),
        '{"Data":{"PodDeviceEntries":[{"PodUID":"p","DeviceIDs":["a","b","c"],"DeviceIDs":["x"],"DeviceIDs":[null,null]}]}}',
        '{"Data":{"PodDeviceEntries":[{"PodUID":"p","DeviceIDs":["a","b"],"DeviceIDs":[],"DeviceIDs":[null,null]}]}}',
        '{"Data":{"PodDeviceEntries":[{"AllocResp":"AQID","AllocResp":[9,null,null,null]}]}}',
        '{"Data":{"PodDeviceEntries":[{"AllocResp":"AQIDBA==","AllocResp":[9],"AllocResp":[null,null,null]}]}}',
        '{"Data":{"RegisteredDevices":{"a":["x"]}},"Data":{"RegisteredDevices":{"b":["y"]}},"Data":{"RegisteredDevices":{"a":null}}}',
        '{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"0":["a"]},"DeviceIDs":{"1":["b"]},"DeviceIDs":{"00":["c"]}}]}}',
        '{"Checksum":5,"Checksum":null,"checksum":7}',
        '{"Data":{"PodDeviceEntries":[{"PodUID":null,"podUID":"q","PODUID":null}]}}',
        # BootID
        '{"Data":{},"BootID":"b"}',
        '{"Data":{},"BootID":null}',
        '{"Data":{},"BootID":5}',
        '{"Data":{},"BootID":["x"]}',
        # case folding (the Kelvin sign and the long s fold into k and s)
        '{"Data":{"Regi\u017fteredDevices":{"a":[]}},"Chec\u212asum":3}',
    ]
    raws = [r.encode("utf-8") for r in out]
    # invalid UTF-8, one U+FFFD per byte
    for bad in (b"\xff", b"a\xe2\x82b", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\xc0\xaf", b"\xf4\x90\x80\x80"):
        raws.append(b'{"Data":{"PodDeviceEntries":[{"PodUID":"' + bad + b'"}],"RegisteredDevices":{"' + bad + b'":["' + bad + b'"]}}}')
    raws.append(b'{"Data":{"PodDeviceEntries":[{"PodUID":"\\ud800\\udc00\\ud800x"}]}}')
    return raws


def fixtures():
    out = []
    for name in fuzz.SEEDS:
        with open(os.path.join(fuzz.FIXTURES, name), "rb") as handle:
            out.append(handle.read())
    return out


def compare(oracle, inputs):
    answers = oracle(inputs)
    assert len(answers) == len(inputs)
    mismatches = []
    compare.decoded = 0
    for raw, answer in zip(inputs, answers):
        for layout in ("v2", "v1"):
            go, py = answer[layout], ours(raw, layout)
            if bool(go["error"]) != bool(py["error"]):
                mismatches.append((raw[:120], layout, "go error %r, ours %r" % (go["error"], py["error"])))
                continue
            if go["error"]:
                continue
            compare.decoded += 1
            go_dump = base64.b64decode(go["dump"]) if go["dump"] else b""
            if (go_dump, go["computed"], go["stored"]) != (py["dump"], py["computed"], py["stored"]):
                mismatches.append((raw[:120], layout, "dump/checksum differ: go %r... ours %r..." % (go_dump[:160], py["dump"][:160])))
            elif layout == "v2" and go["boot_id"] != py["boot_id"]:
                mismatches.append((raw[:120], layout, "BootID go %r ours %r" % (go["boot_id"], py["boot_id"])))
    return mismatches


def test_real_files_and_every_rule_agree_with_go(oracle):
    inputs = fixtures() + rows()
    assert compare(oracle, inputs) == []
    assert compare.decoded >= 40  # most rows decode in at least one layout: the dumps were compared


def test_fuzz_mutants_agree_with_go(oracle):
    inputs = list(fuzz.corpus())
    assert len(inputs) == fuzz.MUTANTS_PER_SEED * len(fuzz.SEEDS)
    assert compare(oracle, inputs) == []
    assert compare.decoded >= 100


# Structured fuzzing: documents shaped like checkpoints, mostly well typed, with
# kubelet's field names in any case, repeated keys, nulls, a wrong type now and then,
# odd numbers and base64, so that the decoder's semantics (not only the scanner) meet
# Go's on many shapes.
STRINGS = ['"a"', '"GPU-1"', '""', '"\\u00e9"', '"\\ud800"', '"p\\u0000"']
B64 = ['"QUJD"', '"AQ=="', '""', '"QUJD\\nRA=="', '"QR=="', '"QUJD="', '"QQ"', "[1,2,null]", "[256]", "[]", "null"]
NUMBERS = ["0", "7", "255", "256", "-1", "1.5", "1e2", "18446744073709551615", "18446744073709551616", "9" * 30]
NUMA_KEYS = ['"0"', '"1"', '"-1"', '"00"', '"+2"', '"9223372036854775807"', '"x"']


def _any(rng):
    return rng.choice(["null", "true", "[]", "{}", rng.choice(NUMBERS), rng.choice(STRINGS), '[{"a":1}]'])


def _field(rng, name):
    return rng.choice([name, name, name, name.lower(), name.upper(), name[0].lower() + name[1:]])


def _obj(rng, members):
    """members: [(name, generator)]; repeats some, drops some, adds an unknown one."""
    out = []
    for name, make in members:
        for dummy in range(rng.choice([0, 1, 1, 1, 1, 2])):
            value = make(rng) if rng.random() < 0.9 else _any(rng)
            out.append('"%s":%s' % (_field(rng, name), value))
    if rng.random() < 0.2:
        out.append('"Other":%s' % _any(rng))
    rng.shuffle(out)
    return "{%s}" % ",".join(out)


def _strings(rng):
    if rng.random() < 0.1:
        return "null"
    return "[%s]" % ",".join(rng.choice(STRINGS + ["null"] if rng.random() < 0.2 else STRINGS) for dummy in range(rng.randrange(4)))


def _numa(rng):
    if rng.random() < 0.1:
        return "null"
    return "{%s}" % ",".join("%s:%s" % (rng.choice(NUMA_KEYS), _strings(rng)) for dummy in range(rng.randrange(3)))


def _entry_v2(rng):
    return _obj(rng, [("PodUID", lambda r: r.choice(STRINGS)), ("ContainerName", lambda r: r.choice(STRINGS)),
                      ("ResourceName", lambda r: r.choice(STRINGS)), ("DeviceIDs", _numa), ("AllocResp", lambda r: r.choice(B64))])


def _entry_v1(rng):
    return _obj(rng, [("PodUID", lambda r: r.choice(STRINGS)), ("DeviceIDs", _strings), ("AllocResp", lambda r: r.choice(B64))])


def _entries(rng):
    if rng.random() < 0.1:
        return rng.choice(["null", "[]"])
    entry = _entry_v2 if rng.random() < 0.6 else _entry_v1
    return "[%s]" % ",".join(entry(rng) if rng.random() < 0.9 else "null" for dummy in range(rng.randrange(4)))


def _registered(rng):
    if rng.random() < 0.1:
        return "null"
    return "{%s}" % ",".join('"%s":%s' % (rng.choice(["nvidia.com/gpu", "r", "r"]), _strings(rng)) for dummy in range(rng.randrange(3)))


def _data(rng):
    return _obj(rng, [("PodDeviceEntries", _entries), ("RegisteredDevices", _registered)])


def _document(rng):
    return _obj(rng, [("Data", _data), ("Checksum", lambda r: r.choice(NUMBERS + ["1"])), ("BootID", lambda r: r.choice(STRINGS))])


def structured(count, seed=fuzz.SEED):
    import random  # pylint: disable=import-outside-toplevel

    rng = random.Random(seed)
    return [_document(rng).encode("utf-8") for dummy in range(count)]


def test_structured_documents_agree_with_go(oracle):
    inputs = structured(3000)
    assert compare(oracle, inputs) == []
    # most of them decode: the dumps and checksums were compared, not only the errors
    assert compare.decoded >= 1500
