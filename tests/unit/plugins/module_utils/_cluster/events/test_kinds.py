# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kinds of event (module_utils/_cluster/events/kinds.py), declared once: every core of the events room and every source
emits them through the declared constants, and KINDS holds them all (gpu_alert too)."""

from __future__ import annotations

import ast
import os

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import kinds as event_kinds

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", ".."))
SOURCES = os.path.join(ROOT, "extensions", "eda", "plugins", "event_source")


def _kind_strings(path):
    """The string constants of a file that are a kind of event, but for docstrings, DOCUMENTATION/EXAMPLES, dict keys and
    subscripts (``options["heartbeat"]``: the options' vocabulary, which shares the word ``heartbeat``), and options.py's
    option bounds."""
    with open(path, "rb") as handle:
        tree = ast.parse(handle.read(), path)
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("DOCUMENTATION", "EXAMPLES") for t in node.targets):
            skip.add(id(node.value))
        if isinstance(node, ast.Dict):
            skip.update(id(k) for k in node.keys if k is not None)
        if isinstance(node, ast.Subscript):
            skip.add(id(node.slice))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "row" and node.args:
            skip.add(id(node.args[0]))  # a settings row's name: an option
        if isinstance(node, ast.Tuple) and len(node.elts) == 3 and all(isinstance(e, ast.Constant) for e in node.elts) \
                and all(isinstance(e.value, int) for e in node.elts[1:]):
            skip.add(id(node.elts[0]))  # (option, low, high)
    kinds = set(event_kinds.KINDS) | {event_kinds.THROTTLED}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in kinds and id(n) not in skip]


def test_every_kind_is_emitted_through_its_declared_constant():
    room = os.path.join(ROOT, "plugins", "module_utils", "_cluster", "events")
    files = [os.path.join(room, n) for n in sorted(os.listdir(room)) if n.endswith(".py")]
    files += [os.path.join(SOURCES, n) for n in sorted(os.listdir(SOURCES)) if n.endswith(".py")]
    spelled = dict((os.path.relpath(f, ROOT), _kind_strings(f)) for f in files)
    declared = spelled.pop("plugins/module_utils/_cluster/events/kinds.py")
    assert spelled == dict((k, []) for k in spelled)
    # kinds.py spells each kind once, in its declaration; KINDS holds every one, the throttled too
    assert sorted(declared) == sorted([k for k in event_kinds.KINDS if not k.endswith(event_kinds.THROTTLED)] + [event_kinds.THROTTLED])
    assert event_kinds.GPU_ALERT in event_kinds.KINDS and len(set(event_kinds.KINDS)) == len(event_kinds.KINDS)


def test_the_check_finds_a_spelled_kind(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""gpu_faults in a docstring is fine"""\nDOCUMENTATION = "gpu_alert"\nEVENT = {"kind": "gpu_alert"}\n')
    assert _kind_strings(str(bad)) == ["gpu_alert"]
