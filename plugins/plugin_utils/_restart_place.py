# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: one of the fleet's kubelet restart places (module_utils/_cluster/restart_slots.py)
held around one node's kubelet restart, on the controller, by gpuops.fleet.kubelet_checkpoint's action plugin
(``restart_place``).

Held inside the node's own task, never across tasks: with ``serial`` and forks, a play that took a place in one task and
restarted kubelet in the next would have each slice hold one place while its other hosts wait for one (every slice's batch
stuck behind the task before it: a deadlock across slices, seen on the rig). Here a node's worker takes a place, runs the
module (kubelet stopped, the checkpoint repaired, kubelet started), and gives the place back, whatever the module did."""

from __future__ import annotations

import hashlib
import re

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import leases, restart_slots
from ansible_collections.gpuops.fleet.plugins.module_utils._common import settings
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import dns_label, is_int
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError, ParameterError

HOST = re.compile(r"\A[A-Za-z0-9._:@-]{1,200}\Z")
RUN = re.compile(r"\A[A-Za-z0-9._-]{1,64}\Z")


class RestartPlaceError(GpuopsError):
    """The places cannot be used here (no namespace, no RBAC): what to set."""


def _text(what, pattern=None):
    def _check(value):
        if not isinstance(value, str):
            return "must be %s, got %s" % (what, type(value).__name__)
        return None if pattern is None or pattern(value) else "must be %s, got %r" % (what, value[:80])
    return _check


def _limit(value):
    try:
        restart_slots.places(value, 1)
    except ParameterError as exc:
        return exc.reason
    return None


SETTINGS = settings.Table(
    settings.row("limit", "str", "5", check=_limit),
    settings.row("namespace", "str", "gpuops-system", check=_text("a namespace name (DNS-1123 label)", dns_label)),
    settings.row("run", "str", None, check=_text("1 to 64 letters, digits, '-', '_' or '.'", RUN.match)),
    settings.row("hold_seconds", "int", 600, check=settings.whole(1, 86400)),
    settings.row("wait_seconds", "int", 1800, check=settings.whole(0, 86400)),
    settings.row("kubeconfig", "str", "", check=_text("a path")),
)


def check(spec):
    """``spec`` (the task's ``restart_place``) checked and typed (a survey's strings turned into numbers, as every other
    setting); ParameterError names the field (``restart_place.<key>``)."""
    if not isinstance(spec, dict):
        raise ParameterError("restart_place", "give a mapping (%s), got %s" % (", ".join(SETTINGS.names()), type(spec).__name__))
    out = SETTINGS.check_all(dict((k, str(v) if k == "limit" and is_int(v) else v) for k, v in spec.items()),
                             coerce=settings.coerce, where="restart_place.")
    if not out["run"]:
        raise ParameterError("restart_place.run", "is required")
    return out


def _client(spec):
    """The API client kubernetes.core builds from the kubeconfig given, else its usual lookup (K8S_AUTH_*, ~/.kube/config,
    the in-cluster ServiceAccount)."""
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client  # pylint: disable=import-outside-toplevel

    return get_api_client(**({"kubeconfig": spec["kubeconfig"]} if spec["kubeconfig"] else {})).client.client


def holder(run, host):
    """``<run>/<host>``: the inventory's name of the host, which a node cannot change (its facts may set ``gpuops_node_name``
    and rank above the inventory's; ``inventory_hostname`` is a magic variable, set last), its SHA-256 where it is not a
    plain name."""
    if not HOST.match(host or ""):
        host = "sha256-" + hashlib.sha256((host or "").encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return "%s/%s" % (run, host)


class Held:
    """One of the fleet's places, held by ``holder(run, host)`` (``take``) until ``give_back``; ``report`` (a dict) gets
    ``place``, ``places``, ``waited_seconds``, then ``given_back``."""

    def __init__(self, spec, host, report):
        from kubernetes.client import CoordinationV1Api, CoreV1Api  # pylint: disable=import-outside-toplevel
        from kubernetes.client.exceptions import ApiException  # pylint: disable=import-outside-toplevel

        from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_watch import listed  # pylint: disable=import-outside-toplevel
        from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import plan  # pylint: disable=import-outside-toplevel

        self.report, self.api_exception = report, ApiException
        client = _client(spec)
        lease_api = leases.Leases(CoordinationV1Api(client), spec["namespace"], ApiException)
        percent = spec["limit"].strip().endswith("%")
        # raw pages, as the plan reads them, each Node cut to what the count reads as it arrives
        fleet = len(plan.gpu_fleet(listed(CoreV1Api(client).list_node, slim=plan.fleet_view))) if percent else 0
        self.places = restart_slots.Places(lease_api, restart_slots.places(spec["limit"], fleet))
        self.identity = holder(spec["run"], host)
        self.spec = spec

    def take(self):
        """The place, waiting for one (NoPlace where none came free within ``wait_seconds``; a missing namespace or a refusal
        said with what to set; another API error as it is)."""
        try:
            place = self.places.hold(self.identity, self.spec["hold_seconds"], self.spec["wait_seconds"])
        except self.api_exception as exc:
            status = getattr(exc, "status", None)
            if status in (403, 404):
                raise RestartPlaceError(
                    "the fleet's kubelet restart places (Leases in namespace %s) %s: create the namespace and grant the run "
                    "get, list, create and update on leases.coordination.k8s.io there (docs/rbac/kubelet-restart-places.yml), "
                    "set gpuops_kubelet_restart_namespace, or gpuops_kubelet_restart_fleet_wide: false (then the batch holds "
                    "per run, per slice under AWX job slicing)" % (self.spec["namespace"], "are refused (403)" if status == 403
                                                                   else "cannot be written (404: no such namespace)")) from None
            raise
        self.report.update(place=place, places=self.places.count, waited_seconds=round(self.places.waited, 1))
        return self

    def give_back(self):
        """Given back; an error doing so is said in the report (the place lapses after ``hold_seconds``), never raised over
        the repair's own result."""
        try:
            self.report["given_back"] = self.places.give_back(self.identity)
        except (self.api_exception, GpuopsError, OSError) as exc:
            self.report["given_back"] = []
            self.report["give_back_error"] = "%s: %s" % (type(exc).__name__, str(exc)[:200])
