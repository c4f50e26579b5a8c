# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""checkpoint_guard: argument specs match defaults (keys and values), README lists them,
the rendered unit passes `systemd-analyze verify`, and the guard's config matches the module's."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

import role_checks  # tests/unit/roles/role_checks.py  # pylint: disable=import-error

ROOT = role_checks.ROOT


def load(*parts):
    return role_checks.load("checkpoint_guard", *parts)


def test_argument_specs_match_defaults_keys_and_values():
    assert role_checks.spec_problems("checkpoint_guard") == []


def test_internal_vars_are_private():
    assert role_checks.non_private_vars("checkpoint_guard") == []


def test_readme_documents_every_variable():
    assert role_checks.undocumented_vars("checkpoint_guard") == []


def test_role_ships_every_module_util_the_guard_imports():
    shipped = set(load("vars", "main.yml")["__checkpoint_guard_module_utils"])
    utils = os.path.join(ROOT, "plugins", "module_utils")
    needed = {"_guard.py"}
    todo = ["_guard.py"]
    while todo:
        with open(os.path.join(utils, todo.pop())) as handle:
            for line in handle:
                if line.startswith("from ansible_collections.gpuops.fleet.plugins.module_utils"):
                    words = line.replace(",", " ").split()
                    names = words[words.index("import") + 1:] if words[1].endswith("module_utils") else [words[1].rsplit(".", 1)[1]]
                    for name in names:
                        if name == "as":
                            break
                        fname = name + ".py"
                        if fname not in needed:
                            needed.add(fname)
                            todo.append(fname)
    assert needed == shipped


@pytest.fixture(scope="module")
def lab_install(tmp_path_factory):
    """Run the role's install step into a sysroot (real Ansible, no systemd), with hardening on."""
    root = tmp_path_factory.mktemp("node")
    playbook = root / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: gpuops.fleet.checkpoint_guard\n"
        "      checkpoint_guard_reconcile_now: false\n      checkpoint_guard_sysroot: %s\n"
        "      checkpoint_guard_python: /usr/bin/python3\n      checkpoint_guard_environment: {LD_LIBRARY_PATH: /usr/local/nvidia/lib64}\n"
        "      checkpoint_guard_checkpoint_path: %s/kubelet_internal_checkpoint\n" % (root, root)
    )
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"))
    env["ANSIBLE_PYTHON_INTERPRETER"] = os.path.join(ROOT, ".venv", "bin", "python")
    subprocess.run(
        [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook)],
        check=True, env=env, cwd=ROOT, capture_output=True, timeout=300,
    )
    return root


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_unit_passes_systemd_analyze_verify_without_any_output(lab_install):
    unit = lab_install / "etc" / "systemd" / "system" / "gpuops.service"
    text = unit.read_text()
    assert "Before=kubelet.service" in text and "Type=oneshot" in text and "RemainAfterExit=yes" in text
    directives = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert [d for d in directives if d.startswith(("Requires=", "BindsTo=", "Requisite="))] == []
    assert 'Environment="LD_LIBRARY_PATH=/usr/local/nvidia/lib64"' in text
    # verify checks that ExecStart exists on this machine: point it at the sysroot's copy
    # (the only edit); any output, even a warning about an unknown key, is a failure
    checked = lab_install / "verify" / "gpuops.service"
    checked.parent.mkdir(exist_ok=True)
    checked.write_text(text.replace("ExecStart=/usr/local/bin/gpuops", "ExecStart=%s/usr/local/bin/gpuops" % lab_install))
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(checked)], capture_output=True, text=True, timeout=60, check=False)
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")


def test_installed_command_runs_the_shipped_code(lab_install):
    cmd = lab_install / "usr" / "local" / "bin" / "gpuops"
    proc = subprocess.run([str(cmd), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and "6  stale or corrupt" in proc.stdout
    lib = lab_install / "usr" / "local" / "lib" / "gpuops" / "ansible_collections" / "gpuops" / "fleet" / "plugins" / "module_utils"
    for name in os.listdir(str(lib)):
        with open(str(lib / name), "rb") as a, open(os.path.join(ROOT, "plugins", "module_utils", name), "rb") as b:
            assert a.read() == b.read(), name
