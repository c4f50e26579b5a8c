# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared pytest set-up: import the collection as ansible_collections.gpuops.fleet, build the fakes."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, "build", "collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "fleet")

if not os.path.exists(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink(ROOT, LINK)
for extra in (COLLECTIONS, os.path.join(ROOT, "tests", "fakes")):
    if extra not in sys.path:
        sys.path.insert(0, extra)

import fakenode  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture(scope="session")
def fake_lib_dir():
    """Directory holding the compiled fake libnvidia-ml.so.1 and the fake nvidia-smi."""
    return fakenode.build_lib(os.path.join(ROOT, "build", "fakes"))


@pytest.fixture()
def fake_node(tmp_path, fake_lib_dir):
    """Factory: fake_node(records, **kw) -> environment dict for a subprocess seeing that node."""

    def make(records, **kwargs):
        config = fakenode.write_config(str(tmp_path / "node.cfg"), records, **kwargs)
        return fakenode.environ(fake_lib_dir, config)

    return make
