# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: read the node's NVIDIA GPUs.

Backends:

* ``nvml``: in-process through ``nvidia-ml-py`` (module ``pynvml``), which loads
  ``libnvidia-ml.so.1`` from the driver; with a ``driver_root`` (a containerized
  driver: the GPU Operator mounts its driver container's root at ``/run/nvidia/driver``
  and checks it with ``chroot /run/nvidia/driver nvidia-smi``, gpu-operator
  ``validator/main.go``), the library is loaded from that root first, so pynvml's
  ``CDLL("libnvidia-ml.so.1")`` finds it by its soname;
* ``nvidia-smi``: the CLI (``--query-gpu`` CSV plus ``-L`` for MIG devices);
  the minor number comes from ``/proc/driver/nvidia/gpus/<bus>/information``.

``gather()`` never raises for a node without a usable driver: it returns facts
with ``available: false`` and a ``reason``. Running commands goes through a
``run(argv) -> (rc, stdout, stderr)`` callable supplied by the caller
(``AnsibleModule.run_command`` in modules).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import re

from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import digits
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import BackendUnavailable, InventoryError, ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._node import hostroot

BACKENDS = ("auto", "nvml", "nvidia-smi")
# Where nvidia-smi lives besides PATH: distro packages, GPU operator / GKE installer layouts.
NVIDIA_SMI_DIRS = ["/usr/bin", "/usr/local/nvidia/bin", "/home/kubernetes/bin/nvidia/bin"]

# Where a driver root (a driver container's filesystem) or a host keeps libnvidia-ml.so.1: Ubuntu and
# Debian based driver images, RHEL based ones, arm64; GKE/COS's installer (/home/kubernetes/bin/nvidia,
# seed 004) and the GPU Operator's host layout (/usr/local/nvidia).
DRIVER_ROOT_LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/lib/aarch64-linux-gnu", "lib64", "usr/lib",
                        "usr/local/nvidia/lib64", "home/kubernetes/bin/nvidia/lib64")

_QUERY_FIELDS = "index,uuid,name,pci.bus_id,memory.total,driver_version,mig.mode.current,mig.mode.pending"
_SMI_EXIT = {
    2: "invalid argument or query field",
    3: "the requested operation is not available on the target device",
    4: "insufficient permissions",
    6: "no GPUs found",
    8: "power cables not attached",
    9: "NVIDIA driver is not loaded",
    10: "NVIDIA kernel detected an interrupt issue with a GPU",
    12: "NVML shared library could not be found or loaded",
    13: "local version of NVML does not implement this function",
    14: "infoROM is corrupted",
    15: "the GPU has fallen off the bus or has otherwise become inaccessible",
    18: "driver/library version mismatch",
    255: "other error or internal driver error",
}
_GPU_LINE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.*) \(UUID: (?P<uuid>GPU-[^)]+)\)\s*$")
_MIG_LINE = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<index>\d+): \(UUID: (?P<uuid>MIG-[^)]+)\)\s*$")
_MIG_NAME = re.compile(r"\bMIG (?P<profile>\S+)")
_MINOR = re.compile(r"^Device Minor:\s*(\d+)\s*$", re.M)


def find_nvidia_smi(explicit=None):
    """Path of an executable nvidia-smi (``explicit``, else PATH, else NVIDIA_SMI_DIRS) or None.

    Outside Ansible (the node-side gpuops command); modules use ``get_bin_path`` with the same dirs.
    """
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for directory in os.environ.get("PATH", "").split(os.pathsep) + NVIDIA_SMI_DIRS:
        candidate = os.path.join(directory, "nvidia-smi")
        if directory and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def find_root_nvml(driver_root):
    """Path of libnvidia-ml.so.1 under ``driver_root``, or None."""
    for directory in DRIVER_ROOT_LIB_DIRS:
        try:  # links resolved inside the root: a driver root's or host's absolute link names its own file, not ours
            candidate = hostroot.resolve(os.path.normpath(driver_root), "/%s/libnvidia-ml.so.1" % directory)
        except OSError:
            continue
        if os.path.isfile(candidate):
            return candidate
    return None


def load_root_nvml(driver_root):
    path = find_root_nvml(driver_root)
    if path is None:
        raise BackendUnavailable(
            "libnvidia-ml.so.1 not found under the driver root %s (%s): is the driver container (e.g. the GPU Operator's) up?"
            % (driver_root, ", ".join(DRIVER_ROOT_LIB_DIRS))
        )
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        raise InventoryError("cannot load %s: %s" % (path, exc), "nvml") from exc


def empty_facts(backend=None, reason=None):
    return {
        "available": False,
        "reason": reason,
        "backend": backend,
        "driver_version": None,
        "cuda_driver_version": None,
        "count": 0,
        "gpus": [],
    }


def _mig_mode(value):
    return {1: "enabled", 0: "disabled"}.get(value)


def _cuda_version(value):
    if not value:
        return None
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def nvml_text(value):
    """A string pynvml returned (bytes from older nvidia-ml-py), as text."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


# c_nvmlValue_t's member for each nvmlValueType_t (pynvml NVML_VALUE_TYPE_*)
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def field_answers(values):
    """``{field ID: (nvmlReturn, value)}`` of what ``nvmlDeviceGetFieldValues`` returned: each field carries its own
    return code, and its value (an int, by its valueType) only where that code is 0 (success)."""
    out = {}
    for value in values or ():
        ret = value.nvmlReturn
        out[value.fieldId] = (ret, int(getattr(value.value, _VALUE_MEMBERS.get(value.valueType, "ullVal"))) if ret == 0 else None)
    return out


def nvml_init(pynvml):
    """``nvmlInit`` with typed errors: BackendUnavailable (no library), InventoryError (no driver, other failures)."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        raise BackendUnavailable("libnvidia-ml.so.1 (NVML, shipped with the NVIDIA driver) was not found") from None
    except pynvml.NVMLError_DriverNotLoaded:
        raise InventoryError("NVIDIA driver is not loaded (NVML: Driver Not Loaded)", "nvml") from None
    except pynvml.NVMLError as exc:
        raise InventoryError("NVML initialisation failed: %s" % exc, "nvml") from exc


def nvml_shutdown(pynvml):
    """``nvmlShutdown``, its failure ignored (the answers are in hand)."""
    try:
        pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        pass


def open_nvml(driver_root=None):
    """``pynvml`` after ``nvmlInit``, its library found as the ``nvml`` backend of gather() finds it: under
    ``driver_root`` first (a local path), else the loader's, else (beside the host) the host's own.

    The caller calls nvml_shutdown. Raises BackendUnavailable (no pynvml, no library) or InventoryError."""
    try:
        import pynvml  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise BackendUnavailable("the Python package nvidia-ml-py (module pynvml) is not installed") from None
    if driver_root:
        load_root_nvml(driver_root)
    try:
        nvml_init(pynvml)
    except BackendUnavailable:
        # beside the host: the library NVIDIA's runtime put in the pod first, else the host's own
        base = None if driver_root else hostroot.root()
        if base is None or find_root_nvml(base) is None:
            raise
        load_root_nvml(base)
        nvml_init(pynvml)
    return pynvml


def _gather_nvml(driver_root=None):
    pynvml = open_nvml(driver_root)
    try:
        facts = empty_facts("nvml")
        facts["driver_version"] = nvml_text(pynvml.nvmlSystemGetDriverVersion())
        try:
            facts["cuda_driver_version"] = _cuda_version(pynvml.nvmlSystemGetCudaDriverVersion())
        except pynvml.NVMLError_NotSupported:
            pass
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu = {
                "index": index,
                "uuid": nvml_text(pynvml.nvmlDeviceGetUUID(handle)),
                "name": nvml_text(pynvml.nvmlDeviceGetName(handle)),
                "pci_bus_id": nvml_text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
                "memory_total_mib": pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024),
                "minor_number": None,
                "mig_mode": {"current": None, "pending": None},
                "mig_devices": [],
            }
            try:
                gpu["minor_number"] = pynvml.nvmlDeviceGetMinorNumber(handle)
            except pynvml.NVMLError_NotSupported:
                pass
            try:
                current, pending = pynvml.nvmlDeviceGetMigMode(handle)
                gpu["mig_mode"] = {"current": _mig_mode(current), "pending": _mig_mode(pending)}
            except pynvml.NVMLError_NotSupported:
                current = 0
            if current == 1:
                gpu["mig_devices"] = nvml_mig_devices(pynvml, handle)
            facts["gpus"].append(gpu)
    except pynvml.NVMLError as exc:
        raise InventoryError("NVML query failed: %s" % exc, "nvml") from exc
    finally:
        nvml_shutdown(pynvml)
    facts["available"] = True
    facts["count"] = len(facts["gpus"])
    return facts


def nvml_mig_devices(pynvml, handle):
    devices = []
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument):
            continue
        name = nvml_text(pynvml.nvmlDeviceGetName(mig))
        match = _MIG_NAME.search(name)
        devices.append(
            {
                "index": slot,
                "uuid": nvml_text(pynvml.nvmlDeviceGetUUID(mig)),
                "profile": match.group("profile") if match else None,
                "gpu_instance_id": pynvml.nvmlDeviceGetGpuInstanceId(mig),
                "compute_instance_id": pynvml.nvmlDeviceGetComputeInstanceId(mig),
                "memory_total_mib": pynvml.nvmlDeviceGetMemoryInfo(mig).total // (1024 * 1024),
            }
        )
    return devices


def _smi_error(argv, rc, out, err):
    text = (err or out or "").strip().splitlines()
    detail = text[0] if text else ""
    meaning = _SMI_EXIT.get(rc, "exit code %d" % rc)
    return InventoryError("%s failed (exit %d, %s): %s" % (" ".join(argv[:2]), rc, meaning, detail), "nvidia-smi")


def _smi_mode(value):
    value = value.strip().lower()
    return value if value in ("enabled", "disabled") else None


def _int_or_none(value):
    return digits(value)


def _minor_from_proc(proc_root, bus_id):
    # nvidia-smi prints an 8-digit PCI domain, /proc uses 4 digits, lower case.
    domain, dummy, rest = bus_id.partition(":")
    name = ("%s:%s" % (domain[-4:], rest)).lower()
    try:
        with open(os.path.join(proc_root, "driver", "nvidia", "gpus", name, "information")) as handle:
            match = _MINOR.search(handle.read())
    except OSError:
        return None
    return int(match.group(1)) if match else None


def _gather_smi(run, smi, proc_root):
    argv = [smi, "--query-gpu=" + _QUERY_FIELDS, "--format=csv,noheader,nounits"]
    try:
        rc, out, err = run(argv)
    except OSError as exc:
        raise BackendUnavailable("cannot run %s: %s" % (smi, exc)) from exc
    facts = empty_facts("nvidia-smi")
    if rc == 6 and "No devices were found" in (out + err):
        facts["available"] = True
        return facts
    if rc != 0:
        raise _smi_error(argv, rc, out, err)
    for line in out.splitlines():
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split(", ")]
        if len(cols) != 8:
            raise InventoryError("unexpected nvidia-smi --query-gpu line (want 8 columns): %r" % line, "nvidia-smi")
        facts["driver_version"] = cols[5]
        facts["gpus"].append(
            {
                "index": int(cols[0]),
                "uuid": cols[1],
                "name": cols[2],
                "pci_bus_id": cols[3],
                "memory_total_mib": _int_or_none(cols[4]),
                "minor_number": _minor_from_proc(proc_root, cols[3]),
                "mig_mode": {"current": _smi_mode(cols[6]), "pending": _smi_mode(cols[7])},
                "mig_devices": [],
            }
        )
    if any(g["mig_mode"]["current"] == "enabled" for g in facts["gpus"]):
        _smi_mig_devices(run, smi, facts)
    facts["available"] = True
    facts["count"] = len(facts["gpus"])
    return facts


def _smi_mig_devices(run, smi, facts):
    argv = [smi, "-L"]
    rc, out, err = run(argv)
    if rc != 0:
        raise _smi_error(argv, rc, out, err)
    by_uuid = dict((g["uuid"], g) for g in facts["gpus"])
    current = None
    for line in out.splitlines():
        gpu_match = _GPU_LINE.match(line)
        if gpu_match:
            current = by_uuid.get(gpu_match.group("uuid"))
            continue
        mig_match = _MIG_LINE.match(line)
        if mig_match and current is not None:
            current["mig_devices"].append(
                {
                    "index": int(mig_match.group("index")),
                    "uuid": mig_match.group("uuid"),
                    "profile": mig_match.group("profile"),
                    "gpu_instance_id": None,
                    "compute_instance_id": None,
                    "memory_total_mib": None,
                }
            )


MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


def node_identity(files=MACHINE_ID_FILES):
    """Which machine this is: a hash of its machine-id (never the id itself: machine-id(5) asks that it stay
    private), else of its host name. The facts carry it, so a repair can refuse another node's inventory.
    Beside the host (hostroot) the host's machine-id is read, so the answer is the host's either way."""
    seed = None
    for path in files:
        try:
            with open(hostroot.readable(path), "rb") as handle:
                seed = handle.read(64).strip() or None
        except OSError:
            continue
        if seed:
            break
    if not seed:
        seed = hostroot.hostname().encode("utf-8", "replace")
    return hashlib.sha256(b"gpuops.fleet node identity:" + seed).hexdigest()[:32]


CONTROL_DEVICE = "/dev/nvidiactl"


def device_hint(path=None):
    """Why the driver could not be reached, where the cause is this process's device list; else None.

    A container that is not privileged may open only the runtime's default devices: its devices
    cgroup refuses the NVIDIA devices with EPERM, even at the host's own ``/dev`` (a chroot changes
    the path, not the cgroup), and NVML then fails with "Unknown Error" (driver 580 on an H200,
    hack/real-gpu/node_pod_devices.py). Only EPERM is a finding: a missing node or ENXIO (no
    driver behind it) is what the backends already said.
    """
    path = path or CONTROL_DEVICE
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno != errno.EPERM:
            return None
        return ("%s exists but this process may not open it (EPERM): it runs in a container whose device list does not "
                "allow the NVIDIA devices; through gpuops.fleet.k8s_node, set gpuops_node_pod_gpu_access "
                "(nvidia-runtime needs NVIDIA's container runtime to run the node pod)" % path)
    os.close(fd)
    return None


def explain(reason):
    """``reason``, followed by device_hint()'s finding where there is one (a reason the GPUs could not be read)."""
    hint = device_hint()
    return "%s; %s" % (reason, hint) if hint else reason


def gather(run, backend="auto", nvidia_smi=None, proc_root="/proc", driver_root=None):
    """Return gpuops_gpus facts (with ``node_id``, see node_identity); never raises for a node without a usable driver.

    ``nvidia_smi`` is the resolved path of the CLI or None when it is not installed.
    ``driver_root`` (e.g. ``/run/nvidia/driver``): NVML is loaded from that root.
    When no backend could read the GPUs, ``reason`` ends with device_hint()'s finding, if any.
    """
    facts = _gather(run, backend, nvidia_smi, proc_root, driver_root)
    if not facts["available"]:
        facts["reason"] = explain(facts["reason"])
    facts["node_id"] = node_identity()
    return facts


def gather_on_node(run, backend="auto", nvidia_smi=None, driver_root=None, get_bin_path=None):
    """gather() as a module runs it, on the host or beside it (hostroot: the node pod without the host's python3).

    ``nvidia_smi`` and ``driver_root`` are host paths (what the user gives); ``get_bin_path`` is
    ``AnsibleModule.get_bin_path``. Beside the host, nvidia-smi is the host's, run chrooted into it, and
    the driver root is reached under the host's root."""
    base = hostroot.root()
    if nvidia_smi:
        try:
            seen = hostroot.readable(nvidia_smi, base)  # beside the host, an absolute link is followed inside the host's root
        except OSError:
            seen = None  # a link loop
        if not (os.path.isabs(nvidia_smi) and seen and os.path.isfile(seen) and os.access(seen, os.X_OK)):
            raise ParameterError("nvidia_smi_path", "%r is not an executable file on this node: give the absolute path of its "
                                 "nvidia-smi, or leave it unset to look in PATH and the drivers' usual directories" % (nvidia_smi,))
    if base is None:
        smi = nvidia_smi or (get_bin_path("nvidia-smi", opt_dirs=NVIDIA_SMI_DIRS) if get_bin_path else find_nvidia_smi())
        return gather(run, backend, smi, driver_root=driver_root or None)
    search = os.pathsep.join([os.environ.get("PATH", "")] + NVIDIA_SMI_DIRS)
    smi = hostroot.which(nvidia_smi or "nvidia-smi", path=search, base=base)
    return gather(hostroot.runner(run, base), backend, smi, driver_root=hostroot.local(driver_root, base) if driver_root else None)


def _gather(run, backend, nvidia_smi, proc_root, driver_root):
    if backend not in BACKENDS:
        raise ValueError("backend must be one of %s" % ", ".join(BACKENDS))
    reasons = []
    if backend in ("auto", "nvml"):
        try:
            return _gather_nvml(driver_root)
        except BackendUnavailable as exc:
            reasons.append("nvml: %s" % exc)
        except InventoryError as exc:
            return empty_facts("nvml", str(exc))
    if backend in ("auto", "nvidia-smi"):
        if nvidia_smi is None:
            reasons.append("nvidia-smi: not found on PATH")
        else:
            try:
                return _gather_smi(run, nvidia_smi, proc_root)
            except BackendUnavailable as exc:
                reasons.append("nvidia-smi: %s" % exc)
            except InventoryError as exc:
                return empty_facts("nvidia-smi", str(exc))
    return empty_facts(None, "; ".join(reasons) + " (is the NVIDIA driver installed?)")
