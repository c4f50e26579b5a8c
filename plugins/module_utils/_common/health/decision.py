# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the GPU health decision table, pure.

An ordered list of rules (``GPU_RULES``, then ``NODE_RULES`` for what a node says of itself) decides per GPU and per
node which action of the actions table (``actions.py``: none, observe, reset, investigate, reboot, replace) a health
read (``gpu_health_info``'s facts) calls for. ``../shared/specs/gpu-health.md`` B4 proposed the table; each rule carries
its row number there. The first rule that fires wins; where this departs from the proposal, ``GPU_RULES``' comment says
so. Rows 17 (the device plugin's unhealthy devices) and ``repeat`` (a repeat offender) need the API and the ledger: they
are the plan's rules (``_cluster/remediation/plan.py``), in the same row space. A new signal is one rule here and its
test. "Healthy again" after a reset (``healthy_again``) is derived from the same rules: no rule at the reset's severity
or above fires for the GPUs. The thresholds (``THRESHOLDS``) travel in the facts, so the controller decides again with
the node's own values.

**NVML before the log.** Field 230 (the recovery action) is NVIDIA's own verdict on the GPU *now*; the
kernel log holds every XID since boot, including those a reset already cleared. So where NVML answers, its
answer decides and the XIDs are signals (``observe``); an XID bucket decides only what this driver's NVML
cannot tell: the recovery action when field 230 is unsupported (XID 154's text, then the buckets), a
row-remap failure when remap counts are unsupported (XID 64).

**Never a verdict on an unreadable node** (row 1): NVML that did not initialise, or that failed with an
"Unknown Error" (the cgroup/daemon-reload case of k8s-device-plugin#426), gives ``unknown`` and ``none``.
"""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._common import settings
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import actions as A
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import xid_catalog

DAY_USEC = 24 * 3600 * 1000 * 1000
# RESTART_APP XIDs that, repeated on one GPU within 24 h, point at the GPU rather than the app
# (NVSentinel's health-events analyzer: XID 31 twice on the same GPU -> RUN_DCGMEUD); faults, not lines
REPEAT_XIDS = (13, 31)
REPEAT_COUNT = 2
# The driver logs one fault as a burst of lines: the same GPU, code and PID, microseconds apart (XID 13's SM warp
# exception, global exception and ESR lines; XID 31's MMU fault lines). Lines of one code and PID each within this
# many µs of the previous are one fault (NVSentinel saw a storm of 77 nodes from one job's crash counted by lines).
FAULT_WINDOW_USEC = 10 * 1000 * 1000
AMPERE = 7  # NVML's architecture number: before it, NVLink GPUs are not individually resettable


def _xid_codes(value):
    if isinstance(value, (list, tuple)) and all(settings.whole(0, 10 ** 6)(c) is None for c in value):
        return None
    return "expected a list of XID codes (whole numbers), got %r" % (value,)


# the decision's thresholds: gpu_health_info's ``thresholds`` option, carried in the facts (``thresholds``)
THRESHOLDS = settings.Table(
    settings.row("repeat_xids", "list", list(REPEAT_XIDS), elements="int", check=_xid_codes),
    settings.row("repeat_count", "int", REPEAT_COUNT, check=settings.whole(2, 1000)),
    settings.row("repeat_window", "int", DAY_USEC // 10 ** 6, check=settings.whole(60, 30 * 86400, "whole number of seconds")),
    settings.row("fault_window_usec", "int", FAULT_WINDOW_USEC, check=settings.whole(0, 3600 * 10 ** 6, "whole number of µs")),
)
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
    """``node`` for an action on the whole node, ``gpu`` for a reset, None for none and observe (the actions table)."""
    return A.scope_of(action)


def _verdict(action, row, reasons, signals=(), **extra):
    out = {"action": action, "scope": A.scope_of(action), "row": row, "reasons": list(reasons), "signals": list(signals)}
    out.update(extra)
    return out


def thresholds_of(facts):
    """The thresholds a health read was decided with (its ``thresholds``; the defaults where it has none), checked: a
    ParameterError names the field (``thresholds.repeat_count``)."""
    raw = (facts or {}).get("thresholds")
    if raw is not None and not isinstance(raw, dict):
        raise ParameterError("thresholds", "expected a dict of %s, got %s" % (", ".join(THRESHOLDS.names()), type(raw).__name__))
    return THRESHOLDS.check_all(raw, where="thresholds.")


def faults(xids, window=FAULT_WINDOW_USEC):
    """The faults the XID lines of one GPU make, in the log's order: ``[{code, pid, start, lines}]``. A line of the same code
    and PID as a fault's last line, within ``window`` µs of it (or both without a time), is that fault's."""
    out, last = [], {}
    for xid in xids:
        key, usec = (xid["code"], xid.get("pid")), xid.get("usec")
        fault = last.get(key)
        if fault is not None and ((usec is None and fault["end"] is None)
                                  or (usec is not None and fault["end"] is not None and 0 <= usec - fault["end"] <= window)):
            fault["lines"] += 1
            fault["end"] = usec
            continue
        fault = {"code": key[0], "pid": key[1], "start": usec, "end": usec, "lines": 1}
        out.append(fault)
        last[key] = fault
    return out


class Read:
    """One GPU's health read as the rules see it: its parts, the XIDs' codes and buckets, its faults, the thresholds."""

    def __init__(self, gpu, limits):
        self.gpu, self.limits = gpu, limits
        self.xids = gpu.get("xids") or []
        self.state, self.arch = gpu.get("state"), gpu.get("architecture")
        self.rec = gpu.get("recovery_action") or {}
        self.remap = gpu.get("remapped_rows") or {}
        self.retired = gpu.get("retired_pages") or {}
        self.ecc = gpu.get("ecc") or {}
        self.codes = set(x["code"] for x in self.xids)
        self.faults = faults(self.xids, limits["fault_window_usec"])
        self.buckets = {}
        for xid in self.xids:
            self.buckets.setdefault(xid["bucket"], set()).add(xid["code"])
        # NVML before the log: an XID bucket decides only what this driver's NVML cannot say (field 230 unsupported)
        self.by_log = self.rec.get("source") != "nvml_field"

    def bucket(self, *names):
        return sorted(set(c for n in names for c in self.buckets.get(n, ())))

    def pre_ampere(self):
        return self.arch is not None and self.arch < AMPERE


def _codes_text(codes):
    return ", ".join(str(c) for c in codes)


# -- the GPU rules, in order: each returns a verdict (and may add signals to ``found``), or None ----------------------------
# Departures from the proposal (spec B4), each for the reason given:
# * XID 79 and "fallen off the bus" decide only for a GPU NVML cannot read (state ``lost``); on a GPU NVML reads, field 230
#   decides (NVML before the log).
# * XID 64 means ``replace`` only where remap counts are unsupported; where NVML reads them, the failure flag (field 145)
#   decides, and XID 64 with no failure flag is a signal.
# * Volatile double-bit ECC (row 11) decides only when field 230 is unsupported: the recovery action is what NVIDIA says
#   about those errors; a pending remap after them is row 16's.

def _unreadable(r, found):
    if r.state == "unreadable":
        return _verdict(A.NONE, 1, ["NVML could not read this GPU (%s): no verdict" % (r.gpu.get("error") or "unknown error")])
    return None


def _lost(r, found):
    if r.state == "lost":
        found.append(_signal("lost", "lost", 1, "nvml"))
        return _verdict(A.REBOOT, 2, ["the GPU is lost (%s): NVIDIA's catalog says restart the machine (XID 79, RESTART_BM)"
                                      % (r.gpu.get("error") or "fallen off the bus")])
    return None


def _remap_failed(r, found):
    if r.remap.get("supported") and r.remap.get("failure"):
        found.append(_signal("remap", "remap_failure", 1, "nvml"))
        return _verdict(A.REPLACE, 3, ["row remapping failed: an RMA criterion (NVIDIA's RMA policy, quoted in awslabs PR #1190)"])
    if not r.remap.get("supported") and 64 in r.codes:
        found.append(_signal("remap", "remap_failure", 1, "kernel_log"))
        return _verdict(A.REPLACE, 3, ["XID 64 (row remapper recording failure) and remap counts are not readable: an RMA criterion"])
    return None


def _reset_required(r, found):
    if r.state == "reset_required":
        found.append(_signal("state", "reset_required", 1, "nvml"))
        return _verdict(A.RESET, 5, ["NVML: the GPU requires a reset before it can be used again"])
    return None


# rows 4 to 9: the recovery action's own verdict (value: (action, row, what NVIDIA says, extra))
_RECOVERY = {
    2: (A.REBOOT, 4, "NVIDIA says reboot", {}),
    7: (A.REBOOT, 4, "NVIDIA says reboot", {}),
    1: (A.RESET, 5, "NVIDIA says reset the GPU (nvidia-smi -r)", {}),
    4: (A.RESET, 6, "drain P2P and reset; the GPU's NVLink peers' pods are drained too", {"peers": True}),
    # NVIDIA: terminate P2P processes, disable UVM persistence, query again. Kubernetes cannot tell which pods use P2P: the
    # GPU and its NVLink peers are drained and the GPU reset (a superset of NVIDIA's step)
    3: (A.RESET, 7, "drain the GPU's and its NVLink peers' P2P users, then reset", {"peers": True}),
    6: (A.RESET, 8, "reset the GPU's PCIe bus (nvidia-smi -r bus)", {"reset_type": "bus"}),
    5: (A.INVESTIGATE, 9, "no NVIDIA procedure was found for this value", {}),
}


def _recovery(r, found):
    value, source = r.rec.get("value"), r.rec.get("source")
    if source not in ("nvml_field", "xid154_log") or not value:
        return None
    found.append(_signal("recovery", "recovery:%d" % value, value, source))
    action, row, says, extra = _RECOVERY.get(value, (A.INVESTIGATE, 9, "a value this collection does not know", {}))
    return _verdict(action, row, ["recovery action %s (%s): %s" % (xid_catalog.recovery_name(value), source, says)], **extra)


def _bucket_restart(r, found):
    if not r.by_log:
        return None
    if r.bucket("RESTART_BM"):
        return _verdict(A.REBOOT, 2, ["XID %s: the catalog says restart the machine (bare metal)" % r.bucket("RESTART_BM")[0]])
    if r.bucket("RESTART_VM"):
        return _verdict(A.REBOOT, 13, ["XID %s: the catalog says restart the VM" % r.bucket("RESTART_VM")[0]])
    return None


def _bucket_person(r, found):
    asks = r.bucket("CHECK_MECHANICALS", "UPDATE_SWFW", "CHECK_UVM", xid_catalog.UNKNOWN) if r.by_log else []
    if asks:
        return _verdict(A.INVESTIGATE, 14, ["XID %s: the catalog asks a person (mechanicals, software/firmware, UVM or an unlisted "
                                            "code: contact support)" % _codes_text(asks)])
    return None


def _bucket_reset(r, found):
    if not r.by_log:
        return None
    if r.bucket("RESET_GPU"):
        return _verdict(A.RESET, 10, ["XID %s: the catalog says reset the GPU" % _codes_text(r.bucket("RESET_GPU"))])
    if r.bucket("WORKFLOW_XID_48"):
        return _verdict(A.RESET, 11, ["XID 48 (double-bit ECC): reset the GPU"])
    return None


def _nvlink(r, what):
    """Row 12: an NVLink fault is reset with the peers nvidia-smi requires; before Ampere the node is rebooted."""
    if r.pre_ampere():
        return _verdict(A.REBOOT, 12, ["%s on a GPU before Ampere: not individually resettable, reboot" % what])
    return _verdict(A.RESET, 12, ["%s: reset the GPU with the peers nvidia-smi requires" % what], peers=True)


def _bucket_nvlink(r, found):
    codes = r.bucket("WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR") if r.by_log else []
    return _nvlink(r, "XID %s (NVLink)" % _codes_text(codes)) if codes else None


def _dbe_unsupported(r, found):
    if r.by_log and r.ecc.get("volatile_dbe"):
        found.append(_signal("ecc", "dbe", r.ecc["volatile_dbe"], "nvml"))
        return _verdict(A.RESET, 11, ["%d uncorrectable (double-bit) ECC errors since boot, and this driver cannot say the recovery "
                                      "action: reset the GPU" % r.ecc["volatile_dbe"]])
    return None


def _nvlink_inactive(r, found):
    inactive = [link["link"] for link in (r.gpu.get("nvlink") or {}).get("links") or [] if not link.get("active")]
    if inactive:
        found.append(_signal("nvlink", "nvlink_inactive", len(inactive), "nvml"))
        return _nvlink(r, "NVLink links %s inactive" % inactive)
    return None


def _pending(r, found):
    pending = [what for what, flag in (("a row remap", r.remap.get("supported") and r.remap.get("pending")),
                                       ("page retirement", r.retired.get("supported") and r.retired.get("pending"))) if flag]
    if not r.remap.get("supported") and 63 in r.codes and not pending:
        pending.append("a row remap (XID 63)")
    if not pending:
        return None
    found.append(_signal("remap", "remap_pending" if "row remap" in pending[0] else "retired_pending", 1, "nvml"))
    return _verdict(A.RESET, 16, ["%s is pending: it takes effect at the next reset; reset only while the GPU holds no pods, never "
                                  "evict for it (NVIDIA: new workloads can still run)" % " and ".join(pending)], opportunistic=True)


def _thermal_shutdown(r, found):
    temp = r.gpu.get("temperature") or {}
    if temp.get("current") is not None and temp.get("shutdown") and temp["current"] >= temp["shutdown"]:
        found.append(_signal("thermal", "temperature_shutdown", temp["current"], "nvml"))
        return _verdict(A.INVESTIGATE, 18, ["temperature %d C at or above the shutdown threshold %d C" % (temp["current"], temp["shutdown"])])
    return None


def _repeated(r, found):
    """XID codes of ``repeat_xids`` whose distinct faults happened ``repeat_count`` times within ``repeat_window``."""
    count, window = r.limits["repeat_count"], r.limits["repeat_window"] * 10 ** 6
    repeats = []
    for code in r.limits["repeat_xids"]:
        times = sorted(f["start"] for f in r.faults if f["code"] == code and f["start"] is not None)
        if any(times[i + count - 1] - times[i] <= window for i in range(len(times) - count + 1)):
            repeats.append(code)
    if repeats:
        return _verdict(A.INVESTIGATE, 18, ["XID %s: %d faults or more on this GPU within %s: the GPU, not the app, is suspect (run a "
                                            "diagnostic)" % (_codes_text(repeats), count, _span(r.limits["repeat_window"]))])
    return None


def _span(seconds):
    return "24 h" if seconds == 86400 else ("%d h" % (seconds // 3600) if seconds % 3600 == 0 else "%d s" % seconds)


def _signals_only(r, found):
    """Row 18's observe: signals that ask for no action now."""
    reasons = []
    if r.xids:
        reasons.append("XIDs since boot that ask for no node action now (%s)" % ", ".join(s["key"] for s in found if s["kind"] == "xid"))
    if r.ecc.get("volatile_dbe"):
        found.append(_signal("ecc", "dbe", r.ecc["volatile_dbe"], "nvml"))
        reasons.append("%d double-bit ECC errors since boot; NVML's recovery action is NONE" % r.ecc["volatile_dbe"])
    slow = [x for x in r.gpu.get("clocks_event_reasons") or [] if x in ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")]
    if slow:
        found.append(_signal("thermal", "clocks:" + ",".join(slow), len(slow), "nvml"))
        reasons.append("hardware clock slowdown: %s" % ", ".join(slow))
    return _verdict(A.OBSERVE, 18, reasons) if reasons else None


GPU_RULES = (_unreadable, _lost, _remap_failed, _reset_required, _recovery, _bucket_restart, _bucket_person, _bucket_reset,
             _bucket_nvlink, _dbe_unsupported, _nvlink_inactive, _pending, _thermal_shutdown, _repeated, _signals_only)


def _xid_signals(fault_list):
    """One signal per XID code; its value is the code's faults (a burst of lines is one)."""
    counts = {}
    for fault in fault_list:
        counts[fault["code"]] = counts.get(fault["code"], 0) + 1
    return [_signal("xid", "xid:%d" % code, n, "kernel_log") for code, n in sorted(counts.items())]


def decide_gpu(gpu, thresholds=None, rules=GPU_RULES):
    """The verdict ``{action, scope, row, reasons, signals[, peers, reset_type, opportunistic]}`` of one GPU's health read: the
    first of ``rules`` that fires (``none``, row 0, where none does). ``thresholds``: THRESHOLDS' settings (the defaults)."""
    read = Read(gpu, thresholds_of({"thresholds": thresholds}))
    found = _xid_signals(read.faults)
    verdict = None
    for rule in rules:
        verdict = rule(read, found)
        if verdict:
            break
    verdict = verdict or _verdict(A.NONE, 0, [])
    verdict["signals"] = verdict["signals"] + found
    if gpu.get("xids_dropped"):
        verdict["reasons"] = verdict["reasons"] + ["%d more XID lines of this GPU were logged than kept (every one that asks for "
                                                   "an action is kept, and the newest routine ones)" % gpu["xids_dropped"]]
    return verdict


def healthy_again(gpu, thresholds=None):
    """Why a GPU is not healthy after its reset or reboot (empty: healthy): every rule at the reset's severity or above that
    fires for its read now, each with its row (the XIDs before the reset are not counted: its mark, or the new boot, ended
    them). A pending remap (row 16) counts: the reset was to apply it. An unreadable GPU (row 1) is not healthy."""
    read = Read(dict(gpu, xids=[]), thresholds_of({"thresholds": thresholds}))
    fired = [v for v in (rule(read, []) for rule in GPU_RULES) if v]
    return ["%s (row %s)" % (reason, v["row"]) for v in fired if v["row"] == 1 or A.severity(v["action"]) >= A.severity(A.RESET)
            for reason in v["reasons"]]


# -- the node's own rules: what a node says of itself beside its GPUs ---------------------------------------------------------

def _missing_gpu(health):
    seen, expected = health.get("gpus_seen"), health.get("gpus_expected")
    if expected is not None and seen is not None and seen < expected:
        return _verdict(A.REBOOT, 2, ["%d GPUs seen, %d expected: a GPU is missing (XID 79's RESTART_BM)" % (seen, expected)],
                        [_signal("count", "count_mismatch", expected - seen, "nvml")])
    return None


def _fabric_manager(health):
    if health.get("nvswitch") and health.get("fabric_manager") not in ("active", None):
        return _verdict(A.INVESTIGATE, 15, ["NVSwitch system whose nvidia-fabricmanager is %s" % health.get("fabric_manager")],
                        [_signal("fabric", "fabric_manager", health.get("fabric_manager"), "systemd")])
    return None


NODE_RULES = (_missing_gpu, _fabric_manager)


def decide_node(health):
    """The node's verdict from its health facts: ``{state, action, scope, row, gpus, reasons, signals}``.

    ``state`` is ``unknown`` (NVML unreadable: row 1, never a verdict), ``ok``, ``attention`` (observe) or
    ``faulty``. ``gpus`` lists the UUIDs (or ``index:<n>`` for a GPU NVML could not name) whose verdict is
    the node's action: the most severe of the actions table among its GPUs' and the node's own rules'."""
    if not health.get("available"):
        return {"state": "unknown", "action": A.NONE, "scope": None, "row": 1, "gpus": [],
                "reasons": ["NVML could not be read on this node (%s): no verdict; the GPUs are not judged faulty" % (health.get("reason") or "unknown")],
                "signals": []}
    candidates = []
    for gpu in health.get("gpus") or []:
        verdict = gpu.get("verdict") or decide_gpu(gpu, health.get("thresholds"))
        candidates.append((verdict, gpu.get("uuid") or "index:%s" % gpu.get("index")))
    candidates.extend((v, None) for v in (rule(health) for rule in NODE_RULES) if v)
    if not candidates:
        return {"state": "ok", "action": A.NONE, "scope": None, "row": 0, "gpus": [], "reasons": [], "signals": []}
    action = A.most_severe(v["action"] for v, dummy in candidates)
    chosen = [(v, who) for v, who in candidates if v["action"] == action]
    reasons, signals, gpus = [], [], []
    for verdict, who in candidates:
        signals.extend(dict(s, gpu=who) if who else s for s in verdict["signals"])
    for verdict, who in chosen:
        reasons.extend(("%s: %s" % (who, r)) if who else r for r in verdict["reasons"])
        if who:
            gpus.append(who)
    return {"state": state_of(action), "action": action, "scope": A.scope_of(action), "row": chosen[0][0]["row"], "gpus": gpus, "reasons": reasons,
            "signals": signals}


def state_of(action):
    """A verdict's state from its action: ``ok`` (none), ``attention`` (observe), else ``faulty``."""
    return "ok" if action == A.NONE else ("attention" if action == A.OBSERVE else "faulty")


# -- the NVLink peer rule, once: the plan's targets and the reset's set ---------------------------------------------------------

def nvlink_peers(health, targets, drain_peers=False):
    """``(peers, why)``: the NVLink peers of ``targets`` (UUIDs) that go with them, and why. Every peer where the verdict drains
    P2P users (``drain_peers``: rows 6, 7, 12); else the peers nvidia-smi must reset in the same command: "If Fabric Manager is
    not running, or if any of the GPUs being reset are based on an architecture preceding Ampere, any GPUs with NVLink
    connections to a GPU being reset must also be reset in the same command" (its man page, spec A2). The targets' own peers
    (not their peers' peers)."""
    by_uuid = dict((g.get("uuid"), g) for g in health.get("gpus") or () if g.get("uuid"))
    fabric = health.get("fabric_manager")
    chosen, peers, why = [t for t in targets if t in by_uuid], [], None
    for uuid in list(chosen):
        found = [p for p in ((by_uuid[uuid].get("nvlink") or {}).get("peers") or ()) if p not in chosen and p in by_uuid]
        old = any((by_uuid[u].get("architecture") or 0) < AMPERE for u in chosen + found)
        if found and (drain_peers or old or fabric != "active"):
            why = why or ("the verdict drains the GPUs' P2P users" if drain_peers else
                          "a GPU before Ampere" if old else "Fabric Manager is %s" % (fabric or "not running"))
            chosen.extend(found)
            peers.extend(found)
    return peers, why
