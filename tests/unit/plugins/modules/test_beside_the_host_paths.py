# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Beside the host, the node modules touch the host's files only under its root (issue 32's acceptance).

The node pod runs the modules with its image's Python, the host's ``/`` at ``GPUOPS_HOST_ROOT``. A
host path opened as it is names the pod's file, not the host's: item 8's ``/etc/hostname`` and
kubelet's absolute links were that bug. A scan of the source cannot prove the rule (a path can reach
``open`` through any variable), so this asks Python itself: every module process of a play that runs
the node modules beside a temp host root carries an audit hook (``sys.addaudithook``, loaded by a
``sitecustomize`` on ``PYTHONPATH``) that writes down each file the process opens, lists, creates,
renames or removes, and each program it starts. Every path must be under the host's root, or one
of the pod's own files named below with the reason it is the pod's. A new direct ``open`` of a host
path in ``_node/`` (or a module) fails here with the path and the line that opened it.
"""

from __future__ import annotations

import json
import os
import sys

import fakenode

from test_kubelet_checkpoint import NEW, host_root

# Every audit event that names a path, and which of its arguments are paths (Python's audit events table).
HOOK = r'''
import json, os, sys, traceback

_LOG = os.environ.get("GPUOPS_AUDIT_LOG")
_EVENTS = {"open": (0,), "os.listdir": (0,), "os.scandir": (0,), "os.mkdir": (0,), "os.rmdir": (0,), "os.remove": (0,),
           "os.rename": (0, 1), "os.link": (0, 1), "os.symlink": (0, 1), "os.chmod": (0,), "os.chown": (0,),
           "os.utime": (0,), "os.truncate": (0,), "os.chdir": (0,), "os.walk": (0,), "glob.glob": (0,),
           "shutil.copyfile": (0, 1), "shutil.rmtree": (0,), "subprocess.Popen": (0, 1), "os.exec": (0, 1),
           "os.posix_spawn": (0, 1), "ctypes.dlopen": (0,)}
if _LOG and "AnsiballZ_" in (sys.argv[0] if sys.argv else ""):
    _fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    _busy = []

    def _where():
        for frame in reversed(traceback.extract_stack()[:-2]):
            if "gpuops/fleet/plugins" in frame.filename:
                return "%s:%s" % (frame.filename.split("gpuops/fleet/", 1)[1], frame.lineno)
        return None

    def _hook(event, args):
        if _busy or event not in _EVENTS:
            return
        _busy.append(1)
        try:
            paths = []
            for index in _EVENTS[event]:
                value = args[index] if index < len(args) else None
                if isinstance(value, (list, tuple)):  # an argv: its program
                    value = value[0] if value else None
                if isinstance(value, bytes):
                    value = value.decode("utf-8", "surrogateescape")
                if isinstance(value, os.PathLike):
                    value = os.fspath(value)
                if isinstance(value, str):
                    paths.append(value)
            if paths:
                record = {"event": event, "paths": paths, "cwd": os.getcwd(), "where": _where()}
                os.write(_fd, (json.dumps(record) + "\n").encode())
        finally:
            _busy.pop()

    sys.addaudithook(_hook)
'''

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: the inventory (the pod's NVML, then the host's machine-id and hostname)
      gpuops.fleet.gpu_uuid_facts: {backend: nvml}
      register: facts
    - name: kubelet's config, from its flags
      gpuops.fleet.kubelet_config_info:
        cmdline: [--config=/var/lib/kubelet/config.yaml, --root-dir=/var/lib/kubelet]
      register: config
    - name: plan (check mode)
      gpuops.fleet.kubelet_checkpoint: {kubelet_unit: '', strategy: prune, gpus: "{{ facts.ansible_facts.gpuops_gpus }}"}
      check_mode: true
    - name: repair
      gpuops.fleet.kubelet_checkpoint: {kubelet_unit: '', strategy: prune, gpus: "{{ facts.ansible_facts.gpuops_gpus }}"}
      register: done
    - name: again
      gpuops.fleet.kubelet_checkpoint: {kubelet_unit: '', strategy: prune, gpus: "{{ facts.ansible_facts.gpuops_gpus }}"}
    - name: described
      gpuops.fleet.kubelet_checkpoint_info: {}
    - name: show
      ansible.builtin.debug:
        msg: "SEEN={{ {'node_id': facts.ansible_facts.gpuops_gpus.node_id, 'config': config.config_path | default(None),
          'backup': done.backup_path} | to_json }}"
"""


# the interpreter's own directories, as given and resolved
PYTHON = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)} | {sys.prefix, sys.base_prefix}


def _under(path, *dirs):
    path = os.path.normpath(path)
    return any(d and (path == d or path.startswith(d.rstrip("/") + "/")) for d in dirs)


def pods_own(path, tmp_path, lib_dir):
    """The reason ``path`` is the pod's own file, not a host file the module should have reached under the root;
    None when it is neither (the test then fails on it)."""
    real = os.path.realpath(path)
    if _under(path, str(tmp_path)) or _under(real, str(tmp_path)):
        return "Ansible's own temp directory and the test's files (in the pod: its temp dir)"
    if any(_under(path, p) or _under(real, p) for p in PYTHON):
        return "the interpreter and its standard library (the pod image's Python)"
    if _under(real, os.path.realpath(lib_dir)):
        return "the NVML library NVIDIA's runtime puts in the pod (read before the host's, by design)"
    if path in ("/dev/null", "/dev/urandom", "/dev/random", "/etc/localtime", "/proc/self/mountinfo") or _under(path, "/usr/share/zoneinfo"):
        return "the process's own devices, clock and mounts"
    if _under(path, "/proc/sys/kernel/random"):
        return "the kernel's boot id, the same in the pod and on the host"
    return None


def test_beside_the_host_every_host_file_is_reached_under_the_hosts_root(playbook, fake_node, tmp_path):
    root = host_root(tmp_path)
    (root / "etc").mkdir()
    (root / "etc/machine-id").write_text("4f6c0d2b6e6a4b3c9a1d2e3f4a5b6c7d\n")
    (root / "etc/hostname").write_text("gpu-host-7\n")
    (root / "mnt/data/kubelet/config.yaml").write_text("kind: KubeletConfiguration\ncpuManagerPolicy: static\n")
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(HOOK)
    log = tmp_path / "audit.jsonl"
    (tmp_path / "beside.yml").write_text(PLAY)
    env = fake_node([fakenode.gpu(NEW)])
    (tmp_path / "podtmp").mkdir()
    env.update(GPUOPS_HOST_ROOT=str(root), GPUOPS_AUDIT_LOG=str(log), TMPDIR=str(tmp_path / "podtmp"),
               PYTHONPATH=os.pathsep.join([str(hook_dir)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]))
    ok, changed, out = playbook(str(tmp_path / "beside.yml"), env)
    assert changed == 2, out  # the plan and the repair: the host's checkpoint was found and pruned

    records = [json.loads(line) for line in log.read_text().splitlines()]
    seen = {(r["event"], p) for r in records for p in r["paths"]}
    host = str(root)
    strays = set()
    lib_dir = env["LD_LIBRARY_PATH"].split(os.pathsep)[0]
    for record in records:
        for path in record["paths"]:
            if record["event"] == "ctypes.dlopen" and "/" not in path:
                continue  # a library name: the dynamic linker's search, the pod's libraries (NVIDIA's runtime puts NVML there)
            full = path if os.path.isabs(path) else os.path.join(record["cwd"], path)
            if record["event"] in ("subprocess.Popen", "os.exec", "os.posix_spawn") and not os.path.isabs(path):
                strays.add((record["event"], path, record["where"], "a program looked up in the pod's PATH"))
            elif not _under(full, host) and not _under(os.path.realpath(full), host) and pods_own(full, tmp_path, lib_dir) is None:
                strays.add((record["event"], path, record["where"]))
    assert not strays, "host paths touched outside GPUOPS_HOST_ROOT (%s):\n%s" % (host, "\n".join(map(str, sorted(strays, key=str))))
    # the hook saw the modules' work: the host's checkpoint, its backup and machine-id, under the root
    assert any(_under(p, host + "/mnt/data/kubelet/device-plugins") for e, p in seen if e == "open"), sorted(seen)
    assert any(p == host + "/etc/machine-id" for e, p in seen if e == "open"), sorted(seen)
    assert any(_under(p, host + "/var/lib/gpuops/backups") for e, p in seen), sorted(seen)
