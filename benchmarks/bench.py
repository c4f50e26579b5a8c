# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Speed figures for gpuops.fleet (prints numbers; not a test).

1. parse + verify (kubelet checksum) + plan for an 8-GPU node whose checkpoint
   holds 150 pod entries with realistic AllocResp payloads (goal: < 5 ms);
   then decode + verify of a file just under max_bytes (16 MiB): it must finish,
   linearly (about 1 s per MB on a loaded 2-core machine);
2. wall time per task of ansible.builtin.ping, gpuops.fleet.gpu_uuid_facts and
   gpuops.fleet.kubelet_checkpoint on localhost, in the same playbook run, with
   simulated GPUs (fake libnvidia-ml.so.1) (goal: each within 1.3x of ping).

Run: make bench   (or: .venv/bin/python benchmarks/bench.py [--iterations N] [--tasks N])
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "build", "collections"), os.path.join(ROOT, "tests", "fakes")]

import fakenode  # noqa: E402

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec  # noqa: E402
from ansible_collections.gpuops.fleet.plugins.module_utils._node import device_ids as ids  # noqa: E402
from ansible_collections.gpuops.fleet.plugins.module_utils._node import reconcile as rc  # noqa: E402

# A real NVIDIA plugin AllocResp (NVIDIA_VISIBLE_DEVICES + 5 device specs), 195 bytes.
ALLOC = base64.b64decode(
    "CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS03N2E3MDJkYi1lMzdmLTNhNzQtZDQ2ZC1jNTcxM2Y2NjA1OGMaJAoOL2Rldi9udmlkaWFjdGwSDi9kZXYv"
    "bnZpZGlhY3RsGgJydxomCg8vZGV2L252aWRpYS11dm0SDy9kZXYvbnZpZGlhLXV2bRoCcncaMgoVL2Rldi9udmlkaWEtdXZtLXRvb2xzEhUvZGV2L252aWRpYS11"
    "dm0tdG9vbHMaAnJ3Gi4KEy9kZXYvbnZpZGlhLW1vZGVzZXQSEy9kZXYvbnZpZGlhLW1vZGVzZXQaAnJ3GiAKDC9kZXYvbnZpZGlhMBIML2Rldi9udmlkaWEwGgJydw=="
)


def uuid(i):
    return "GPU-%08x-e770-3ea8-8ac3-8a1d419763e0" % (0x0650A168 + i)


def node_checkpoint(gpus=8, entries=150):
    """150 entries over 8 GPUs: time-sliced nvidia.com/gpu replicas and gpushare units, one stale GPU."""
    registered = {
        "nvidia.com/gpu": ["%s::%d" % (uuid(g), r) for g in range(gpus) for r in range(10)],
        "aliyun.com/gpu-mem": ["%s-_-%d" % (uuid(g), u) for g in range(gpus) for u in range(16)],
        "rdma/hca": ["mlx5_%d" % i for i in range(4)],
    }
    pods = []
    for i in range(entries):
        g = i % gpus
        if i % 2:
            pods.append(codec.PodDevicesEntry("pod-%04d" % i, "app", "nvidia.com/gpu", {g // 4: ["%s::%d" % (uuid(g), i % 10)]}, ALLOC))
        else:
            pods.append(codec.PodDevicesEntry("pod-%04d" % i, "app", "aliyun.com/gpu-mem", {g // 4: ["%s-_-%d" % (uuid(g), i % 16)]}, ALLOC[:150]))
    data, dummy = codec.encode(codec.Checkpoint("v2", pods, registered))
    facts = {"available": True, "gpus": [{"index": g, "uuid": uuid(g) if g != 3 else uuid(99)} for g in range(gpus)]}
    return data, facts


def bench_codec(iterations):
    data, facts = node_checkpoint()
    dump_len = len(codec.spew_dump("v2", *_entries_registered(data)))
    timings = []
    for dummy in range(iterations):
        start = time.perf_counter()
        decoded = codec.decode(data)
        assert decoded.valid
        inventory = ids.inventory_from_facts(facts)
        plan = rc.plan(decoded.checkpoint, inventory, ids.DEFAULT_GPU_RESOURCES)
        timings.append(time.perf_counter() - start)
    assert plan.is_stale
    print("parse+verify+plan, 8 GPUs, 150 pod entries (file %d bytes, hashed dump %d bytes), %d runs:" % (len(data), dump_len, iterations))
    print("  median %.2f ms   min %.2f ms   max %.2f ms   (goal < 5 ms)" % (statistics.median(timings) * 1e3, min(timings) * 1e3, max(timings) * 1e3))
    parts = {}
    for name, fn in (("json parse + Go-strict decode", lambda: codec.decode_tree(codec.parse_json(data), "v2")),):
        parts[name] = min(_time(fn) for dummy in range(max(5, iterations // 4)))
    cp = codec.decode(data).checkpoint
    parts["go-spew dump"] = min(_time(lambda: codec.spew_dump("v2", cp.entries, cp.registered)) for dummy in range(10))
    dump = codec.spew_dump("v2", cp.entries, cp.registered)
    parts["fnv32a over dump"] = min(_time(lambda: codec.fnv32a(dump)) for dummy in range(10))
    for name, value in parts.items():
        print("  %-30s %.2f ms (min)" % (name, value * 1e3))


def bench_large(max_bytes=16 * 1024 * 1024):
    """A checkpoint just under max_bytes: pod entries until the encoded file reaches the limit."""
    data, dummy = node_checkpoint()
    cp = codec.decode(data).checkpoint
    count = max_bytes // (len(data) // len(cp.entries))
    while True:
        entries = [cp.entries[i % len(cp.entries)] for i in range(count)]
        big, dummy = codec.encode(codec.Checkpoint("v2", entries, cp.registered))
        if 0.99 * max_bytes <= len(big) <= max_bytes:
            break
        count = int(count * max_bytes / len(big) * 0.995)
    half, dummy = codec.encode(codec.Checkpoint("v2", entries[: len(entries) // 2], cp.registered))
    print("decode + verify of large files (linear in size; max_bytes %d):" % max_bytes)
    for label, blob in (("half", half), ("full", big)):
        start = time.perf_counter()
        decoded = codec.decode(blob)
        took = time.perf_counter() - start
        assert decoded.valid
        print("  %-4s %9d bytes, %6d entries: %6.2f s  (%.2f s per MB)" % (label, len(blob), len(decoded.checkpoint.entries), took, took / (len(blob) / 1e6)))


def _entries_registered(data):
    cp = codec.decode(data).checkpoint
    return cp.entries, cp.registered


def _time(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    ckpt: "{{ workdir }}/kubelet_internal_checkpoint"
  tasks:
    - name: warm-up
      ansible.builtin.ping:
    - name: ping
      ansible.builtin.ping:
      loop: "{{ range(n) | list }}"
    - name: gpu_uuid_facts
      gpuops.fleet.gpu_uuid_facts:
      loop: "{{ range(n) | list }}"
    - name: kubelet_checkpoint
      gpuops.fleet.kubelet_checkpoint:
        checkpoint_path: "{{ ckpt }}"
        backup_dir: "{{ workdir }}/backups"
        lock_dir: "{{ workdir }}/run"
      loop: "{{ range(n) | list }}"
"""


def bench_tasks(n):
    bindir = os.path.dirname(sys.executable)
    with tempfile.TemporaryDirectory() as tmp:
        lib = fakenode.build_lib(os.path.join(ROOT, "build", "fakes"))
        config = fakenode.write_config(os.path.join(tmp, "node.cfg"), [fakenode.gpu(uuid(g), bus="00000000:%02x:00.0" % (g + 7), minor=g) for g in range(8)])
        data, dummy = node_checkpoint()
        # an up-to-date checkpoint: every run reads, verifies and plans, and changes nothing
        cp = codec.decode(data).checkpoint
        facts = {"available": True, "gpus": [{"index": g, "uuid": uuid(g)} for g in range(8)]}
        assert not rc.plan(cp, ids.inventory_from_facts(facts), ids.DEFAULT_GPU_RESOURCES).is_stale
        with open(os.path.join(tmp, "kubelet_internal_checkpoint"), "wb") as handle:
            handle.write(data)
        book = os.path.join(tmp, "bench.yml")
        with open(book, "w") as handle:
            handle.write(PLAYBOOK)
        env = fakenode.environ(lib, config)
        env.update(
            ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
            ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"),
            ANSIBLE_PYTHON_INTERPRETER=sys.executable,
            ANSIBLE_LOCAL_TEMP=os.path.join(tmp, "local"),
        )
        proc = subprocess.run(
            [os.path.join(bindir, "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e", json.dumps({"workdir": tmp, "n": n}), book],
            env=env, capture_output=True, text=True, check=True,
        )
    report = json.loads(proc.stdout)
    per_task = {}
    for task in report["plays"][0]["tasks"]:
        name = task["task"]["name"]
        duration = task["task"]["duration"]
        per_task[name] = _seconds(duration["end"]) - _seconds(duration["start"])
    ping = per_task["ping"] / n
    print("Ansible task wall time on localhost, %d runs each in one playbook (simulated GPUs: 8 x fake NVML):" % n)
    for name in ("ping", "gpu_uuid_facts", "kubelet_checkpoint"):
        each = per_task[name] / n
        print("  %-20s %6.1f ms/run   %.2fx ping   (goal <= 1.30x)" % (name, each * 1e3, each / ping))


def _seconds(stamp):
    # e.g. 2026-11-21T20:10:01.123456Z
    clock = stamp.rstrip("Z").split("T")[1]
    h, m, s = clock.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--codec-only", action="store_true", help="only the codec figures (no Ansible run)")
    args = parser.parse_args()
    print("python %s" % sys.version.split()[0])
    bench_codec(args.iterations)
    bench_large()
    if not args.codec_only:
        bench_tasks(args.tasks)


if __name__ == "__main__":
    main()
