# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: small value checks shared by the other module_utils."""

from __future__ import annotations

import re

from ansible_collections.gpuops.fleet.plugins.module_utils._errors import ParameterError

# An NVIDIA UUID body (GPU-<this>, MIG-<this>), as nvidia-smi -L and NVML print it.
UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"

# systemd.unit(5): a unit name is [A-Za-z0-9:_.@\-] plus its type suffix; never an option.
UNIT_NAME = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9:_.@\\-]*\.(?:service|target|socket|mount|path|timer)\Z")


def is_int(value):
    """A whole number, and not a bool (True is an int in Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def as_int(field, value):
    """A whole number from a number or a string of digits (``-e``, AWX surveys); else ParameterError naming ``field``."""
    if is_int(value):
        return value
    if isinstance(value, str) and re.match(r"\A\s*[0-9]+\s*\Z", value):
        return int(value)
    raise ParameterError(field, "expected a whole number, got %r" % (value,))


def as_bool(field, value):
    """True or False from a bool or true/false, yes/no, on/off, 1/0 as text; else ParameterError naming ``field``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ParameterError(field, "expected true or false, got %r" % (value,))


# resource.Quantity suffixes (k8s.io/apimachinery/pkg/api/resource/suffix.go)
_SUFFIX = {"": 1, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18,
           "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_QUANTITY = re.compile(r"\A\s*(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?P<suffix>[KMGTPE]i|[kMGTPE]|m|)\s*\Z")


def whole_quantity(value):
    """A resource quantity as a whole number, rounded up as resource.Quantity.Value() does; 0 when absent or unreadable."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _QUANTITY.match(str(value))
    if not match:
        return 0
    whole_part, dummy, frac = match.group("num").partition(".")
    suffix = match.group("suffix")
    numerator = (int(whole_part or "0") * 10 ** len(frac) + int(frac or "0")) * (1 if suffix == "m" else _SUFFIX[suffix])
    denominator = 10 ** len(frac) * (1000 if suffix == "m" else 1)
    return -(-numerator // denominator)
