# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Planner tables and reconcile() against real files in a temp sysroot."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec
from ansible_collections.gpuops.fleet.plugins.module_utils._node import device_ids as ids
from ansible_collections.gpuops.fleet.plugins.module_utils._node import nodefile
from ansible_collections.gpuops.fleet.plugins.module_utils._node import options as options_table
from ansible_collections.gpuops.fleet.plugins.module_utils._node import reconcile as rc
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ChangedWhileWorkingError, InventoryError, ParameterError, UnsafeFileError

NEW = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
OLD = "GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb"
OTHER = "GPU-383cd6a5-00a6-b455-62c4-c163d164b837"
FACTS = {"available": True, "reason": None, "count": 2, "gpus": [{"index": 0, "uuid": NEW}, {"index": 1, "uuid": OTHER}]}
E = codec.PodDevicesEntry


def checkpoint(entries, registered, layout="v2"):
    return codec.Checkpoint(layout, entries, registered)


@pytest.mark.parametrize(
    "entries, registered, stale, affected",
    [
        ([], {"nvidia.com/gpu": [NEW, OTHER]}, {}, []),
        ([], {"nvidia.com/gpu": [OLD, OTHER]}, {"nvidia.com/gpu": [OLD]}, []),
        (
            [E("p1", "app", "nvidia.com/gpu", {0: [OLD]}), E("p2", "app", "nvidia.com/gpu", {1: [OTHER]})],
            {"nvidia.com/gpu": [NEW, OTHER]},
            {"nvidia.com/gpu": [OLD]},
            ["p1"],
        ),
        (
            [E("p1", "c", "aliyun.com/gpu-mem", {0: [OLD + "-_-0", OLD + "-_-1"]}), E("p2", "c", "aliyun.com/gpu-mem", {0: [NEW + "-_-2"]})],
            {"aliyun.com/gpu-mem": [NEW + "-_-%d" % i for i in range(4)]},
            {"aliyun.com/gpu-mem": [OLD + "-_-0", OLD + "-_-1"]},
            ["p1"],
        ),
        ([E("p1", "c", "nvidia.com/gpu", {0: [OLD + "::1"]})], {"nvidia.com/gpu": [NEW + "::0", NEW + "::1"]}, {"nvidia.com/gpu": [OLD + "::1"]}, ["p1"]),
        ([E("p1", "c", "rdma/hca", {0: ["mlx5_0"]})], {"rdma/hca": ["mlx5_0", OLD]}, {}, []),
        ([E("p1", "c", "nvidia.com/gpu", ["2"])], {"nvidia.com/gpu": ["0", "1", "2"]}, {"nvidia.com/gpu": ["2"]}, ["p1"]),
        ([E("p1", "c", "nvidia.com/gpu", None)], None, {}, []),
    ],
)
def test_plan(entries, registered, stale, affected):
    the_plan = rc.plan(checkpoint(entries, registered), ids.inventory_from_facts(FACTS), ids.DEFAULT_GPU_RESOURCES)
    assert the_plan.stale == stale
    assert [a["pod_uid"] for a in the_plan.affected] == affected


def test_plan_reports_unrecognized_without_calling_them_stale():
    the_plan = rc.plan(checkpoint([], {"nvidia.com/gpu": ["tegra", NEW]}), ids.inventory_from_facts(FACTS), ids.DEFAULT_GPU_RESOURCES)
    assert not the_plan.is_stale
    assert the_plan.unrecognized == {"nvidia.com/gpu": ["tegra"]}


def test_prune_keeps_every_other_entry_and_resource():
    cp = checkpoint(
        [E("p1", "a", "nvidia.com/gpu", {0: [OLD]}, b"s"), E("p2", "a", "nvidia.com/gpu", {1: [OTHER]}, b"t"), E("p3", "a", "rdma/hca", {0: ["mlx5_0"]}, None)],
        {"nvidia.com/gpu": [OLD, OTHER], "rdma/hca": ["mlx5_0"], "example.com/empty": None},
    )
    the_plan = rc.plan(cp, ids.inventory_from_facts(FACTS), ids.DEFAULT_GPU_RESOURCES)
    pruned = rc.prune(cp, the_plan)
    assert [e.pod_uid for e in pruned.entries] == ["p2", "p3"]
    assert pruned.entries[0].alloc_resp == b"t"
    assert pruned.registered == {"nvidia.com/gpu": [OTHER], "rdma/hca": ["mlx5_0"], "example.com/empty": None}
    data, dummy = codec.encode(pruned)
    assert codec.decode(data).valid


# --------------------------------------------------------------------------- files


@pytest.fixture()
def sysroot(tmp_path):
    plugins = tmp_path / "var/lib/kubelet/device-plugins"
    plugins.mkdir(parents=True)
    return {
        "path": str(plugins / "kubelet_internal_checkpoint"),
        "backup_dir": str(tmp_path / "var/lib/gpuops/backups"),
        "lock_dir": str(tmp_path / "run/gpuops"),
    }


def write(path, cp, mode=0o644):
    data, dummy = codec.encode(cp)
    with open(path, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)
    return data


STALE_CP = checkpoint(
    [E("300f47eb-e5c3-4d0b-9a87-925837b67732", "app-3g-v1", "nvidia.com/gpu", {0: [OLD]}, b"secret-env"), E("p2", "c", "rdma/hca", {0: ["mlx5_0"]}, None)],
    {"nvidia.com/gpu": [OLD], "rdma/hca": ["mlx5_0"]},
)


def options(sysroot, **kw):
    settings = {"checkpoint_path": sysroot["path"], "backup_dir": sysroot["backup_dir"], "lock_dir": sysroot["lock_dir"]}
    settings.update(kw)
    return options_table.validate_options(**settings)


def run(sysroot, facts=None, check_mode=False, diff=False, **kw):
    return rc.reconcile(FACTS if facts is None else facts, options(sysroot, **kw), check_mode=check_mode, diff=diff, now=1795723200.5)


def test_remove_moves_aside_with_backup_then_is_idempotent(sysroot):
    original = write(sysroot["path"], STALE_CP)
    result = run(sysroot, strategy="remove")
    assert result["changed"] and result["action"] == "removed" and result["status"] == "stale"
    assert result["stale"] == {"nvidia.com/gpu": [OLD]}
    assert [p["pod_uid"] for p in result["affected_pods"]] == ["300f47eb-e5c3-4d0b-9a87-925837b67732"]
    assert not os.path.exists(sysroot["path"])
    assert os.path.basename(result["backup_path"]) == "kubelet_internal_checkpoint.20261126T200000.500000Z"
    with open(result["backup_path"], "rb") as handle:
        assert handle.read() == original
    assert stat.S_IMODE(os.stat(sysroot["backup_dir"]).st_mode) == 0o700
    again = run(sysroot, strategy="remove")
    assert not again["changed"] and again["status"] == "missing"


def test_check_mode_changes_nothing_and_reports_the_same_plan(sysroot):
    original = write(sysroot["path"], STALE_CP)
    for strategy in ("remove", "prune"):
        result = run(sysroot, strategy=strategy, check_mode=True)
        assert result["changed"] and result["backup_path"] is None
        with open(sysroot["path"], "rb") as handle:
            assert handle.read() == original
    assert not os.path.exists(sysroot["backup_dir"])


def test_prune_rewrites_atomically_keeping_mode_and_other_resources(sysroot):
    write(sysroot["path"], STALE_CP, mode=0o600)
    result = run(sysroot, strategy="prune", diff=True)
    assert result["changed"] and result["action"] == "pruned"
    nf = nodefile.read(sysroot["path"])
    assert stat.S_IMODE(nf.st.st_mode) == 0o600
    decoded = codec.decode(nf.data)
    assert decoded.valid
    assert decoded.checkpoint.registered == {"nvidia.com/gpu": [], "rdma/hca": ["mlx5_0"]}
    assert [e.pod_uid for e in decoded.checkpoint.entries] == ["p2"]
    assert sorted(os.listdir(os.path.dirname(sysroot["path"]))) == ["kubelet_internal_checkpoint"]
    assert "secret-env" not in result["diff"]["before"] and "<redacted: 10 bytes>" in result["diff"]["before"]
    again = run(sysroot, strategy="prune")
    assert not again["changed"] and again["status"] == "up_to_date"


def test_up_to_date_touches_nothing(sysroot):
    cp = checkpoint([E("p", "c", "nvidia.com/gpu", {0: [NEW]})], {"nvidia.com/gpu": [NEW, OTHER]})
    write(sysroot["path"], cp)
    before = os.stat(sysroot["path"])
    result = run(sysroot)
    assert (result["changed"], result["status"], result["action"]) == (False, "up_to_date", "none")
    assert os.stat(sysroot["path"]).st_mtime_ns == before.st_mtime_ns


@pytest.mark.parametrize(
    "facts, reason",
    [
        ({"available": False, "reason": "NVIDIA driver is not loaded (NVML: Driver Not Loaded)", "gpus": []}, "Driver Not Loaded"),
        ({"available": True, "reason": None, "gpus": []}, "zero GPUs seen while the checkpoint lists 2 GPU device IDs"),
    ],
)
def test_unknown_inventory_never_acts(sysroot, facts, reason):
    original = write(sysroot["path"], STALE_CP)
    with pytest.raises(InventoryError) as err:
        run(sysroot, facts=facts)
    assert reason in str(err.value)
    skipped = run(sysroot, facts=facts, unknown_inventory="skip")
    assert (skipped["changed"], skipped["action"], skipped["status"]) == (False, "skipped", "inventory_unknown")
    with open(sysroot["path"], "rb") as handle:
        assert handle.read() == original


def test_zero_gpus_with_no_gpu_ids_is_fine(sysroot):
    write(sysroot["path"], checkpoint([], {"rdma/hca": ["mlx5_0"]}))
    result = run(sysroot, facts={"available": True, "gpus": []})
    assert result["status"] == "up_to_date"


def test_corrupt_is_reported_then_removed_only_when_asked(sysroot):
    with open(sysroot["path"], "wb") as handle:
        handle.write(b'{"Data":{"RegisteredDevices":{"nvidia.com/gpu":["' + OLD.encode() + b'"]}},"Checksum":1}')
    reported = run(sysroot)
    assert (reported["changed"], reported["status"], reported["action"]) == (False, "corrupt", "none")
    assert "checksum mismatch" in reported["error"]
    assert os.path.exists(sysroot["path"])
    removed = run(sysroot, on_corrupt="remove")
    assert removed["changed"] and removed["action"] == "removed" and os.path.exists(removed["backup_path"])
    assert not os.path.exists(sysroot["path"])


def test_symlink_is_refused(sysroot, tmp_path):
    real = tmp_path / "elsewhere"
    write(str(real), STALE_CP)
    os.symlink(str(real), sysroot["path"])
    with pytest.raises(UnsafeFileError, match="symlink"):
        run(sysroot)
    info = rc.describe(sysroot["path"])
    assert info["exists"] and "symlink" in info["error"]


def test_oversized_file_is_refused(sysroot):
    write(sysroot["path"], STALE_CP)
    with pytest.raises(UnsafeFileError, match="over the 64-byte limit"):
        run(sysroot, max_bytes=64)


def kubelet_write(path, data):
    """kubelet's own write: a temp file in the directory, renamed over the checkpoint."""
    tmp = path + ".kubelet-tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
    REAL_RENAME(tmp, path)


REAL_RENAME = os.rename
NEWER = b'{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":1}'


@pytest.mark.parametrize("strategy", ["remove", "prune"])
def test_kubelet_write_just_before_the_claim_is_put_back_nothing_lost(sysroot, monkeypatch, strategy):
    # The exact window: after the last look at the file, before our claim of it (a rename for
    # remove, a hard link for prune).
    write(sysroot["path"], STALE_CP)
    real_link = os.link

    def rename(src, dst):
        if src == sysroot["path"]:
            kubelet_write(sysroot["path"], NEWER)
        return REAL_RENAME(src, dst)

    def link(src, dst):
        if src == sysroot["path"]:
            kubelet_write(sysroot["path"], NEWER)
        return real_link(src, dst)

    monkeypatch.setattr(nodefile.os, "rename", rename)
    monkeypatch.setattr(nodefile.os, "link", link)
    with pytest.raises(ChangedWhileWorkingError, match="changed while we worked .*(put back|left as kubelet wrote it), nothing lost"):
        run(sysroot, strategy=strategy)
    monkeypatch.undo()
    with open(sysroot["path"], "rb") as handle:
        assert handle.read() == NEWER
    assert sorted(os.listdir(os.path.dirname(sysroot["path"]))) == ["kubelet_internal_checkpoint"]
    assert not os.path.exists(sysroot["backup_dir"]) or os.listdir(sysroot["backup_dir"]) == []


@pytest.mark.parametrize("strategy", ["remove", "prune"])
def test_kubelet_write_after_the_backup_before_the_claim_changes_nothing(sysroot, monkeypatch, strategy):
    # the backup is written first now: a kubelet write right after it is found at the claim
    write(sysroot["path"], STALE_CP)

    def hook(step):
        if step == "backup_written":
            kubelet_write(sysroot["path"], NEWER)

    monkeypatch.setattr(nodefile, "STEP_HOOK", hook)
    with pytest.raises(ChangedWhileWorkingError, match="changed while we worked .*nothing lost"):
        run(sysroot, strategy=strategy)
    with open(sysroot["path"], "rb") as handle:
        assert handle.read() == NEWER
    assert sorted(os.listdir(os.path.dirname(sysroot["path"]))) == ["kubelet_internal_checkpoint"]
    assert os.listdir(sysroot["backup_dir"]) == [], "a backup of bytes that were not changed is not kept"


@pytest.mark.parametrize("strategy", ["remove", "prune"])
def test_kubelet_write_after_the_claim_wins_and_our_backup_holds_what_we_read(sysroot, monkeypatch, strategy):
    # the narrowest window: the file is claimed and compared, the swap (prune) or the unlink
    # (remove) comes next; RENAME_EXCHANGE hands kubelet's file back to it
    original = write(sysroot["path"], STALE_CP)

    def hook(step):
        if step == "claimed":
            kubelet_write(sysroot["path"], NEWER)

    monkeypatch.setattr(nodefile, "STEP_HOOK", hook)
    if strategy == "prune":
        with pytest.raises(ChangedWhileWorkingError, match="written by kubelet while we worked: kept kubelet's file, nothing lost"):
            run(sysroot, strategy=strategy)
    else:
        # removing our claimed copy cannot touch kubelet's new file
        assert run(sysroot, strategy=strategy)["action"] == "removed"
    with open(sysroot["path"], "rb") as handle:
        assert handle.read() == NEWER
    assert sorted(os.listdir(os.path.dirname(sysroot["path"]))) == ["kubelet_internal_checkpoint"]
    (backup,) = os.listdir(sysroot["backup_dir"])
    with open(os.path.join(sysroot["backup_dir"], backup), "rb") as handle:
        assert handle.read() == original


def test_kubelet_writing_twice_during_the_swap_keeps_its_newest_file(sysroot, monkeypatch):
    write(sysroot["path"], STALE_CP)
    newest = NEWER.replace(b"1}", b"2}")

    def hook(step):
        if step == "claimed":
            kubelet_write(sysroot["path"], NEWER)
        elif step == "swapped":
            kubelet_write(sysroot["path"], newest)  # over our swapped-in file

    monkeypatch.setattr(nodefile, "STEP_HOOK", hook)
    with pytest.raises(ChangedWhileWorkingError, match="kept kubelet's file"):
        run(sysroot, strategy="prune")
    with open(sysroot["path"], "rb") as handle:
        assert handle.read() == newest
    assert sorted(os.listdir(os.path.dirname(sysroot["path"]))) == ["kubelet_internal_checkpoint"]


def test_without_rename_exchange_the_swap_is_a_rename(sysroot, monkeypatch):
    # a C library or filesystem without renameat2(RENAME_EXCHANGE): the claim-and-compare
    # still guards the change, the swap is a plain atomic rename
    write(sysroot["path"], STALE_CP)
    monkeypatch.setattr(nodefile, "_exchange", lambda a, b: False)
    result = run(sysroot, strategy="prune")
    assert result["action"] == "pruned"
    with open(sysroot["path"], "rb") as handle:
        assert codec.decode(handle.read()).valid
    assert sorted(os.listdir(os.path.dirname(sysroot["path"]))) == ["kubelet_internal_checkpoint"]


def test_rename_exchange_is_used_here(sysroot):
    # this machine's glibc and filesystem swap atomically: the tests above exercise that path
    a, b = os.path.join(os.path.dirname(sysroot["path"]), "a"), os.path.join(os.path.dirname(sysroot["path"]), "b")
    for name, text in ((a, b"A"), (b, b"B")):
        with open(name, "wb") as handle:
            handle.write(text)
    assert nodefile._exchange(a, b)
    with open(a, "rb") as handle:
        assert handle.read() == b"B"


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"strategy": "delete"}, "strategy"),
        ({"on_corrupt": "ignore"}, "on_corrupt"),
        ({"unknown_inventory": "go"}, "unknown_inventory"),
        ({"max_bytes": 0}, "max_bytes"),
        ({"resources": []}, "resources"),
        ({"facts": {"available": "yes", "gpus": []}}, "gpus.available"),
        ({"facts": {"gpus": []}}, "gpus"),
    ],
)
def test_bad_parameters_name_the_field(sysroot, kwargs, field):
    with pytest.raises(ParameterError) as err:
        run(sysroot, **kwargs)
    assert err.value.field == field


def test_backup_dir_inside_device_plugins_is_refused(sysroot):
    with pytest.raises(ParameterError) as err:
        rc.reconcile(FACTS, options(sysroot, backup_dir=os.path.dirname(sysroot["path"])))
    assert err.value.field == "backup_dir"
    with pytest.raises(ParameterError) as err:
        rc.reconcile(FACTS, options(sysroot, checkpoint_path="relative/checkpoint"))
    assert err.value.field == "checkpoint_path"
    # anywhere in the checkpoint's directory tree, also through a symlink into it
    with pytest.raises(ParameterError) as err:
        options(sysroot, backup_dir=os.path.join(os.path.dirname(sysroot["path"]), "gpuops", "backups"))
    assert err.value.field == "backup_dir"
    link = os.path.join(os.path.dirname(sysroot["lock_dir"]), "into-plugins")
    os.makedirs(os.path.dirname(link))
    os.symlink(os.path.dirname(sysroot["path"]), link)
    with pytest.raises(ParameterError) as err:
        options(sysroot, backup_dir=os.path.join(link, "b"))
    assert err.value.field == "backup_dir"


def test_describe_reports_missing_corrupt_and_v2(sysroot):
    missing = rc.describe(sysroot["path"])
    assert (missing["exists"], missing["layout"], missing["stored_checksum"]) == (False, None, None)
    write(sysroot["path"], STALE_CP)
    info = rc.describe(sysroot["path"])
    assert info["layout"] == "v2" and info["checksum_valid"] and info["error"] is None
    assert info["stored_checksum"] == info["computed_checksum"]
    assert info["registered_devices"] == {"nvidia.com/gpu": [OLD], "rdma/hca": ["mlx5_0"]}
    assert info["pod_device_entries"][0] == {
        "pod_uid": "300f47eb-e5c3-4d0b-9a87-925837b67732",
        "container_name": "app-3g-v1",
        "resource_name": "nvidia.com/gpu",
        "device_ids": [OLD],
        "numa_nodes": {"0": [OLD]},
        "alloc_envs": None,  # b"secret-env" is not a ContainerAllocateResponse
    }
    with open(sysroot["path"], "wb") as handle:
        handle.write(b"{not json")
    bad = rc.describe(sysroot["path"])
    assert bad["exists"] and bad["layout"] is None and not bad["checksum_valid"] and "invalid JSON" in bad["error"]


def test_backup_name_takes_seconds_and_fraction_from_one_clock_reading(monkeypatch):
    readings = iter([1795723200.999999, 1795723201.000001])
    monkeypatch.setattr(nodefile.time, "time", lambda: next(readings))
    assert nodefile.backup_name("/x/kubelet_internal_checkpoint") == "kubelet_internal_checkpoint.20261126T200000.999999Z"


def test_diff_only_when_asked_and_unchanged_outcomes_diff_equal(sysroot):
    original = write(sysroot["path"], STALE_CP)
    assert "diff" not in run(sysroot, check_mode=True)
    removed = run(sysroot, strategy="remove", check_mode=True, diff=True)["diff"]
    assert removed["after"] == "" and OLD in removed["before"]
    skipped = run(sysroot, facts={"available": False, "reason": "driver down", "gpus": []}, unknown_inventory="skip", diff=True)
    assert skipped["diff"]["before"] == skipped["diff"]["after"] != ""
    with open(sysroot["path"], "wb") as handle:
        handle.write(b"{not json")
    corrupt = run(sysroot, diff=True)
    assert corrupt["diff"] == {"before": "<undecodable checkpoint, 9 bytes>\n", "after": "<undecodable checkpoint, 9 bytes>\n"}
    with open(sysroot["path"], "wb") as handle:
        handle.write(original)


# --------------------------------------------------------------------------- strategy auto (issue 10)

BLOG_GPUS = ["GPU-77a702db-e37f-3a74-d46d-c5713f66058c", "GPU-9b341c59-f96b-ba85-c137-78c3652fea65", "GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]
BLOG_POD = "513cb897-0262-4868-826f-aa943ee45a38"


def _fixture(name):
    with open(os.path.join(os.path.dirname(__file__), "fixtures", "checkpoints", name), "rb") as handle:
        return codec.decode(handle.read()).checkpoint


def _facts(uuids):
    return {"available": True, "gpus": [{"index": i, "uuid": u} for i, u in enumerate(uuids)]}


@pytest.mark.parametrize(
    "cp, gpus, expected, kept_pods",
    [
        # real kubelet file, 3 GPUs, one pod on GPU 0: GPU 2 replaced -> the pod's GPU is still there: prune keeps it
        (_fixture("blog_3gpu_numa0.json"), BLOG_GPUS[:2] + [OTHER], "prune", [BLOG_POD]),
        # the same file, GPU 0 (the pod's) replaced -> nothing valid to keep: remove
        (_fixture("blog_3gpu_numa0.json"), [OTHER] + BLOG_GPUS[1:], "remove", []),
        # the field report's file: no pod entries at all -> remove, as GPUOps did
        (_fixture("seed_000_v1_no_entries.json"), [OTHER], "remove", []),
        # all stale
        (
            checkpoint(
                [E("p1", "c", "nvidia.com/gpu", {0: [OLD]}, None), E("p2", "c", "aliyun.com/gpu-mem", {0: [OLD + "-_-1"]}, None)],
                {"nvidia.com/gpu": [OLD]},
            ),
            [NEW], "remove", [],
        ),
        # mixed: one pod on a stale GPU, one on a valid GPU
        (checkpoint([E("p1", "c", "nvidia.com/gpu", {0: [OLD]}, None), E("p2", "c", "nvidia.com/gpu", {0: [NEW]}, None)], {"nvidia.com/gpu": [OLD, NEW]}),
         [NEW], "prune", ["p2"]),
        # a pod holding a stale and a valid GPU is stale as a whole: nothing valid to keep
        (checkpoint([E("p1", "c", "nvidia.com/gpu", {0: [OLD, NEW]}, None)], {"nvidia.com/gpu": [OLD, NEW]}), [NEW], "remove", []),
        # a pod on a non-GPU resource (RDMA) must keep its allocation: prune
        (checkpoint([E("p1", "c", "nvidia.com/gpu", {0: [OLD]}, None), E("p3", "c", "rdma/hca", {0: ["mlx5_0"]}, None)], {"nvidia.com/gpu": [OLD]}),
         [NEW], "prune", ["p3"]),
        # only registrations are stale, a time-sliced replica of the valid GPU is in use: prune
        (checkpoint([E("p4", "c", "nvidia.com/gpu", {0: [NEW + "::3"]}, None)], {"nvidia.com/gpu": [OLD + "::0", NEW + "::3"]}), [NEW], "prune", ["p4"]),
    ],
)
def test_auto_prunes_when_any_pod_entry_keeps_valid_devices_else_removes(cp, gpus, expected, kept_pods):
    the_plan = rc.plan(cp, ids.inventory_from_facts(_facts(gpus)), ids.DEFAULT_GPU_RESOURCES)
    assert the_plan.is_stale
    strategy, reason = rc.choose_strategy(cp, the_plan, "auto")
    assert strategy == expected
    assert reason.startswith("auto: ")
    for pod in kept_pods:
        assert pod in reason
    # an explicit strategy is never second-guessed
    assert rc.choose_strategy(cp, the_plan, "remove")[0] == "remove"
    assert rc.choose_strategy(cp, the_plan, "prune")[0] == "prune"


def test_auto_on_disk_reports_the_choice_and_keeps_the_valid_pod(sysroot):
    entries = [E("p1", "c", "nvidia.com/gpu", {0: [OLD]}, b"s"), E("p2", "c", "nvidia.com/gpu", {1: [OTHER]}, b"t")]
    write(sysroot["path"], checkpoint(entries, {"nvidia.com/gpu": [OLD, OTHER]}))
    result = run(sysroot)
    assert (result["strategy"], result["action"]) == ("prune", "pruned")
    assert "p2" in result["strategy_reason"]
    with open(sysroot["path"], "rb") as handle:
        kept = codec.decode(handle.read())
    assert kept.valid and [e.pod_uid for e in kept.checkpoint.entries] == ["p2"]
    up_to_date = run(sysroot)
    assert up_to_date["status"] == "up_to_date" and up_to_date["strategy"] is None


def test_a_retired_resource_is_stale_whatever_gpu_it_names(sysroot):
    # the node was switched to shared GPU memory: its nvidia.com/gpu registrations name a GPU it still has
    cp = checkpoint(
        [E("whole", "c", "nvidia.com/gpu", {0: [NEW]}, None), E("shared", "c", "aliyun.com/gpu-mem", {0: [NEW + "-_-0", NEW + "-_-1"]}, None)],
        {"nvidia.com/gpu": [NEW, OTHER], "aliyun.com/gpu-mem": [NEW + "-_-%d" % i for i in range(4)]},
    )
    write(sysroot["path"], cp)
    assert run(sysroot)["status"] == "up_to_date"  # without it, nothing is stale
    result = run(sysroot, retired_resources=["nvidia.com/gpu"])
    assert result["action"] == "pruned" and result["stale"] == {"nvidia.com/gpu": [NEW, OTHER]}
    assert [p["pod_uid"] for p in result["affected_pods"]] == ["whole"]
    decoded = codec.decode(nodefile.read(sysroot["path"]).data).checkpoint
    assert decoded.registered == {"nvidia.com/gpu": [], "aliyun.com/gpu-mem": [NEW + "-_-%d" % i for i in range(4)]}
    assert [e.pod_uid for e in decoded.entries] == ["shared"]
    assert not run(sysroot, retired_resources=["nvidia.com/gpu"])["changed"]


@pytest.mark.parametrize("bad", [["nvidia.com/*"], ["gpu"], "nvidia.com/gpu"])
def test_retired_resources_are_exact_names(sysroot, bad):
    with pytest.raises(ParameterError) as err:
        options(sysroot, retired_resources=bad)
    assert err.value.field == "retired_resources"


@pytest.mark.parametrize("path, max_bytes, field", [
    ("", 1024, "checkpoint_path"), ("relative/kubelet_internal_checkpoint", 1024, "checkpoint_path"),
    ("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", 0, "max_bytes"),
    ("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", -5, "max_bytes"),
])
def test_describe_refuses_an_empty_path_and_a_size_limit_that_is_not_positive(path, max_bytes, field):
    # kubelet_checkpoint_info's options: an empty path or max_bytes <= 0 reported every file as missing or refused
    with pytest.raises(ParameterError) as err:
        rc.describe(path, max_bytes)
    assert err.value.field == field
