# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The roles' checks of values that reach manifests, Prometheus rules and systemd units (one validator for all)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import CHECKS, check_value
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.plugin_utils._guard_settings import environment_lines

_OR_EMPTY = "_or_empty"


def checked_values(checks):
    """True when every value is of its kind; else an error naming the variable and what it must be.

    ``checks`` maps a kind of CHECKS (``dns_label``, ``duration``, ...; ``<kind>_or_empty`` when empty means
    "off") to a mapping of variable names to values.
    """
    if not isinstance(checks, dict):
        raise AnsibleFilterError("gpuops.fleet._checked_values: expected a mapping of kinds to {variable: value}")
    for kind in sorted(checks):
        base = kind[: -len(_OR_EMPTY)] if kind.endswith(_OR_EMPTY) else kind
        if base not in CHECKS or not isinstance(checks[kind], dict):
            raise AnsibleFilterError("gpuops.fleet._checked_values: unknown kind %r (known: %s)" % (kind, ", ".join(sorted(CHECKS))))
        for field in sorted(checks[kind]):
            try:
                check_value(field, checks[kind][field], base, empty_ok=base != kind)
            except ParameterError as exc:
                raise AnsibleFilterError("%s; set %s to a valid value" % (exc, field)) from exc
    return True


def unit_environment(environment, field):
    """``Environment="NAME=value"`` lines for a systemd unit, refusing names or values that could break out of the line."""
    try:
        return environment_lines(environment, field)
    except ParameterError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"_checked_values": checked_values, "_unit_environment": unit_environment}
