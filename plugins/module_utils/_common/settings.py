# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: a table of settings, the one place a setting is declared.

A row is a setting's name, Ansible type, default, choices, elements, aliases and check (the one rule its value must meet,
wherever it comes from: a module option, a role variable, a file's key, a value a node reports). Everything else derives
from the table, as community.crypto's ``get_privatekey_argument_spec()`` serves its module and its action plugin alike:
a module's argument spec (``argument_spec``), the defaults (``defaults``), and every check of a value (``problem``,
``check``, ``check_all``). The checkpoint repair's table (``_node/options.py``), the remediation plan's
(``_cluster/remediation/plan.py``), the GPU reset's (``_node/health/gpu_reset.py``) and the health decision's thresholds
(``_common/health/decision.py``) are tables of this kind.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence

Check = Callable[[Any], Optional[str]]
Row = Dict[str, Any]

from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import as_bool, as_int, is_int
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError


def row(name: str, kind: str, default: Any, choices: Sequence[Any] | None = None, elements: str | None = None,
        aliases: Sequence[str] | None = None, check: Check | None = None, **extra: Any) -> Row:
    """A setting: ``extra`` holds what one table adds (where the setting also goes: ``guard``, ``role``...)."""
    out = {"name": name, "type": kind, "default": default, "choices": choices, "elements": elements, "aliases": aliases, "check": check}
    out.update(extra)
    return out


def copy(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


# checks a row may name: each takes the value and returns None, or why it is refused (the field is the row's name)
def whole(low: int | None = None, high: int | None = None, what: str = "whole number") -> Check:
    """A check: a whole number (not a bool) from ``low`` to ``high`` (None: no bound)."""
    def _check(value: Any) -> str | None:
        if is_int(value) and (low is None or value >= low) and (high is None or value <= high):
            return None
        bounds = ("from %d to %d" % (low, high) if high is not None else "of %d or more" % low) if low is not None else ""
        return "%r must be a %s %s" % (value, what, bounds) if bounds else "%r must be a %s" % (value, what)
    return _check


def coerce(entry: Row, value: Any) -> Any:
    """A value as a template, ``-e`` or an AWX survey may give it (a string) in its row's type: a whole number, a bool, a
    comma-separated list; anything else as it is (the row's check refuses it). ParameterError names the row."""
    if entry["type"] == "int" and isinstance(value, str):
        return as_int(entry["name"], value)
    if entry["type"] == "bool" and isinstance(value, str):
        return as_bool(entry["name"], value)
    if entry["type"] == "list" and isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


def boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


class Table:
    """Rows of settings (``row``), checked and turned into argument specs by name."""

    def __init__(self, *rows: Row) -> None:
        self.rows = tuple(rows)
        self.by_name = dict((r["name"], r) for r in rows)

    def names(self) -> tuple[str, ...]:
        return tuple(r["name"] for r in self.rows)

    def problem(self, name: str, value: Any) -> str | None:
        """Why ``value`` is refused for the setting ``name`` (its choices, then its check), or None."""
        found = self.refusal(name, value)
        return found and (found[1] if found[0] == name else "%s: %s" % (found[0], found[1]))

    def refusal(self, name: str, value: Any) -> tuple[str, str] | None:
        """``(field, why)`` where ``value`` is refused for the setting ``name``, or None. A row's ``each`` checks a list's
        elements one by one; the field then names the element (``gpus[1]``)."""
        entry = self.by_name[name]
        if entry["choices"] and value not in entry["choices"]:
            return name, "%r is not one of %s" % (value, ", ".join(map(str, entry["choices"])))
        reason = entry["check"](value) if entry["check"] else None
        if reason:
            return name, reason
        for i, item in enumerate(value if entry.get("each") and isinstance(value, (list, tuple)) else ()):
            reason = entry["each"](item)
            if reason:
                return "%s[%d]" % (name, i), reason
        return None

    def check(self, name: str, value: Any) -> Any:
        """``value`` for the setting ``name``, or ParameterError naming it (or its element) and why."""
        found = self.refusal(name, value)
        if found:
            raise ParameterError(*found)
        return value

    def defaults(self, *names: str) -> dict[str, Any]:
        return dict((r["name"], copy(r["default"])) for r in self._rows(names))

    def check_all(self, raw: dict[str, Any] | None, coerce: Callable[[Row, Any], Any] | None = None,
                  where: str | None = None) -> dict[str, Any]:
        """Every setting from ``raw`` (unset or None: the default), checked; an unknown key is refused, naming the known
        ones. ``coerce(row, value)`` turns a value that may arrive as a string (an AWX survey) into the row's type first;
        ``where`` prefixes the field named in an error (``thresholds.``)."""
        out = self.defaults()
        for key, value in (raw or {}).items():
            if key not in self.by_name:
                raise ParameterError((where or "") + str(key), "is not a setting here (known: %s)" % ", ".join(sorted(self.by_name)))
            if value is None:
                continue
            try:
                value = coerce(self.by_name[key], value) if coerce else value
            except ParameterError as exc:  # the field as this table's caller names it (``where``)
                raise ParameterError((where or "") + exc.field, exc.reason) from None
            found = self.refusal(key, value)
            if found:
                raise ParameterError((where or "") + found[0], found[1])
            out[key] = value
        return out

    def argument_spec(self, *names: str) -> dict[str, dict[str, Any]]:
        """Ansible argument specs of the named rows (all rows when none is named)."""
        spec = {}
        for entry in self._rows(names):
            arg = {"type": entry["type"]}
            if entry.get("required"):
                arg["required"] = True
            elif entry["default"] is not None:
                arg["default"] = copy(entry["default"])
            for key in ("choices", "aliases"):
                if entry[key]:
                    arg[key] = list(entry[key])
            if entry["elements"]:
                arg["elements"] = entry["elements"]
            spec[entry["name"]] = arg
        return spec

    def _rows(self, names: Sequence[str]) -> list[Row]:
        return [self.by_name[n] for n in names] if names else list(self.rows)
