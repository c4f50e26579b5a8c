# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release notes: CHANGELOG.rst is what antsibull-changelog generates from changelogs/changelog.yaml,
with the New Modules, New Plugins (Filter, Lookup) and New Roles sections, for the version galaxy.yml builds (or, for a
version in development, newer than the last release with its changes in fragments)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_changelog_rst_is_generated_and_lists_new_roles_filters_and_modules(tmp_path):
    # antsibull-changelog finds the collection from its path: a copy laid out as ansible_collections/gpuops/fleet
    copy = tmp_path / "ansible_collections" / "gpuops" / "fleet"
    copy.mkdir(parents=True)
    for name in ("galaxy.yml", "changelogs"):
        source = os.path.join(ROOT, name)
        (shutil.copytree if os.path.isdir(source) else shutil.copy)(source, str(copy / name))
    tool = os.path.join(os.path.dirname(sys.executable), "antsibull-changelog")
    subprocess.run([tool, "generate"], cwd=str(copy), check=True, capture_output=True)
    with open(os.path.join(ROOT, "CHANGELOG.rst"), encoding="utf-8") as handle:
        committed = handle.read()
    assert (copy / "CHANGELOG.rst").read_text(encoding="utf-8") == committed, "CHANGELOG.rst is stale: run antsibull-changelog generate"
    with open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8") as handle:
        version = yaml.safe_load(handle)["version"]
    if "\nv%s\n" % version not in committed:
        # a version in development: newer than the last release, with its changes in fragments until it is released
        with open(os.path.join(ROOT, "changelogs", "changelog.yaml"), encoding="utf-8") as handle:
            released = sorted(yaml.safe_load(handle)["releases"], key=lambda v: tuple(int(x) for x in v.split(".")))
        assert tuple(int(x) for x in version.split(".")) > tuple(int(x) for x in released[-1].split(".")), (version, released[-1])
        pending = [n for n in os.listdir(os.path.join(ROOT, "changelogs", "fragments")) if n.endswith((".yml", ".yaml"))]
        assert pending, "galaxy.yml says %s, which is neither released in CHANGELOG.rst nor has changelog fragments" % version
    for heading in ("New Modules\n-----------", "New Plugins\n-----------", "Filter\n~~~~~~", "Lookup\n~~~~~~", "New Roles\n---------"):
        assert heading in committed, heading
    for entry in ("- checkpoint_guard - ", "- device_plugin - ", "- fleet_node_summary - ", "- kubelet_checkpoint - ", "- run_dir - "):
        assert entry in committed, entry
