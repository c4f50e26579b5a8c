# The Ansible ecosystem's own collection checks, through antsibull-nox: its sessions are declared in
# antsibull-nox.toml (lint with ruff and yamllint, antsibull-docs' docs lint, no-unwanted-files and
# the action groups, the build and galaxy-importer's import). `make nox` runs the default ones;
# `nox -l` lists them. https://docs.ansible.com/projects/antsibull-nox/
#
# /// script
# dependencies = ["nox>=2025.02.09", "antsibull-nox"]
# ///

import os
import re
import shutil
import sys

import nox

try:
    import antsibull_nox
except ImportError:
    print("You need to install antsibull-nox in the same Python environment as nox.")
    sys.exit(1)


antsibull_nox.load_antsibull_nox_toml()


# Sphinx warnings that only say docs.ansible.com's inventory (intersphinx) is out of reach, as it is
# from this project's machines: references to ansible-core's docs and other collections' labels
_OFFLINE_ONLY = re.compile(
    r"failed to reach any of the inventories|intersphinx inventory .* not fetchable"
    r"|undefined label: '(?!ansible_collections\.gpuops\.)[^']*'|'envvar' reference target not found: ANSIBLE_"
)


@nox.session(name="docs-site", default=True)
def docs_site(session: nox.Session) -> None:
    """Build the collection's docs site (antsibull-docs and Sphinx, as docs.ansible.com renders collections)
    into build/docsite/html: the modules, plugins and roles from their docs, the guides from docs/docsite.
    The collection comes from ANSIBLE_COLLECTIONS_PATH (make nox sets it). Any Sphinx warning fails the
    build but those that only say docs.ansible.com's inventory could not be fetched (_OFFLINE_ONLY)."""
    dest = os.path.join(session.create_tmp(), "docsite")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest, mode=0o700)
    session.install("ansible-core", "antsibull-docs>=2,<3")
    session.run("antsibull-docs", "sphinx-init", "--use-current", "--squash-hierarchy", "--fail-on-error",
                "--title", "gpuops.fleet", "--dest-dir", dest, "gpuops.fleet")
    session.install("-r", os.path.join(dest, "requirements.txt"))
    rst = os.path.join(dest, "rst")
    os.makedirs(rst, mode=0o700, exist_ok=True)
    session.run("antsibull-docs", "--config-file", os.path.join(dest, "antsibull-docs.cfg"), "collection",
                "--cleanup", "everything", "--fail-on-error", "--use-current", "--squash-hierarchy",
                "--dest-dir", rst, "gpuops.fleet")
    _fleet_page_picture(session, rst)
    warnings = os.path.join(dest, "warnings.txt")
    session.run("sphinx-build", "-M", "html", rst, os.path.join(dest, "build"), "-c", dest, "-q", "-w", warnings, silent=True)
    with open(warnings, encoding="utf-8") as handle:
        ours = [line for line in handle.read().splitlines() if "WARNING" in line and not _OFFLINE_ONLY.search(line)]
    if ours:
        session.error("the docs site has %d Sphinx warning(s):\n%s" % (len(ours), "\n".join(ours)))
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build", "docsite", "html")
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(os.path.join(dest, "build", "html"), out)
    session.log("docs site: %s" % os.path.join(out, "index.html"))


# The fleet page's picture, taken by the browser test (tests/lab/test_fleet_page_browser.py, make lab-test) at this tree: put
# under the health guide's "The fleet page" in the site this session builds, so the picture is never older than the code.
# The collection's own docs (galaxy-importer, docs.ansible.com) carry the guide's text alone: a picture there would go stale.
PICTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build", "docsite-images", "fleet-page.png")


def _fleet_page_picture(session: nox.Session, rst: str) -> None:
    guide = os.path.join(rst, "docsite", "guide_health.rst")
    if not os.path.exists(PICTURE) or not os.path.exists(guide):
        session.log("no picture of the fleet page (make lab-test takes it): the site shows the guide's text alone")
        return
    shutil.copy(PICTURE, os.path.join(rst, "docsite", "fleet-page.png"))
    with open(guide, "a", encoding="utf-8") as handle:
        handle.write("\n.. image:: fleet-page.png\n   :alt: the fleet page of the lab's gpu_health.yml in Debian's chromium\n\n"
                     "The lab's ``gpu_health.yml`` page (SIMULATED GPUs), lab-gpushare's GPU 1 clicked, as the browser test saw it "
                     "when this site was built.\n")


if __name__ == "__main__":
    nox.main()
