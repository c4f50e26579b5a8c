# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: kubelet's effective CPUManager policy, node side.

kubelet takes its settings from command-line flags and from a KubeletConfiguration file
(``--config``); a flag that is set wins over the file (kubelet re-applies flags on top of the
file), and ``cpuManagerPolicy`` defaults to ``none``. The flags are read, in this order, from:

1. the running kubelet's ``/proc/<pid>/cmdline`` (what kubelet really runs with);
2. the files systemd units load them from when kubelet is not running: kubeadm's
   ``/var/lib/kubelet/kubeadm-flags.env`` (``KUBELET_KUBEADM_ARGS``) with kubeadm's
   ``--config=/var/lib/kubelet/config.yaml``, and ``/etc/default/kubelet`` or
   ``/etc/sysconfig/kubelet`` (``KUBELET_EXTRA_ARGS``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket

from ansible_collections.gpuops.fleet.plugins.module_utils._node import hostroot
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import KubeletConfigError, ParameterError

try:
    import yaml
    HAS_YAML = True
except ImportError:  # pragma: no cover - PyYAML is on nearly every node; JSON and a line scan remain
    HAS_YAML = False

KUBEADM_FLAGS_ENV = "/var/lib/kubelet/kubeadm-flags.env"
KUBEADM_CONFIG = "/var/lib/kubelet/config.yaml"
EXTRA_ARGS_FILES = ("/etc/default/kubelet", "/etc/sysconfig/kubelet")
# the policies kubelet knows (pkg/kubelet/cm/cpumanager: PolicyNone, PolicyStatic; names are case-sensitive);
# kubelet refuses to start with any other
POLICIES = ("none", "static")
FLAGS_OF_INTEREST = ("config", "cpu-manager-policy", "hostname-override", "root-dir", "feature-gates", "reserved-cpus")
MAX_CONFIG_BYTES = 1024 * 1024


def parse_flags(argv):
    """pflag-style ``--name=value`` / ``--name value`` into a dict (last one wins, as in pflag)."""
    flags = {}
    args = list(argv or [])
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-") or arg in ("-", "--"):
            continue
        name = arg.lstrip("-")
        if "=" in name:
            name, value = name.split("=", 1)
        elif i < len(args) and not args[i].startswith("-"):
            value = args[i]
            i += 1
        else:
            value = "true"
        flags[name] = value
    return flags


def _within(root, path):
    """Where ``path`` of the node whose root is ``root`` is read: every link followed inside that root, the last one too
    (beside the host an absolute link is the host's, not the pod's). A link loop raises KubeletConfigError naming it."""
    if root in ("", "/"):
        return path
    try:
        return hostroot.readable(path, root)
    except OSError as exc:
        raise KubeletConfigError("%s: %s" % (path, exc.strerror or exc)) from exc


def _read_text(path, limit=MAX_CONFIG_BYTES):
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise KubeletConfigError("%s is larger than %d bytes" % (path, limit))
    return data.decode("utf-8", "replace")


def find_kubelet_process(proc="/proc"):
    """(pid, argv) of the running kubelet, or None."""
    try:
        entries = sorted((e for e in os.listdir(proc) if e.isdigit()), key=int)
    except OSError:
        return None
    for entry in entries:
        try:
            with open(os.path.join(proc, entry, "cmdline"), "rb") as handle:
                raw = handle.read()
        except OSError:
            continue
        argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        if not argv:
            continue
        if os.path.basename(argv[0]) == "kubelet":
            return int(entry), argv[1:]
        if os.path.basename(argv[0]) == "hyperkube" and len(argv) > 1 and argv[1] == "kubelet":
            return int(entry), argv[2:]
    return None


def _env_assignments(text):
    """VAR=value lines of a systemd EnvironmentFile (quotes removed)."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        try:
            parts = shlex.split(value)
        except ValueError:
            parts = [value]
        out[key.strip()] = " ".join(parts)
    return out


def flags_from_env_files(root="/"):
    """kubelet's flags as kubeadm's systemd drop-in assembles them; (argv, files) or (None, [])."""
    argv, used = [], []
    kubeadm = _within(root, KUBEADM_FLAGS_ENV)
    if os.path.isfile(kubeadm):
        env = _env_assignments(_read_text(kubeadm))
        argv.append("--config=%s" % KUBEADM_CONFIG)
        argv.extend(shlex.split(env.get("KUBELET_KUBEADM_ARGS", "")))
        used.append(KUBEADM_FLAGS_ENV)
    for name in EXTRA_ARGS_FILES:
        path = _within(root, name)
        if os.path.isfile(path):
            env = _env_assignments(_read_text(path))
            argv.extend(shlex.split(env.get("KUBELET_EXTRA_ARGS", "")))
            used.append(name)
    return (argv, used) if used else (None, [])


def _scan_top_level(text, key):
    match = re.search(r"^%s\s*:\s*[\"']?([A-Za-z]+)[\"']?\s*(?:#.*)?$" % re.escape(key), text, re.M)
    return match.group(1) if match else None


def config_file_policy(path):
    """``cpuManagerPolicy`` of a KubeletConfiguration file (YAML or JSON); None when unset."""
    text = _read_text(path)
    try:
        if HAS_YAML:
            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except ValueError as exc:
        if not HAS_YAML:
            return _scan_top_level(text, "cpuManagerPolicy")
        raise KubeletConfigError("%s is not valid YAML/JSON: %s" % (path, exc)) from exc
    except Exception as exc:  # yaml.YAMLError; yaml may be absent, so no name to catch
        raise KubeletConfigError("%s is not valid YAML/JSON: %s" % (path, str(exc).splitlines()[0])) from exc
    if data is None:
        return None
    if not isinstance(data, dict):
        raise KubeletConfigError("%s does not hold a KubeletConfiguration mapping" % path)
    kind = data.get("kind")
    if kind not in (None, "KubeletConfiguration"):
        raise KubeletConfigError("%s is a %s, not a KubeletConfiguration" % (path, kind))
    value = data.get("cpuManagerPolicy")
    return None if value is None else str(value)


def _policy_of_file(root, path):
    """(cpuManagerPolicy or None, error or None) of kubelet's config file ``path`` on the node whose root is ``root``."""
    try:
        full = _within(root, path)
    except KubeletConfigError as exc:
        return None, "kubelet's config file cannot be read: %s" % exc
    if not os.path.isfile(full):
        return None, "kubelet's config file %s does not exist" % path
    try:
        return config_file_policy(full), None
    except (OSError, KubeletConfigError) as exc:
        return None, str(exc)


def read(root="/", cmdline=None, config_path=None, hostname=None, proc=None):
    """kubelet's effective cpuManagerPolicy and where it came from.

    ``cmdline`` (a list) replaces the lookup of kubelet's flags; ``config_path`` replaces
    ``--config``. Nothing found is a result with ``error`` set, not an exception: the caller
    (preflight) decides what an unknown policy means.
    """
    if cmdline is not None and not isinstance(cmdline, list):
        raise ParameterError("cmdline", "expected a list of kubelet arguments")
    result = {"cpu_manager_policy": None, "source": None, "flags_from": None, "config_path": None,
              "flags": {}, "node_name": None, "error": None}
    if cmdline is not None:
        argv, result["flags_from"] = cmdline, "cmdline parameter"
    else:
        found = find_kubelet_process(proc or _within(root, "/proc")) if (proc or root in ("", "/")) else None
        if found:
            argv, result["flags_from"] = found[1], "running kubelet (pid %d)" % found[0]
        else:
            try:
                argv, used = flags_from_env_files(root)
            except KubeletConfigError as exc:
                result["error"] = "kubelet's flag files cannot be read: %s" % exc
                return result
            result["flags_from"] = ", ".join(used) if used else None
    flags = parse_flags(argv) if argv is not None else {}
    result["flags"] = dict((k, v) for k, v in flags.items() if k in FLAGS_OF_INTEREST)
    name = flags.get("hostname-override") or hostname or socket.gethostname()
    result["node_name"] = name.strip().lower()
    if argv is None and config_path is None:
        result["error"] = ("no running kubelet, and none of %s found" % ", ".join((KUBEADM_FLAGS_ENV,) + EXTRA_ARGS_FILES))
        return result
    path = config_path or flags.get("config")
    policy, source = None, None
    if path:
        result["config_path"] = path
        policy, result["error"] = _policy_of_file(root, path)
        if policy:
            source = "config file %s" % path
    if "cpu-manager-policy" in flags:
        policy, source = flags["cpu-manager-policy"], "flag --cpu-manager-policy (%s)" % result["flags_from"]
        result["error"] = None  # the flag wins over a config file that could not be read
    if result["error"]:
        return result
    if policy is None:
        policy, source = "none", "kubelet's default (not set in %s)" % (path or result["flags_from"])
    result["source"] = source
    if policy not in POLICIES:
        result["error"] = ("cpuManagerPolicy %r (%s) is not one kubelet knows (%s; case-sensitive): kubelet refuses to start with it; "
                           "fix it on the node" % (policy, source, ", ".join(POLICIES)))
        return result
    result["cpu_manager_policy"] = policy
    return result


def read_on_node(root="/", cmdline=None, config_path=None, hostname=None):
    """read() as a module runs it, on the host or beside it (hostroot: the node pod on a host without python3).

    ``root`` is a host path. Beside the host, its ``/`` is the host's root under the mount, while ``/proc``
    (the pod has the host's PID namespace) shows the host's processes, and the host's name is its own
    ``/etc/hostname`` (the pod has a name of its own). A ``root`` other than ``/`` is a sysroot: no live process."""
    base = hostroot.root()
    if base is None:
        return read(root=root, cmdline=cmdline, config_path=config_path, hostname=hostname)
    if root in ("", "/"):
        return read(root=base, cmdline=cmdline, config_path=config_path, hostname=hostname or hostroot.hostname(base), proc="/proc")
    return read(root=hostroot.local(root, base), cmdline=cmdline, config_path=config_path, hostname=hostname)
