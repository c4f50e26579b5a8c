# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the node-side ``gpuops`` command (boot guard).

The ``checkpoint_guard`` role copies this collection's module_utils to the node and
installs ``/usr/local/bin/gpuops``, a three-line wrapper around ``main()``. The guard
runs the very code ``kubelet_checkpoint`` runs (``_gpu_inventory.gather`` and
``_reconcile.reconcile``), before kubelet at boot, and logs one JSON object per line
(``level``, ``msg``, ``time`` plus indexable fields) to stdout, i.e. the journal.

Commands::

    gpuops check              act: move aside (or prune) a stale checkpoint
    gpuops report             read-only: say what check would do
    gpuops dev-char-symlinks  create /dev/char links for NVIDIA devices (before daemon-reload)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import time

from ansible_collections.gpuops.fleet.plugins.module_utils import _device_ids as ids
from ansible_collections.gpuops.fleet.plugins.module_utils import _gpu_inventory as inventory
from ansible_collections.gpuops.fleet.plugins.module_utils import _nodefile as nodefile
from ansible_collections.gpuops.fleet.plugins.module_utils import _reconcile as rec
from ansible_collections.gpuops.fleet.plugins.module_utils._errors import GpuopsError, ParameterError, UnsafeFileError

VERSION = "1.0.0"
DEFAULT_CONFIG = "/etc/gpuops/gpuops.json"

# Exit codes (documented in the role README and `gpuops --help`).
EXIT_OK = 0  # up to date, no checkpoint, or repaired
EXIT_ERROR = 1  # unexpected error (a bug: please report the traceback)
EXIT_USAGE = 2  # bad command line or configuration file
EXIT_INVENTORY_UNKNOWN = 3  # GPUs could not be read: refused to touch the checkpoint
EXIT_CORRUPT = 4  # checkpoint corrupt and left in place (on_corrupt: report)
EXIT_WOULD_CHANGE = 5  # report mode only: check would change the checkpoint
EXIT_ACTION_FAILED = 6  # stale or corrupt, but the backup/removal/rewrite failed

EXIT_CODES = (
    (EXIT_OK, "checkpoint up to date, missing (kubelet writes a fresh one), or repaired"),
    (EXIT_ERROR, "unexpected error"),
    (EXIT_USAGE, "bad command line or configuration file"),
    (EXIT_INVENTORY_UNKNOWN, "GPU inventory unknown (driver not loaded, NVML error, zero GPUs): checkpoint left untouched"),
    (EXIT_CORRUPT, "checkpoint corrupt and left in place (on_corrupt: report)"),
    (EXIT_WOULD_CHANGE, "report only: check would change the checkpoint"),
    (EXIT_ACTION_FAILED, "stale or corrupt, but the backup, removal or rewrite failed (or kubelet wrote the file meanwhile)"),
)

# Settings of /etc/gpuops/gpuops.json and their defaults (checked by _check_field).
CONFIG_FIELDS = {
    "checkpoint_path": rec.DEFAULT_PATH,
    "backup_dir": rec.DEFAULT_BACKUP_DIR,
    "strategy": "remove",
    "on_corrupt": "report",
    "resources": list(ids.DEFAULT_GPU_RESOURCES),
    "backend": "auto",
    "nvidia_smi": None,
    "max_bytes": nodefile.DEFAULT_MAX_BYTES,
    "driver_wait_seconds": 0,
    "restart_kubelet": True,
    "kubelet_unit": "kubelet.service",
}


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_field(name, value):
    """Type and range checks the reconcile code does not do itself."""
    if name in ("checkpoint_path", "backup_dir", "strategy", "on_corrupt", "backend", "kubelet_unit"):
        if not isinstance(value, str) or not value:
            return "must be a non-empty string"
    if name == "backend" and value not in inventory.BACKENDS:
        return "%r is not one of %s" % (value, ", ".join(inventory.BACKENDS))
    if name == "nvidia_smi" and value is not None and (not isinstance(value, str) or not os.path.isabs(value)):
        return "must be null (search PATH) or an absolute path to nvidia-smi"
    if name == "resources" and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
        return "must be a list of resource names or patterns, e.g. [\"nvidia.com/gpu\"]"
    if name == "max_bytes" and (not _is_int(value) or value <= 0):
        return "must be a positive number of bytes"
    if name == "driver_wait_seconds" and (not _is_int(value) or not 0 <= value <= 600):
        return "must be a whole number of seconds from 0 to 600"
    if name == "restart_kubelet" and not isinstance(value, bool):
        return "must be true or false"
    return None


def parse_config(text, source):
    """Validated configuration from JSON ``text``; unknown or malformed fields raise ParameterError."""
    try:
        doc = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise ParameterError(source, "not valid JSON (%s)" % exc)
    if not isinstance(doc, dict):
        raise ParameterError(source, "must hold a JSON object of settings")
    unknown = sorted(set(doc) - set(CONFIG_FIELDS))
    if unknown:
        raise ParameterError(
            "%s: %s" % (source, unknown[0]), "unknown setting; known settings: %s" % ", ".join(sorted(CONFIG_FIELDS))
        )
    config = dict(CONFIG_FIELDS)
    config["resources"] = list(config["resources"])
    config.update(doc)
    for name in sorted(config):
        problem = _check_field(name, config[name])
        if problem:
            raise ParameterError("%s: %s" % (source, name), problem)
    try:
        rec.validate_options(config["strategy"], config["on_corrupt"], "skip", config["backup_dir"], config["checkpoint_path"], config["max_bytes"])
        ids.validate_resource_patterns(config["resources"])
    except ParameterError as exc:
        field = {"path": "checkpoint_path"}.get(exc.field, exc.field)
        raise ParameterError("%s: %s" % (source, field), exc.reason)
    return config


def load_config(path, explicit):
    """Read the configuration file; a missing default file means defaults, a missing explicit one is an error."""
    try:
        with open(path, "r") as handle:
            text = handle.read()
    except (IOError, OSError) as exc:
        if not explicit and getattr(exc, "errno", None) == 2:
            return parse_config("", path)
        raise ParameterError("--config", "cannot read %s: %s" % (path, exc.strerror or exc))
    return parse_config(text, path)


def rfc3339(now):
    """Local time with offset and milliseconds, e.g. 2026-11-21T14:41:17.031+08:00."""
    seconds, millis = divmod(int(round(now * 1000)), 1000)
    local = time.localtime(seconds)
    offset = local.tm_gmtoff or 0
    sign = "+" if offset >= 0 else "-"
    offset = abs(offset)
    return "%s.%03d%s%02d:%02d" % (
        time.strftime("%Y-%m-%dT%H:%M:%S", local),
        millis,
        sign,
        offset // 3600,
        (offset % 3600) // 60,
    )


class JsonLog(object):
    """One JSON object per line: level, msg, time, event, then structured fields."""

    def __init__(self, stream, clock=time.time):
        self.stream = stream
        self.clock = clock
        self.started = clock()

    def emit(self, level, event, msg, **fields):
        now = self.clock()
        record = {"level": level, "msg": msg, "time": rfc3339(now), "event": event}
        record.update(fields)
        self.stream.write(json.dumps(record, sort_keys=False, separators=(",", ":")) + "\n")
        self.stream.flush()

    def elapsed_ms(self):
        return int(round((self.clock() - self.started) * 1000))


def _run(argv):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def gather_gpus(config, log, run=_run, sleep=time.sleep, clock=time.monotonic):
    """GPU facts; waits up to ``driver_wait_seconds`` for a driver that is still coming up."""
    deadline = clock() + config["driver_wait_seconds"]
    announced = False
    while True:
        # looked up on every try: a driver installer may put nvidia-smi in place late
        facts = inventory.gather(run, config["backend"], inventory.find_nvidia_smi(config["nvidia_smi"]))
        if facts.get("available") or clock() >= deadline:
            return facts
        if not announced:
            log.emit(
                "info",
                "driver_wait",
                "GPUs not readable yet (%s); waiting up to %ds for the NVIDIA driver" % (facts.get("reason"), config["driver_wait_seconds"]),
                reason=facts.get("reason"),
            )
            announced = True
        sleep(1)


def _ids_msg(values):
    """The seed's style: a JSON list of IDs, or null."""
    flat = []
    for resource_ids in values.values():
        flat.extend(v for v in resource_ids if v not in flat)
    return json.dumps(flat) if flat else "null"


def _kubelet_active(config, run):
    rc, dummy, dummy2 = run(["systemctl", "is-active", "--quiet", config["kubelet_unit"]])
    return rc == 0


def _after_action(config, log, run, report_only):
    """kubelet keeps device state in memory: a running kubelet needs a restart to see the change."""
    if report_only or shutil.which("systemctl") is None or not _kubelet_active(config, run):
        return None
    unit = config["kubelet_unit"]
    if not config["restart_kubelet"]:
        log.emit("warning", "kubelet_running", "%s is running and keeps the old device state in memory: restart it" % unit, unit=unit)
        return False
    rc, dummy, err = run(["systemctl", "restart", "--no-block", unit])
    if rc != 0:
        log.emit("error", "kubelet_restart_failed", "restarting %s failed: %s" % (unit, err.strip()), unit=unit, rc=rc)
        return False
    log.emit("info", "kubelet_restarted", "%s was running: restart requested" % unit, unit=unit)
    return True


def check(config, log, report_only=False, run=_run, sleep=time.sleep, now=None):
    """The guard: returns an exit code; every step is logged."""
    mode = "report" if report_only else "check"
    log.emit("info", "start", "check gpu start (gpuops %s, %s mode)" % (VERSION, mode), mode=mode, version=VERSION, checkpoint_path=config["checkpoint_path"])
    facts = gather_gpus(config, log, run, sleep)
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
    try:
        result = rec.reconcile(
            facts,
            path=config["checkpoint_path"],
            strategy=config["strategy"],
            on_corrupt=config["on_corrupt"],
            unknown_inventory="skip",
            backup_dir=config["backup_dir"],
            resources=config["resources"],
            check_mode=report_only,
            max_bytes=config["max_bytes"],
            now=now,
        )
    except (UnsafeFileError, OSError) as exc:
        log.emit("error", "action_failed", "checkpoint left as it was: %s" % exc, checkpoint_path=config["checkpoint_path"])
        return _finish(log, EXIT_ACTION_FAILED, None)
    return _story(config, log, facts, result, report_only, run)


def _story(config, log, facts, result, report_only, run):
    status = result["status"]
    common = {"checkpoint_path": result["checkpoint_path"], "status": status}
    if status == rec.STATE_INVENTORY_UNKNOWN:
        log.emit("error", "inventory_unknown", result["msg"], reason=facts.get("reason"), **common)
        return _finish(log, EXIT_INVENTORY_UNKNOWN, result)
    if status == rec.STATE_MISSING:
        log.emit("info", "checkpoint_missing", result["msg"], **common)
        return _finish(log, EXIT_OK, result)
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
            return _finish(log, EXIT_CORRUPT, result)
        return _acted(config, log, result, report_only, run)
    log.emit("info", "registered_gpus", "find registered gpu: %s" % _ids_msg(result["registered_gpu_ids"]), registered=result["registered_gpu_ids"])
    log.emit("info", "pod_gpus", "find pod gpu: %s" % _ids_msg(result["pod_gpu_ids"]), pods=result["pod_gpu_ids"])
    if result["unrecognized"]:
        unrecognized = result["unrecognized"]
        log.emit("warning", "unrecognized_ids", "device IDs not mapped to a GPU (left alone): %s" % _ids_msg(unrecognized), unrecognized=unrecognized)
    if status == rec.STATE_UP_TO_DATE:
        log.emit("info", "up_to_date", "cached gpu info in checkpoint is up to date", **common)
        return _finish(log, EXIT_OK, result)
    pods = sorted(set(p["pod_uid"] for p in result["affected_pods"]))
    log.emit(
        "warning",
        "stale",
        "cached gpu info in checkpoint is out of date: %s not on this node" % _ids_msg(result["stale"]),
        stale=result["stale"],
        affected_pods=pods,
        **common
    )
    return _acted(config, log, result, report_only, run)


def _acted(config, log, result, report_only, run):
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
    )
    result["kubelet_restarted"] = _after_action(config, log, run, report_only)
    return _finish(log, EXIT_WOULD_CHANGE if report_only else EXIT_OK, result)


def _finish(log, code, result):
    fields = {"exit_code": code, "elapsed_ms": log.elapsed_ms()}
    if result is not None:
        fields.update(status=result["status"], action=result["action"], changed=bool(result["changed"]), backup_path=result["backup_path"])
        fields["kubelet_restarted"] = result.get("kubelet_restarted")
    level = "info" if code in (EXIT_OK, EXIT_WOULD_CHANGE) else "error"
    log.emit(level, "finished", "check gpu finished", **fields)
    return code


# /dev/char links: systemd resolves device cgroup rules through /dev/char/<major>:<minor>;
# without links for the NVIDIA nodes, `systemctl daemon-reload` makes running GPU
# containers lose their devices on systemd-cgroup nodes (nvidia-container-toolkit#251).


def nvidia_char_devices(dev_root="/dev"):
    """[(path, major, minor)] of the NVIDIA character devices under ``dev_root``."""
    found = []
    candidates = [os.path.join(dev_root, n) for n in os.listdir(dev_root) if n.startswith("nvidia")]
    caps = os.path.join(dev_root, "nvidia-caps")
    if os.path.isdir(caps) and not os.path.islink(caps):
        candidates.extend(os.path.join(caps, n) for n in os.listdir(caps))
    for path in sorted(candidates):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            found.append((path, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return found


def dev_char_symlinks(dev_root="/dev", dry_run=False):
    """Ensure /dev/char/<major>:<minor> -> the NVIDIA node; returns {created, present, conflicts}."""
    char_dir = os.path.join(dev_root, "char")
    out = {"created": [], "present": [], "conflicts": []}
    for path, major, minor in nvidia_char_devices(dev_root):
        link = os.path.join(char_dir, "%d:%d" % (major, minor))
        target = os.path.relpath(path, char_dir)
        if os.path.islink(link):
            if os.path.realpath(link) == os.path.realpath(path):
                out["present"].append(link)
            else:
                out["conflicts"].append("%s -> %s (expected %s)" % (link, os.readlink(link), target))
            continue
        if os.path.lexists(link):
            out["conflicts"].append("%s exists and is not a symlink" % link)
            continue
        if not dry_run:
            if not os.path.isdir(char_dir):
                os.makedirs(char_dir, 0o755)
            os.symlink(target, link)
        out["created"].append(link)
    return out


def _dev_char_command(args, log, run=_run):
    ctk = shutil.which("nvidia-ctk")
    before = dev_char_symlinks(args.dev_root, dry_run=True)
    if ctk and not args.dry_run and args.dev_root == "/dev":
        rc, out, err = run([ctk, "system", "create-dev-char-symlinks", "--create-all"])
        if rc != 0:
            log.emit("error", "dev_char_failed", "nvidia-ctk failed (rc %d): %s" % (rc, (err or out).strip()), rc=rc)
            return EXIT_ACTION_FAILED
        tool = "nvidia-ctk"
        after = dev_char_symlinks(args.dev_root, dry_run=True)
        created = sorted(set(after["present"]) - set(before["present"]))
        result = {"created": created, "present": before["present"], "conflicts": after["conflicts"]}
    else:
        tool = "gpuops"
        result = dev_char_symlinks(args.dev_root, dry_run=args.dry_run)
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
    dev = sub.add_parser("dev-char-symlinks", help="create /dev/char links for NVIDIA devices (run before systemctl daemon-reload)")
    dev.add_argument("--dev-root", default="/dev", help=argparse.SUPPRESS)
    dev.add_argument("--dry-run", action="store_true", help="only say what would be created")
    return parser


def main(argv=None, stdout=None, stderr=None, default_config=DEFAULT_CONFIG):
    """Entry point of /usr/local/bin/gpuops; returns the exit code."""
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
    if args.command == "dev-char-symlinks":
        try:
            return _dev_char_command(args, log)
        except OSError as exc:
            log.emit("error", "dev_char_failed", "creating /dev/char links failed: %s" % exc)
            return EXIT_ACTION_FAILED
    try:
        config = load_config(args.config or default_config, bool(args.config))
    except GpuopsError as exc:
        log.emit("error", "config_error", "configuration error: %s" % exc)
        return EXIT_USAGE
    try:
        return check(config, log, report_only=args.command == "report")
    except Exception as exc:  # pylint: disable=broad-except
        # a bug: still one JSON line, so log pipelines keep the traceback with the record
        import traceback  # pylint: disable=import-outside-toplevel

        log.emit("error", "internal_error", "unexpected error: %s" % exc, traceback=traceback.format_exc())
        return EXIT_ERROR
