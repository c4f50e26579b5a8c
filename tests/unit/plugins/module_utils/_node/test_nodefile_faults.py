# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filesystem faults around a real reconcile: full disk, read-only directories,
dangling symlinks, loose permissions, concurrent runs, rotation.

After each fault the checkpoint is either untouched or replaced whole, no file with
a backup's name is partial, no temp file is left behind, and the error is one of
the collection's typed errors naming errno, operation and path.

Full disks and read-only mounts are real (tmpfs and a read-only bind mount) where
the test runs as root with mount rights, as on CI; elsewhere those cases are skipped
and the injected-ENOSPC case still runs.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import threading

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec
from ansible_collections.gpuops.fleet.plugins.module_utils._node import nodefile
from ansible_collections.gpuops.fleet.plugins.module_utils._node import options as options_table
from ansible_collections.gpuops.fleet.plugins.module_utils._node import reconcile as rc
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import (
    GpuopsError,
    LockBusyError,
    NodeFileError,
    UnsafeFileError,
)

NEW = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
OLD = "GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb"
FACTS = {"available": True, "reason": None, "count": 1, "gpus": [{"index": 0, "uuid": NEW}]}
E = codec.PodDevicesEntry
# about 43 KB, like the field report's disk-full case: bigger than the 8 KiB tmpfs
STALE = codec.Checkpoint(
    "v2",
    [E("pod-%03d" % i, "c", "nvidia.com/gpu", {0: [OLD if i % 2 else NEW]}, b"NVIDIA_VISIBLE_DEVICES=" + b"x" * 200) for i in range(120)],
    {"nvidia.com/gpu": [OLD, NEW]},
)


@pytest.fixture()
def node(tmp_path):
    plugins = tmp_path / "var/lib/kubelet/device-plugins"
    plugins.mkdir(parents=True)
    path = str(plugins / "kubelet_internal_checkpoint")
    data, dummy = codec.encode(STALE)
    with open(path, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o644)
    return {"path": path, "data": data, "root": tmp_path, "backup_dir": str(tmp_path / "var/lib/gpuops/backups"), "lock_dir": str(tmp_path / "run/gpuops")}


def run(node, strategy="remove", **kw):
    settings = {"checkpoint_path": node["path"], "backup_dir": node["backup_dir"], "lock_dir": node["lock_dir"], "strategy": strategy}
    settings.update(kw)
    return rc.reconcile(FACTS, options_table.validate_options(**settings))


def checkpoint_bytes(node):
    with open(node["path"], "rb") as handle:
        return handle.read()


def assert_no_debris(node, backup_dir=None):
    """No temp file next to the checkpoint, and no backup that is not the whole original."""
    assert os.listdir(os.path.dirname(node["path"])) == ["kubelet_internal_checkpoint"]
    backup_dir = backup_dir or node["backup_dir"]
    if os.path.isdir(backup_dir):
        for name in os.listdir(backup_dir):
            assert not name.startswith("."), "temp file left in backup_dir: %s" % name
            with open(os.path.join(backup_dir, name), "rb") as handle:
                assert handle.read() == node["data"], "partial backup %s" % name


def _mount(args):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs or a read-only bind needs root")
    proc = subprocess.run(["mount"] + args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip("mount not permitted here: %s" % proc.stderr.strip())


@pytest.fixture()
def mounts():
    done = []

    def mount(args, target):
        _mount(args)
        done.append(target)

    yield mount
    for target in reversed(done):
        subprocess.run(["umount", target], check=False)


@pytest.mark.parametrize("strategy", ["remove", "prune"])
def test_full_disk_leaves_no_partial_backup_and_the_checkpoint_untouched(node, mounts, strategy):
    os.makedirs(node["backup_dir"], 0o700)
    mounts(["-t", "tmpfs", "-o", "size=8k,mode=0700", "tmpfs", node["backup_dir"]], node["backup_dir"])
    with pytest.raises(NodeFileError) as err:
        run(node, strategy)
    assert err.value.errno == errno.ENOSPC
    assert str(err.value).startswith("ENOSPC writing backup %s/kubelet_internal_checkpoint." % node["backup_dir"])
    assert checkpoint_bytes(node) == node["data"]
    assert os.listdir(node["backup_dir"]) == []
    assert_no_debris(node)


def test_injected_enospc_mid_backup_is_cleaned_up(node, monkeypatch):
    real_write = os.write
    calls = []

    def write(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:8192]))  # a short write, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(nodefile.os, "write", write)
    with pytest.raises(NodeFileError, match="^ENOSPC writing backup "):
        run(node)
    monkeypatch.undo()
    assert checkpoint_bytes(node) == node["data"]
    assert os.listdir(node["backup_dir"]) == []
    assert_no_debris(node)


def test_new_backup_dir_on_a_read_only_filesystem(node, mounts):
    parent = str(node["root"] / "var/lib/gpuops")
    os.makedirs(parent)
    mounts(["--bind", parent, parent], parent)
    mounts(["-o", "remount,ro,bind", parent], parent)
    with pytest.raises(NodeFileError) as err:
        run(node)
    assert str(err.value).startswith("EROFS creating backup_dir %s" % node["backup_dir"])
    assert checkpoint_bytes(node) == node["data"]
    assert_no_debris(node)


@pytest.mark.parametrize("strategy", ["remove", "prune"])
def test_read_only_checkpoint_directory(node, mounts, strategy):
    plugins = os.path.dirname(node["path"])
    mounts(["--bind", plugins, plugins], plugins)
    mounts(["-o", "remount,ro,bind", plugins], plugins)
    with pytest.raises(NodeFileError) as err:
        run(node, strategy)
    assert err.value.errno == errno.EROFS
    assert plugins in str(err.value)
    assert checkpoint_bytes(node) == node["data"]
    assert not os.path.exists(node["backup_dir"]) or os.listdir(node["backup_dir"]) == []


def test_dangling_backup_dir_symlink_is_refused(node):
    os.makedirs(os.path.dirname(node["backup_dir"]))
    os.symlink(str(node["root"] / "nowhere"), node["backup_dir"])
    with pytest.raises(UnsafeFileError, match="dangling symlink"):
        run(node)
    assert checkpoint_bytes(node) == node["data"]
    with pytest.raises(UnsafeFileError, match="dangling symlink"):
        rc.reconcile(FACTS, options_table.validate_options(checkpoint_path=node["path"], backup_dir=node["backup_dir"], lock_dir=node["lock_dir"]),
                     check_mode=True)


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_backup_dir_writable_by_others_is_refused(node, mode):
    os.makedirs(node["backup_dir"])
    os.chmod(node["backup_dir"], mode)
    with pytest.raises(UnsafeFileError, match="group- or world-writable .*chmod 0700"):
        run(node)
    assert checkpoint_bytes(node) == node["data"]
    assert os.listdir(node["backup_dir"]) == []


def test_backups_are_private_whatever_the_checkpoint_mode(node):
    os.chmod(node["path"], 0o666)
    result = run(node)
    assert stat.S_IMODE(os.stat(result["backup_path"]).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(node["backup_dir"]).st_mode) == 0o700


def test_backups_are_rotated_to_the_newest_n(node):
    paths = []
    for dummy in range(5):
        with open(node["path"], "wb") as handle:
            handle.write(node["data"])
        paths.append(run(node, backup_keep=3)["backup_path"])
    assert sorted(os.path.join(node["backup_dir"], n) for n in os.listdir(node["backup_dir"])) == sorted(paths[-3:])
    with open(node["path"], "wb") as handle:
        handle.write(node["data"])
    kept_all = run(node, backup_keep=0)
    assert kept_all["backups_removed"] == []
    assert len(os.listdir(node["backup_dir"])) == 4


def test_a_held_lock_makes_the_second_run_wait_then_give_up(node):
    with nodefile.run_lock(node["lock_dir"], node["path"]), pytest.raises(LockBusyError, match="another run holds the lock"):
        run(node, lock_timeout=1)
    assert checkpoint_bytes(node) == node["data"]
    assert run(node)["changed"]


@pytest.mark.parametrize("strategy", ["remove", "prune"])
def test_two_runs_at_once_thirty_times_one_winner_one_backup(node, strategy):
    for trial in range(30):
        with open(node["path"], "wb") as handle:
            handle.write(node["data"])
        for name in os.listdir(node["backup_dir"]) if os.path.isdir(node["backup_dir"]) else ():
            os.unlink(os.path.join(node["backup_dir"], name))
        barrier = threading.Barrier(2)
        results, errors = [], []

        def one(barrier, results, errors):
            barrier.wait()
            try:
                results.append(run(node, strategy))
            except GpuopsError as exc:  # typed errors are acceptable verdicts; nothing else is
                errors.append(exc)
            except BaseException as exc:  # pylint: disable=broad-except
                errors.append(("untyped", exc))

        threads = [threading.Thread(target=one, args=(barrier, results, errors)) for dummy in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == [], "trial %d: %r" % (trial, errors)
        assert sorted(r["changed"] for r in results) == [False, True], "trial %d" % trial
        loser = [r for r in results if not r["changed"]][0]
        assert loser["status"] == ("missing" if strategy == "remove" else "up_to_date")
        assert len(os.listdir(node["backup_dir"])) == 1, "trial %d" % trial
        assert_no_debris_after_change(node, strategy)


def assert_no_debris_after_change(node, strategy):
    plugins = os.path.dirname(node["path"])
    assert os.listdir(plugins) == ([] if strategy == "remove" else ["kubelet_internal_checkpoint"])
    if strategy == "prune":
        assert codec.decode(checkpoint_bytes(node)).valid


def test_a_checkpoint_of_max_bytes_is_read_and_judged_one_byte_more_is_refused(node):
    # max_bytes keeps its meaning at the default 16 MiB: a file of exactly that size is
    # decoded and verified (linear time; benchmarks/bench.py prints the figures).
    limit = nodefile.DEFAULT_MAX_BYTES
    entry = STALE.entries[0]
    per_entry = len(codec.encode(codec.Checkpoint("v2", [entry] * 100, {}))[0]) // 100
    entries = [entry] * (limit // per_entry)
    data = codec.encode(codec.Checkpoint("v2", entries, {"nvidia.com/gpu": [NEW]}))[0]
    while len(data) > limit:
        entries = entries[: len(entries) - 1 - (len(data) - limit) // per_entry]
        data = codec.encode(codec.Checkpoint("v2", entries, {"nvidia.com/gpu": [NEW]}))[0]
    # pad with white space (JSON allows it) to exactly max_bytes
    data += b" " * (limit - len(data))
    assert len(data) == limit
    with open(node["path"], "wb") as handle:
        handle.write(data)
    options = options_table.validate_options(checkpoint_path=node["path"], backup_dir=node["backup_dir"], lock_dir=node["lock_dir"])
    result = rc.reconcile(FACTS, options, check_mode=True)
    assert result["status"] == "up_to_date" and result["checksum_valid"]
    with open(node["path"], "ab") as handle:
        handle.write(b" ")
    with pytest.raises(UnsafeFileError, match="over the %d-byte limit" % limit):
        run(node)


# --------------------------------------------------------------------------- what a killed run leaves


def _leftover(node, tag, data):
    path = os.path.join(os.path.dirname(node["path"]), ".kubelet_internal_checkpoint.gpuops-%s-4242-0a1b2c3d.tmp" % tag)
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def test_a_claim_left_by_a_killed_removal_is_put_back_and_the_removal_redone(node):
    # the state a removal killed between its claim and its unlink leaves: no checkpoint, the claim beside it
    claim = _leftover(node, "claim", node["data"])
    os.unlink(node["path"])
    settings = {"checkpoint_path": node["path"], "backup_dir": node["backup_dir"], "lock_dir": node["lock_dir"], "strategy": "remove"}
    planned = rc.reconcile(FACTS, options_table.validate_options(**settings), check_mode=True)
    assert [s["action"] for s in planned["recovered"]] == ["restored"] and planned["action"] == "removed"
    assert not os.path.exists(node["path"]) and os.path.exists(claim), "check mode put nothing back"
    result = run(node, "remove")
    assert result["recovered"] == [{"action": "restored", "path": claim, "backup_path": None}]
    assert result["action"] == "removed" and result["msg"].startswith("a run that was killed left files behind: put back the checkpoint")
    assert os.listdir(os.path.dirname(node["path"])) == []


def test_leftover_temp_files_are_removed_and_unique_bytes_rescued_first(node):
    new = _leftover(node, "new", b"half of a new file")
    same = _leftover(node, "claim", node["data"])
    os.makedirs(node["backup_dir"], 0o700)
    backup_tmp = os.path.join(node["backup_dir"], ".kubelet_internal_checkpoint.gpuops-backup-4242-0a1b2c3d.tmp")
    with open(backup_tmp, "wb") as handle:
        handle.write(b"partial")
    steps, restore_from = nodefile.recover(node["path"], node["backup_dir"])
    assert restore_from is None
    assert sorted((s["action"], s["path"]) for s in steps) == sorted([("removed", same), ("removed", new), ("removed", backup_tmp)])
    assert os.listdir(os.path.dirname(node["path"])) == ["kubelet_internal_checkpoint"] and os.listdir(node["backup_dir"]) == []
    # a claim whose bytes are neither the checkpoint's nor any backup's is saved before it goes
    unique = _leftover(node, "claim", b'{"Data":{},"Checksum":1}')
    (step,), dummy = nodefile.recover(node["path"], node["backup_dir"])
    assert step["action"] == "rescued" and step["path"] == unique
    with open(step["backup_path"], "rb") as handle:
        assert handle.read() == b'{"Data":{},"Checksum":1}'
    assert os.listdir(os.path.dirname(node["path"])) == ["kubelet_internal_checkpoint"]


def test_other_files_and_other_checkpoints_temp_files_are_not_touched(node):
    plugins = os.path.dirname(node["path"])
    names = ("nvidia-gpu.sock", ".other_checkpoint.gpuops-new-1-0a1b2c3d.tmp", ".kubelet_internal_checkpoint.gpuops-new-x.tmp")
    keep = [os.path.join(plugins, n) for n in names]
    for path in keep:
        with open(path, "wb") as handle:
            handle.write(b"x")
    steps, dummy = nodefile.recover(node["path"], node["backup_dir"])
    assert steps == [] and all(os.path.exists(p) for p in keep)
    assert not run(node, "prune", backup_keep=0)["recovered"]
