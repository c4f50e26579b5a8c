# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the GPU health decision table, pure.

One table decides per GPU and per node what to do about a health read (``gpu_health_info``'s facts):
``none``, ``observe``, ``reset`` (scope ``gpu``), ``reboot``, ``replace`` or ``investigate`` (scope
``node``). ``../shared/specs/gpu-health.md`` B4 proposed it; the rows are numbered as there. The first
matching row wins. Where this departs from the proposal, the docstring of ``decide_gpu`` says so.

**NVML before the log.** Field 230 (the recovery action) is NVIDIA's own verdict on the GPU *now*; the
kernel log holds every XID since boot, including those a reset already cleared. So where NVML answers, its
answer decides and the XIDs are signals (``observe``); an XID bucket decides only what this driver's NVML
cannot tell: the recovery action when field 230 is unsupported (XID 154's text, then the buckets), a
row-remap failure when remap counts are unsupported (XID 64).

**Never a verdict on an unreadable node** (row 1): NVML that did not initialise, or that failed with an
"Unknown Error" (the cgroup/daemon-reload case of k8s-device-plugin#426), gives ``unknown`` and ``none``.
"""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import xid_catalog

ACTIONS = ("none", "observe", "reset", "investigate", "reboot", "replace")
# how a node's verdict is picked from its GPUs' and its own: the most severe; investigate outranks reset
# (a node a person must look at gets no automatic reset meanwhile)
_SEVERITY = dict((name, rank) for rank, name in enumerate(ACTIONS))
NODE_SCOPED = ("investigate", "reboot", "replace")
DAY_USEC = 24 * 3600 * 1000 * 1000
# RESTART_APP XIDs that, repeated on one GPU within 24 h, point at the GPU rather than the app
# (NVSentinel's health-events analyzer: XID 31 twice on the same GPU -> RUN_DCGMEUD); faults, not lines
REPEAT_XIDS = (13, 31)
REPEAT_COUNT = 2
# The driver logs one fault as a burst of lines: the same GPU, code and PID, microseconds apart (XID 13's SM warp
# exception, global exception and ESR lines; XID 31's MMU fault lines). Lines of one code and PID each within this
# many µs of the previous are one fault (NVSentinel saw a storm of 77 nodes from one job's crash counted by lines).
FAULT_WINDOW_USEC = 10 * 1000 * 1000
# clocks event reasons that are the hardware's (pynvml nvmlClocksEventReason*)
CLOCK_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def clock_reason_names(mask):
    return [name for bit, name in sorted(CLOCK_REASONS.items()) if mask & bit]


def _signal(kind, key, value, source):
    return {"kind": kind, "key": key, "value": value, "source": source}


def scope_of(action):
    """``node`` for an action on the whole node, ``gpu`` for a reset, None for none and observe."""
    return "node" if action in NODE_SCOPED else ("gpu" if action == "reset" else None)


def _verdict(action, row, reasons, signals, **extra):
    out = {"action": action, "scope": scope_of(action), "row": row, "reasons": reasons, "signals": signals}
    out.update(extra)
    return out


def faults(xids):
    """The faults the XID lines of one GPU make, in the log's order: ``[{code, pid, start, lines}]``. A line of the same code
    and PID as a fault's last line, within FAULT_WINDOW_USEC of it (or both without a time), is that fault's."""
    out, last = [], {}
    for xid in xids:
        key, usec = (xid["code"], xid.get("pid")), xid.get("usec")
        fault = last.get(key)
        if fault is not None and ((usec is None and fault["end"] is None)
                                  or (usec is not None and fault["end"] is not None and 0 <= usec - fault["end"] <= FAULT_WINDOW_USEC)):
            fault["lines"] += 1
            fault["end"] = usec
            continue
        fault = {"code": key[0], "pid": key[1], "start": usec, "end": usec, "lines": 1}
        out.append(fault)
        last[key] = fault
    return out


def _xid_signals(xids):
    """One signal per XID code; its value is the code's faults (a burst of lines is one)."""
    counts = {}
    for fault in faults(xids):
        counts[fault["code"]] = counts.get(fault["code"], 0) + 1
    return [_signal("xid", "xid:%d" % code, n, "kernel_log") for code, n in sorted(counts.items())]


def _repeats(xids):
    """XID codes of REPEAT_XIDS whose distinct faults happened REPEAT_COUNT times within 24 h (by their time since boot)."""
    found = []
    for code in REPEAT_XIDS:
        times = sorted(f["start"] for f in faults(xids) if f["code"] == code and f["start"] is not None)
        if any(times[i + REPEAT_COUNT - 1] - times[i] <= DAY_USEC for i in range(len(times) - REPEAT_COUNT + 1)):
            found.append(code)
    return found


def _by_recovery(value, source):
    """Rows 4 to 9: the recovery action's own verdict, or None for NONE."""
    name = xid_catalog.recovery_name(value)
    why = "recovery action %s (%s)" % (name, source)
    if value in (2, 7):
        return _verdict("reboot", 4, [why + ": NVIDIA says reboot"], [])
    if value == 1:
        return _verdict("reset", 5, [why + ": NVIDIA says reset the GPU (nvidia-smi -r)"], [])
    if value == 4:
        return _verdict("reset", 6, [why + ": drain P2P and reset; the GPU's NVLink peers' pods are drained too"], [], peers=True)
    if value == 3:
        # NVIDIA: terminate P2P processes, disable UVM persistence, query again. Kubernetes cannot tell which pods
        # use P2P: the GPU and its NVLink peers are drained and the GPU reset (a superset of NVIDIA's step)
        return _verdict("reset", 7, [why + ": drain the GPU's and its NVLink peers' P2P users, then reset"], [], peers=True)
    if value == 6:
        return _verdict("reset", 8, [why + ": reset the GPU's PCIe bus (nvidia-smi -r bus)"], [], reset_type="bus")
    if value == 5:
        return _verdict("investigate", 9, [why + ": no NVIDIA procedure was found for this value"], [])
    if value:
        return _verdict("investigate", 9, [why + ": a value this collection does not know"], [])
    return None


def _by_bucket(xids, arch):
    """Rows 10 to 14 and the unknown codes, from the XIDs' buckets, when NVML cannot say the recovery action."""
    buckets = {}
    for xid in xids:
        buckets.setdefault(xid["bucket"], []).append(xid["code"])

    def codes(*names):
        return sorted(set(c for n in names for c in buckets.get(n, [])))

    if codes("RESTART_BM"):
        return _verdict("reboot", 2, ["XID %s: the catalog says restart the machine (bare metal)" % codes("RESTART_BM")[0]], [])
    if codes("RESTART_VM"):
        return _verdict("reboot", 13, ["XID %s: the catalog says restart the VM" % codes("RESTART_VM")[0]], [])
    if codes("CHECK_MECHANICALS", "UPDATE_SWFW", "CHECK_UVM", xid_catalog.UNKNOWN):
        found = codes("CHECK_MECHANICALS", "UPDATE_SWFW", "CHECK_UVM", xid_catalog.UNKNOWN)
        return _verdict("investigate", 14, ["XID %s: the catalog asks a person (mechanicals, software/firmware, UVM or an unlisted "
                                            "code: contact support)" % ", ".join(str(c) for c in found)], [])
    if codes("RESET_GPU"):
        return _verdict("reset", 10, ["XID %s: the catalog says reset the GPU" % ", ".join(str(c) for c in codes("RESET_GPU"))], [])
    if codes("WORKFLOW_XID_48"):
        return _verdict("reset", 11, ["XID 48 (double-bit ECC): reset the GPU"], [])
    if codes("WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR"):
        found = ", ".join(str(c) for c in codes("WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR"))
        if arch is not None and arch < 7:
            return _verdict("reboot", 12, ["XID %s (NVLink) on a GPU before Ampere: not individually resettable, reboot" % found], [])
        return _verdict("reset", 12, ["XID %s (NVLink): reset the GPU with the peers nvidia-smi requires" % found], [], peers=True)
    return None


def decide_gpu(gpu):
    """The verdict ``{action, scope, row, reasons, signals[, peers, reset_type, opportunistic]}`` of one GPU's health read.

    Departures from the proposal (spec B4), each for the reason given:

    * XID 79 and "fallen off the bus" decide only for a GPU NVML cannot read (state ``lost``); on a GPU NVML
      reads, field 230 decides (NVML before the log, above).
    * XID 64 means ``replace`` only where remap counts are unsupported; where NVML reads them, the failure
      flag (field 145) decides, and XID 64 with no failure flag is a signal.
    * Volatile double-bit ECC (row 11) decides only when field 230 is unsupported: the recovery action is what
      NVIDIA says about those errors; a pending remap after them is row 16's.
    """
    xids = gpu.get("xids") or []
    signals = _xid_signals(xids)
    state = gpu.get("state")
    rec = gpu.get("recovery_action") or {}
    remap = gpu.get("remapped_rows") or {}
    retired = gpu.get("retired_pages") or {}
    ecc = gpu.get("ecc") or {}
    nvlink = gpu.get("nvlink") or {}
    codes = set(x["code"] for x in xids)

    def done(verdict):
        verdict["signals"] = verdict["signals"] + signals
        if gpu.get("xids_dropped"):
            verdict["reasons"] = verdict["reasons"] + ["%d more XID lines of this GPU were logged than kept (every one that asks for "
                                                       "an action is kept, and the newest routine ones)" % gpu["xids_dropped"]]
        return verdict

    if state == "unreadable":
        return done(_verdict("none", 1, ["NVML could not read this GPU (%s): no verdict" % (gpu.get("error") or "unknown error")], []))
    if state == "lost":
        signals.append(_signal("lost", "lost", 1, "nvml"))
        return done(_verdict("reboot", 2, ["the GPU is lost (%s): NVIDIA's catalog says restart the machine (XID 79, RESTART_BM)"
                                           % (gpu.get("error") or "fallen off the bus")], []))
    if remap.get("supported") and remap.get("failure"):
        signals.append(_signal("remap", "remap_failure", 1, "nvml"))
        return done(_verdict("replace", 3, ["row remapping failed: an RMA criterion (NVIDIA's RMA policy, quoted in awslabs PR #1190)"], []))
    if not remap.get("supported") and 64 in codes:
        signals.append(_signal("remap", "remap_failure", 1, "kernel_log"))
        return done(_verdict("replace", 3, ["XID 64 (row remapper recording failure) and remap counts are not readable: an RMA "
                                            "criterion"], []))
    if state == "reset_required":
        signals.append(_signal("state", "reset_required", 1, "nvml"))
        return done(_verdict("reset", 5, ["NVML: the GPU requires a reset before it can be used again"], []))
    source = rec.get("source")
    if source in ("nvml_field", "xid154_log") and rec.get("value") is not None:
        if rec["value"]:
            signals.append(_signal("recovery", "recovery:%d" % rec["value"], rec["value"], source))
        verdict = _by_recovery(rec["value"], source)
        if verdict:
            return done(verdict)
    if source != "nvml_field":
        verdict = _by_bucket(xids, gpu.get("architecture"))
        if verdict:
            return done(verdict)
        if ecc.get("volatile_dbe"):
            signals.append(_signal("ecc", "dbe", ecc["volatile_dbe"], "nvml"))
            return done(_verdict("reset", 11, ["%d uncorrectable (double-bit) ECC errors since boot, and this driver cannot say the "
                                               "recovery action: reset the GPU" % ecc["volatile_dbe"]], []))
    inactive = [link["link"] for link in nvlink.get("links") or [] if not link.get("active")]
    if inactive:
        signals.append(_signal("nvlink", "nvlink_inactive", len(inactive), "nvml"))
        arch = gpu.get("architecture")
        if arch is not None and arch < 7:
            return done(_verdict("reboot", 12, ["NVLink links %s inactive on a GPU before Ampere: reboot" % inactive], []))
        return done(_verdict("reset", 12, ["NVLink links %s inactive: reset the GPU with the peers nvidia-smi requires" % inactive], [],
                             peers=True))
    pending = [what for what, flag in (("a row remap", remap.get("supported") and remap.get("pending")),
                                       ("page retirement", retired.get("supported") and retired.get("pending"))) if flag]
    if not remap.get("supported") and 63 in codes and not pending:
        pending.append("a row remap (XID 63)")
    if pending:
        signals.append(_signal("remap", "remap_pending" if "row remap" in pending[0] else "retired_pending", 1, "nvml"))
        return done(_verdict("reset", 16, ["%s is pending: it takes effect at the next reset; reset only while the GPU holds no pods, "
                                           "never evict for it (NVIDIA: new workloads can still run)" % " and ".join(pending)], [],
                             opportunistic=True))
    temp = gpu.get("temperature") or {}
    if temp.get("current") is not None and temp.get("shutdown") and temp["current"] >= temp["shutdown"]:
        signals.append(_signal("thermal", "temperature_shutdown", temp["current"], "nvml"))
        return done(_verdict("investigate", 18, ["temperature %d C at or above the shutdown threshold %d C" % (temp["current"], temp["shutdown"])], []))
    repeats = _repeats(xids)
    if repeats:
        codes = ", ".join(str(c) for c in repeats)
        return done(_verdict("investigate", 18, ["XID %s: %d faults or more on this GPU within 24 h (distinct faults, not lines): the "
                                                 "GPU, not the app, is suspect (run a diagnostic)" % (codes, REPEAT_COUNT)], []))
    reasons = []
    if xids:
        reasons.append("XIDs since boot that ask for no node action now (%s)" % ", ".join(s["key"] for s in signals if s["kind"] == "xid"))
    if ecc.get("volatile_dbe"):
        signals.append(_signal("ecc", "dbe", ecc["volatile_dbe"], "nvml"))
        reasons.append("%d double-bit ECC errors since boot; NVML's recovery action is NONE" % ecc["volatile_dbe"])
    slow = [r for r in gpu.get("clocks_event_reasons") or [] if r in ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")]
    if slow:
        signals.append(_signal("thermal", "clocks:" + ",".join(slow), len(slow), "nvml"))
        reasons.append("hardware clock slowdown: %s" % ", ".join(slow))
    if reasons:
        return done(_verdict("observe", 18, reasons, []))
    return done(_verdict("none", 0, [], []))


def decide_node(health):
    """The node's verdict from its health facts: ``{state, action, scope, row, gpus, reasons, signals}``.

    ``state`` is ``unknown`` (NVML unreadable: row 1, never a verdict), ``ok``, ``attention`` (observe) or
    ``faulty``. ``gpus`` lists the UUIDs (or ``index:<n>`` for a GPU NVML could not name) whose verdict is
    the node's action."""
    if not health.get("available"):
        return {"state": "unknown", "action": "none", "scope": None, "row": 1, "gpus": [],
                "reasons": ["NVML could not be read on this node (%s): no verdict; the GPUs are not judged faulty" % (health.get("reason") or "unknown")],
                "signals": []}
    candidates = []
    for gpu in health.get("gpus") or []:
        verdict = gpu.get("verdict") or decide_gpu(gpu)
        candidates.append((verdict, gpu.get("uuid") or "index:%s" % gpu.get("index")))
    seen, expected = health.get("gpus_seen"), health.get("gpus_expected")
    if expected is not None and seen is not None and seen < expected:
        candidates.append((_verdict("reboot", 2, ["%d GPUs seen, %d expected: a GPU is missing (XID 79's RESTART_BM)" % (seen, expected)],
                                    [_signal("count", "count_mismatch", expected - seen, "nvml")]), None))
    if health.get("nvswitch") and health.get("fabric_manager") not in ("active", None):
        candidates.append((_verdict("investigate", 15, ["NVSwitch system whose nvidia-fabricmanager is %s" % health.get("fabric_manager")],
                                    [_signal("fabric", "fabric_manager", health.get("fabric_manager"), "systemd")]), None))
    if not candidates:
        return {"state": "ok", "action": "none", "scope": None, "row": 0, "gpus": [], "reasons": [], "signals": []}
    worst = max(_SEVERITY[v["action"]] for v, dummy in candidates)
    chosen = [(v, who) for v, who in candidates if _SEVERITY[v["action"]] == worst]
    action = chosen[0][0]["action"]
    reasons, signals, gpus = [], [], []
    for verdict, who in candidates:
        signals.extend(dict(s, gpu=who) if who else s for s in verdict["signals"])
    for verdict, who in chosen:
        reasons.extend(("%s: %s" % (who, r)) if who else r for r in verdict["reasons"])
        if who:
            gpus.append(who)
    state = "ok" if action == "none" else ("attention" if action == "observe" else "faulty")
    return {"state": state, "action": action, "scope": scope_of(action), "row": chosen[0][0]["row"], "gpus": gpus, "reasons": reasons, "signals": signals}
