# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One activation of the event source gpuops.fleet.gpu_nodes without ansible-rulebook, for the two-activation test: the
source's own main() (as ansible-rulebook calls it) with the options given as JSON, each event printed as one JSON line with
the time it was put on the queue.  python source_process.py '<options JSON>'"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "build", "collections"))
SOURCE = os.path.join(ROOT, "build", "collections", "ansible_collections", "gpuops", "fleet", "extensions", "eda", "plugins",
                      "event_source", "gpu_nodes.py")


class Printed:
    async def put(self, event):
        print(json.dumps({"at": time.time(), "event": event}, default=str), flush=True)


def main():
    spec = importlib.util.spec_from_file_location("gpu_nodes_source", SOURCE)
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    asyncio.run(source.main(Printed(), json.loads(sys.argv[1])))


if __name__ == "__main__":
    main()
