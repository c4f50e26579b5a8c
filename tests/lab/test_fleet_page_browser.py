# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 61, item 3: the fleet page in a real browser. Debian's chromium, headless, driven by Selenium through Debian's
chromium-driver (the driver built from the same source package as the browser, so their versions always agree; Playwright
pins and downloads its own Chromium build, which this workplace cannot reach, and supports no other).

The lab's gpu_health.yml (SIMULATED GPUs) writes gpu-health.json and gpu-health.html: every node and GPU of the JSON is on
the page with its state and the legend's colour, the filters work; a report with a node's hostile text (markup, a script, a
very long name) shows that text as text and runs nothing; a page of 1,000 nodes of 8 GPUs has every node.

make lab-test sets GPUOPS_REQUIRE_BROWSER=1: there a missing browser fails the test (hack/check-deps.sh installs it); the
ansible-core matrix's lines, which have no Selenium, skip it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpuops.fleet.plugins.filter.fleet_report import fleet_page
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _fleet_page as pages

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
REQUIRED = os.environ.get("GPUOPS_REQUIRE_BROWSER") == "1"


def _rgb(colour):
    return "rgb(%d, %d, %d)" % tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


@pytest.fixture(scope="module")
def browser():
    try:
        from selenium import webdriver  # pylint: disable=import-outside-toplevel
        from selenium.webdriver.chrome.service import Service  # pylint: disable=import-outside-toplevel
    except ImportError:
        if REQUIRED:
            raise
        pytest.skip("Selenium is not installed here (requirements-dev.txt)")
    found = [shutil.which(n) for n in ("chromium", "chromedriver")]
    if not all(found):
        if REQUIRED:
            pytest.fail("Debian's chromium and chromium-driver are needed (hack/check-deps.sh --install)")
        pytest.skip("no chromium/chromedriver here")
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    options.binary_location = found[0]
    driver = webdriver.Chrome(service=Service(found[1]), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def open_page(driver, path):
    driver.get("file://" + str(path))
    assert driver.execute_script("return document.body.getAttribute('data-ready')") == "1", "the page's script did not run to its end"


def rows(driver):
    """Each row as the browser shows it: node text, state, whether displayed, its cells' (gpu, state, colour, title)."""
    return driver.execute_script("""
      return Array.from(document.querySelectorAll('#rows tr')).map(function (tr) {
        return {node: tr.cells[0].textContent, state: tr.cells[1].textContent, shown: tr.style.display !== 'none',
                cells: Array.from(tr.querySelectorAll('.cell')).map(function (c) {
                  return [c.getAttribute('data-gpu'), c.getAttribute('data-state'), getComputedStyle(c).backgroundColor, c.title]; })};
      });""")


@pytest.fixture(scope="module")
def health_report(tmp_path_factory, fake_lib_dir):  # pylint: disable=unused-argument
    base = tmp_path_factory.mktemp("page-lab")
    extra = {"gpuops_lab_root": str(base) + "/nodes/{{ inventory_hostname }}", "gpuops_report_dir": str(base / "report")}
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(base / "tmp"))
    for playbook in (os.path.join(ROOT, "lab", "setup.yml"), os.path.join(ROOT, "playbooks", "gpu_health.yml")):
        proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", os.path.join(ROOT, "lab", "inventory.yml"), "-e", json.dumps(extra),
                               playbook], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return base / "report"


def test_site_ymls_page_in_check_mode_shows_each_nodes_checkpoint_on_its_gpus(browser, health_report):
    base = health_report.parent
    extra = {"gpuops_lab_root": str(base) + "/nodes/{{ inventory_hostname }}", "gpuops_report_dir": str(base / "site")}
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(base / "tmp"))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", os.path.join(ROOT, "lab", "inventory.yml"), "-e", json.dumps(extra),
                           "--check", os.path.join(ROOT, "playbooks", "site.yml")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    summary = json.loads((base / "site" / "fleet-summary.json").read_text())
    open_page(browser, base / "site" / "fleet-summary.html")
    shown = dict((r["node"], r) for r in rows(browser))
    assert sorted(shown) == sorted(n["node"] for n in summary["nodes"])
    for node in summary["nodes"]:
        assert len(shown[node["node"]]["cells"]) == max(1, len(node["gpu_uuids"])), node
    states = dict((name, r["state"]) for name, r in shown.items())
    assert states == {"lab-healthy": "up_to_date", "lab-replaced-gpu": "stale", "lab-gpushare": "stale", "lab-corrupt": "corrupt",
                      "lab-no-driver": "unknown"}, states
    assert all(c[2] == _rgb(pages.COLOURS[c[1]]) for r in shown.values() for c in r["cells"])


def test_every_node_and_gpu_of_the_report_is_on_the_page_with_its_state_and_colour_and_the_filters_work(browser, health_report):
    report = json.loads((health_report / "gpu-health.json").read_text())
    open_page(browser, health_report / "gpu-health.html")
    shown = dict((r["node"], r) for r in rows(browser))
    assert sorted(shown) == sorted(n["node"] for n in report["nodes"])
    for node in report["nodes"]:
        want = [(str(g["index"]), g["state"]) for g in node["gpu_detail"]] or [("-", node["state"])]
        got = shown[node["node"]]
        assert [(c[0], c[1]) for c in got["cells"]] == want, (node["node"], got)
        assert all(c[2] == _rgb(pages.COLOURS[c[1]]) for c in got["cells"]), got  # the legend's colour
        assert got["state"] == node["state"]
    # the lab as its README tells it: lab-gpushare's GPU 1 asks for a reset; lab-no-driver is unknown, never faulty
    assert [c[1] for c in shown["lab-gpushare"]["cells"]] == ["ok", "faulty"]
    assert "GPU_RESET" in shown["lab-gpushare"]["cells"][1][3] and shown["lab-no-driver"]["state"] == "unknown"
    legend = browser.execute_script("return Array.from(document.querySelectorAll('#legend .key')).map(function (k) { return k.getAttribute('data-state'); })")
    assert set(legend) == set(c[1] for r in shown.values() for c in r["cells"]) | set(r["state"] for r in shown.values())

    box = browser.find_element("id", "f-node")
    box.send_keys("gpushare")
    assert [r["node"] for r in rows(browser) if r["shown"]] == ["lab-gpushare"]
    box.clear()
    browser.execute_script("var s = document.getElementById('f-state'); s.value = 'unknown'; s.dispatchEvent(new Event('change'));")
    assert [r["node"] for r in rows(browser) if r["shown"]] == ["lab-no-driver"]
    assert browser.find_element("id", "count").text == "1 of %d nodes" % len(report["nodes"])
    # a cell's details on click: its reasons, recovery action and XIDs
    browser.execute_script("var s = document.getElementById('f-state'); s.value = ''; s.dispatchEvent(new Event('change'));")
    browser.execute_script("document.querySelector('tr[data-node=\"lab-gpushare\"] .cell[data-gpu=\"1\"]').click();")
    detail = browser.find_element("id", "detail").text
    assert "GPU 1" in detail and "recovery action: GPU_RESET" in detail and "XIDs: 119" in detail, detail
    os.makedirs(os.path.join(ROOT, "build", "docsite-images"), exist_ok=True)
    browser.save_screenshot(os.path.join(ROOT, "build", "docsite-images", "fleet-page.png"))


HOSTILE = [
    '<img src=x onerror="document.body.setAttribute(\'data-pwned\', \'img\')">',
    '</script><script>document.body.setAttribute("data-pwned", "script")</script>',
    "gpu-" + "x" * 5000,
]


def test_a_nodes_hostile_text_is_shown_as_text_and_runs_nothing(browser, tmp_path):
    """Rows as a node could make them: its name and its reasons are its own data (the page cuts a text at 300)."""
    nodes = [{"node": text, "state": "faulty", "action": "reset", "line": text, "reasons": [text],
              "gpu_detail": [{"index": 0, "uuid": text, "state": "faulty", "action": "reset", "reasons": [text], "recovery": text, "xids": [text]}]}
             for text in HOSTILE]
    page = tmp_path / "hostile.html"
    page.write_text(fleet_page({"nodes": nodes, "plan": None}, "gpu_health", title=HOSTILE[1], generated_at=HOSTILE[0]))
    open_page(browser, page)
    assert browser.execute_script("return document.body.getAttribute('data-pwned')") is None
    assert browser.execute_script("return document.querySelectorAll('img, script:not([id]):not([type])').length") == 1  # the page's own script
    names = [r["node"] for r in rows(browser)]
    assert sorted(names) == sorted(t if len(t) <= 300 else t[:297] + "..." for t in HOSTILE)
    assert browser.title == HOSTILE[1] and HOSTILE[0] in browser.find_element("id", "meta").text
    assert any(HOSTILE[1] in c[3] for r in rows(browser) for c in r["cells"])  # a reason, as text, in the cell's title


def test_a_page_of_1000_nodes_of_8_gpus_has_every_node(browser, tmp_path):
    nodes = [{"node": "gpu-%04d" % i, "state": "faulty" if i % 50 == 0 else "ok", "action": "reset" if i % 50 == 0 else "none",
              "line": "", "reasons": [], "gpu_detail": [{"index": g, "uuid": "GPU-%04d-%d" % (i, g), "state": "faulty" if i % 50 == 0 and g == 3 else "ok",
                                                         "action": "none", "reasons": [], "recovery": "NONE", "xids": []} for g in range(8)]}
             for i in range(1000)]
    page = tmp_path / "big.html"
    page.write_text(fleet_page({"nodes": nodes, "plan": None}, "gpu_health"))
    open_page(browser, page)
    got = rows(browser)
    assert len(got) == 1000 and all(len(r["cells"]) == 8 for r in got)
    assert sum(1 for r in got for c in r["cells"] if c[1] == "faulty") == 20
