# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: node code that runs beside the host, not on it.

Through ``gpuops.fleet.k8s_node`` a host without ``python3`` (COS, Flatcar, Bottlerocket, Talos)
cannot run a module chrooted into itself. The node pod then runs the modules with its image's
Python, the host's ``/`` mounted at ``GPUOPS_HOST_ROOT`` (``/host``), which the connection exports.
Everything a module does on the node then goes through here:

* files: a host path (``/var/lib/kubelet/...``, what the user and the role give) is reached at
  ``local(path)``: its directories are resolved inside the root, so a host symlink with an
  absolute target (``/var/lib/kubelet -> /mnt/data/kubelet``) lands on the host's target, not the
  pod's; the last component is kept (an atomic rename replaces a link, as on the host);
* programs: ``systemctl``, ``systemd-run`` and ``nvidia-smi`` are the host's, run chrooted into the
  root (``runner``) with argv built from data, and ``which`` finds them on the host and answers
  with host paths: the rescue timer's command line is run by the host's systemd, so every path in
  it (tools, lock) is a host path (``host``);
* answers: ``to_host`` turns the paths in a result back into host paths, so a report reads the
  same whichever way the module ran.

Without ``GPUOPS_HOST_ROOT`` (SSH, a local run, the chrooted node pod, the boot guard) every
function is the identity, and nothing here changes what the node code does.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import sys

from ansible_collections.gpuops.fleet.plugins.module_utils._common.beside_host import HOST_ROOT_ENV
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError, UnsafeFileError

ENV = HOST_ROOT_ENV
# where a host's programs are when PATH does not say (systemd's default PATH)
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_MAX_LINKS = 40
# Run argv on the host: chroot into the root, then exec the program from the host's PATH. The pod's
# own Python does it (an image needs no chroot binary); the caller's argv stays argv. execvp's PATH search
# imports ``warnings`` when it runs, and after the chroot the pod's standard library is gone: imported first.
_CHROOT = ("import os, sys, warnings  # noqa: F401\n"
           "os.chroot(sys.argv[1]); os.chdir('/')\n"
           "try:\n"
           "    os.execvp(sys.argv[2], sys.argv[2:])\n"
           "except OSError as exc:\n"
           "    sys.stderr.write('%s: not runnable on the host (%s)\\n' % (sys.argv[2], exc.strerror)); sys.exit(127)\n")


def root(environ=None):
    """The host's root as this process sees it, or None when this process runs on the host itself.

    Raises ParameterError when the variable is set to something that is not the absolute path of a
    directory (``/`` itself means "on the host": None)."""
    value = (os.environ if environ is None else environ).get(ENV, "")
    if not value:
        return None
    if not os.path.isabs(value) or not os.path.isdir(value):
        raise ParameterError(ENV, "%r must be the absolute path of the host's root mounted in the node pod (e.g. /host)" % value)
    value = os.path.normpath(value)
    return None if value == "/" else value


def resolve(base, path, last=True):
    """``path`` (absolute, a host path) resolved inside ``base``: links followed as the host would (an
    absolute target starts again at ``base``, ``..`` never leaves it); the last component only when ``last``."""
    base = base.rstrip("/")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    done, hops = [], 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        candidate = base + "/" + "/".join(done + [part])
        if (parts or last) and os.path.islink(candidate):
            hops += 1
            if hops > _MAX_LINKS:
                raise OSError(errno.ELOOP, "Too many levels of symbolic links (a link loop)", path)
            target = os.readlink(candidate)
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            continue
        done.append(part)
    return base + "/" + "/".join(done) if done else (base or "/")


def local(path, base=None):
    """Where this process reaches the host path ``path`` (unchanged on the host itself, and for a relative or empty path)."""
    base = root() if base is None else base
    if not base or not path or not os.path.isabs(path):
        return path
    try:
        return resolve(base, path, last=False)
    except OSError as exc:
        # never the unresolved path: the kernel would follow its links in the pod, and a loop would look like a missing file
        raise UnsafeFileError("%s: %s inside the host's root (%s); fix the link on the host" % (path, exc.strerror or exc, base)) from exc


def readable(path, base=None):
    """Where this process reads the host path ``path``: like ``local``, and its last component followed too when it is a
    link, inside the host's root (an absolute ``/etc/hostname -> /run/...`` is the host's, not the pod's). A link loop
    raises OSError (ELOOP), never a path that only looks missing."""
    base = root() if base is None else base
    if not base or not path or not os.path.isabs(path):
        return path
    return resolve(base, path, last=True)


def host(path, base=None):
    """The host path of ``path`` as this process reaches it (the inverse of ``local``)."""
    base = root() if base is None else base
    if not base or not isinstance(path, str):
        return path
    if path == base:
        return "/"
    return path[len(base):] if path.startswith(base + "/") else path


def localize(obj, names, base=None):
    """Set each attribute ``names`` of ``obj`` (host paths, e.g. checked options) to ``local`` of it."""
    base = root() if base is None else base
    for name in names if base else ():
        setattr(obj, name, local(getattr(obj, name), base))
    return obj


def to_host(value, base=None):
    """``value`` (a result: dicts, lists, strings) with every ``ROOT/`` in its strings written as ``/``.

    Never raises: where the root itself is in error (that error is being reported), ``value`` is returned."""
    if base is None:
        try:
            base = root()
        except ParameterError:
            return value
    if not base:
        return value
    if isinstance(value, str):
        return value.replace(base + "/", "/")
    if isinstance(value, dict):
        return dict((k, to_host(v, base)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(to_host(v, base) for v in value)
    return value


def hostname(base=None):
    """The host's name: its ``/etc/hostname`` beside the host (the node pod has a name of its own), else this machine's."""
    base = root() if base is None else base
    if base:
        try:
            with open(readable("/etc/hostname", base)) as handle:
                name = handle.read(256).strip()
            if name:
                return name
        except OSError:
            pass
    return socket.gethostname()


def which(name, path=None, base=None):
    """The host path of the host's executable ``name`` (PATH, else HOST_PATH), or None; ``shutil.which`` on the host itself."""
    base = root() if base is None else base
    if not base:
        return shutil.which(name, path=path)
    if "/" in name:
        dirs, name = [os.path.dirname(name)], os.path.basename(name)
    else:
        dirs = (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep) + HOST_PATH.split(":")
    for directory in dirs:
        if not directory.startswith("/"):
            continue
        candidate = os.path.join(directory, name)
        try:
            resolved = resolve(base, candidate)
        except OSError:
            continue
        if os.path.isfile(resolved) and os.access(resolved, os.X_OK):
            return os.path.normpath(candidate)
    return None


def argv(command, base=None):
    """``command`` (a list) as run on the host: chrooted into the root by this Python; unchanged on the host itself."""
    base = root() if base is None else base
    if not base:
        return list(command)
    return [sys.executable, "-c", _CHROOT, base] + [str(a) for a in command]


def tools(names, get_bin_path, run=None, base=None):
    """``(paths, run)``: ``{name: path or None}`` of the host's tools ``names`` and ``run`` made to run on the host. On the
    host itself, the module's ``get_bin_path`` finds them and ``run`` is unchanged; beside the host (a node pod), ``which``
    finds their host paths under its root and ``runner`` runs them there."""
    base = root() if base is None else base
    if not base:
        return dict((name, get_bin_path(name)) for name in names), run
    return dict((name, which(name, base=base)) for name in names), (runner(run, base) if run is not None else None)


def driver_tool(name, found, driver_root, base=None):
    """The driver's own ``name`` where the driver has one (``<driver_root>/usr/bin/<name>``: a GPU Operator node's
    ``/run/nvidia/driver``, whose nvidia-smi is not on the host's PATH), else ``found`` (PATH's, from ``tools``). The one
    way the node modules find the driver's tools (gpu_reset, gpu_rma_evidence). ``driver_root`` is a host path; the
    path returned is one ``run`` (from ``tools``) runs: a host path, run chrooted beside the host."""
    if not driver_root or not os.path.isabs(driver_root):
        return found
    path = os.path.join(driver_root, "usr/bin", name)
    try:
        seen = readable(path, base)
    except (OSError, UnsafeFileError):
        return found
    return path if seen and os.path.isfile(seen) and os.access(seen, os.X_OK) else found


def runner(run, base=None):
    """``run(argv, **kw)`` (e.g. ``AnsibleModule.run_command``) made to run its argv on the host."""
    base = root() if base is None else base
    if not base:
        return run

    def on_host(command, *args, **kwargs):
        return run(argv(command, base), *args, **kwargs)
    return on_host
