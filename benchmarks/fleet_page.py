# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Figures, not a test: the fleet page (plugins/plugin_utils/_fleet_page.py) at N nodes of 8 GPUs (1 in 50 nodes with a
faulty GPU and its reasons and XIDs, the rest healthy): the page's size, the time to build it (the filter), and the time
Debian's chromium (headless, Selenium and chromium-driver) takes from loading the file to the page's script having drawn
every row (the body's data-ready), then to filter by state. Median of --runs.

  .venv/bin/python benchmarks/fleet_page.py [--nodes 1000 5000] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "build", "collections"))

from ansible_collections.gpuops.fleet.plugins.filter.fleet_report import fleet_page  # noqa: E402  pylint: disable=wrong-import-position


def report(count):
    nodes = []
    for i in range(count):
        bad = i % 50 == 0
        gpus = [{"index": g, "uuid": "GPU-%08x-0000-0000-0000-%012x" % (i, g), "state": "faulty" if bad and g == 3 else "ok",
                 "action": "reset" if bad and g == 3 else "none", "recovery": "GPU_RESET" if bad and g == 3 else "NONE",
                 "reasons": ["GPU-%08x: recovery action GPU_RESET (nvml_field): NVIDIA says reset the GPU (nvidia-smi -r)" % i] if bad and g == 3 else [],
                 "xids": ["79 GPU has fallen off the bus"] if bad and g == 3 else []} for g in range(8)]
        nodes.append({"node": "gpu-node-%05d.rack-%02d.example.com" % (i, i % 40), "state": "faulty" if bad else "ok",
                      "action": "reset" if bad else "none", "line": "", "reasons": [], "gpu_detail": gpus})
    return {"nodes": nodes, "plan": None}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    from selenium import webdriver  # pylint: disable=import-outside-toplevel
    from selenium.webdriver.chrome.service import Service  # pylint: disable=import-outside-toplevel

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        for count in args.nodes:
            data = report(count)
            began = time.monotonic()
            html = fleet_page(data, "gpu_health", generated_at="benchmark")
            build = time.monotonic() - began
            with tempfile.NamedTemporaryFile("w", suffix=".html", delete=False) as handle:
                handle.write(html)
            loads, filters = [], []
            for dummy in range(args.runs):
                began = time.monotonic()
                driver.get("file://" + handle.name)
                while driver.execute_script("return document.body && document.body.getAttribute('data-ready')") != "1":
                    time.sleep(0.005)
                loads.append(time.monotonic() - began)
                began = time.monotonic()
                shown = driver.execute_script("var s = document.getElementById('f-state'); s.value = 'faulty'; s.dispatchEvent(new Event('change'));"
                                              "return document.getElementById('count').textContent;")
                filters.append(time.monotonic() - began)
            os.unlink(handle.name)
            print("%d nodes x 8 GPUs: page %.0f KiB (%d bytes), built in %.2f s; chromium: drawn in %.2f s (median of %d, max %.2f), "
                  "filter by state %.3f s (%s)" % (count, len(html.encode()) / 1024.0, len(html.encode()), build,
                                                   statistics.median(loads), args.runs, max(loads), statistics.median(filters), shown))
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
