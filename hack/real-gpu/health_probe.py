# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""READ-ONLY probe of everything GPU health (issue 34) would read, on a machine with a REAL NVIDIA GPU.

Not run in CI (CI has no GPU). It calls only NVML getters, reads the kernel log and runs
``nvidia-smi -q`` and ``systemctl is-active``: it resets nothing and sets nothing. One JSON object on
stdout (and ``$OUT/health-probe.json`` when ``$OUT`` is set):

- per GPU, every NVML call and field ID that ../shared/specs/gpu-health.md (A2) names, each as
  ``{"value": ...}`` or ``{"error": "<pynvml class>", "code": n}``: what a real driver answers, and
  which of them it does not support, so the fake NVML copies a real answer, not our guess;
- which of the spec's pynvml constant names the installed pynvml has;
- the kernel log's NVRM lines since boot, from ``journalctl -k -b -o json`` and ``/dev/kmsg`` (read
  non-blocking), with the journal's field names for one line;
- ``nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT,TEMPERATURE,PERFORMANCE`` as text, the
  fallback parser's input;
- the Fabric Manager and persistence daemon states; the read's cost (ms per GPU, all calls).

    python3 hack/real-gpu/health_probe.py
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time

import pynvml

CONSTANTS = (
    "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", "NVML_GPU_RECOVERY_ACTION_NONE", "NVML_GPU_RECOVERY_ACTION_GPU_RESET",
    "NVML_GPU_RECOVERY_ACTION_NODE_REBOOT", "NVML_GPU_RECOVERY_ACTION_DRAIN_P2P", "NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET",
    "NVML_FI_DEV_REMAPPED_COR", "NVML_FI_DEV_REMAPPED_UNC", "NVML_FI_DEV_REMAPPED_PENDING", "NVML_FI_DEV_REMAPPED_FAILURE",
    "NVML_FI_DEV_RETIRED_SBE", "NVML_FI_DEV_RETIRED_DBE", "NVML_FI_DEV_RETIRED_PENDING",
    "NVML_FI_DEV_ECC_SBE_VOL_TOTAL", "NVML_FI_DEV_ECC_DBE_VOL_TOTAL", "NVML_FI_DEV_ECC_SBE_AGG_TOTAL", "NVML_FI_DEV_ECC_DBE_AGG_TOTAL",
    "NVML_FI_DEV_RESET_STATUS", "NVML_FI_DEV_DRAIN_AND_RESET_STATUS", "NVML_NVLINK_MAX_LINKS",
    "nvmlClocksEventReasonHwSlowdown", "nvmlClocksThrottleReasonHwSlowdown", "nvmlEventTypeXidCriticalError",
    "nvmlEventTypeGpuRecoveryAction", "NVML_DEVICE_ARCH_HOPPER", "NVML_GPU_FABRIC_STATE_COMPLETED",
)
# field ID -> the spec's name (A2); asked one by one as well, so that one unsupported ID cannot hide another's answer
FIELDS = {230: "GET_GPU_RECOVERY_ACTION", 226: "RESET_STATUS", 227: "DRAIN_AND_RESET_STATUS",
          142: "REMAPPED_COR", 143: "REMAPPED_UNC", 144: "REMAPPED_PENDING", 145: "REMAPPED_FAILURE",
          29: "RETIRED_SBE", 30: "RETIRED_DBE", 31: "RETIRED_PENDING", 92: "RETIRED_PENDING_SBE", 93: "RETIRED_PENDING_DBE",
          3: "ECC_SBE_VOL_TOTAL", 4: "ECC_DBE_VOL_TOTAL", 5: "ECC_SBE_AGG_TOTAL", 6: "ECC_DBE_AGG_TOTAL"}
VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def plain(value):
    """An NVML answer as JSON: ctypes structures by their fields, bytes as text."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return dict((k, plain(v)) for k, v in value.items())
    fields = getattr(value, "_fields_", None)
    if fields:
        return dict((name, plain(getattr(value, name))) for name, dummy in fields)
    if hasattr(value, "__len__") and not isinstance(value, str) and hasattr(value, "__getitem__"):
        return [plain(v) for v in value]
    return value


def ask(func, *args):
    try:
        return {"value": plain(func(*args))}
    except pynvml.NVMLError as exc:
        return {"error": type(exc).__name__, "code": getattr(exc, "value", None), "text": str(exc)}
    except Exception as exc:  # pylint: disable=broad-except  # a report: every answer is recorded
        return {"exception": "%s: %s" % (type(exc).__name__, exc)}


def field(handle, field_id):
    try:
        values = pynvml.nvmlDeviceGetFieldValues(handle, [field_id])
    except pynvml.NVMLError as exc:
        return {"call_error": type(exc).__name__, "code": getattr(exc, "value", None)}
    except Exception as exc:  # pylint: disable=broad-except
        return {"exception": "%s: %s" % (type(exc).__name__, exc)}
    one = values[0]  # each value carries its own nvmlReturn (spec A2)
    member = VALUE_MEMBERS.get(one.valueType)
    return {"nvmlReturn": one.nvmlReturn, "valueType": one.valueType,
            "value": getattr(one.value, member) if member and one.nvmlReturn == 0 else None}


def gpu(index):
    started = time.monotonic()
    out = {"index": index}
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError as exc:
        out["handle"] = {"error": type(exc).__name__, "code": getattr(exc, "value", None)}
        return out
    for name in ("nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo", "nvmlDeviceGetName", "nvmlDeviceGetArchitecture",
                 "nvmlDeviceGetMigMode", "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetEccMode",
                 "nvmlDeviceGetRemappedRows", "nvmlDeviceGetRowRemapperHistogram", "nvmlDeviceGetRetiredPagesPendingStatus",
                 "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
                 "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetComputeRunningProcesses",
                 "nvmlDeviceGetSupportedEventTypes", "nvmlDeviceGetMinorNumber"):
        func = getattr(pynvml, name, None)
        out[name] = ask(func, handle) if func else {"missing_in_pynvml": True}
    for name, struct in (("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t"), ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t")):
        if hasattr(pynvml, name) and hasattr(pynvml, struct):  # pynvml fills a structure the caller passes
            info = getattr(pynvml, struct)()
            if hasattr(info, "version") and hasattr(pynvml, "nvmlGpuFabricInfo_v2"):
                info.version = pynvml.nvmlGpuFabricInfo_v2
            answer = ask(getattr(pynvml, name), handle, ctypes.byref(info))
            out[name] = {"value": plain(info)} if "value" in answer else answer
    for cause in (0, 1):
        out["nvmlDeviceGetRetiredPages(%d)" % cause] = ask(pynvml.nvmlDeviceGetRetiredPages, handle, cause)
    for error_type in (0, 1):
        for counter in (0, 1):
            out["nvmlDeviceGetTotalEccErrors(%d,%d)" % (error_type, counter)] = ask(
                pynvml.nvmlDeviceGetTotalEccErrors, handle, error_type, counter)
    out["temperature"] = ask(pynvml.nvmlDeviceGetTemperature, handle, 0)
    for threshold in (0, 1):
        out["threshold(%d)" % threshold] = ask(pynvml.nvmlDeviceGetTemperatureThreshold, handle, threshold)
    out["fields_one_by_one"] = dict(("%d %s" % (fid, name), field(handle, fid)) for fid, name in sorted(FIELDS.items()))
    links = []
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = ask(pynvml.nvmlDeviceGetNvLinkState, handle, link)
        entry = {"link": link, "state": state}
        if "value" in state:
            entry["remote_pci"] = ask(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            entry["errors"] = dict((c, ask(pynvml.nvmlDeviceGetNvLinkErrorCounter, handle, link, c)) for c in range(5))
        links.append(entry)
    # one entry per distinct answer, so 18 'NotSupported' read as one line
    out["nvlink"] = links if any("value" in item["state"] for item in links) else {"all_links": links[0]["state"], "links": len(links)}
    out["ms_all_calls"] = round((time.monotonic() - started) * 1000, 1)
    return out


def run(argv, limit=20000):
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"exception": "%s: %s" % (type(exc).__name__, exc)}
    return {"rc": proc.returncode, "stdout": proc.stdout[:limit], "stderr": proc.stderr[-2000:]}


def journal():
    proc = run(["journalctl", "-k", "-b", "-o", "json", "--no-pager"], limit=50 * 1024 * 1024)
    if "rc" not in proc or proc["rc"]:
        return proc
    lines, keys, nvrm = 0, None, []
    for raw in proc["stdout"].splitlines():
        lines += 1
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        message = entry.get("MESSAGE")
        if isinstance(message, list):  # journald gives bytes as a list of numbers
            message = bytes(message).decode("utf-8", "replace")
        if message and "NVRM" in message:
            keys = keys or sorted(entry)
            nvrm.append({"t": entry.get("__REALTIME_TIMESTAMP"), "m": message})
    return {"rc": 0, "lines": lines, "nvrm_lines": len(nvrm), "first_nvrm_keys": keys, "nvrm": nvrm[:80]}


def kmsg():
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return {"exception": "%s: %s" % (type(exc).__name__, exc)}
    records, nvrm = 0, []
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:  # EPIPE: the ring overwrote a record we were about to read
                nvrm.append({"read_error": str(exc)})
                continue
            if not record:
                break
            records += 1
            text = record.decode("utf-8", "replace")
            if "NVRM" in text:
                nvrm.append(text.rstrip("\n"))
    finally:
        os.close(fd)
    return {"records": records, "nvrm_lines": len(nvrm), "nvrm": nvrm[:80]}


def main():
    report = {"python": sys.version.split()[0], "pynvml_file": pynvml.__file__,
              "constants": dict((name, getattr(pynvml, name, None)) for name in CONSTANTS)}
    try:
        from importlib.metadata import version
        report["nvidia_ml_py"] = version("nvidia-ml-py")
    except Exception:  # pylint: disable=broad-except
        report["nvidia_ml_py"] = None
    with open("/proc/sys/kernel/random/boot_id") as handle:
        report["boot_id"] = handle.read().strip()
    started = time.monotonic()
    pynvml.nvmlInit()
    report["nvml_init_ms"] = round((time.monotonic() - started) * 1000, 1)
    try:
        report["driver"] = ask(pynvml.nvmlSystemGetDriverVersion)
        report["nvml_version"] = ask(pynvml.nvmlSystemGetNVMLVersion)
        report["gpus"] = [gpu(i) for i in range(pynvml.nvmlDeviceGetCount())]
        report["unit_names"] = ask(lambda: [f for f in dir(pynvml) if f.startswith("nvmlDevice") and "Recovery" in f])
    finally:
        pynvml.nvmlShutdown()
    report["journal"] = journal()
    report["kmsg"] = kmsg()
    report["nvidia_smi_q"] = run(["nvidia-smi", "-q", "-d", "ECC,ROW_REMAPPER,PAGE_RETIREMENT,TEMPERATURE,PERFORMANCE"])
    report["nvidia_smi_query"] = run(["nvidia-smi", "--query-gpu=index,uuid,pci.bus_id,persistence_mode,"
                                      "ecc.errors.uncorrected.volatile.total,retired_pages.pending,"
                                      "remapped_rows.pending,remapped_rows.failure,temperature.gpu,clocks_event_reasons.active",
                                      "--format=csv"])
    report["nvidia_smi_nvlink"] = run(["nvidia-smi", "nvlink", "-s"])
    report["systemd"] = dict((unit, run(["systemctl", "is-active", unit])) for unit in ("nvidia-fabricmanager", "nvidia-persistenced"))
    text = json.dumps(report, indent=2, sort_keys=True, default=str)
    print(text)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "health-probe.json"), "w") as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
