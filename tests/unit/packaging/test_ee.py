# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The execution environment: ansible-builder finds the collection's dependencies, and the build
context `ansible-builder create` writes from execution-environment.yml is complete (hack/ee.sh).

No image is built here (no base image in CI: registries are unreachable); `make ee` builds one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.path.dirname(sys.executable)
CONTEXT = os.path.join(ROOT, "build", "ee", "context")


def _ee_context():
    env = dict(os.environ, BIN=BIN)
    proc = subprocess.run([os.path.join(ROOT, "hack", "ee.sh"), "context"], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _version():
    with open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)["version"]


def test_builder_context_holds_the_collection_the_base_and_a_tested_ansible_core(tmp_path):
    _ee_context()
    with open(os.path.join(CONTEXT, "Containerfile"), encoding="utf-8") as handle:
        containerfile = handle.read()
    assert 'ARG EE_BASE_IMAGE="localhost/gpuops-ee-base:bookworm"' in containerfile
    assert 'ARG PKGMGR="/usr/bin/apt-get"' in containerfile
    # the EE's ansible-core is the line `make test` runs everything on (requirements-dev.txt)
    with open(os.path.join(ROOT, "requirements-dev.txt"), encoding="utf-8") as handle:
        core = re.search(r"^(ansible-core[^\s#]+)", handle.read(), re.M).group(1)
    refs = re.search(r'^ARG ANSIBLE_INSTALL_REFS="([^"]*)"', containerfile, re.M).group(1).split()
    assert core in refs and any(r.startswith("ansible-runner") for r in refs), refs
    assert "COPY _build/collections /build/collections" in containerfile
    with open(os.path.join(CONTEXT, "_build", "requirements.yml"), encoding="utf-8") as handle:
        wanted = yaml.safe_load(handle)["collections"]
    assert [c["name"] for c in wanted] == ["/build/collections/gpuops-fleet.tar.gz", "/build/collections/kubernetes-core.tar.gz"]
    # the tarballs the galaxy stage installs are there, and are what ansible-galaxy installs
    built = os.path.join(CONTEXT, "_build", "collections")
    with tarfile.open(os.path.join(built, "gpuops-fleet.tar.gz")) as tar:
        manifest = yaml.safe_load(tar.extractfile("MANIFEST.json"))
    assert manifest["collection_info"]["version"] == _version()
    target = tmp_path / "collections"
    proc = subprocess.run(
        [os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--force", "--no-deps", "-p", str(target),
         os.path.join(built, "gpuops-fleet.tar.gz"), os.path.join(built, "kubernetes-core.tar.gz")],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (target / "ansible_collections" / "kubernetes" / "core" / "plugins" / "modules" / "k8s.py").is_file()

    # what the builder stage's introspection finds in the installed collections
    proc = subprocess.run([os.path.join(BIN, "ansible-builder"), "introspect", "--sanitize", str(target)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    found = yaml.safe_load(proc.stdout.split("---", 1)[1])
    assert "kubernetes>=24.2.0  # from collection gpuops.fleet" in found["python"]
    assert "openssh-client [platform:dpkg]  # from collection gpuops.fleet" in found["system"]
    assert "openssh-clients [platform:rpm]  # from collection gpuops.fleet" in found["system"]
    assert "kubernetes-client [platform:dpkg]  # from collection gpuops.fleet" in found["system"]  # kubectl: the API path


def test_definition_is_builder_v3_and_the_collection_declares_its_dependency_files():
    with open(os.path.join(ROOT, "execution-environment.yml"), encoding="utf-8") as handle:
        definition = yaml.safe_load(handle)
    assert definition["version"] == 3
    with open(os.path.join(ROOT, "meta", "execution-environment.yml"), encoding="utf-8") as handle:
        meta = yaml.safe_load(handle)
    assert meta == {"version": 1, "dependencies": {"python": "requirements.txt", "system": "bindep.txt"}}
    for name in meta["dependencies"].values():
        assert os.path.isfile(os.path.join(ROOT, name)), name


def test_the_decision_environment_context_holds_the_rulebook_its_java_and_the_collections():
    """decision-environment.yml (EDA controller activations): ansible-builder v3, ansible-rulebook pinned as CI runs it,
    Java 17 for its rules engine, this collection and kubernetes.core (the event source's API client)."""
    env = dict(os.environ, BIN=BIN)
    proc = subprocess.run([os.path.join(ROOT, "hack", "ee.sh"), "de-context"], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    context = os.path.join(ROOT, "build", "de", "context")
    with open(os.path.join(context, "_build", "requirements.txt"), encoding="utf-8") as handle:
        python = handle.read()
    with open(os.path.join(ROOT, "requirements-dev.txt"), encoding="utf-8") as handle:
        rulebook = re.search(r"^(ansible-rulebook[^\s#]+)", handle.read(), re.M).group(1)
    assert rulebook in python and "kubernetes>=24.2.0" in python
    with open(os.path.join(context, "_build", "bindep.txt"), encoding="utf-8") as handle:
        assert "openjdk-17-jre-headless [platform:dpkg]" in handle.read()
    with open(os.path.join(context, "_build", "requirements.yml"), encoding="utf-8") as handle:
        wanted = yaml.safe_load(handle)["collections"]
    assert [c["name"] for c in wanted] == ["/build/collections/gpuops-fleet.tar.gz", "/build/collections/kubernetes-core.tar.gz"]
    with tarfile.open(os.path.join(context, "_build", "collections", "gpuops-fleet.tar.gz")) as tar:
        names = tar.getnames()
    # what an activation runs: the event source and the rulebooks, inside the collection
    assert set(names) >= set("extensions/eda/%s" % n for n in (
        "plugins/event_source/gpu_nodes.py", "plugins/event_source/alertmanager.py", "rulebooks/gpu_health.yml",
        "rulebooks/gpu_health_controller.yml", "rulebooks/checkpoint_repair.yml", "rulebooks/checkpoint_repair_controller.yml"))
    with open(os.path.join(context, "Containerfile"), encoding="utf-8") as handle:
        assert "RUN java -version" in handle.read()
