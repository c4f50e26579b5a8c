# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: how GPU workloads get at the driver (module
``gpu_workload_audit``). Pure functions over Pod objects as the API serves them (dicts).

Field report 004 ended with every GPU pod ``privileged: true`` and the driver's directories
mounted crosswise (the host's ``.../nvidia/bin`` on ``/usr/local/nvidia/lib64`` and the
reverse). What a GPU workload needs instead, on nodes where a driver installer put the driver
in a host directory (GKE's ``/home/kubernetes/bin/nvidia``): the GPU through the device plugin
(a ``nvidia.com/*`` resource), the install dir at ``/usr/local/nvidia`` (read-only), its
``lib64`` on ``LD_LIBRARY_PATH`` and no ``privileged`` and no ``/dev`` from the host.
"""

from __future__ import annotations

import posixpath

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

KINDS = ("privileged", "swapped_mount", "misplaced_mount", "ld_library_path", "dev_mounted", "device_node_mounted")
DEFAULT_IGNORE = [{"k8s-app": "nvidia-driver-installer"}]


def _norm(path):
    return posixpath.normpath(path or "/") if path else None


def check_params(install_dir, container_dir, resource_prefixes, ignore_labels):
    for field, value in (("install_dir", install_dir), ("container_dir", container_dir)):
        if not isinstance(value, str) or not value.startswith("/"):
            raise ParameterError(field, "expected an absolute path, got %r" % (value,))
    if not resource_prefixes or any(not isinstance(p, str) or not p for p in resource_prefixes):
        raise ParameterError("resource_prefixes", "expected a non-empty list of resource name prefixes such as nvidia.com/")
    for item in ignore_labels or ():
        if not isinstance(item, dict) or not item:
            raise ParameterError("ignore_pods_with_labels", "expected a list of label maps such as {k8s-app: nvidia-driver-installer}, got %r" % (item,))


def _requests_gpu(ctr, prefixes):
    resources = ctr.get("resources") or {}
    names = set(resources.get("limits") or {}) | set(resources.get("requests") or {})
    return sorted(n for n in names if any(n.startswith(p) for p in prefixes))


def _under(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


def _ignored(pod, ignore_labels):
    labels = ((pod.get("metadata") or {}).get("labels")) or {}
    return any(all(labels.get(k) == str(v) for k, v in item.items()) for item in ignore_labels or ())


def audit_pod(pod, install_dir, container_dir, prefixes, ignore_labels=None):
    """Findings for one pod (None when the pod neither asks for a GPU nor touches the driver or /dev/nvidia*)."""
    if _ignored(pod, ignore_labels):
        return None
    install_dir, container_dir = _norm(install_dir), _norm(container_dir)
    spec = pod.get("spec") or {}
    host_paths = dict((v.get("name"), _norm((v.get("hostPath") or {}).get("path"))) for v in spec.get("volumes") or () if v.get("hostPath"))
    lib_dir = posixpath.join(container_dir, "lib64")
    findings, relevant = [], False
    for ctr in list(spec.get("initContainers") or ()) + list(spec.get("containers") or ()):
        name = ctr.get("name")
        gpus = _requests_gpu(ctr, prefixes)
        mounts = [(m.get("mountPath"), host_paths.get(m.get("name"))) for m in ctr.get("volumeMounts") or () if m.get("name") in host_paths]
        driver_mounts = [(_norm(at), host) for at, host in mounts if _under(host, install_dir)]
        dev_mounts = [(at, host) for at, host in mounts if host == "/dev" or _under(host, "/dev/nvidia") or host.startswith("/dev/nvidia")]
        if not (gpus or driver_mounts or dev_mounts):
            continue
        relevant = True

        def finding(kind, detail, fix, container=name):
            findings.append({"container": container, "kind": kind, "detail": detail, "fix": fix})

        if (ctr.get("securityContext") or {}).get("privileged"):
            finding("privileged", "runs privileged: true (every host device, every capability)",
                    "remove privileged: true; request the GPU as a resource (%s) so the device plugin hands the container "
                    "its /dev/nvidia* devices, and mount %s read-only at %s" % (" or ".join(gpus) or "nvidia.com/gpu", install_dir, container_dir))
        for at, host in driver_mounts:
            sub = posixpath.relpath(host, install_dir)
            expected = _norm(posixpath.join(container_dir, sub)) if sub != "." else container_dir
            if at == expected:
                continue
            placed = posixpath.relpath(at, container_dir) if _under(at, container_dir) else None
            if placed not in (None, ".") and sub != "." and placed != sub:
                finding("swapped_mount", "mounts the host's %s at %s (the driver's %s directory where its %s belongs)" % (host, at, sub, placed),
                        "mount %s at %s, or the whole %s read-only at %s" % (host, expected, install_dir, container_dir))
            else:
                finding("misplaced_mount", "mounts the host's %s at %s" % (host, at),
                        "mount it at %s (the driver was built for that path), read-only" % expected)
        if gpus or driver_mounts:
            env = dict((e.get("name"), e.get("value")) for e in ctr.get("env") or () if "value" in e)
            ld_path = env.get("LD_LIBRARY_PATH")
            if ld_path is None or lib_dir not in [_norm(p) for p in ld_path.split(":") if p]:
                finding("ld_library_path", "LD_LIBRARY_PATH is %s" % ("not set" if ld_path is None else repr(ld_path)),
                        "add %s to LD_LIBRARY_PATH (the CUDA libraries are found there, field report 004)" % lib_dir)
        for at, host in dev_mounts:
            if host == "/dev":
                finding("dev_mounted", "mounts the host's whole /dev at %s" % at,
                        "remove the /dev mount; the device plugin passes the container only its GPU's /dev/nvidia* devices")
            else:
                finding("device_node_mounted", "mounts the device node %s by hostPath at %s, past the device plugin" % (host, at),
                        "remove the hostPath mount and request the GPU as a resource (nvidia.com/gpu)")
    if not relevant:
        return None
    meta = pod.get("metadata") or {}
    return {"namespace": meta.get("namespace"), "name": meta.get("name"), "node": spec.get("nodeName"), "findings": findings}


def audit(pods, install_dir, container_dir, prefixes, ignore_labels=None):
    """Every GPU-related pod with its findings; ``by_node`` counts findings per node."""
    rows = []
    for pod in pods or ():
        row = audit_pod(pod, install_dir, container_dir, prefixes, ignore_labels)
        if row is not None:
            rows.append(row)
    rows.sort(key=lambda r: (r["namespace"] or "", r["name"] or ""))
    by_node = {}
    for row in rows:
        if row["node"]:
            by_node[row["node"]] = by_node.get(row["node"], 0) + len(row["findings"])
    bad = [r for r in rows if r["findings"]]
    total = sum(len(r["findings"]) for r in rows)
    return {"pods": rows, "by_node": by_node, "findings": total, "clean": not bad,
            "msg": "%d GPU pod(s) audited, %d with findings (%d in all)" % (len(rows), len(bad), total)}
