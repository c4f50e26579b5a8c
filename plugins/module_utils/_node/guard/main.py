# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the node-side ``gpuops`` command (boot guard).

The ``checkpoint_guard`` role copies this collection's module_utils to the node and
installs ``/usr/local/bin/gpuops``, a three-line wrapper around its entry point
(``roles/checkpoint_guard/files/gpuops_main.py``), which calls ``main()`` with the runner of the
commands it needs (module_utils start no process themselves). The guard
runs the very code ``kubelet_checkpoint`` runs (``gpu_inventory.gather`` and
``reconcile.reconcile``), before kubelet at boot, and logs one JSON object per line
(``level``, ``msg``, ``time`` plus indexable fields) to stdout, i.e. the journal.

Commands::

    gpuops check              act: move aside (or prune) a stale checkpoint
    gpuops check --late       the same, once a driver that starts after kubelet is up
    gpuops report             read-only: say what check would do
    gpuops dev-char-symlinks  create /dev/char links for NVIDIA devices (before daemon-reload)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import sys
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._node import devchar, install, nodefile
from ansible_collections.gpuops.fleet.plugins.module_utils._node import gpu_inventory as inventory
from ansible_collections.gpuops.fleet.plugins.module_utils._node import gpu_metrics
from ansible_collections.gpuops.fleet.plugins.module_utils._node import reconcile as rec
from ansible_collections.gpuops.fleet.plugins.module_utils._node import repair
from ansible_collections.gpuops.fleet.plugins.module_utils._node import systemd
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import (
    GpuopsError,
    InventoryError,
    KubeletControlError,
    KubeletRunningError,
    LockBusyError,
    UnsafeFileError,
)
from ansible_collections.gpuops.fleet.plugins.module_utils._node.guard.config import DEFAULT_CONFIG, load_config, parse_config
from ansible_collections.gpuops.fleet.plugins.module_utils._node.jsonlog import JsonLog
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import SHA256

__all__ = ["main", "check", "parse_config", "load_config", "JsonLog", "DEFAULT_CONFIG"]

VERSION = "1.1.0"

# Exit codes (documented in the role README and `gpuops --help`).
EXIT_OK = 0  # up to date, no checkpoint, or repaired
EXIT_ERROR = 1  # unexpected error (a bug: please report the traceback)
EXIT_USAGE = 2  # bad command line or configuration file
EXIT_INVENTORY_UNKNOWN = 3  # GPUs could not be read: refused to touch the checkpoint
EXIT_CORRUPT = 4  # checkpoint corrupt and left in place (on_corrupt: report)
EXIT_WOULD_CHANGE = 5  # report mode only: check would change the checkpoint
EXIT_ACTION_FAILED = 6  # stale or corrupt, but the backup/removal/rewrite failed
EXIT_LOCKED = 7  # another run held the checkpoint's lock past lock_timeout: nothing done
EXIT_KUBELET_RUNNING = 8  # kubelet runs and restart_kubelet is false: nothing done
EXIT_KUBELET_FAILED = 9  # stopping or starting kubelet around the repair failed

EXIT_CODES = (
    (EXIT_OK, "checkpoint up to date, missing (kubelet writes a fresh one), or repaired"),
    (EXIT_ERROR, "unexpected error"),
    (EXIT_USAGE, "bad command line or configuration file"),
    (EXIT_INVENTORY_UNKNOWN, "GPU inventory unknown (driver not loaded, NVML error, zero GPUs): checkpoint left untouched"),
    (EXIT_CORRUPT, "checkpoint corrupt and left in place (on_corrupt: report)"),
    (EXIT_WOULD_CHANGE, "report only: check would change the checkpoint"),
    (EXIT_ACTION_FAILED, "stale or corrupt, but the backup, removal or rewrite failed (or kubelet wrote the file meanwhile): file untouched or replaced whole"),
    (EXIT_LOCKED, "another gpuops run held the checkpoint's lock past lock_timeout: nothing was done"),
    (EXIT_KUBELET_RUNNING, "stale, but kubelet runs and restart_kubelet is false: nothing was done (kubelet would write its old state back)"),
    (EXIT_KUBELET_FAILED, "stopping or starting kubelet around the repair failed: the log says whether the checkpoint changed and what to start"),
)


def gather_gpus(config, log, run, sleep=time.sleep, clock=time.monotonic, late=False):
    """GPU facts; waits for a driver that is still coming up.

    Early (at boot, before kubelet) it waits up to ``driver_wait_seconds``. The late check
    waits up to ``late_wait_seconds`` for the driver's ready file (when one is set: the GPU
    Operator's validator writes it once ``nvidia-smi`` works in the driver root) and for
    the GPUs to be readable.
    """
    wait = config["late_wait_seconds"] if late else config["driver_wait_seconds"]
    ready_file = config["driver_ready_file"] if late else None
    deadline = clock() + wait
    announced = False
    while True:
        if ready_file and not os.path.exists(ready_file):
            facts = inventory.empty_facts(None, "the driver's ready file %s does not exist yet" % ready_file)
        else:
            # looked up on every try: a driver installer may put nvidia-smi in place late
            smi = inventory.find_nvidia_smi(config["nvidia_smi"])
            facts = inventory.gather(run, config["backend"], smi, driver_root=config["driver_root"])
        if facts.get("available") or clock() >= deadline:
            return facts
        if not announced:
            log.emit(
                "info",
                "driver_wait",
                "GPUs not readable yet (%s); waiting up to %ds for the NVIDIA driver" % (facts.get("reason"), wait),
                reason=facts.get("reason"),
                late=late,
            )
            announced = True
        sleep(1)


def _ids_msg(values):
    """The seed's style: a JSON list of IDs, or null."""
    flat = []
    for resource_ids in values.values():
        flat.extend(v for v in resource_ids if v not in flat)
    return json.dumps(flat) if flat else "null"


def _kubelet(config, run):
    """The kubelet unit as the guard handles it, or None on a host without systemctl."""
    if not systemd.available():
        return None
    # --no-block start: gpuops.service is ordered before kubelet, so a blocking start
    # from inside it would wait for the guard itself to finish
    return repair.Kubelet(
        config["kubelet_unit"], restart=config["restart_kubelet"], block_start=False, run=run, rescue_seconds=config["kubelet_rescue_seconds"]
    )


def _restarted(result):
    """kubelet_restarted of the finished record: true; false when it ran and was not restarted; null otherwise."""
    info = result.get("kubelet") or {}
    if info.get("restarted"):
        return True
    return False if info.get("state_before") in systemd.RUNNING_STATES else None


def check(config, log, run, report_only=False, sleep=time.sleep, now=None, late=False):
    """The guard: returns an exit code; every step is logged.

    ``late``: the late check (gpuops-late.service, after kubelet) of a node whose driver
    comes up after kubelet (a driver container). Early, with ``late_check`` set, a node
    whose GPUs cannot be read yet is deferred to it instead of failing the boot.
    """
    mode = "report" if report_only else ("late check" if late else "check")
    log.emit(
        "info", "start", "check gpu start (gpuops %s, %s mode)" % (VERSION, mode), mode=mode, version=VERSION, checkpoint_path=config["checkpoint_path"]
    )
    facts = gather_gpus(config, log, run, sleep, late=late)
    if not facts.get("available") and config["late_check"] and not late and not report_only:
        log.emit(
            "warning",
            "deferred",
            "GPUs not readable before kubelet (%s): nothing touched; gpuops-late.service checks again once the driver is up" % facts.get("reason"),
            reason=facts.get("reason"),
            driver_root=config["driver_root"],
            driver_ready_file=config["driver_ready_file"],
        )
        log.emit("info", "finished", "check gpu finished", exit_code=EXIT_OK, status="deferred", action="none", changed=False, elapsed_ms=log.elapsed_ms())
        return EXIT_OK
    if facts.get("available"):
        uuids = [g.get("uuid") for g in facts.get("gpus") or ()]
        mig = [m.get("uuid") for g in facts.get("gpus") or () for m in g.get("mig_devices") or ()]
        log.emit(
            "info",
            "gpus_found",
            "find nvidia gpu: %s" % json.dumps(uuids),
            gpus=uuids,
            mig_devices=mig,
            gpu_count=len(uuids),
            driver_version=facts.get("driver_version"),
            backend=facts.get("backend"),
        )
    told = []

    def notify(event, **fields):
        if event == "reconciled":  # kubelet is stopped: tell the repair before it starts again
            told.append(_story(log, facts, fields["result"], report_only))
            return
        if event == "rescue_armed":
            log.emit("info", event, "%s armed: starts %s within %ds should this run die while it is stopped"
                     % (fields["rescue_unit"], fields["unit"], fields["rescue_seconds"]), **fields)
            return
        level = "error" if event.endswith("failed") else "info"
        log.emit(level, event, "%s: %s" % (fields.get("unit"), event.split("_", 1)[1].replace("_", " ")), **fields)

    try:
        result = repair.repair(facts, config["options"], _kubelet(config, run), check_mode=report_only, now=now, notify=notify)
    except KubeletRunningError as exc:
        log.emit("warning", "kubelet_running", str(exc), unit=config["kubelet_unit"], checkpoint_path=config["checkpoint_path"])
        return _finish(log, EXIT_KUBELET_RUNNING, exc.result)
    except KubeletControlError as exc:
        log.emit("error", "kubelet_control_failed", str(exc), unit=config["kubelet_unit"], checkpoint_path=config["checkpoint_path"])
        return _finish(log, EXIT_KUBELET_FAILED, exc.result)
    except LockBusyError as exc:
        log.emit("error", "locked", str(exc), checkpoint_path=config["checkpoint_path"])
        return _finish(log, EXIT_LOCKED, None)
    except InventoryError as exc:
        log.emit("error", "inventory_unknown", str(exc), checkpoint_path=config["checkpoint_path"])
        return _finish(log, EXIT_INVENTORY_UNKNOWN, None)
    except UnsafeFileError as exc:
        log.emit("error", "action_failed", "checkpoint untouched or replaced whole: %s" % exc, checkpoint_path=config["checkpoint_path"])
        return _finish(log, EXIT_ACTION_FAILED, None)
    code = told[0] if told else _story(log, facts, result, report_only)
    return _finish(log, code, result)


def _story(log, facts, result, report_only):
    """Log what was found and done; returns the exit code."""
    status = result["status"]
    common = {"checkpoint_path": result["checkpoint_path"], "status": status}
    if result.get("recovered"):
        log.emit(
            "warning",
            "recovered",
            "%s what a killed run left: %s" % ("would undo" if report_only else "undid",
                                               ", ".join("%s %s" % (s["action"], s["path"]) for s in result["recovered"])),
            steps=result["recovered"],
            checkpoint_path=result["checkpoint_path"],
        )
    if status == rec.STATE_INVENTORY_UNKNOWN:
        log.emit("error", "inventory_unknown", result["msg"], reason=facts.get("reason"), **common)
        return EXIT_INVENTORY_UNKNOWN
    if status == rec.STATE_MISSING:
        log.emit("info", "checkpoint_missing", result["msg"], **common)
        return EXIT_OK
    log.emit(
        "info",
        "checkpoint_read",
        "read checkpoint: layout %s, checksum %s" % (result["layout"] or "unknown", "valid" if result["checksum_valid"] else "INVALID"),
        layout=result["layout"],
        checksum_valid=result["checksum_valid"],
        **common
    )
    if status == rec.STATE_CORRUPT:
        level = "warning" if result["action"] == "removed" else "error"
        log.emit(level, "checkpoint_corrupt", result["msg"], error=result["error"], action=result["action"], backup_path=result["backup_path"], **common)
        if result["action"] == "none":
            return EXIT_CORRUPT
        return _acted(log, result, report_only)
    log.emit("info", "registered_gpus", "find registered gpu: %s" % _ids_msg(result["registered_gpu_ids"]), registered=result["registered_gpu_ids"])
    log.emit("info", "pod_gpus", "find pod gpu: %s" % _ids_msg(result["pod_gpu_ids"]), pods=result["pod_gpu_ids"])
    if result["unrecognized"]:
        unrecognized = result["unrecognized"]
        log.emit("warning", "unrecognized_ids", "device IDs not mapped to a GPU (left alone): %s" % _ids_msg(unrecognized), unrecognized=unrecognized)
    if status == rec.STATE_UP_TO_DATE:
        log.emit("info", "up_to_date", "cached gpu info in checkpoint is up to date", **common)
        return EXIT_OK
    pods = sorted(set(p["pod_uid"] for p in result["affected_pods"]))
    log.emit(
        "warning",
        "stale",
        "cached gpu info in checkpoint is out of date: %s not on this node" % _ids_msg(result["stale"]),
        stale=result["stale"],
        affected_pods=pods,
        **common
    )
    return _acted(log, result, report_only)


def _acted(log, result, report_only):
    verb = "would be " if report_only else ""
    what = {"removed": "moved aside", "pruned": "pruned"}[result["action"]]
    log.emit(
        "info" if not report_only else "warning",
        "action",
        "checkpoint %s%s%s" % (verb, what, (" (backup %s)" % result["backup_path"]) if result["backup_path"] else ""),
        action=result["action"],
        applied=not report_only,
        backup_path=result["backup_path"],
        checkpoint_path=result["checkpoint_path"],
        strategy=result["strategy"],
        strategy_reason=result["strategy_reason"],
    )
    return EXIT_WOULD_CHANGE if report_only else EXIT_OK


def _finish(log, code, result):
    fields = {"exit_code": code, "elapsed_ms": log.elapsed_ms()}
    if result is not None:
        fields.update(status=result["status"], action=result["action"], changed=bool(result["changed"]), backup_path=result["backup_path"])
        fields["kubelet_restarted"] = _restarted(result)
    level = "info" if code in (EXIT_OK, EXIT_WOULD_CHANGE) else "error"
    log.emit(level, "finished", "check gpu finished", **fields)
    return code


def _dev_char_command(args, log, run):
    try:
        tool, result = devchar.ensure_links(run, args.dev_root, dry_run=args.dry_run, ctk=shutil.which("nvidia-ctk"))
    except devchar.DevCharError as exc:
        log.emit("error", "dev_char_failed", str(exc), rc=exc.rc)
        return EXIT_ACTION_FAILED
    level = "warning" if result["conflicts"] else "info"
    log.emit(
        level,
        "dev_char_symlinks",
        "%s /dev/char links for NVIDIA devices: %d %screated, %d present, %d conflicting"
        % (tool, len(result["created"]), "would be " if args.dry_run else "", len(result["present"]), len(result["conflicts"])),
        tool=tool,
        dry_run=args.dry_run,
        **result
    )
    return EXIT_OK


# the install spec and the code a DaemonSet form's pod reads from its ConfigMap (1 MiB at most)
INSTALL_SPEC_MAX = 1 << 20


def _mounted(path):
    """A ConfigMap volume's file (a symlink into ``..data/``, which kubelet swaps atomically) read whole."""
    found = nodefile.read(os.path.realpath(path), INSTALL_SPEC_MAX)
    if found is None:
        raise GpuopsError("%s is missing (the ConfigMap's key, mounted by the DaemonSet)" % path)
    return found.data


def install_spec(spec_path, spec_sha256):
    """The ``install`` verb's spec: install()'s own, checked link by link against the pod template.

    The spec's bytes must have ``spec_sha256`` (the pod template's, given on the command line: a ConfigMap edited
    apart from its DaemonSet is refused), its ``code.sha256`` must be a SHA-256, and the code's bytes read from
    ``code.source`` must have it. No systemd here (a pod cannot ask the host's): units are enabled by ``links``."""
    if not isinstance(spec_sha256, str) or not SHA256.match(spec_sha256):
        raise GpuopsError("--spec-sha256 must be the spec's SHA-256 (64 lowercase hex digits), got %r" % (spec_sha256,))
    raw = _mounted(spec_path)
    found = hashlib.sha256(raw).hexdigest()
    if found != spec_sha256:
        raise GpuopsError("%s has SHA-256 %s, the pod template says %s: the ConfigMap was changed apart from its DaemonSet; nothing "
                          "was installed. Run the checkpoint_guard role's daemonset entry point again" % (spec_path, found, spec_sha256))
    try:
        spec = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise GpuopsError("%s is not JSON: %s" % (spec_path, exc)) from exc
    if not isinstance(spec, dict) or not isinstance(spec.get("code"), dict):
        raise GpuopsError("%s: expected an object with code, directories, files, links, absent" % spec_path)
    install.check_entries(spec)
    code = spec["code"]
    if not isinstance(code.get("sha256"), str) or not SHA256.match(code["sha256"]):
        raise GpuopsError("%s: code.sha256 must be the code's SHA-256, got %r: nothing was installed" % (spec_path, code.get("sha256")))
    data = _mounted(code.get("source") or "")
    sha = hashlib.sha256(data).hexdigest()
    if sha != code["sha256"]:
        raise GpuopsError("%s has SHA-256 %s, the spec says %s: the ConfigMap was changed in between; run the rollout again"
                          % (code.get("source"), sha, code["sha256"]))
    return dict(spec, code={"path": code["path"], "mode": code.get("mode", "0644"), "sha256": sha, "data": data},
                systemd=False, selftest=None, units=[], dev_char_symlinks=False)


class _Stopped(Exception):
    """SIGTERM while ``gpuops wait`` runs (its pod deleted)."""


def _stop(signum, frame):
    raise _Stopped()


def _install_command(args, log):
    """``gpuops install --spec FILE``: the DaemonSet form's init container (gpuops.fleet.checkpoint_guard's ``daemonset``
    entry point). One line ``installed`` with the code's SHA-256 (what the rollout's log check reads), or
    ``install_failed`` naming what was refused (the init container's termination message)."""
    try:
        spec = install_spec(args.spec, args.spec_sha256)
        result = install.install(spec, run=None)
    except GpuopsError as exc:
        log.emit("error", "install_failed", "installing the guard failed: %s" % exc, spec=args.spec)
        return EXIT_ACTION_FAILED
    log.emit("info", "installed", "guard %s (code sha256 %s)" % ("installed" if result["changed"] else "up to date", spec["code"]["sha256"]),
             changed=result["changed"], code_sha256=spec["code"]["sha256"], spec_sha256=args.spec_sha256,
             written=[row["path"] for row in result["files"]], links=[row["path"] for row in result["links"]],
             removed=[row["path"] for row in result["removed"]], directories=[row["path"] for row in result["directories"]],
             filesystems=result["filesystems"])
    return EXIT_OK


def _wait_command(log, wait=signal.pause):
    """``gpuops wait``: the DaemonSet form's container, which keeps the pod Running once its init container installed
    the guard; SIGTERM (the pod deleted) ends it with 0 at once (a container's PID 1 has no default handler)."""
    signal.signal(signal.SIGTERM, _stop)
    try:
        while True:
            wait()
    except _Stopped:
        log.emit("info", "stopped", "stopped (SIGTERM)")
    return EXIT_OK


DEFAULT_TEXTFILE = "/var/lib/node_exporter/textfile_collector/gpuops.prom"


def _metrics_command(args, log):
    """``gpuops metrics``: GPU memory per pod into a node_exporter textfile (see _gpu_metrics)."""
    up, reason, samples = True, None, []
    try:
        if args.driver_root:
            inventory.load_root_nvml(args.driver_root)
        import pynvml  # pylint: disable=import-outside-toplevel
        samples = gpu_metrics.attribute(gpu_metrics.read_gpus(pynvml), args.root, args.node)
    except ImportError:
        up, reason = False, "the Python package nvidia-ml-py (module pynvml) is not installed"
    except GpuopsError as exc:
        up, reason = False, inventory.explain(str(exc))
    # the file is written either way: gpuops_metrics_up 0 with its reason is what an alert needs
    try:
        gpu_metrics.write_atomically(args.textfile, gpu_metrics.render(samples, up=up, reason=reason, node=args.node))
    except OSError as exc:
        log.emit("error", "metrics_write_failed", "writing %s failed: %s" % (args.textfile, exc), path=args.textfile)
        return EXIT_ACTION_FAILED
    pods = sorted(set(labels["pod_uid"] for metric, labels, value in samples if metric == "gpuops_pod_gpu_memory_used_bytes"))
    if not up:
        log.emit("error", "metrics_inventory_unknown", "GPU memory not read: %s (wrote gpuops_metrics_up 0 to %s)" % (reason, args.textfile),
                 path=args.textfile, reason=reason)
        return EXIT_INVENTORY_UNKNOWN
    log.emit("info", "metrics_written", "GPU memory of %d pod(s) on %d GPU(s) written to %s"
             % (len(pods), len([m for m, dummy, dummy2 in samples if m == "gpuops_gpu_memory_total_bytes"]), args.textfile),
             path=args.textfile, pods=pods)
    return EXIT_OK


def _parser():
    epilog = "exit codes:\n" + "\n".join("  %d  %s" % pair for pair in EXIT_CODES)
    parser = argparse.ArgumentParser(
        prog="gpuops",
        description="gpuops.fleet boot guard: keep kubelet's device checkpoint in line with the node's GPUs.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version="gpuops %s" % VERSION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, text in (("check", "repair a stale checkpoint (backup first)"), ("report", "read-only: say what check would do (exit 5 if it would act)")):
        cmd = sub.add_parser(name, help=text, description=text, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
        cmd.add_argument("--config", help="JSON settings file (default %s; missing means defaults)" % DEFAULT_CONFIG)
        if name == "check":
            cmd.add_argument(
                "--late",
                action="store_true",
                help="the late check after kubelet: wait up to late_wait_seconds for driver_ready_file and the GPUs, then check",
            )
    dev = sub.add_parser("dev-char-symlinks", help="create /dev/char links for NVIDIA devices (run before systemctl daemon-reload)")
    dev.add_argument("--dev-root", default="/dev", help=argparse.SUPPRESS)
    dev.add_argument("--dry-run", action="store_true", help="only say what would be created")
    ins = sub.add_parser("install", help="install the guard from a spec file, no systemd calls (the DaemonSet form's init container)")
    ins.add_argument("--spec", required=True, help="the install spec (JSON, from the checkpoint_guard role's daemonset entry point)")
    ins.add_argument("--spec-sha256", required=True, help="the spec's SHA-256, from the pod template: any other spec is refused")
    sub.add_parser("wait", help="do nothing until SIGTERM (the DaemonSet form's container, after its init container installed)")
    met = sub.add_parser("metrics", help="write GPU memory per pod (NVML processes, /proc/<pid>/cgroup) as a node_exporter textfile")
    met.add_argument("--textfile", default=DEFAULT_TEXTFILE, help="the .prom file to write atomically (default %s)" % DEFAULT_TEXTFILE)
    met.add_argument("--driver-root", help="load NVML from a containerized driver's root (GPU Operator: /run/nvidia/driver)")
    met.add_argument("--node", help="the Kubernetes node name, written as every series' node label")
    met.add_argument("--root", default="/", help=argparse.SUPPRESS)
    return parser


def main(argv=None, stdout=None, stderr=None, default_config=DEFAULT_CONFIG, run=None):
    """The gpuops command; returns the exit code. ``run(argv) -> (rc, stdout, stderr)`` runs the commands it needs
    (systemctl, systemd-run, nvidia-smi, nvidia-ctk): the entry point passes it (gpuops_main.py)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_OK if exc.code == 0 else EXIT_USAGE
    log = JsonLog(stdout)
    if args.command is None:
        parser.print_usage(stderr)
        return EXIT_USAGE
    if args.command == "metrics":
        return _metrics_command(args, log)
    if args.command == "install":
        return _install_command(args, log)
    if args.command == "wait":
        return _wait_command(log)
    if args.command == "dev-char-symlinks":
        try:
            return _dev_char_command(args, log, run)
        except OSError as exc:
            log.emit("error", "dev_char_failed", "creating /dev/char links failed: %s" % exc)
            return EXIT_ACTION_FAILED
    try:
        config = load_config(args.config or default_config, bool(args.config))
    except GpuopsError as exc:
        log.emit("error", "config_error", "configuration error: %s" % exc)
        return EXIT_USAGE
    try:
        return check(config, log, run, report_only=args.command == "report", late=getattr(args, "late", False))
    except Exception as exc:  # pylint: disable=broad-except
        # a bug: still one JSON line, so log pipelines keep the traceback with the record
        import traceback  # pylint: disable=import-outside-toplevel

        log.emit("error", "internal_error", "unexpected error: %s" % exc, traceback=traceback.format_exc())
        return EXIT_ERROR
