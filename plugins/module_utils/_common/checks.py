# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: small value checks shared by the other module_utils."""

from __future__ import annotations

import re

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

# An NVIDIA UUID body (GPU-<this>, MIG-<this>), as nvidia-smi -L and NVML print it.
UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# a GPU or MIG device as NVML names it (GPU-<uuid>, MIG-<uuid>), as the plan, the quarantine and the verification take it
GPU_ID = re.compile(r"\A(?:GPU|MIG)-[0-9A-Za-z-]{1,90}\Z")

# systemd.unit(5): a unit name is [A-Za-z0-9:_.@\-] plus its type suffix; never an option.
UNIT_NAME = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9:_.@\\-]*\.(?:service|target|socket|mount|path|timer)\Z")


_DNS_SUBDOMAIN = re.compile(r"\A[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_DNS_LABEL = re.compile(r"\A[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?\Z")


def dns_name(name):
    """Whether ``name`` is a Kubernetes object name (DNS-1123 subdomain: a Node's, a Lease's)."""
    return isinstance(name, str) and len(name) <= 253 and bool(_DNS_SUBDOMAIN.match(name))


def dns_label(name):
    """Whether ``name`` is a DNS-1123 label (a namespace's name)."""
    return isinstance(name, str) and bool(_DNS_LABEL.match(name))


def is_int(value):
    """A whole number, and not a bool (True is an int in Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


# the most digits a whole number read from text may have: a count, a port, seconds or bytes never need more, and Python's
# int() refuses more than 4,300 (a ValueError, where a node, a pod or an alert supplies the text)
MAX_DIGITS = 18
_DIGITS = re.compile(r"\A\s*([0-9]{1,%d})\s*\Z" % MAX_DIGITS)


def digits(value):
    """A whole number from a text of ASCII digits (at most MAX_DIGITS, spaces around allowed), else None. Never raises,
    whatever the value: ``str.isdigit`` takes '²' and 5,000 digits, on which ``int()`` raises; this takes neither."""
    if not isinstance(value, str):
        return None
    found = _DIGITS.match(value)
    return int(found.group(1)) if found else None


def as_int(field, value):
    """A whole number from a number or a string of digits (``-e``, AWX surveys); else ParameterError naming ``field``."""
    if is_int(value):
        return value
    number = digits(value)
    if number is not None:
        return number
    raise ParameterError(field, "expected a whole number, got %s" % _shown(value))


def _shown(value):
    """A value for a message: its repr, cut to 80 characters (a 5,000-digit text is not echoed whole)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


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


# What a value that reaches a manifest, a Prometheus rule or a systemd unit may be, by kind. Kubernetes'
# own rules come from k8s.io/apimachinery/pkg/util/validation (IsDNS1123Label, IsDNS1123Subdomain,
# IsQualifiedName for label keys and resource names, IsValidLabelValue); Prometheus durations from
# prometheus/common model.ParseDuration; systemd time spans from systemd.time(7).
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = r"%s(?:\.%s)*" % (_LABEL, _LABEL)
_QUALIFIED = r"(?:%s/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?" % _SUBDOMAIN
# absolute paths that go unquoted into a unit line (ExecStart=, ReadWritePaths=): no white space,
# quotes, backslashes, specifiers (%) or control characters
UNIT_PATH = re.compile(r"\A/[A-Za-z0-9._@+:,=/-]*\Z")
# An environment variable name (systemd Environment=, a process environment).
ENV_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
CHECKS = {
    "dns_label": (r"\A%s\Z" % _LABEL, 63, "a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit"),
    "dns_subdomain": (r"\A%s\Z" % _SUBDOMAIN, 253, "a DNS-1123 subdomain: DNS-1123 labels joined by '.'"),
    "label_key": (r"\A%s\Z" % _QUALIFIED, 316, "a label key: an optional DNS-1123 prefix and '/', then letters, digits, '-', '_', '.'"),
    "label_value": (r"\A(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z", 63, "a label value: letters, digits, '-', '_', '.'"),
    "resource_name": (r"\A%s\Z" % _QUALIFIED, 316, "an extended resource name such as nvidia.com/gpu"),
    "duration": (r"\A(?:[0-9]+(?:ms|s|m|h|d|w|y))+\Z", 64, "a Prometheus duration such as 30s, 5m, 1h30m"),
    "timespan": (r"\A(?:[0-9]+(?:us|ms|s|sec|m|min|h|hr|d))+\Z", 64, "a systemd time span such as 15s, 1min, 1h30min"),
    "seconds": (r"\A[0-9]{1,10}\Z", 10, "a whole number of seconds, such as 21600 for 6 hours"),
    "prometheus_name": (r"\A[A-Za-z_:][A-Za-z0-9_.:-]*\Z", 128, "letters, digits and _.:- (a Prometheus job name)"),
    "url": (r"\Ahttps?://[^\s\"'<>\\`{}|^]+\Z", 2048, "an http(s) URL without white space or quotes"),
    "unit_path": (UNIT_PATH.pattern, 4096, "an absolute path of letters, digits and ._@+:,=/- only (it is written into a systemd unit)"),
    "pull_policy": (r"\A(?:Always|IfNotPresent|Never)\Z", 12, "Always, IfNotPresent or Never"),
    # [registry[:port]/]path[:tag][@sha256:digest], nothing a shell or YAML could read
    "image": (r"\A[a-z0-9]+(?:[._/:-][a-z0-9]+)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?\Z", 512,
              "an image reference such as registry.example/busybox@sha256:<digest>"),
}
_COMPILED = dict((kind, re.compile(pattern)) for kind, (pattern, dummy, dummy2) in CHECKS.items())
# a SHA-256 as hashlib's hexdigest() writes it
SHA256 = re.compile(r"\A[0-9a-f]{64}\Z")
DIGEST_TAIL = "@sha256:"


def check_value(field, value, kind, empty_ok=False):
    """``value`` when it is of ``kind`` (CHECKS) and its length; else ParameterError naming ``field`` and what it must be."""
    if empty_ok and value in ("", None):
        return value
    dummy, limit, rule = CHECKS[kind]
    if not isinstance(value, str) or len(value) > limit or not _COMPILED[kind].match(value):
        raise ParameterError(field, "%r is not %s (at most %d characters)" % (value, rule, limit))
    return value


def check_pinned_image(field, value, why):
    """``value`` when it is an image reference pinned by digest; else ParameterError naming ``field``, ending with ``why``
    (what the image runs, the reason a tag is not enough)."""
    check_value(field, value, "image")
    if DIGEST_TAIL not in value:
        raise ParameterError(field, "%r names no digest: give repository@sha256:<64 hex> %s" % (value, why))
    return value
