# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: read a node's GPU health (NVML and the kernel log), read-only.

Per GPU, through unmodified ``pynvml`` (names as nvidia-ml-py 13.615 spells them; ``../shared/specs/gpu-health.md`` A2):

* its state: ``ok``; ``lost`` (``NVMLError_GpuIsLost``, NVML_ERROR_GPU_IS_LOST 15, from the handle or any query);
  ``reset_required`` (``NVMLError_ResetRequired``, 16); ``unreadable`` (any other NVML error: no verdict);
* one ``nvmlDeviceGetFieldValues`` call for fields 3-6 (ECC totals), 29-31 (retired pages), 142-145 (remapped
  rows) and 230 (``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``). Each value carries its own ``nvmlReturn``:
  NOT_SUPPORTED is an answer (a Hopper GPU has no retired pages, MIG with instances no remap counts; the
  lent H200 answered so, hack/real-gpu/h200-2026-11-26-health-probe.json), not a failure. Where field 230 is
  not supported (older drivers) the recovery action is the last XID 154 line's, ``source: xid154_log``;
* persistence mode, ECC mode, architecture, temperature and its thresholds, clocks event reasons;
* NVLink: per link its state, error counters and the peer it reaches (``nvmlDeviceGetNvLinkRemotePciInfo``,
  joined to a GPU of this node by PCI bus ID); a GPU whose link 0 answers NOT_SUPPORTED has no NVLink;
* its compute processes, each mapped to its pod and container by ``gpu_metrics.attribute_process`` (the
  cgroup code ``gpuops metrics`` uses).

Per node: the boot ID, the driver version, the GPUs NVML counts against the GPUs expected, whether it is an
NVSwitch system and, there, the ``nvidia-fabricmanager`` unit's state.

The verdicts come from ``_common/health/decision.py``'s rules (pure), with the ``thresholds`` option. NVML that does not initialise gives
``available: false`` and the node ``unknown``, never a verdict.
"""

from __future__ import annotations

import os

from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import decision, xid_catalog
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import BackendUnavailable, InventoryError, ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._node import gpu_inventory, gpu_metrics, hostroot
from ansible_collections.gpuops.fleet.plugins.module_utils._node.health import kernel_log

FIELDS = {
    3: ("ecc", "volatile_sbe"),
    4: ("ecc", "volatile_dbe"),
    5: ("ecc", "aggregate_sbe"),
    6: ("ecc", "aggregate_dbe"),
    29: ("retired_pages", "sbe"),
    30: ("retired_pages", "dbe"),
    31: ("retired_pages", "pending"),
    142: ("remapped_rows", "correctable"),
    143: ("remapped_rows", "uncorrectable"),
    144: ("remapped_rows", "pending"),
    145: ("remapped_rows", "failure"),
    xid_catalog.RECOVERY_FIELD: ("recovery_action", "value"),
}
NVSWITCH_PATHS = ("/dev/nvidia-nvswitchctl", "/proc/driver/nvidia-nvswitch")
BOOT_ID = "/proc/sys/kernel/random/boot_id"
STAT = "/proc/stat"
ARCHITECTURES = {2: "kepler", 3: "maxwell", 4: "pascal", 5: "volta", 6: "turing", 7: "ampere", 8: "ada", 9: "hopper", 10: "blackwell"}


class _Lost(Exception):
    pass


class _ResetRequired(Exception):
    pass


class _Reader:
    """NVML calls of one GPU, with the errors sorted: lost and reset-required end the GPU's read, NOT_SUPPORTED
    is an answer (None), anything else is noted in ``errors`` and answers None."""

    def __init__(self, pynvml):
        self.nvml = pynvml
        self.errors = []

    def call(self, name, *args):
        nvml = self.nvml
        func = getattr(nvml, name, None)
        if func is None:
            return None
        try:
            return func(*args)
        except nvml.NVMLError_GpuIsLost:
            raise _Lost() from None
        except nvml.NVMLError_ResetRequired:
            raise _ResetRequired() from None
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
            return None
        except nvml.NVMLError as exc:
            self.errors.append("%s: %s" % (name, exc))
            return None


def _fields(reader, handle, gpu):
    found = {}
    for field, (ret, value) in gpu_inventory.field_answers(reader.call("nvmlDeviceGetFieldValues", handle, sorted(FIELDS))).items():
        if ret == 15:
            raise _Lost()
        if ret == 16:
            raise _ResetRequired()
        if ret == 0:
            found[field] = value
    for field, (group, key) in FIELDS.items():
        gpu[group][key] = found.get(field)
    for group, keys in (("remapped_rows", (142, 143, 144, 145)), ("retired_pages", (29, 30, 31))):
        gpu[group]["supported"] = all(k in found for k in keys)
        for k in keys:
            if gpu[group]["supported"] and FIELDS[k][1] in ("pending", "failure"):
                gpu[group][FIELDS[k][1]] = bool(found[k])
    rec = gpu["recovery_action"]
    if rec["value"] is not None:
        rec["source"] = "nvml_field"
        rec["name"] = xid_catalog.recovery_name(rec["value"])


def _nvlink(reader, handle):
    nvml = reader.nvml
    links = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError_GpuIsLost:
            raise _Lost() from None
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
            if link == 0:
                return {"supported": False, "links": [], "inactive": 0, "peers": []}
            continue
        except nvml.NVMLError:
            continue
        entry = {"link": link, "active": bool(active), "peer_pci_bus_id": None}
        remote = reader.call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        if remote is not None:
            entry["peer_pci_bus_id"] = gpu_inventory.nvml_text(remote.busId)
        for key, counter in (("replay", 0), ("recovery", 1), ("crc_flit", 2)):
            entry[key] = reader.call("nvmlDeviceGetNvLinkErrorCounter", handle, link, counter)
        links.append(entry)
    return {"supported": bool(links), "links": links, "inactive": sum(1 for x in links if not x["active"]), "peers": []}


def _empty_gpu(index):
    return {
        "index": index, "uuid": None, "name": None, "pci_bus_id": None, "state": "ok", "error": None,
        "architecture": None, "architecture_name": None, "mig_mode": None,
        "recovery_action": {"value": None, "name": None, "source": "unsupported"},
        "remapped_rows": {"supported": False, "correctable": None, "uncorrectable": None, "pending": None, "failure": None},
        "retired_pages": {"supported": False, "sbe": None, "dbe": None, "pending": None},
        "ecc": {"mode": None, "volatile_sbe": None, "volatile_dbe": None, "aggregate_sbe": None, "aggregate_dbe": None},
        "persistence_mode": None,
        "temperature": {"current": None, "slowdown": None, "shutdown": None},
        "clocks_event_reasons": [],
        "nvlink": {"supported": False, "links": [], "inactive": 0, "peers": []},
        "mig_devices": [],
        "processes": [],
        "xids": [],
        "fallen_off_bus": False,
    }


def _read_gpu(pynvml, index, root):
    gpu = _empty_gpu(index)
    reader = _Reader(pynvml)
    try:
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError_GpuIsLost:
            raise _Lost() from None
        except pynvml.NVMLError_ResetRequired:
            raise _ResetRequired() from None
        except pynvml.NVMLError as exc:
            gpu.update(state="unreadable", error="nvmlDeviceGetHandleByIndex: %s" % exc)
            return gpu
        gpu["uuid"] = gpu_inventory.nvml_text(reader.call("nvmlDeviceGetUUID", handle))
        gpu["name"] = gpu_inventory.nvml_text(reader.call("nvmlDeviceGetName", handle))
        pci = reader.call("nvmlDeviceGetPciInfo", handle)
        gpu["pci_bus_id"] = gpu_inventory.nvml_text(pci.busId) if pci is not None else None
        if gpu["uuid"] is None:
            gpu.update(state="unreadable", error="; ".join(reader.errors) or "no UUID")
            return gpu
        _fields(reader, handle, gpu)
        arch = reader.call("nvmlDeviceGetArchitecture", handle)
        gpu["architecture"] = arch
        gpu["architecture_name"] = ARCHITECTURES.get(arch) if arch is not None else None
        mig = reader.call("nvmlDeviceGetMigMode", handle)
        gpu["mig_mode"] = {1: "enabled", 0: "disabled"}.get(mig[0]) if mig else None
        if gpu["mig_mode"] == "enabled":  # the MIG devices' UUIDs: a pod holding one holds this GPU
            try:
                gpu["mig_devices"] = [m["uuid"] for m in gpu_inventory.nvml_mig_devices(pynvml, handle)]
            except pynvml.NVMLError as exc:
                reader.errors.append("MIG devices: %s" % exc)
        ecc_mode = reader.call("nvmlDeviceGetEccMode", handle)
        gpu["ecc"]["mode"] = {1: "enabled", 0: "disabled"}.get(ecc_mode[0]) if ecc_mode else None
        persistence = reader.call("nvmlDeviceGetPersistenceMode", handle)
        gpu["persistence_mode"] = None if persistence is None else bool(persistence)
        gpu["temperature"] = {
            "current": reader.call("nvmlDeviceGetTemperature", handle, 0),
            "slowdown": reader.call("nvmlDeviceGetTemperatureThreshold", handle, 1),
            "shutdown": reader.call("nvmlDeviceGetTemperatureThreshold", handle, 0),
        }
        reasons = reader.call("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if reasons is None:
            reasons = reader.call("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        gpu["clocks_event_reasons"] = decision.clock_reason_names(reasons or 0)
        gpu["nvlink"] = _nvlink(reader, handle)
        gpu["processes"] = _processes(pynvml, handle, root, reader)
    except _Lost:
        gpu.update(state="lost", error="NVML_ERROR_GPU_IS_LOST")
        return gpu
    except _ResetRequired:
        gpu.update(state="reset_required", error="NVML_ERROR_RESET_REQUIRED")
        return gpu
    if reader.errors:
        gpu["errors"] = reader.errors
    return gpu


def _processes(pynvml, handle, root, reader):
    try:
        procs = gpu_metrics.compute_processes(pynvml, handle)
    except pynvml.NVMLError_GpuIsLost:
        raise _Lost() from None
    except pynvml.NVMLError_ResetRequired:
        raise _ResetRequired() from None
    except (pynvml.NVMLError, InventoryError) as exc:
        reader.errors.append("compute processes: %s" % exc)
        return []
    out = []
    for pid, used in procs:
        found = gpu_metrics.attribute_process(root, pid)
        out.append({"pid": pid, "used_mib": used // (1024 * 1024), "pod_uid": found[0] if found else None,
                    "container": found[1] if found else None})
    return out


def _boot_time():
    """The boot's wall-clock time (epoch seconds: the kernel's ``btime`` in /proc/stat, the same in every read of this
    boot, so two reads give equal facts): an XID's time since boot plus this is when it was logged, which the plan
    compares with a breaker reset's time."""
    try:
        with open(STAT) as handle:
            for line in handle:
                if line.startswith("btime "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _boot_id():
    try:
        with open(BOOT_ID) as handle:  # the kernel's: the same in the node pod as on the host
            return handle.read(64).strip() or None
    except OSError:
        return None


def _nvswitch():
    return any(os.path.exists(hostroot.readable(path)) for path in NVSWITCH_PATHS)


def _fabric_manager(run, systemctl):
    if not systemctl:
        return "unknown"
    rc, out, dummy = run([systemctl, "is-active", "nvidia-fabricmanager.service"])
    state = (out or "").strip().splitlines()[0] if (out or "").strip() else ""
    if rc == 0:
        return "active"
    return state if state in ("inactive", "failed", "activating", "deactivating") else "absent"


def read(run, driver_root=None, gpus_expected=None, log_source="auto", log_path=None, overrides=None,
         journalctl=None, systemctl=None, mark_path=kernel_log.MARK, thresholds=None):
    """The node's health facts (see the module's RETURN); never raises for a node whose NVML cannot be read. ``thresholds``
    (the decision's, checked: ``decision.thresholds_of``) are decided with and kept in the facts."""
    facts = {"thresholds": decision.thresholds_of({"thresholds": thresholds}),
             "available": False, "reason": None, "backend": "nvml", "driver_version": None, "boot_id": _boot_id(), "boot_time": _boot_time(),
             "gpus_seen": None, "gpus_expected": gpus_expected, "nvswitch": False, "fabric_manager": None,
             "gpus": [], "kernel_log": {"source": None, "reason": None, "records": 0, "ignored_before_mark": 0,
                                        "unattributed_xids": []}}
    root = hostroot.root() or "/"
    try:
        pynvml = gpu_inventory.open_nvml(driver_root)
    except (BackendUnavailable, InventoryError) as exc:
        facts["reason"] = gpu_inventory.explain("nvml: %s" % exc)
    else:
        try:
            facts["driver_version"] = gpu_inventory.nvml_text(pynvml.nvmlSystemGetDriverVersion())
            count = pynvml.nvmlDeviceGetCount()
            facts["gpus"] = [_read_gpu(pynvml, index, root) for index in range(count)]
            facts["gpus_seen"] = count
            facts["available"] = True
        except pynvml.NVMLError as exc:
            facts["reason"] = gpu_inventory.explain("NVML query failed: %s" % exc)
            facts["gpus"] = []
        finally:
            gpu_inventory.nvml_shutdown(pynvml)
    records, source, why = kernel_log.read(log_source, run, log_path, journalctl)
    parsed = kernel_log.parse(records, overrides)
    facts["kernel_log"]["unattributed_xids"] = kernel_log.attach(parsed, facts["gpus"], kernel_log.read_marks(facts["boot_id"], mark_path))
    facts["kernel_log"].update(source=source, reason=why, records=len(records), ignored_before_mark=parsed["ignored_before_mark"])
    _peers(facts["gpus"])
    facts["nvswitch"] = _nvswitch()
    if facts["nvswitch"]:
        facts["fabric_manager"] = _fabric_manager(run, systemctl)
    for gpu in facts["gpus"]:
        _xid154(gpu)
        gpu["verdict"] = decision.decide_gpu(gpu, facts["thresholds"])
    facts["verdict"] = decision.decide_node(facts)
    return facts


def _peers(gpus):
    by_bus = dict((kernel_log.bus_key(g.get("pci_bus_id")), g) for g in gpus if g.get("pci_bus_id"))
    for gpu in gpus:
        peers = []
        for link in gpu["nvlink"]["links"]:
            peer = by_bus.get(kernel_log.bus_key(link.get("peer_pci_bus_id")))
            link["peer_uuid"] = peer["uuid"] if peer else None
            if peer and peer["uuid"] and peer["uuid"] not in peers:
                peers.append(peer["uuid"])
        gpu["nvlink"]["peers"] = peers


def _xid154(gpu):
    """Where field 230 is not supported, the recovery action the last XID 154 line of this GPU gave."""
    rec = gpu["recovery_action"]
    if rec["source"] == "nvml_field" or gpu["state"] != "ok":
        return
    for xid in reversed(gpu["xids"]):
        if xid["code"] == 154 and xid.get("recovery_action") is not None:
            rec.update(value=xid["recovery_action"], name=xid_catalog.recovery_name(xid["recovery_action"]), source="xid154_log")
            return


# gpu_health_info's options (its argument spec): kubelet_checkpoint's health option checks its value with the same
# table, so the plan's round trip reads the health as the module does (issue 36)
ARGUMENT_SPEC = dict(
    backend=dict(type="str", default="auto", choices=["auto", "nvml"]),
    driver_root=dict(type="path"),
    gpus_expected=dict(type="int"),
    kernel_log=dict(type="str", default="auto", choices=["auto", "journal", "kmsg", "file", "none"]),
    kernel_log_path=dict(type="path"),
    xid_overrides=dict(type="dict", default={}),
    mark_path=dict(type="path", default=kernel_log.MARK),
    thresholds=dict(type="dict", default={}),
)


def read_with(params, run, get_bin_path):
    """``read`` with gpu_health_info's options (ARGUMENT_SPEC applied): checked first (ParameterError names the option),
    the host's journalctl, systemctl and driver root found on whichever side of the host this runs."""
    if params["gpus_expected"] is not None and params["gpus_expected"] < 0:
        raise ParameterError("gpus_expected", "must be 0 or more, got %d: give the number of GPUs the node should have, or leave it unset"
                             % params["gpus_expected"])
    if params["kernel_log"] == "file" and not params["kernel_log_path"]:
        raise ParameterError("kernel_log_path", "is required with kernel_log=file: give the path of the saved kernel log")
    overrides = xid_catalog.check_overrides("xid_overrides", params["xid_overrides"])
    thresholds = decision.thresholds_of({"thresholds": params.get("thresholds") or {}})
    base = hostroot.root()
    found, run = hostroot.tools(("journalctl", "systemctl"), get_bin_path, run, base)
    journalctl, systemctl = found["journalctl"], found["systemctl"]
    driver_root = params["driver_root"] or None
    if driver_root and base is not None:
        driver_root = hostroot.local(driver_root, base)
    return read(run, driver_root=driver_root, gpus_expected=params["gpus_expected"], log_source=params["kernel_log"],
                log_path=params["kernel_log_path"], overrides=overrides, journalctl=journalctl, systemctl=systemctl,
                mark_path=params.get("mark_path") or kernel_log.MARK, thresholds=thresholds)
