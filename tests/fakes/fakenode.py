# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers for tests (and the lab): build the fake NVML library, nvidia-smi and systemctl, describe fake nodes.

A fake node is a config file read by both ``fake_nvml.c`` (through unmodified
pynvml) and the fake ``nvidia-smi``; the GPU names carry "(simulated)".
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "fake_nvml.c")
ROOT = os.path.dirname(os.path.dirname(HERE))
# `python -c GUARD_RUNNER <args>` runs the gpuops command as /usr/local/bin/gpuops does: its entry point
# (roles/checkpoint_guard/files/gpuops_main.py) with this checkout's module_utils
GUARD_RUNNER = "import sys; sys.path[:0] = [%r, %r]; from gpuops_main import entry; sys.exit(entry())" % (
    os.path.join(ROOT, "build", "collections"), os.path.join(ROOT, "roles", "checkpoint_guard", "files"))


def run_guard(command, config, env, timeout=60):
    """``gpuops COMMAND --config CONFIG`` as /usr/local/bin/gpuops runs it: (exit code, its JSON log records, stderr)."""
    proc = subprocess.run([sys.executable, "-c", GUARD_RUNNER, command, "--config", str(config)], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


def finished(records):
    """The guard's last ``finished`` record."""
    return [r for r in records if r["event"] == "finished"][-1]


T4 = "Tesla T4 (simulated)"
A100 = "NVIDIA A100-SXM4-40GB (simulated)"


# Older drivers' libraries, by the symbols they lack (see fake_nvml.c): build_lib(dir, DRIVERS[name])
DRIVERS = {
    "r470": ("FAKE_NVML_NO_PROCS_V3",),
    "r440": ("FAKE_NVML_NO_PROCS_V3", "FAKE_NVML_NO_PROCS_V2"),
    # a driver whose NVML lacks field 230 (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION): its nvmlReturn is NOT_SUPPORTED
    "no-recovery-field": ("FAKE_NVML_NO_FIELD_RECOVERY",),
}


def build_lib(out_dir, defines=()):
    """Compile libnvidia-ml.so.1 into ``out_dir`` (skipped when up to date); returns the directory.

    ``defines``: preprocessor names of an older driver's library (DRIVERS); give each its own directory.
    """
    os.makedirs(out_dir, exist_ok=True)
    # one build at a time per directory: `make matrix` runs several ansible-core lines at once, and each
    # one's conftest asks for the library (an unlocked check-then-build raced: a half-written stamp read
    # as stale, two compilers writing one temp file)
    with open(os.path.join(out_dir, ".build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _build_locked(out_dir, defines)
    return out_dir


def dcgm_dir(out_dir):
    """A directory holding the fake ``dcgmi`` (fake_dcgmi.py), for a test that puts DCGM on a fake node's PATH (the default
    lib dir has none: a node without DCGM keeps the verification pod as its gate); returns it."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "dcgmi")
    with open(os.path.join(HERE, "fake_dcgmi.py")) as src, open(path + ".tmp", "w") as dst:
        dst.write("#!%s\n" % sys.executable)
        dst.write(src.read())
    os.chmod(path + ".tmp", 0o755)
    os.replace(path + ".tmp", path)
    return out_dir


def _build_locked(out_dir, defines):
    lib = os.path.join(out_dir, "libnvidia-ml.so.1")
    command = (["gcc", "-Wall", "-Wextra", "-Werror", "-O2", "-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1"]
               + ["-D%s" % name for name in defines] + ["-o", lib + ".tmp", SOURCE])
    # up to date means built from this very source with these flags (a stamp beside the library), not
    # "newer than the source": another checkout sharing build/ can have an older source with a newer mtime
    with open(SOURCE, "rb") as handle:
        digest = hashlib.sha256(handle.read() + b"\0" + " ".join(command).encode()).hexdigest()
    stamp = lib + ".sha256"
    try:
        with open(stamp) as handle:
            current = os.path.exists(lib) and handle.read() == digest
    except OSError:
        current = False
    if not current:
        subprocess.check_call(command)
        os.replace(lib + ".tmp", lib)
        with open(stamp, "w") as handle:
            handle.write(digest)
    # The fake CLIs run with this interpreter; written with a shebang at build time.
    for name, source in (("nvidia-smi", "fake_nvidia_smi.py"), ("systemctl", "fake_systemctl.py"), ("systemd-run", "fake_systemd_run.py"),
                         ("journalctl", "fake_journalctl.py")):
        path = os.path.join(out_dir, name)
        with open(os.path.join(HERE, source)) as src, open(path + ".tmp", "w") as dst:
            dst.write("#!%s\n" % sys.executable)
            dst.write(src.read())
        os.chmod(path + ".tmp", 0o755)
        os.replace(path + ".tmp", path)


def gpu(uuid, name=T4, bus="00000000:00:07.0", mem_mib=15360, minor=0, mig=-1, mig_pending=None):
    return "gpu|%s|%s|%s|%d|%d|%d|%d" % (uuid, name, bus, mem_mib, minor, mig, mig if mig_pending is None else mig_pending)


def proc(gpu_index, pid, used_mib):
    """A compute process on a GPU (host PID), using ``used_mib`` of its memory."""
    return "proc|%d|%d|%d" % (gpu_index, pid, used_mib)


def mig(gpu_index, slot, uuid, profile, gi, ci, mem_mib):
    return "mig|%d|%d|%s|%s|%d|%d|%d" % (gpu_index, slot, uuid, profile, gi, ci, mem_mib)


def health(kind, gpu_index, *values):
    """A health line of fake_nvml.c (recovery, remap, retired, ecc, persistence, temp, clocks, nvlink, arch, lost,
    reset_required), e.g. ``health("remap", 0, 0, 1, 1, 0)``."""
    return "|".join([kind, str(gpu_index)] + [str(v) for v in values])


def xid(gpu_index, code):
    """An XID critical error event of fake_nvml.c (``nvmlEventSetWait_v2``), delivered to event sets created before it."""
    return "xid|%d|%d" % (gpu_index, code)


def append_config(path, *records):
    """Add records to a fake-NVML config in place (events and health lines: what happens on a running node)."""
    with open(path, "a") as handle:
        handle.write("".join(r + "\n" for r in records))


def write_config(path, records, driver="535.104.05", cuda=12020, init_error=0):
    lines = ["driver|%s" % driver, "cuda|%d" % cuda]
    if init_error:
        lines.append("init_error|%d" % init_error)
    lines.extend(records)
    with open(path, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


def environ(lib_dir, config, base=None):
    """Environment for a subprocess that should see the fake node."""
    env = dict(os.environ if base is None else base)
    env["LD_LIBRARY_PATH"] = lib_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["PATH"] = lib_dir + ":" + env.get("PATH", "/usr/bin:/bin")
    env["GPUOPS_FAKE_NVML_CONFIG"] = config
    return env
