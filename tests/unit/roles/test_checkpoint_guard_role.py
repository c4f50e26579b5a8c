# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""checkpoint_guard: argument specs match defaults (keys and values), README lists them,
the rendered unit passes `systemd-analyze verify`, and the guard's config matches the module's."""

from __future__ import annotations

import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

import role_checks  # tests/unit/roles/role_checks.py  # pylint: disable=import-error

from ansible_collections.gpuops.fleet.plugins.module_utils._node.guard import main as guard
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_code as guard_code

ROOT = role_checks.ROOT


def load(*parts):
    return role_checks.load("checkpoint_guard", *parts)


def test_argument_specs_match_defaults_keys_and_values():
    assert role_checks.spec_problems("checkpoint_guard", entries=("main", "repair", "daemonset")) == []


def test_internal_vars_are_private():
    assert role_checks.non_private_vars("checkpoint_guard") == []


def test_readme_documents_every_variable():
    assert role_checks.undocumented_vars("checkpoint_guard") == []


def test_the_guard_is_one_file_that_imports_alone_on_the_oldest_python(tmp_path):
    # every module_util in it imports with nothing but the file on sys.path (no collection, no ansible),
    # on this Python and on the oldest the nodes may have (pyenv's 3.8, when present)
    data, names = guard_code.build()
    pyz = tmp_path / "gpuops.pyz"
    pyz.write_bytes(data)
    modules = [n[:-3].replace("/", ".") for n in names if n.startswith("ansible_collections/") and not n.endswith("__init__.py")]
    assert "ansible_collections.gpuops.fleet.plugins.module_utils._node.guard.main" in modules and "gpuops_main.py" in names
    script = ("import importlib, sys; sys.path.insert(0, %r)\nfor name in %r: importlib.import_module(name)\n"
              "from gpuops_main import entry; sys.exit(entry(argv=['--version']))" % (str(pyz), modules))
    pythons = [sys.executable] + sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8.*/bin/python3")))[-1:]
    for python in pythons:
        proc = subprocess.run([python, "-I", "-c", script], capture_output=True, text=True, timeout=60, check=False)
        assert (proc.returncode, proc.stdout.strip()) == (0, "gpuops %s" % guard.VERSION), (python, proc.stderr)


def test_the_guard_file_is_reproducible_and_holds_the_node_and_common_packages(tmp_path):
    first, names = guard_code.build()
    assert guard_code.build() == (first, names)
    # the once-per-process build (made in ansible-core's main process, before its workers fork: issue 62) is the same
    assert guard_code.built() == (first, names) and guard_code.built() is guard_code.built()
    # a source's time is not in it, its content is
    root = tmp_path / "collection"
    shutil.copytree(ROOT, str(root), ignore=shutil.ignore_patterns(".git", ".venv", "build", "out", "tests"))
    os.utime(str(root / "plugins/module_utils/_common/errors.py"), (0, 0))
    assert guard_code.build(str(root))[0] == first
    with open(str(root / "plugins/module_utils/_common/errors.py"), "a") as handle:
        handle.write("# changed\n")
    assert guard_code.build(str(root))[0] != first
    # what it ships is _node and _common whole, byte for byte, and never a file of _cluster
    (root / "plugins/module_utils/_node/new_helper.py").write_text("X = 1\n")
    assert "ansible_collections/gpuops/fleet/plugins/module_utils/_node/new_helper.py" in guard_code.build(str(root))[1]
    base = "ansible_collections/gpuops/fleet/plugins/module_utils/"
    shipped = sorted(n[len(base):] for n in names if n.startswith(base))
    utils = os.path.join(ROOT, "plugins", "module_utils")
    expected = sorted(
        os.path.relpath(os.path.join(top, name), utils).replace(os.sep, "/")
        for package in ("_node", "_common")
        for top, _dirs, files in os.walk(os.path.join(utils, package)) if "__pycache__" not in top
        for name in files if name.endswith(".py")
    ) + ["__init__.py"]
    assert shipped == sorted(expected)
    assert not [n for n in names if "/_cluster/" in n or "/plugin_utils/" in n]
    with zipfile.ZipFile(io.BytesIO(first)) as archive:
        for name in shipped:
            if name != "__init__.py":
                with open(os.path.join(ROOT, "plugins", "module_utils", *name.split("/")), "rb") as handle:
                    assert archive.read(base + name) == handle.read(), name


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
    lib = lab_install / "usr" / "local" / "lib" / "gpuops"
    assert sorted(os.listdir(str(lib))) == ["gpuops-install.json", "gpuops.pyz"], "one code file per node, and the install's manifest"
    assert json.loads((lib / "gpuops-install.json").read_text())["selftest"] == "passed"
    assert (lib / "gpuops.pyz").read_bytes() == guard_code.build()[0]


def test_the_install_is_one_module_call_check_mode_writes_nothing_and_a_second_run_sends_no_code(tmp_path):
    root = tmp_path / "node"
    root.mkdir()
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: gpuops.fleet.checkpoint_guard\n"
        "      checkpoint_guard_reconcile_now: false\n      checkpoint_guard_sysroot: %s\n"
        "      checkpoint_guard_python: /usr/bin/python3\n"
        "      checkpoint_guard_checkpoint_path: %s/kubelet_internal_checkpoint\n"
        "  post_tasks:\n    - copy: {content: \"{{ checkpoint_guard_plan.guard_install | to_json }}\", dest: %s}\n"
        "      check_mode: false\n      changed_when: false\n" % (root, root, tmp_path / "installed.json")
    )
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_PYTHON_INTERPRETER=os.path.join(ROOT, ".venv", "bin", "python"))

    def run(*extra):
        proc = subprocess.run(
            [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook)] + list(extra),
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        installed = json.loads((tmp_path / "installed.json").read_text())
        changed = int(re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", proc.stdout).group(1))
        return installed, changed

    planned, dummy = run("--check", "--diff")
    assert planned["changed"] and not planned["code"]["sent"] and planned["selftest"] is None
    assert "gpuops.pyz" in [os.path.basename(f["path"]) for f in planned["files"]]
    assert sorted(os.listdir(str(root))) == [], "check mode wrote nothing"
    first, changed = run()
    assert changed == 1 and first["code"]["sent"] and first["selftest"]["rc"] in (0, 3, 4, 5)
    assert {os.path.basename(f["path"]) for f in first["files"]} == {"gpuops.pyz", "gpuops", "gpuops.json", "gpuops.service"}
    assert first["planned"] is False  # the plan read that the install had work to do: the install ran
    second, changed = run()
    assert changed == 0 and not second["changed"] and not second["code"]["sent"] and second["files"] == []
    # issue 36: the plan's round trip read that nothing would change, so the install made no call (its result is
    # that reading); tests/lab proves no module but the plan ran on the nodes
    assert second["planned"] is True and second["selftest_owed"] is False
    # a file changed on the node: the plan reads it, and the install rewrites that file alone (the code's bytes stay)
    config = next(root.rglob("gpuops.json"))
    config.write_text(config.read_text().replace('"backup_keep"', '"backup_keep_edited"'))
    third, changed = run()
    assert changed == 1 and third["planned"] is False and not third["code"]["sent"]
    assert [os.path.basename(f["path"]) for f in third["files"]] == ["gpuops.json"] and third["selftest"]["rc"] in (0, 3, 4, 5)
    fourth, changed = run()
    assert changed == 0 and fourth["planned"] is True
