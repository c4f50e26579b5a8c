# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: eviction modes, pure (no API calls). Which of a remediation's pods go now, which
it waits for, and which it never touches; the plan (``plan.py``) reports them, the quarantine (``quarantine.py``) acts on
them.

NVSentinel's node-drainer is the anchor (its ``userNamespaces``, ``systemNamespaces`` and ``deleteAfterTimeoutMinutes``,
docs/configuration/node-drainer.md), with three differences: a mode may also be set per pod, by an annotation that may only
make it gentler; ``delete_after_timeout`` evicts through the Eviction API (a PodDisruptionBudget still counts) rather than
force-deleting; and the timeout is per rule, not one for the cluster.

* **Modes**, harshest first: ``immediate`` (the Eviction API now), ``delete_after_timeout`` (the Eviction API once the
  fault, the node's quarantine, is ``timeout_minutes`` old), ``allow_completion`` (never evicted: the pod runs to its end,
  the GPU stays quarantined, and the reset waits for it).
* **Rules**, ``[{namespace: <glob>, mode, timeout_minutes}]``: the first whose glob (``fnmatch``, case-sensitive) matches the
  pod's namespace wins; the last must be ``*``, so every namespace has a mode that was chosen, not a default nobody saw.
* **System namespaces**, a regular expression searched in the namespace (Go's ``regexp.MatchString``, as NVSentinel's
  ``systemNamespaces``: anchor it): a pod there is never evicted; one that holds a target GPU blocks the reset, named.
* **The pod's annotation** ``gpuops.fleet/eviction-mode``: ``allow_completion``, ``delete_after_timeout:<minutes>`` or a
  mode's name; gentler than or as gentle as its namespace's rule, or the pod blocks the node's remediation, named (a
  tenant's annotation may protect its own pod, never speed up an eviction).
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any, Dict

from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import as_int
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError, ParameterError

Policy = Dict[str, Any]  # check_policy's: the rules and the system namespaces' pattern
Found = Dict[str, Any]  # mode_of's: a pod's mode, its timeout, what said so, whether it is a system pod
IMMEDIATE, AFTER_TIMEOUT, ALLOW_COMPLETION = "immediate", "delete_after_timeout", "allow_completion"
MODES = (IMMEDIATE, AFTER_TIMEOUT, ALLOW_COMPLETION)  # harshest first
ANNOTATION = "gpuops.fleet/eviction-mode"
DEFAULT_RULES = ({"namespace": "*", "mode": IMMEDIATE},)
# NVSentinel's default (nvsentinel, kube-system, gpu-operator, gmp-system, network-operator), with Kubernetes' other own
# namespaces, the GPU Operator's usual other name, and this collection's
DEFAULT_SYSTEM = r"^(kube-system|kube-public|kube-node-lease|gpu-operator|nvidia-gpu-operator|network-operator|nvsentinel|gpuops-system)$"
# a glob over namespace names: DNS-1123 characters and fnmatch's * ? [ ] !
_GLOB = re.compile(r"\A[a-z0-9*?\[\]!-]{1,63}\Z")
MAX_MINUTES = 7 * 24 * 60


class PodModeError(GpuopsError):
    """A pod's annotation asks for a mode it may not have (unknown, or harsher than its namespace's)."""


def check_policy(rules: Any, system_namespaces: Any) -> Policy:
    """``{"rules": [...], "system": compiled regex, "system_pattern": str}`` from the user's; ParameterError naming the field
    (``eviction_modes[1].mode``, ``system_namespaces``) and what it must be. ``rules`` may be None (the default: every
    namespace immediate, today's behaviour)."""
    if rules in (None, "", []):
        rules = list(DEFAULT_RULES)
    if not isinstance(rules, (list, tuple)):
        raise ParameterError("eviction_modes", "expected a list of {namespace, mode[, timeout_minutes]}, got %s" % type(rules).__name__)
    checked = []
    for i, rule in enumerate(rules):
        field = "eviction_modes[%d]" % i
        if not isinstance(rule, dict):
            raise ParameterError(field, "expected {namespace: <glob>, mode: %s[, timeout_minutes]}, got %r" % ("|".join(MODES), rule))
        unknown = sorted(set(rule) - {"namespace", "mode", "timeout_minutes"})
        if unknown:
            raise ParameterError("%s.%s" % (field, unknown[0]), "is not a field of an eviction rule (namespace, mode, timeout_minutes)")
        pattern = rule.get("namespace")
        if not isinstance(pattern, str) or not _GLOB.match(pattern) or _bad_brackets(pattern):
            raise ParameterError(field + ".namespace", "%r is not a glob of namespace names (lowercase letters, digits, '-', and * ? "
                                 "[...]): for example training-* or *" % (pattern,))
        if pattern == "*" and i != len(rules) - 1:
            raise ParameterError(field + ".namespace", "'*' matches every namespace, so the rules after it would never be used: put "
                                 "it last")
        mode = rule.get("mode")
        if mode not in MODES:
            raise ParameterError(field + ".mode", "%r is not an eviction mode (%s)" % (mode, ", ".join(MODES)))
        minutes = rule.get("timeout_minutes")
        if mode == AFTER_TIMEOUT:
            if minutes in (None, ""):
                raise ParameterError(field + ".timeout_minutes", "is required with mode delete_after_timeout (minutes from the quarantine)")
            minutes = _minutes(field + ".timeout_minutes", minutes)
        elif minutes not in (None, ""):
            raise ParameterError(field + ".timeout_minutes", "applies to delete_after_timeout only, not to %s" % mode)
        else:
            minutes = None
        checked.append({"namespace": pattern, "mode": mode, "timeout_minutes": minutes})
    if checked[-1]["namespace"] != "*":
        raise ParameterError("eviction_modes[%d].namespace" % (len(checked) - 1), "the last rule must be namespace '*' (the mode of "
                             "every other namespace, chosen, not a default), got %r" % checked[-1]["namespace"])
    if system_namespaces is None:
        system_namespaces = DEFAULT_SYSTEM
    if not isinstance(system_namespaces, str):
        raise ParameterError("system_namespaces", "expected a regular expression (text), got %s" % type(system_namespaces).__name__)
    try:
        system = re.compile(system_namespaces) if system_namespaces else None
    except re.error as exc:
        raise ParameterError("system_namespaces", "%r is not a regular expression: %s" % (system_namespaces, exc)) from None
    return {"rules": checked, "system": system, "system_pattern": system_namespaces}


def _bad_brackets(pattern: str) -> bool:
    """An unclosed ``[`` (fnmatch would match it as a literal, which is never what was meant)."""
    depth = 0
    for char in pattern:
        if char == "[":
            if depth:
                return True
            depth = 1
        elif char == "]" and depth:
            depth = 0
    return bool(depth)


def _minutes(field: str, value: Any) -> int:
    minutes = as_int(field, value)
    if not 1 <= minutes <= MAX_MINUTES:
        raise ParameterError(field, "%d is not 1 to %d minutes" % (minutes, MAX_MINUTES))
    return minutes


def _rank(mode: str, minutes: int | None) -> tuple[int, int]:
    """How gentle a mode is: a longer timeout is gentler than a shorter one, and both lie between the other two."""
    return (MODES.index(mode), minutes or 0)


def _name(pod: dict[str, Any]) -> str:
    meta = _dict(_dict(pod).get("metadata"))
    return "%s/%s" % (meta.get("namespace"), meta.get("name"))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def annotation_mode(pod: dict[str, Any]) -> tuple[str, int | None] | None:
    """``(mode, minutes)`` the pod's annotation asks for, or None; PodModeError where it is not one."""
    text = _dict(_dict(_dict(pod).get("metadata")).get("annotations")).get(ANNOTATION)
    if text is None:
        return None
    mode, sep, minutes = str(text).strip().partition(":")
    if mode not in MODES or (sep and mode != AFTER_TIMEOUT):
        raise PodModeError("pod %s: annotation %s=%r is not an eviction mode (%s, or delete_after_timeout:<minutes>)"
                           % (_name(pod), ANNOTATION, str(text)[:80], ", ".join(MODES)))
    if not sep:
        return mode, None
    try:
        return mode, _minutes(ANNOTATION, minutes)
    except ParameterError as exc:
        raise PodModeError("pod %s: annotation %s=%r: %s" % (_name(pod), ANNOTATION, str(text)[:80], exc)) from None


def mode_of(pod: dict[str, Any], policy: Policy) -> Found:
    """``{"mode", "timeout_minutes", "by", "system"}`` for one pod: its namespace's rule, made gentler by its annotation; a
    pod of a system namespace is ``system`` (never evicted). PodModeError where its annotation asks for a harsher mode."""
    namespace = _dict(_dict(pod).get("metadata")).get("namespace")
    namespace = namespace if isinstance(namespace, str) else ""
    if policy["system"] is not None and policy["system"].search(namespace):
        return {"mode": None, "timeout_minutes": None, "by": "system_namespaces %s" % policy["system_pattern"], "system": True}
    index, rule = next((i, r) for i, r in enumerate(policy["rules"]) if fnmatch.fnmatchcase(namespace, r["namespace"]))
    found = {"mode": rule["mode"], "timeout_minutes": rule["timeout_minutes"], "by": "eviction_modes[%d] (%s)" % (index, rule["namespace"]),
             "system": False}
    asked = annotation_mode(pod)
    if asked is None:
        return found
    mode, minutes = asked
    if mode == AFTER_TIMEOUT and minutes is None:
        minutes = rule["timeout_minutes"]
        if minutes is None:
            raise PodModeError("pod %s: annotation %s=delete_after_timeout names no minutes, and its namespace's rule %s has none: "
                               "write delete_after_timeout:<minutes>" % (_name(pod), ANNOTATION, found["by"]))
    if _rank(mode, minutes) < _rank(rule["mode"], rule["timeout_minutes"]):
        raise PodModeError("pod %s: annotation %s asks for %s, harsher than %s of its namespace's rule %s: an annotation may only make "
                           "the eviction gentler; remove it or ask for a gentler mode"
                           % (_name(pod), ANNOTATION, _text(mode, minutes), _text(rule["mode"], rule["timeout_minutes"]), found["by"]))
    return dict(found, mode=mode, timeout_minutes=minutes, by="annotation %s" % ANNOTATION)


def _text(mode: str, minutes: int | None) -> str:
    return "%s:%d" % (mode, minutes) if minutes else mode


def decide(found: Found, fault_age: int) -> tuple[str, str | None]:
    """``("evict" | "wait", why)`` for a pod of ``mode_of``, ``fault_age`` seconds after the node's quarantine began."""
    if found["system"]:
        return "wait", "a system namespace's pod (%s): never evicted; the reset waits until it is gone" % found["by"]
    if found["mode"] == IMMEDIATE:
        return "evict", None
    if found["mode"] == ALLOW_COMPLETION:
        return "wait", "allow_completion (%s): it runs to its end; the reset waits for it" % found["by"]
    due = found["timeout_minutes"] * 60
    if fault_age >= due:
        return "evict", "delete_after_timeout (%s): the fault is %d s old, past its %d min" % (found["by"], fault_age, found["timeout_minutes"])
    return "wait", "delete_after_timeout (%s): evicted in %d s, when the fault is %d min old" % (
        found["by"], due - fault_age, found["timeout_minutes"])
