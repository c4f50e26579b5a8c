# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection (controller): the boot guard's DaemonSet form, built as data.

For nodes reached only through the API (no SSH, no Ansible connection), as field report 000 offers
(a privileged DaemonSet with ``/usr/local/bin`` and ``/etc/systemd/system`` mounted that copies a
binary and a unit), but least-privilege:

* a ConfigMap holds the guard's code (``gpuops.pyz``, the file ``guard_install`` installs over SSH)
  and the install spec (JSON: the same directories, files and removals as the role's install step);
* the DaemonSet's init container runs ``python3 gpuops.pyz install --spec ...``: the node-side
  install engine (``_node/install.py``, the one ``guard_install`` runs); then its container runs
  ``gpuops wait`` until the pod is deleted (Ready only once the install exited 0, as the GKE driver
  installer's init container);
* the init container mounts only the guard's directories (each a hostPath, the fewest that hold them
  all), the ConfigMap, read-only, and the directory of the guard's interpreter (``checkpoint_guard_python``),
  read-only and never created, so that a node without it is refused before anything is written; the
  waiting container only the ConfigMap; no hostPID, no host network, no service account token, every capability
  dropped, read-only root filesystem, no privilege escalation. It runs as uid 0 because the host's
  directories are root's (writing to a directory one owns needs no capability);
* systemd is not asked (that would need the host's D-Bus socket or its mount namespace): units are
  enabled by their ``WantedBy=`` links, as ``systemctl enable`` makes them. The guard acts at the next
  boot, before kubelet, which is when stale GPU IDs appear;
* the pod template carries the code's and the spec's SHA-256, so a change of either is a new
  revision that ``gpuops.fleet.daemonset_rollout`` rolls node by node (updateStrategy OnDelete); the
  containers' commands carry them too, and the pod checks both before it runs or installs anything
  (``LAUNCHER``, then ``guard.install_spec``): an edited ConfigMap is refused, and the install's log
  line names both SHA-256s, which the rollout compares with the controller's.

The install refuses, before writing, a directory on a read-only or tmpfs mount (``_node/mounts.py``):
the pod's log and the rollout's row then say which directory and why.
"""

from __future__ import annotations

import base64
import hashlib
import json
import posixpath

from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_layout as guard_layout
from ansible_collections.gpuops.fleet.plugins.module_utils._common.beside_host import HOST_ROOT
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import UNIT_PATH, check_pinned_image, check_value
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

HOST = HOST_ROOT
CONFIG_DIR = "/gpuops"
CODE_KEY = "gpuops.pyz"
SPEC_KEY = "install.json"
CONTAINER = "install"
# a ConfigMap's whole size limit (k8s.io/api core/v1 MaxSecretSize is the same 1 MiB)
CONFIGMAP_MAX = 1024 * 1024
APP_LABEL = "gpuops-guard"
# The pod's first code: the image's python3 runs it from the pod template (python3 -c), before anything from the
# ConfigMap. It reads gpuops.pyz once, from the directory kubelet swapped in (a ConfigMap's files are links into a
# directory kubelet replaces whole, never rewrites), refuses bytes whose SHA-256 is not the template's, and runs that
# file. The code then checks the spec against the template's --spec-sha256 (guard.install_spec): a ConfigMap edited
# apart from its DaemonSet installs nothing.
LAUNCHER = (
    "import hashlib, json, os, runpy, sys\n"
    "path = os.path.realpath(sys.argv[1])\n"
    "with open(path, 'rb') as handle:\n"
    "    found = hashlib.sha256(handle.read()).hexdigest()\n"
    "if found != sys.argv[2]:\n"
    "    print(json.dumps({'level': 'error', 'event': 'install_failed', 'msg': '%s has SHA-256 %s, the pod template says %s: the "
    "ConfigMap was changed apart from its DaemonSet; nothing was run' % (sys.argv[1], found, sys.argv[2])}))\n"
    "    sys.exit(6)\n"
    "sys.argv = [path] + sys.argv[3:]\n"
    "runpy.run_path(path, run_name='__main__')\n"
)


def launch(python, code_sha256, *argv):
    """A container's command: the launcher checks the code against ``code_sha256`` (the template's), then runs it with ``argv``."""
    return [python, "-c", LAUNCHER, CONFIG_DIR + "/" + CODE_KEY, code_sha256] + list(argv)


def host_mounts(paths):
    """The fewest directories whose subtrees hold every path (a path under another is covered by its mount)."""
    chosen = []
    for path in sorted(set(paths)):
        if not any(path == top or path.startswith(top.rstrip("/") + "/") for top in chosen):
            chosen.append(path)
    return chosen


def _wanted_by(content):
    """The targets of a unit's ``WantedBy=`` lines (the builder writes one line, space-separated)."""
    found = []
    for line in content.splitlines():
        if line.startswith("WantedBy="):
            found.extend(line[len("WantedBy="):].split())
    return found


def install_spec(settings, files, code_sha256, unit_dir, enabled, late_check):
    """The spec the pod's ``gpuops install`` applies, every path under HOST (where the mounts are)."""
    unit = settings["unit"]
    directories = guard_layout.directories(settings, unit_dir)
    links, gone = [], []
    for entry in files:
        if not entry["unit"]:
            continue
        name = posixpath.basename(entry["path"])
        for target in _wanted_by(entry["content"]):
            link = "%s/%s.wants/%s" % (unit_dir, target, name)
            if enabled:
                if posixpath.dirname(link) not in [d["path"] for d in directories]:
                    directories.append({"path": posixpath.dirname(link), "mode": "0755"})
                links.append({"path": HOST + link, "target": entry["path"]})
            else:
                gone.append({"path": HOST + link})
    return {
        "require_persistent": True,
        # the wrapper's interpreter (checkpoint_guard_python), seen through its directory's read-only mount
        "interpreter": {"path": HOST + unit["python"], "shown": unit["python"], "name": "checkpoint_guard_python"},
        "directories": [dict(entry, path=HOST + entry["path"]) for entry in directories],
        "code": {"path": HOST + unit["lib_dir"] + "/gpuops.pyz", "mode": "0644", "sha256": code_sha256,
                 "source": CONFIG_DIR + "/" + CODE_KEY},
        "files": [{"path": HOST + entry["path"], "content": entry["content"], "mode": entry["mode"], "unit": entry["unit"]}
                  for entry in files],
        "links": links,
        # what an older layout left (the role's install step removes the same: guard_layout), and the links of disabled units
        "absent": guard_layout.leftovers(settings, unit_dir, late_check, root=HOST, systemd=False) + gone,
    }


def _checked(options):
    name = check_value("checkpoint_guard_daemonset_name", options["name"], "dns_label")
    namespace = check_value("checkpoint_guard_daemonset_namespace", options["namespace"], "dns_label")
    if options["image"] in ("", None):
        raise ParameterError("checkpoint_guard_daemonset_image", "not set: name an image with python3 by digest (repository@sha256:<64 hex>), "
                             "e.g. the collection's execution environment image")
    image = check_pinned_image("checkpoint_guard_daemonset_image", options["image"],
                               "(an image with python3, e.g. the collection's execution environment); a tag can run other code tomorrow")
    python = options["python"]
    if not isinstance(python, str) or not (python == "python3" or UNIT_PATH.match(python)):
        raise ParameterError("checkpoint_guard_daemonset_python", "%r must be python3 or an absolute path of the image's Python" % (python,))
    keys = options["node_label_keys"]
    if not isinstance(keys, list):
        raise ParameterError("checkpoint_guard_daemonset_node_label_keys", "must be a list of label keys (an empty list: every node)")
    for index, key in enumerate(keys):
        check_value("checkpoint_guard_daemonset_node_label_keys[%d]" % index, key, "label_key")
    tolerations = options["tolerations"]
    if not isinstance(tolerations, list) or not all(isinstance(t, dict) for t in tolerations):
        raise ParameterError("checkpoint_guard_daemonset_tolerations", "must be a list of tolerations (mappings with key, operator, effect)")
    return name, namespace, image, python, keys, tolerations


def manifests(settings, files, code, options, unit_dir="/etc/systemd/system", enabled=True, late_check=False):
    """``{"configmap", "daemonset", "code_sha256", "spec_sha256", "mounts", "read_only_mounts"}`` for the guard's DaemonSet form.

    ``files``: the role's text files (``_guard_files.files`` with no sysroot); ``code``: gpuops.pyz's bytes;
    ``options``: name, namespace, image (by digest), python, node_label_keys, tolerations, priority_class_name."""
    name, namespace, image, python, keys, tolerations = _checked(options)
    code_sha = hashlib.sha256(code).hexdigest()
    spec = install_spec(settings, files, code_sha, unit_dir, enabled, late_check)
    spec_text = json.dumps(spec, indent=1, sort_keys=True) + "\n"
    spec_sha = hashlib.sha256(spec_text.encode("utf-8")).hexdigest()
    encoded = base64.b64encode(code).decode("ascii")
    if len(encoded) + len(spec_text) > CONFIGMAP_MAX:
        raise ParameterError("checkpoint_guard_daemonset", "the code and spec are %d bytes, over a ConfigMap's 1 MiB" % (len(encoded) + len(spec_text)))
    labels = {"app.kubernetes.io/name": APP_LABEL, "app.kubernetes.io/instance": name, "app.kubernetes.io/managed-by": "gpuops.fleet"}
    top = host_mounts([entry["path"] for entry in guard_layout.directories(settings, unit_dir)])
    volumes = [{"name": "guard", "configMap": {"name": name, "defaultMode": 0o444}}]
    mounts = [{"name": "guard", "mountPath": CONFIG_DIR, "readOnly": True}]
    for index, path in enumerate(top):
        volumes.append({"name": "host-%d" % index, "hostPath": {"path": path, "type": "DirectoryOrCreate"}})
        mounts.append({"name": "host-%d" % index, "mountPath": HOST + path})
    python_dir = posixpath.dirname(settings["unit"]["python"])
    read_only = []
    if host_mounts(top + [python_dir]) != top:
        read_only.append(python_dir)
        # the interpreter's directory, read-only and never created: the install only looks whether it is there
        volumes.append({"name": "host-python", "hostPath": {"path": python_dir, "type": "Directory"}})
        mounts.append({"name": "host-python", "mountPath": HOST + python_dir, "readOnly": True})
    common = {
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        # the host's directories are root's: uid 0, but no capability at all (no DAC override, no chown of others' files)
        "securityContext": {"runAsUser": 0, "runAsGroup": 0, "privileged": False, "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
    }
    pod = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "tolerations": tolerations,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        # the install is an init container, as the GKE driver installer's: the pod is Ready only once it exited 0
        "initContainers": [dict(
            name=CONTAINER,
            command=launch(python, code_sha, "install", "--spec", CONFIG_DIR + "/" + SPEC_KEY, "--spec-sha256", spec_sha),
            # a failed install's last log line (which directory, why) becomes the rollout row's reason
            terminationMessagePolicy="FallbackToLogsOnError",
            volumeMounts=mounts, **common)],
        # then nothing to do but keep the pod Running: no host directory mounted any more
        "containers": [dict(name="guard", command=launch(python, code_sha, "wait"),
                            volumeMounts=[mounts[0]], **common)],
        "volumes": volumes,
    }
    if keys:
        pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "Exists"}]} for key in keys]}}}
    if options.get("priority_class_name"):
        pod["priorityClassName"] = check_value("checkpoint_guard_daemonset_priority_class_name", options["priority_class_name"], "dns_subdomain")
    annotations = {"gpuops.fleet/code-sha256": code_sha, "gpuops.fleet/spec-sha256": spec_sha}
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace, "labels": labels},
                 "data": {SPEC_KEY: spec_text}, "binaryData": {CODE_KEY: encoded}}
    daemonset = {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": APP_LABEL, "app.kubernetes.io/instance": name}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod},
        },
    }
    return {"configmap": configmap, "daemonset": daemonset, "code_sha256": code_sha, "spec_sha256": spec_sha, "mounts": top,
            "read_only_mounts": read_only,
            "log_pattern": r'"event":"installed".*"code_sha256":"(?P<sha256>[0-9a-f]{64})","spec_sha256":"(?P<spec_sha256>[0-9a-f]{64})"'}
