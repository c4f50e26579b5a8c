# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hostile inputs for the adversarial passes (issue 48): a document with each of its fields replaced by each of a set of
values of the wrong type or size, or deleted."""

from __future__ import annotations

import copy

DELETE = object()  # the key removed
VALUES = [DELETE, None, 0, -1, 2 ** 70, 1.5, float("nan"), float("inf"), True, "", "x" * 70000, "{{ lookup('pipe', 'id') }}",
          "\u2028", [], [None], [1], [{}], {}, {"a": [1]},
          # issue 57: a lone surrogate (JSON's escaped "\ud800" decodes to one; it cannot be written as UTF-8), a digit that is
          # isdigit() but no int ('\u00b2'), 5,000 digits (int() refuses past 4,300; a JSON number that long fails json.loads
          # itself, so no such int ever arrives parsed), and JSON nested 20,000 deep in 40 KB of text (json.loads of it raises
          # RecursionError)
          "\ud800", "\u00b2", "9" * 5000, "[" * 20000 + "]" * 20000]


def paths(value, path=()):
    """Every path into ``value`` (a tuple of keys and indexes), the root's included, containers and leaves alike."""
    yield path
    if isinstance(value, dict):
        for key in value:
            yield from paths(value[key], path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from paths(item, path + (i,))


def replaced(doc, path, value):
    """A copy of ``doc`` with the field at ``path`` set to ``value`` (DELETE removes it)."""
    doc = copy.deepcopy(doc)
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = copy.deepcopy(value)
    return doc


def mutations(doc, values=None):
    """``(path, value, the mutated copy)`` for every field of ``doc`` (not the root) and every value (VALUES by default)."""
    for path in list(paths(doc))[1:]:
        for value in VALUES if values is None else values:
            yield path, value, replaced(doc, path, value)
