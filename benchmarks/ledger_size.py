# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Figures, not a test: the remediation ledger's size (its ConfigMap's data, ``ledger.dump``) for a fleet of N GPU nodes with
a share in flight. Each open entry is what a quarantine writes for a GPU-scoped reset of an 8-GPU node at its heaviest:
one GPU, two signal keys, the driver, its claim, its step ``awaiting_pods`` with its waited-for pods (``--waiting`` each,
names of 40 characters and their UIDs); the closed history fills the rest (``MAX_ENTRIES`` entries at most, the oldest
dropped first). A ConfigMap holds 1 MiB; the ledger is written at most ``MAX_BYTES`` (900 KiB).

  .venv/bin/python benchmarks/ledger_size.py [--nodes 1000 5000 20000] [--in-flight 0.1] [--waiting 4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "build", "collections"))
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers  # noqa: E402


def entry(n, now, open_, waiting):
    e = {"node": "gpu-node-%05d.rack-%03d.example.internal" % (n, n // 40), "gpus": ["GPU-%08x-1111-2222-3333-%012x" % (n, 0)],
         "action": "reset", "keys": ["xid:79", "recovery:reset"], "driver_version": "580.95.05", "at": now - 600, "run": "job-%d" % n,
         "scope": "gpu", "cordoned_by_us": True, "boot_id": "%08x-aaaa-bbbb-cccc-%012x" % (n, n)}
    if open_:
        e.update(step="awaiting_pods", claim={"run": "job-%d" % n, "until": now + 3600}, closed_at=None,
                 waiting_for=[{"pod": "training-team-%02d/pytorchjob-worker-%05d-%d" % (n % 50, n, w), "uid": "%08x-0000-4000-8000-%012x" % (n, w),
                               "due_at": now + 3600} for w in range(waiting)])
    else:
        e.update(closed_at=now - 60, result="recovered", recover_seconds=58.0)
    return e


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 20000])
    parser.add_argument("--in-flight", type=float, default=0.1)
    parser.add_argument("--waiting", type=int, default=4)
    args = parser.parse_args()
    now = 1796500000
    for nodes in args.nodes:
        opened = int(nodes * args.in_flight)
        ledger = ledgers.empty()
        ledger["entries"] = [entry(n, now, False, 0) for n in range(ledgers.MAX_ENTRIES)] + [
            entry(100000 + n, now, True, args.waiting) for n in range(opened)]
        row = {"nodes": nodes, "in_flight": opened, "open_entry_bytes": len(json.dumps(entry(1, now, True, args.waiting), separators=(",", ":")))}
        try:
            data = ledgers.dump(ledger)[ledgers.KEY]
            kept = json.loads(data)["entries"]
            row.update(bytes=len(data), entries=len(kept), closed_kept=sum(1 for e in kept if e.get("closed_at")), fits=True)
        except ledgers.LedgerError as exc:
            row.update(fits=False, error=str(exc)[:160])
        print(json.dumps(row))


if __name__ == "__main__":
    main()
