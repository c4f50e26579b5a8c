# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's event sources (gpuops.fleet.gpu_nodes, gpuops.fleet.alertmanager) loaded by their path, as ansible-rulebook loads a collection's source
(runpy.run_path of extensions/eda/plugins/event_source/<name>.py): the unit, kube and knode tests share it."""

from __future__ import annotations

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = os.path.join(ROOT, "extensions", "eda", "plugins", "event_source")
SOURCE = os.path.join(SOURCES, "gpu_nodes.py")


def load(name="gpuops_gpu_nodes_source", source="gpu_nodes"):
    """A fresh module of the source (its own globals: a test's monkeypatching stays with it)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(SOURCES, source + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
