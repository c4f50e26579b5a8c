# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each node module compiled once from a zip (_node/compile_once.py, python/cpython#141276), proven on the guard's own
zip (the node code as a node runs it) under the real zipimport, in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
import zipimport

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node import compile_once
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_code

NODE = "ansible_collections.gpuops.fleet.plugins.module_utils._node"

# a fresh interpreter counts what zipimport compiles (its one compile function), imports the node code's modules from
# the zip, and prints {file in the zip: compiles} and whether the wrapper was installed
PROBE = r"""
import collections, json, sys, zipimport
counts = collections.Counter()
compile_source = zipimport._compile_source
def counted(pathname, source):
    counts[pathname.split('.pyz/', 1)[-1]] += 1
    return compile_source(pathname, source)
zipimport._compile_source = counted
sys.path.insert(0, sys.argv[1])
import importlib
for name in sys.argv[2:]:
    importlib.import_module(name)
marked = getattr(zipimport._get_module_code, "_gpuops_compile_once", False)
print(json.dumps({"counts": counts, "installed": marked}))
"""


def probe(archive, *modules):
    done = subprocess.run([sys.executable, "-c", PROBE, str(archive)] + list(modules), capture_output=True, text=True, check=True,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    return json.loads(done.stdout)


def guard_zip(tmp_path):
    path = tmp_path / "gpuops.pyz"
    path.write_bytes(_guard_code.build()[0])
    return path


def test_each_node_module_compiles_once_from_the_guards_zip(tmp_path):
    # the checkpoint plan's modules (the main job's one call per node), from the zip the node code ships in
    found = probe(guard_zip(tmp_path), NODE + ".repair", NODE + ".install", NODE + ".gpu_inventory", NODE + ".options")
    assert found["installed"] is True
    ours = dict((name, n) for name, n in found["counts"].items() if "/_node/" in name or "/_common/" in name)
    first = [NODE.replace(".", "/") + "/__init__.py", NODE.replace(".", "/") + "/compile_once.py"]
    below = dict((name, n) for name, n in ours.items() if name not in first)
    assert len(below) > 15, ours  # the plan's code: repair, reconcile, checkpoint, nodefile, install, ...
    assert set(below.values()) == {1}, below
    # before the wrapper is in place, as CPython does it: the package that installs it and the wrapper, twice
    assert [ours[name] for name in first] == [2, 2]


def test_a_zip_without_the_wrapper_compiles_each_module_twice(tmp_path):
    # the same zip with _node/__init__.py emptied: what CPython does without the wrapper (python/cpython#141276); when
    # CPython compiles once itself, this test fails and the wrapper can go
    source = guard_zip(tmp_path)
    plain = tmp_path / "plain.pyz"
    init = NODE.replace(".", "/") + "/__init__.py"
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(plain, "w") as new:
        for item in old.infolist():
            new.writestr(item, b"" if item.filename == init else old.read(item.filename))
    found = probe(plain, NODE + ".repair")
    assert found["installed"] is False
    assert found["counts"][NODE.replace(".", "/") + "/repair.py"] == 2


def test_install_changes_nothing_for_code_imported_from_files():
    before = zipimport._get_module_code
    assert compile_once.from_zip(compile_once.__spec__) is False
    assert compile_once.install(compile_once.__spec__) is False
    assert zipimport._get_module_code is before


def test_install_once_and_the_same_code_object_for_the_second_ask(monkeypatch, tmp_path):
    archive = tmp_path / "m.zip"
    with zipfile.ZipFile(archive, "w") as made:
        made.writestr("m_once.py", "VALUE = 41 + 1\n")
    original = zipimport._get_module_code
    calls = []

    def counting(importer, fullname):
        calls.append(fullname)
        return original(importer, fullname)

    monkeypatch.setattr(zipimport, "_get_module_code", counting)
    importer = zipimport.zipimporter(str(archive))
    spec = importer.find_spec("m_once")
    assert compile_once.install(spec) is True
    assert compile_once.install(spec) is False  # already installed: not wrapped twice
    first = zipimport._get_module_code(importer, "m_once")
    second = zipimport._get_module_code(importer, "m_once")
    assert first[0] is second[0] and first[2].endswith("m_once.py")
    assert calls == ["m_once", "m_once"]  # find_spec above, then one compile for both asks
    namespace = {}
    exec(first[0], namespace)  # noqa: S102 (the module's own code object, from the zip)
    assert namespace["VALUE"] == 42


def test_a_module_not_in_the_zip_is_not_kept(monkeypatch, tmp_path):
    archive = tmp_path / "m.zip"
    with zipfile.ZipFile(archive, "w") as made:
        made.writestr("here.py", "X = 1\n")
    monkeypatch.setattr(zipimport, "_get_module_code", zipimport._get_module_code)
    importer = zipimport.zipimporter(str(archive))
    assert compile_once.install(importer.find_spec("here")) is True
    # asked twice, refused twice: an error is never kept as an answer
    with pytest.raises(zipimport.ZipImportError):
        zipimport._get_module_code(importer, "missing")
    with pytest.raises(zipimport.ZipImportError):
        zipimport._get_module_code(importer, "missing")


def test_a_call_with_more_arguments_goes_to_zipimports_own_helper_every_time(monkeypatch):
    calls = []

    def helper(importer, fullname, *more, **named):
        calls.append((fullname, more, named))
        return (object(), False, "x.py")

    monkeypatch.setattr(zipimport, "_get_module_code", helper)

    class Zipped:
        loader = zipimport.zipimporter.__new__(zipimport.zipimporter)

    assert compile_once.install(Zipped) is True
    first = zipimport._get_module_code(object(), "m", True)
    second = zipimport._get_module_code(object(), "m", True)
    assert first is not second and calls == [("m", (True,), {}), ("m", (True,), {})]
    assert zipimport._get_module_code(object(), "n", check=False) is not zipimport._get_module_code(object(), "n", check=False)


def test_an_importer_that_names_no_zip_goes_to_zipimports_own_helper_every_time(monkeypatch):
    calls = []

    def helper(importer, fullname):
        calls.append((importer, fullname))
        return (object(), False, "x.py")

    monkeypatch.setattr(zipimport, "_get_module_code", helper)

    class Zipped:
        loader = zipimport.zipimporter.__new__(zipimport.zipimporter)

    assert compile_once.install(Zipped) is True
    one, two = object(), object()  # no archive, no prefix: two importers the cache could not tell apart
    assert zipimport._get_module_code(one, "m") is not zipimport._get_module_code(two, "m")
    assert calls == [(one, "m"), (two, "m")]
