# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection tarball users install: what FQCN playbooks and ansible-doc need, none of the dev tree."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_tarball_ships_the_collection_and_its_license_not_the_dev_tree(tmp_path):
    galaxy = os.path.join(os.path.dirname(sys.executable), "ansible-galaxy")
    subprocess.run([galaxy, "collection", "build", "--output-path", str(tmp_path), ROOT], check=True, capture_output=True)
    (tarball,) = [p for p in tmp_path.iterdir() if p.name.endswith(".tar.gz")]
    with tarfile.open(str(tarball)) as tar:
        names = set(tar.getnames())
    tops = set(n.split("/")[0] for n in names)
    assert tops == {"FILES.json", "MANIFEST.json", "LICENSE", "README.md", "CHANGELOG.rst", "requirements.yml", "requirements.txt",
                    "bindep.txt", "changelogs", "docs", "meta", "playbooks", "plugins", "roles", "extensions"}
    for needed in ("playbooks/site.yml", "playbooks/recover_pods.yml", "playbooks/device_plugin.yml", "playbooks/vars/kubelet_restarts.yml",
                   "plugins/modules/kubelet_checkpoint.py", "plugins/module_utils/_node/repair.py", "plugins/filter/fleet_rows.yml",
                   "roles/checkpoint_guard/files/gpuops_main.py", "plugins/plugin_utils/_guard_files.py", "roles/device_plugin/templates/verify-pod.yml.j2",
                   "meta/runtime.yml", "meta/execution-environment.yml", "changelogs/changelog.yaml",
                   # Event-Driven Ansible: ansible-rulebook finds a collection's sources and rulebooks there
                   "extensions/eda/plugins/event_source/gpu_nodes.py", "extensions/eda/rulebooks/gpu_health.yml"):
        assert needed in names, needed
    assert not any(n.startswith("extensions/molecule") for n in names)  # the test scenarios stay in the dev tree
    assert not any(n.startswith("changelogs/fragments") or "__pycache__" in n for n in names)
    with tarfile.open(str(tarball)) as tar:
        license_text = tar.extractfile("LICENSE").read().decode()
    assert "GNU GENERAL PUBLIC LICENSE" in license_text and "Version 3, 29 June 2007" in license_text
