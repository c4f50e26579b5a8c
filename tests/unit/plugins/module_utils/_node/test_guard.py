# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node-side gpuops command: configuration, the JSON-line story, exit codes.

The command runs in a subprocess against the fake libnvidia-ml.so.1 under unmodified
pynvml, on a temp sysroot, with the field report's real checkpoint.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import fakenode
import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec
from ansible_collections.gpuops.fleet.plugins.module_utils._node import devchar
from ansible_collections.gpuops.fleet.plugins.module_utils._node.guard import main as guard
from ansible_collections.gpuops.fleet.plugins.module_utils._node import jsonlog
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))))
SEED = os.path.join(ROOT, "lab", "files", "seed_checkpoint.json")
GPUSHARE = os.path.join(ROOT, "lab", "files", "gpushare_checkpoint.json")
CORRUPT = os.path.join(ROOT, "lab", "files", "corrupt_checkpoint.json")
SEED_GPU = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
NEW_GPU = "GPU-68ce64fb-ea68-5ad6-7e72-31f3f07378df"
SHARE_KEPT = "GPU-1b7d2a3e-5c8f-4e61-9a0d-3f2c4b5a6d7e"
RUNNER = fakenode.GUARD_RUNNER


@pytest.fixture()
def node(tmp_path, fake_node):
    """Factory: a sysroot with a checkpoint and a config; returns a runner of `gpuops <cmd>`."""

    def make(gpus, checkpoint_src=SEED, checkpoint_bytes=None, init_error=0, **settings):
        cp = tmp_path / "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
        cp.parent.mkdir(parents=True)
        if checkpoint_bytes is not None:
            cp.write_bytes(checkpoint_bytes)
        elif checkpoint_src:
            cp.write_bytes(read(checkpoint_src))
        backups = tmp_path / "var/lib/gpuops/backups"
        config = {"checkpoint_path": str(cp), "backup_dir": str(backups), "lock_dir": str(tmp_path / "run/gpuops")}
        config.update(settings)
        cfg = tmp_path / "gpuops.json"
        cfg.write_text(json.dumps(config))
        env = fake_node([fakenode.gpu(u, minor=i, bus="00000000:00:%02x.0" % (7 + i)) for i, u in enumerate(gpus)], init_error=init_error)
        env["PATH"] = "/usr/bin:/bin"  # no systemctl games: the fake node has no kubelet unit

        def run(command="check", config_path=str(cfg)):
            code, records, dummy = fakenode.run_guard(command, config_path, env)
            return code, records

        run.checkpoint = cp
        run.backups = backups
        run.config = str(cfg)
        run.env = env
        return run

    return make


def read(path):
    with open(path, "rb") as handle:
        return handle.read()


def events(records):
    return [r["event"] for r in records]


def by_event(records, name):
    return [r for r in records if r["event"] == name][0]


def test_replaced_gpu_story_action_and_second_run(node):
    run = node([NEW_GPU])
    original = run.checkpoint.read_bytes()
    code, records = run()
    assert code == guard.EXIT_OK
    assert events(records) == ["start", "gpus_found", "checkpoint_read", "registered_gpus", "pod_gpus", "stale", "action", "finished"]
    for r in records:
        assert set(("level", "msg", "time", "event")) <= set(r)
        assert r["level"] in ("info", "warning", "error")
    assert by_event(records, "gpus_found")["gpus"] == [NEW_GPU]
    assert by_event(records, "registered_gpus")["msg"] == 'find registered gpu: ["%s"]' % SEED_GPU
    assert by_event(records, "pod_gpus")["msg"] == "find pod gpu: null"
    stale = by_event(records, "stale")
    assert stale["level"] == "warning" and stale["stale"] == {"nvidia.com/gpu": [SEED_GPU]}
    finished = records[-1]
    assert finished["action"] == "removed" and finished["changed"] is True and finished["exit_code"] == 0
    assert not run.checkpoint.exists()
    assert read(finished["backup_path"]) == original
    assert os.path.dirname(finished["backup_path"]) == str(run.backups)

    code, records = run()
    assert code == guard.EXIT_OK
    assert events(records) == ["start", "gpus_found", "checkpoint_missing", "finished"]
    assert records[-1]["changed"] is False
    assert len(os.listdir(str(run.backups))) == 1


def test_report_mode_changes_nothing_and_exits_5(node):
    run = node([NEW_GPU])
    original = run.checkpoint.read_bytes()
    code, records = run("report")
    assert code == guard.EXIT_WOULD_CHANGE
    action = by_event(records, "action")
    assert action["applied"] is False and action["backup_path"] is None
    assert run.checkpoint.read_bytes() == original
    assert not run.backups.exists()


def test_healthy_node_is_up_to_date_and_untouched(node):
    run = node([SEED_GPU])
    before = os.stat(str(run.checkpoint))
    code, records = run()
    assert code == guard.EXIT_OK
    assert events(records)[-2:] == ["up_to_date", "finished"]
    after = os.stat(str(run.checkpoint))
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_driver_not_loaded_refuses_and_waits_first(node):
    run = node([SEED_GPU], init_error=9, driver_wait_seconds=1)
    original = run.checkpoint.read_bytes()
    code, records = run()
    assert code == guard.EXIT_INVENTORY_UNKNOWN
    assert events(records) == ["start", "driver_wait", "inventory_unknown", "finished"]
    unknown = by_event(records, "inventory_unknown")
    assert unknown["level"] == "error" and "not loaded" in unknown["reason"]
    assert records[-1]["elapsed_ms"] >= 1000
    assert run.checkpoint.read_bytes() == original
    assert not run.backups.exists()


def test_zero_gpus_while_checkpoint_lists_some_is_unknown_inventory(node):
    run = node([])
    code, records = run()
    assert code == guard.EXIT_INVENTORY_UNKNOWN
    assert "zero GPUs seen" in by_event(records, "inventory_unknown")["msg"]
    assert run.checkpoint.exists()


@pytest.mark.parametrize("on_corrupt, code, action", [("report", guard.EXIT_CORRUPT, "none"), ("remove", guard.EXIT_OK, "removed")])
def test_corrupt_checkpoint(node, on_corrupt, code, action):
    data = read(CORRUPT)
    assert data == read(SEED)[:60]
    run = node([SEED_GPU], checkpoint_bytes=data, on_corrupt=on_corrupt)
    got, records = run()
    assert got == code
    corrupt = by_event(records, "checkpoint_corrupt")
    assert corrupt["action"] == action and "invalid JSON" in corrupt["error"]
    if action == "none":
        assert run.checkpoint.read_bytes() == data
    else:
        assert not run.checkpoint.exists()
        assert read(records[-1]["backup_path"]) == data


def test_gpushare_prune_keeps_the_other_gpu(node):
    run = node(["GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb", SHARE_KEPT], checkpoint_src=GPUSHARE, strategy="prune")
    code, records = run()
    assert code == guard.EXIT_OK
    assert by_event(records, "stale")["affected_pods"] == ["7a4f0d3c-2b1e-4c5d-8e9f-0a1b2c3d4e5f"]
    assert len(by_event(records, "stale")["stale"]["aliyun.com/gpu-mem"]) == 15
    decoded = codec.decode(run.checkpoint.read_bytes())
    assert decoded.valid
    assert [e.container_name for e in decoded.checkpoint.entries] == ["binpack-1"]
    assert decoded.checkpoint.registered["aliyun.com/gpu-mem"] == ["%s-_-%d" % (SHARE_KEPT, n) for n in range(15)]


def test_symlinked_checkpoint_is_refused_with_exit_6(node, tmp_path):
    run = node([NEW_GPU], checkpoint_src=None)
    target = tmp_path / "elsewhere"
    target.write_bytes(read(SEED))
    os.symlink(str(target), str(run.checkpoint))
    code, records = run()
    assert code == guard.EXIT_ACTION_FAILED
    assert by_event(records, "action_failed")["level"] == "error"
    assert target.read_bytes() == read(SEED)


@pytest.mark.parametrize(
    "raw, message",
    [
        (b'{"strategy": "nuke"}', "strategy: 'nuke' is not one of auto, remove, prune"),
        # not UTF-8: exit 2 and one clear line, not a traceback
        (b'{"strategy": "r\xe9move"}', "is not valid UTF-8"),
        (b"\xff\xfe{}", "is not valid UTF-8"),
        (b'{"backup_dir": "/var/\xc3"}', "is not valid UTF-8"),
        # a repeated key is refused, not a silent last-wins
        (b'{"strategy": "prune", "strategy": "remove"}', "strategy: appears more than once"),
    ],
)
def test_bad_config_file_is_exit_2_naming_file_and_field(node, tmp_path, raw, message):
    run = node([SEED_GPU])
    bad = tmp_path / "bad.json"
    bad.write_bytes(raw)
    code, records = run(config_path=str(bad))
    assert code == guard.EXIT_USAGE
    assert len(records) == 1 and records[0]["event"] == "config_error"
    assert "%s: %s" % (bad, message) in records[0]["msg"]


def test_missing_explicit_config_is_exit_2(node, tmp_path):
    run = node([SEED_GPU])
    code, records = run(config_path=str(tmp_path / "nope.json"))
    assert code == guard.EXIT_USAGE and "cannot read" in records[0]["msg"]


@pytest.mark.parametrize(
    "text, field",
    [
        ('{"stratgy": "remove"}', "stratgy"),
        ('{"resources": "nvidia.com/gpu"}', "resources"),
        ('{"max_bytes": true}', "max_bytes"),
        ('{"driver_wait_seconds": 601}', "driver_wait_seconds"),
        ('{"restart_kubelet": "yes"}', "restart_kubelet"),
        ('{"backend": "cuda"}', "backend"),
        ('{"nvidia_smi": "nvidia-smi"}', "nvidia_smi"),
        ('{"backup_dir": "relative/dir"}', "backup_dir"),
        ('{"checkpoint_path": "relative"}', "checkpoint_path"),
        ('{"resources": ["["]}', "resources"),
        ("[1]", None),
        ("{", None),
    ],
)
def test_parse_config_names_the_field(text, field):
    with pytest.raises(ParameterError) as info:
        guard.parse_config(text, "/etc/gpuops/gpuops.json")
    assert info.value.field == ("/etc/gpuops/gpuops.json: %s" % field if field else "/etc/gpuops/gpuops.json")


def test_parse_config_defaults_and_overrides():
    config = guard.parse_config("", "x")
    assert config["strategy"] == "auto" and config["on_corrupt"] == "report" and config["restart_kubelet"] is True
    assert guard.parse_config('{"strategy": "prune", "driver_wait_seconds": 5}', "x")["driver_wait_seconds"] == 5


def test_rfc3339_has_milliseconds_and_offset(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    import time

    time.tzset()
    try:
        assert jsonlog.rfc3339(1593326477.031) == "2020-06-28T14:41:17.031+08:00"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_usage_errors_are_exit_2():
    assert guard.main([], stdout=io.StringIO(), stderr=io.StringIO()) == guard.EXIT_USAGE
    assert guard.main(["frobnicate"], stdout=io.StringIO(), stderr=io.StringIO()) == guard.EXIT_USAGE


@pytest.fixture()
def devroot(tmp_path):
    """A /dev with real character device nodes (mknod needs root, which CI has)."""
    dev = tmp_path / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    try:
        for name, major, minor in (("nvidia0", 195, 0), ("nvidiactl", 195, 255), ("nvidia-uvm", 508, 0), ("nvidia-caps/nvidia-cap1", 511, 1)):
            os.mknod(str(dev / name), 0o600 | 0o020000, os.makedev(major, minor))
    except PermissionError:
        pytest.skip("mknod needs root")
    (dev / "nvidia-not-a-device").write_text("")
    return dev


def test_dev_char_symlinks_created_once_and_never_clobbered(devroot):
    plan = devchar.dev_char_symlinks(str(devroot), dry_run=True)
    assert sorted(os.path.basename(p) for p in plan["created"]) == ["195:0", "195:255", "508:0", "511:1"]
    assert not (devroot / "char").exists()
    first = devchar.dev_char_symlinks(str(devroot))
    assert first["created"] == plan["created"]
    assert os.readlink(str(devroot / "char" / "195:0")) == "../nvidia0"
    assert os.readlink(str(devroot / "char" / "511:1")) == "../nvidia-caps/nvidia-cap1"
    assert os.path.realpath(str(devroot / "char" / "508:0")) == str(devroot / "nvidia-uvm")
    second = devchar.dev_char_symlinks(str(devroot))
    assert second["created"] == [] and len(second["present"]) == 4
    os.unlink(str(devroot / "char" / "195:0"))
    os.symlink("../somewhere-else", str(devroot / "char" / "195:0"))
    third = devchar.dev_char_symlinks(str(devroot))
    assert third["created"] == [] and len(third["conflicts"]) == 1
    assert os.readlink(str(devroot / "char" / "195:0")) == "../somewhere-else"


def test_dev_char_command_logs_json(devroot, monkeypatch):
    monkeypatch.setattr(guard.shutil, "which", lambda name: None)
    out = io.StringIO()
    assert guard.main(["dev-char-symlinks", "--dev-root", str(devroot)], stdout=out) == guard.EXIT_OK
    record = json.loads(out.getvalue())
    assert record["tool"] == "gpuops" and len(record["created"]) == 4


# --------------------------------------------------------------------------- bad input (issue 9, section 3)

@pytest.mark.parametrize(
    "text, field",
    [
        ('{"max_bytes": "16777216"}', "max_bytes"),
        ('{"driver_wait_seconds": "0"}', "driver_wait_seconds"),
        ('{"kubelet_unit": "--help"}', "kubelet_unit"),
        ('{"kubelet_unit": "kubelet"}', "kubelet_unit"),
        ('{"kubelet_unit": "kubelet.service\\nExecStartPre=/bin/sh"}', "kubelet_unit"),
        ('{"backup_keep": -1}', "backup_keep"),
        ('{"lock_timeout": 0}', "lock_timeout"),
        ('{"lock_dir": "run/gpuops"}', "lock_dir"),
        ('{"strategy": "remove", "strategy": "prune"}', "strategy"),
        ('{"backup_dir": "/a", "Backup_dir": "/b", "backup_dir": "/c"}', "backup_dir"),
    ],
)
def test_parse_config_refuses_strings_for_numbers_bad_units_and_repeated_keys(text, field):
    with pytest.raises(ParameterError) as info:
        guard.parse_config(text, "/etc/gpuops/gpuops.json")
    assert info.value.field == "/etc/gpuops/gpuops.json: %s" % field


def _guard_with_stdout(run, how):
    """Run `gpuops check` with stdout closed, on a broken pipe, or on /dev/full; returns (rc, stderr)."""
    argv = [sys.executable, "-c", RUNNER, "check", "--config", run.config]
    if how == "closed":
        shell = ["/bin/sh", "-c", 'exec "$@" >&-', "sh"]
        proc = subprocess.run(shell + argv, env=run.env, stderr=subprocess.PIPE, timeout=60, check=False)
        return proc.returncode, proc.stderr.decode()
    if how == "full":
        with open("/dev/full", "w") as full:
            proc = subprocess.run(argv, env=run.env, stdout=full, stderr=subprocess.PIPE, timeout=60, check=False)
        return proc.returncode, proc.stderr.decode()
    proc = subprocess.Popen(argv, env=run.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # nobody reads: EPIPE on the first write
    with proc.stderr:
        err = proc.stderr.read().decode()
    return proc.wait(60), err


@pytest.mark.parametrize("how", ["closed", "broken_pipe", "full"])
def test_an_unwritable_log_changes_neither_decision_nor_exit_code(node, how):
    if how == "full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    run = node([NEW_GPU])
    code, err = _guard_with_stdout(run, how)
    assert code == guard.EXIT_OK
    assert "Traceback" not in err and "Exception ignored" not in err
    # the decision was carried out: the stale checkpoint was moved aside with a backup
    assert not run.checkpoint.exists()
    assert len(os.listdir(run.backups)) == 1


def test_a_held_lock_is_exit_7(node, tmp_path):
    from ansible_collections.gpuops.fleet.plugins.module_utils._node import nodefile

    run = node([NEW_GPU], lock_timeout=1)
    with nodefile.run_lock(str(tmp_path / "run/gpuops"), str(run.checkpoint)):
        code, records = run()
    assert code == guard.EXIT_LOCKED
    assert by_event(records, "locked")["msg"].startswith("another run holds the lock")
    assert run.checkpoint.read_bytes() == read(SEED)
