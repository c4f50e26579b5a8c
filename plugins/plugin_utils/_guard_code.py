# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection (controller side): the node-side ``gpuops`` command as one file.

The command is the collection's own node module_utils (the code ``kubelet_checkpoint`` runs) plus its
entry point (``roles/checkpoint_guard/files/gpuops_main.py``, node code outside module_utils: it starts
processes). ``build`` packs them into one zip
that Python imports from (``sys.path.insert(0, ".../gpuops.pyz")``: zipimport), so the role copies
one file per node instead of one per module_util.

* What goes in: the entry point and the ``_node`` and ``_common`` packages whole, no list kept by
  hand. Those two packages and the entry point import nothing else (a test reads their syntax trees), so no controller code
  (``_cluster``, plugin_utils: the role's settings, the guard's file list and layout) reaches a node.
* Reproducible: the same sources give the same bytes (entries sorted, a fixed timestamp and mode,
  stored uncompressed, so neither the files' times nor the controller's zlib change the result); a
  second run therefore changes nothing on the node.
* Every package directory gets an ``__init__.py``: zipimport of the nodes' older Pythons does not
  find implicit namespace packages.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile

PACKAGE = "ansible_collections.gpuops.fleet.plugins.module_utils"
# what runs on a node: the node code and the leaves it shares with the controller (tests/unit/plugins/
# module_utils/test_layout.py proves from the syntax trees that neither imports anything else)
SHIPPED = ("_common", "_node")
ENTRY = "gpuops_main.py"
# where the entry point lives: node code, outside module_utils (it starts processes)
ENTRY_PATH = ("roles", "checkpoint_guard", "files", ENTRY)
# ``python3 gpuops.pyz COMMAND``: how the DaemonSet form's container runs it (no wrapper there)
MAIN = b"import sys\n\nfrom gpuops_main import entry\n\nsys.exit(entry())\n"
# 1980-01-01, the earliest time a zip entry holds: a fixed time makes the bytes the sources' alone
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def collection_root():
    """This collection's root directory (plugins/plugin_utils/ is two levels below it)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def module_utils_needed(root=None):
    """Every ``.py`` file of the shipped packages, as paths relative to module_utils, sorted."""
    root = root or collection_root()
    utils = os.path.join(root, "plugins", "module_utils")
    found = []
    for package in SHIPPED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(utils, package)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            rel = os.path.relpath(dirpath, utils).replace(os.sep, "/")
            found.extend("%s/%s" % (rel, name) for name in filenames if name.endswith(".py"))
    return sorted(found)


def _entry(name, data):
    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    info.compress_type = zipfile.ZIP_STORED
    info.external_attr = 0o100644 << 16
    info.create_system = 3  # unix, whatever the controller
    return info, data


def build(root=None):
    """``(zip bytes, sorted archive names)`` of the gpuops command."""
    root = root or collection_root()
    entries = {}
    with open(os.path.join(root, *ENTRY_PATH), "rb") as handle:
        entries[ENTRY] = handle.read()
    entries["__main__.py"] = MAIN
    base = PACKAGE.replace(".", "/")
    parts = base.split("/")
    for depth in range(1, len(parts) + 1):
        entries["/".join(parts[:depth]) + "/__init__.py"] = b""
    for name in module_utils_needed(root):
        with open(os.path.join(root, "plugins", "module_utils", *name.split("/")), "rb") as handle:
            entries["%s/%s" % (base, name)] = handle.read()
    for package in SHIPPED:
        entries.setdefault("%s/%s/__init__.py" % (base, package), b"")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name in sorted(entries):
            info, data = _entry(name, entries[name])
            archive.writestr(info, data)
    return buf.getvalue(), sorted(entries)


# this collection's build, made once per process (``built``)
_BUILT = []


def built():
    """``build()`` of this collection, made once per process. The kubelet_checkpoint action plugin makes it when
    ansible-core's main process loads the plugin, before it forks a worker per node, so each worker has it (issue 62: one
    build of about 390 KB per node was 5 to 10 ms of the controller's CPU per node). A run's collection does not change
    under it; ``build`` itself reads the files again each time."""
    if not _BUILT:
        _BUILT.append(build())
    return _BUILT[0]


def digest(data):
    return hashlib.sha256(data).hexdigest()
