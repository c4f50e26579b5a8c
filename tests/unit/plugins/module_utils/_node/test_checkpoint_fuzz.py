# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bounded, seeded fuzzing of the codec with mutants of the real kubelet files.

Whatever the bytes, decode() returns a verdict (it never raises), parse_json and
decode_tree raise nothing but CheckpointDecodeError, and a file kubelet would
decodes re-encodes into one kubelet accepts, with the same data.
"""

from __future__ import annotations

import os
import random

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import CheckpointDecodeError

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "checkpoints")
SEEDS = sorted(n for n in os.listdir(FIXTURES) if n.endswith(".json"))
MUTANTS_PER_SEED = 2000
SEED = 20261123

# Tokens that reach the corners of Go's decoder: huge and odd numbers, deep
# nesting, invalid UTF-8, escapes, base64 edge cases, nulls, duplicate keys.
TOKENS = [
    b"9" * 4400,
    b"-" + b"1" * 30,
    b"1e400",
    b"0.5",
    b"null",
    b"true",
    b"[]",
    b"{}",
    b"[" * 1100 + b"]" * 1100,
    b"\xff",
    b"\xe2\x82",
    b"\\ud800",
    b"\\u0000",
    b'"QUJD="',
    b'"QQ"',
    b'"AQID"',
    b'"+0009"',
    b'"PodDeviceEntries":[{}],"PodDeviceEntries":[null,{"PodUID":1}]',
    b'"DeviceIDs":["a"]',
    b'"BootID":7',
    b'"Checksum":0',
    b"\xef\xbb\xbf",
    b",",
    b":",
    b'"',
]


def mutate(rng, data):
    data = bytearray(data)
    for dummy in range(rng.randint(1, 4)):
        kind = rng.randrange(6)
        pos = rng.randrange(len(data) + 1)
        if kind == 0 and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif kind == 1:
            data[pos:pos] = rng.choice(TOKENS)
        elif kind == 2:
            end = min(len(data), pos + rng.randint(1, 40))
            del data[pos:end]
        elif kind == 3 and data:
            start = rng.randrange(len(data))
            chunk = data[start:start + rng.randint(1, 80)]
            data[pos:pos] = chunk
        elif kind == 4:
            del data[pos:]
        else:
            # replace a value after a colon with a token
            colon = data.find(b":", pos)
            if colon >= 0:
                end = colon + 1
                while end < len(data) and data[end:end + 1] not in (b",", b"}", b"]"):
                    end += 1
                data[colon + 1:end] = rng.choice(TOKENS)
    return bytes(data)


def corpus():
    rng = random.Random(SEED)
    for name in SEEDS:
        with open(os.path.join(FIXTURES, name), "rb") as handle:
            original = handle.read()
        for dummy in range(MUTANTS_PER_SEED):
            yield mutate(rng, original)


def test_fuzz_codec_only_ever_gives_its_own_verdict():
    count = decoded = 0
    for raw in corpus():
        count += 1
        result = codec.decode(raw)  # must not raise
        assert isinstance(result, codec.DecodeResult)
        assert (result.error is None) == result.valid
        try:
            tree = codec.parse_json(raw)
            for layout in ("v2", "v1"):
                try:
                    codec.decode_tree(tree, layout)
                except CheckpointDecodeError:
                    pass
        except CheckpointDecodeError:
            pass
        if result.checkpoint is not None:
            # decoded (a checksum mismatch at most): what encode writes is a file kubelet accepts
            decoded += 1
            data, value = codec.encode(result.checkpoint)
            again = codec.decode(data)
            assert again.valid, again.error
            assert codec.spew_dump(again.checkpoint.layout, again.checkpoint.entries, again.checkpoint.registered) == codec.spew_dump(
                result.checkpoint.layout, result.checkpoint.entries, result.checkpoint.registered
            )
    assert count == MUTANTS_PER_SEED * len(SEEDS)
    # the mutants are not all trivially broken: many still decode
    assert decoded > count // 20


@pytest.mark.parametrize("name", SEEDS)
def test_every_truncation_of_a_real_file_is_a_verdict(name):
    with open(os.path.join(FIXTURES, name), "rb") as handle:
        original = handle.read()
    for end in range(len(original)):
        result = codec.decode(original[:end])
        assert not result.valid
