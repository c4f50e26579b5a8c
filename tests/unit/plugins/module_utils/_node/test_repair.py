# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runtime repair order (stop kubelet, reconcile, start kubelet) against real files.

The fake systemd below models kubelet as kubelet's device manager behaves: while it runs it
writes its in-memory copy of the checkpoint (here: at every systemctl call, the harshest
schedule), and it reads the file only when it starts. A repair done under a running kubelet
is therefore undone, and the final file shows it.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec
from ansible_collections.gpuops.fleet.plugins.module_utils._node.guard import main as guard
from ansible_collections.gpuops.fleet.plugins.module_utils._node import nodefile
from ansible_collections.gpuops.fleet.plugins.module_utils._node import options as options_table
from ansible_collections.gpuops.fleet.plugins.module_utils._node import reconcile as rc
from ansible_collections.gpuops.fleet.plugins.module_utils._node import repair
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import InventoryError, KubeletControlError, KubeletRunningError, NodeFileError

NEW = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
OLD = "GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb"
FACTS = {"available": True, "reason": None, "count": 1, "gpus": [{"index": 0, "uuid": NEW}]}
E = codec.PodDevicesEntry
# a pod on a GPU that is gone and a running pod on the GPU that is still there: auto prunes
MIXED = codec.Checkpoint(
    "v2",
    [E("stale-pod", "c", "nvidia.com/gpu", {0: [OLD]}, b"old-env"), E("valid-pod", "c", "nvidia.com/gpu", {0: [NEW]}, b"keep-env")],
    {"nvidia.com/gpu": [OLD, NEW]},
)
UP_TO_DATE = codec.Checkpoint("v2", [E("valid-pod", "c", "nvidia.com/gpu", {0: [NEW]}, b"keep-env")], {"nvidia.com/gpu": [NEW]})


class FakeKubelet:
    """systemctl for one kubelet unit; a running kubelet writes its memory over the file at every call."""

    def __init__(self, path, state="active", fail=()):
        self.path = path
        self.state = state
        self.fail = set(fail)
        self.calls = []
        self.rescue_calls = []
        self.rescue_state = "inactive"
        self.memory = self._read() if state == "active" else None
        self.clock_value = 0.0

    def _read(self):
        with open(self.path, "rb") as handle:
            return handle.read()

    def clock(self):
        self.clock_value += 0.5
        return self.clock_value

    def __call__(self, argv):
        if argv[0].endswith("systemd-run") or any(a.startswith("gpuops-rescue-") for a in argv[1:]):
            return self.rescue(argv)
        self.calls.append(argv[1:])
        if self.state == "active":
            with open(self.path, "wb") as handle:
                handle.write(self.memory)
        verb = argv[1]
        if verb == "is-active":
            return (0 if self.state == "active" else 3), self.state + "\n", ""
        if verb in self.fail:
            return 1, "", "Job for kubelet.service failed"
        if verb == "stop":
            self.state, self.memory = "inactive", None
        elif verb == "start":
            self.state, self.memory = "active", self._read()
        return 0, "", ""

    def rescue(self, argv):
        """The rescue timer's calls (systemd-run, and systemctl on gpuops-rescue-*), kept apart from kubelet's."""
        self.rescue_calls.append(argv)
        if argv[0].endswith("systemd-run"):
            if "systemd-run" in self.fail:
                return 1, "", "Failed to start transient timer unit"
            self.rescue_state = "active"
            return 0, "", ""
        if argv[1] == "stop":
            self.rescue_state = "inactive"
            return 0, "", ""
        return (0 if self.rescue_state == "active" else 3), self.rescue_state + "\n", ""


def which(name, path=None):
    """The node's tools as the rescue looks them up (this machine's own are not used)."""
    return "/usr/bin/" + name


@pytest.fixture()
def node(tmp_path):
    plugins = tmp_path / "var/lib/kubelet/device-plugins"
    plugins.mkdir(parents=True)
    path = plugins / "kubelet_internal_checkpoint"
    options = options_table.validate_options(checkpoint_path=str(path), backup_dir=str(tmp_path / "backups"), lock_dir=str(tmp_path / "run"))

    def make(cp=MIXED, state="active", fail=(), restart=True):
        path.write_bytes(codec.encode(cp)[0])
        fake = FakeKubelet(str(path), state, fail)
        kubelet = repair.Kubelet("kubelet.service", restart=restart, run=fake, clock=fake.clock, which=which)
        return fake, kubelet

    make.path = path
    make.options = options
    return make


def entries(path):
    decoded = codec.decode(path.read_bytes())
    assert decoded.valid
    return [(e.pod_uid, e.device_ids, e.alloc_resp) for e in decoded.checkpoint.entries]


def test_running_kubelet_is_stopped_the_file_pruned_then_kubelet_started(node):
    fake, kubelet = node()
    events = []
    result = repair.repair(FACTS, node.options, kubelet, notify=lambda event, **f: events.append(event))
    assert fake.calls == [["is-active", "kubelet.service"], ["stop", "kubelet.service"], ["start", "kubelet.service"]]
    assert events == ["rescue_armed", "kubelet_stopping", "kubelet_stopped", "reconciled", "kubelet_started"]
    # the rescue: armed before the stop, waiting for this run's lock, then disarmed after our own start
    armed, stop_timer, stop_service = fake.rescue_calls
    assert armed == [
        "/usr/bin/systemd-run", "--unit=gpuops-rescue-kubelet", "--on-active=60s", "--timer-property=AccuracySec=1s",
        "--description=gpuops: start kubelet.service if the checkpoint repair that stopped it died", "--",
        "/usr/bin/sh", "-c", 'flock -w "$1" "$2" true; exec "$3" start --no-block "$4"', "gpuops-rescue",
        "300", nodefile.lock_path(node.options.lock_dir, node.options.checkpoint_path), "/usr/bin/systemctl", "kubelet.service",
    ]
    assert (stop_timer, stop_service) == (["systemctl", "stop", "gpuops-rescue-kubelet.timer"], ["systemctl", "stop", "gpuops-rescue-kubelet.service"])
    assert fake.rescue_state == "inactive" and result["kubelet"]["rescue_seconds"] == 60
    assert not os.path.exists(repair._mark_path(node.options))
    assert (result["action"], result["strategy"]) == ("pruned", "prune")
    assert result["kubelet"]["restarted"] and result["kubelet"]["state_before"] == "active"
    assert result["kubelet"]["down_seconds"] == 1.0 and result["kubelet"]["stop_seconds"] == 0.5
    # kubelet kept writing while it ran, yet the repair stands: it happened while kubelet was down,
    # and the restarted kubelet read the repaired file
    assert entries(node.path) == [("valid-pod", {0: [NEW]}, b"keep-env")]
    assert fake.state == "active" and codec.decode(fake.memory).checkpoint.registered == {"nvidia.com/gpu": [NEW]}


def test_no_rescue_no_stop_kubelet_and_the_file_untouched(node):
    # without a way to start kubelet again should this run die, kubelet is not stopped at all
    fake, kubelet = node(fail=["systemd-run"])
    before = node.path.read_bytes()
    with pytest.raises(KubeletControlError, match="arming the rescue timer .* failed .*kubelet was not stopped and the checkpoint was left alone"):
        repair.repair(FACTS, node.options, kubelet)
    assert fake.calls == [["is-active", "kubelet.service"]] and fake.state == "active"
    assert node.path.read_bytes() == before and not os.path.exists(repair._mark_path(node.options))


def test_a_rescue_that_fires_while_the_run_lives_waits_for_its_lock(tmp_path):
    # the real flock(1) against the run's own lock: the rescue's command does not get past
    # it while the run holds the lock, and goes on at once when the lock is free
    lock_dir, checkpoint = str(tmp_path / "run"), str(tmp_path / "cp")
    argv = _rescue_argv(lock_dir, checkpoint)
    shell_part = argv[argv.index("--") + 1:]
    shell_part[-2] = "echo"  # "systemctl" -> echo: prints "start --no-block kubelet.service"
    with nodefile.run_lock(lock_dir, checkpoint):
        proc = subprocess.Popen(shell_part, stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        assert proc.poll() is None, "the rescue went on while the run held its lock"
    out, dummy = proc.communicate(timeout=10)
    assert out.strip() == "start --no-block kubelet.service"


def _rescue_argv(lock_dir, checkpoint):
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, "", ""

    ok, dummy = repair.systemd.arm_rescue("kubelet.service", 5, nodefile.lock_path(lock_dir, checkpoint), run, shutil.which)
    assert ok
    return calls[0]


def test_the_next_run_starts_kubelet_that_a_killed_run_left_stopped(node):
    # what a run killed after stopping kubelet leaves: its mark, its armed rescue, kubelet down
    fake, kubelet = node(state="inactive")
    os.makedirs(node.options.lock_dir, exist_ok=True)
    repair._write_mark(repair._mark_path(node.options), "kubelet.service")
    fake.rescue_state = "active"
    events = []
    result = repair.repair(FACTS, node.options, kubelet, notify=lambda event, **f: events.append(event))
    assert result["action"] == "pruned" and result["kubelet"]["left_stopped_by_killed_run"]
    assert fake.state == "active" and result["kubelet"]["started"], "kubelet runs again, after the repair"
    assert fake.calls[-1] == ["start", "kubelet.service"] and events == ["kubelet_started"]
    assert fake.rescue_state == "inactive" and not os.path.exists(repair._mark_path(node.options))
    # nothing left to finish: the third run asks nobody
    fake.calls[:] = []
    again = repair.repair(FACTS, node.options, kubelet)
    assert not again["changed"] and fake.calls == [] and not again["kubelet"]["left_stopped_by_killed_run"]


def test_a_killed_run_on_a_healthy_checkpoint_still_gets_kubelet_started(node):
    fake, kubelet = node(UP_TO_DATE, state="inactive")
    os.makedirs(node.options.lock_dir, exist_ok=True)
    repair._write_mark(repair._mark_path(node.options), "kubelet.service")
    result = repair.repair(FACTS, node.options, kubelet)
    # the checkpoint needs nothing, but starting kubelet is a change
    assert result["action"] == "none" and result["changed"] and result["kubelet"]["started"] and fake.state == "active"
    assert not os.path.exists(repair._mark_path(node.options))


def test_the_old_order_loses_the_repair_to_a_running_kubelet(node):
    """What the role did before: reconcile under a running kubelet, restart afterwards."""
    fake, dummy = node()
    rc.reconcile(FACTS, node.options)
    fake(["systemctl", "restart", "kubelet.service"])  # kubelet writes its memory before it stops
    assert [pod for pod, dummy2, dummy3 in entries(node.path)] == ["stale-pod", "valid-pod"]


def test_nothing_to_change_never_asks_kubelet(node):
    fake, kubelet = node(UP_TO_DATE)
    result = repair.repair(FACTS, node.options, kubelet)
    assert fake.calls == [] and not result["changed"]
    assert result["kubelet"]["state_before"] is None and not result["kubelet"]["restarted"]


def test_stopped_kubelet_is_left_stopped(node):
    fake, kubelet = node(state="inactive")
    result = repair.repair(FACTS, node.options, kubelet)
    assert fake.calls == [["is-active", "kubelet.service"]]
    assert result["action"] == "pruned" and not result["kubelet"]["restarted"] and fake.state == "inactive"


@pytest.mark.parametrize("state", ["activating", "reloading", "deactivating"])
def test_a_kubelet_between_states_counts_as_running(node, state):
    fake, kubelet = node()
    fake.state = state
    fake.memory = node.path.read_bytes()
    result = repair.repair(FACTS, node.options, kubelet)
    assert [c[0] for c in fake.calls] == ["is-active", "stop", "start"] and result["kubelet"]["restarted"]


def test_check_mode_only_asks(node):
    fake, kubelet = node()
    before = node.path.read_bytes()
    result = repair.repair(FACTS, node.options, kubelet, check_mode=True)
    assert fake.calls == [["is-active", "kubelet.service"]]
    assert result["changed"] and result["kubelet"]["would_restart"] and not result["kubelet"]["restarted"]
    assert node.path.read_bytes() == before


def test_check_mode_with_nothing_to_change_never_asks_kubelet(node):
    # the role's read-only plan runs on every node at every run: a healthy node costs no systemctl call
    fake, kubelet = node(UP_TO_DATE)
    result = repair.repair(FACTS, node.options, kubelet, check_mode=True)
    assert fake.calls == [] and not result["changed"]
    assert result["kubelet"]["state_before"] is None and not result["kubelet"]["would_restart"]


def test_restart_not_allowed_refuses_and_touches_nothing(node):
    fake, kubelet = node(restart=False)
    before = node.path.read_bytes()
    with pytest.raises(KubeletRunningError, match="restart_kubelet is false") as caught:
        repair.repair(FACTS, node.options, kubelet)
    assert [c[0] for c in fake.calls] == ["is-active"] and node.path.read_bytes() == before
    assert caught.value.result["planned_action"] == "pruned" and not caught.value.result["changed"]


def test_failed_stop_leaves_the_file_and_kubelet_running(node):
    fake, kubelet = node(fail=["stop"])
    before = node.path.read_bytes()
    with pytest.raises(KubeletControlError, match="stopping kubelet.service failed .*left alone"):
        repair.repair(FACTS, node.options, kubelet)
    assert node.path.read_bytes() == before and fake.state == "active"


def test_a_failed_repair_still_starts_kubelet(node, monkeypatch):
    fake, kubelet = node()
    real = rc.reconcile

    def reconcile(facts, options, check_mode=False, **kw):
        if not check_mode:
            raise NodeFileError("writing backup", "/backups/x", OSError(28, "No space left on device"))
        return real(facts, options, check_mode=check_mode, **kw)

    monkeypatch.setattr(rc, "reconcile", reconcile)
    with pytest.raises(NodeFileError, match="ENOSPC"):
        repair.repair(FACTS, node.options, kubelet)
    assert [c[0] for c in fake.calls] == ["is-active", "stop", "start"] and fake.state == "active"


def test_a_failed_start_says_so_with_the_result(node):
    fake, kubelet = node(fail=["start"])
    with pytest.raises(KubeletControlError, match=r"starting kubelet.service again failed .*systemctl start kubelet.service") as caught:
        repair.repair(FACTS, node.options, kubelet)
    assert caught.value.result["action"] == "pruned" and fake.state == "inactive"
    assert entries(node.path) == [("valid-pod", {0: [NEW]}, b"keep-env")]


def test_no_kubelet_handling_is_a_plain_reconcile(node):
    node()
    result = repair.repair(FACTS, node.options, None)
    assert result["action"] == "pruned" and result["kubelet"]["unit"] is None


def _guard_config(node, **extra):
    settings = {"checkpoint_path": str(node.path), "backup_dir": node.options.backup_dir, "lock_dir": node.options.lock_dir}
    settings.update(extra)
    return guard.parse_config(json.dumps(settings), "test")


def _guard_run(node, fake, config, monkeypatch):
    monkeypatch.setattr(guard.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(guard.inventory, "gather", lambda *a, **k: dict(FACTS, backend="nvml"))
    out = io.StringIO()
    code = guard.check(config, guard.JsonLog(out), run=fake)
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def test_guard_logs_stop_repair_start_in_that_order(node, monkeypatch):
    fake, dummy = node()
    code, records = _guard_run(node, fake, _guard_config(node), monkeypatch)
    events = [r["event"] for r in records]
    assert code == guard.EXIT_OK
    assert events.index("kubelet_stopped") < events.index("stale") < events.index("action") < events.index("kubelet_started")
    assert ["stop", "kubelet.service"] in fake.calls and ["start", "--no-block", "kubelet.service"] in fake.calls
    assert records[-1]["kubelet_restarted"] is True and records[-1]["action"] == "pruned"


def test_guard_with_restart_kubelet_false_exits_8_and_touches_nothing(node, monkeypatch):
    fake, dummy = node()
    before = node.path.read_bytes()
    code, records = _guard_run(node, fake, _guard_config(node, restart_kubelet=False), monkeypatch)
    assert code == guard.EXIT_KUBELET_RUNNING == 8
    assert records[-2]["event"] == "kubelet_running" and records[-1]["kubelet_restarted"] is False
    assert node.path.read_bytes() == before


def test_guard_report_mode_only_asks_kubelet(node, monkeypatch):
    fake, dummy = node()
    monkeypatch.setattr(guard.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(guard.inventory, "gather", lambda *a, **k: dict(FACTS, backend="nvml"))
    code = guard.check(_guard_config(node), guard.JsonLog(io.StringIO()), report_only=True, run=fake)
    assert code == guard.EXIT_WOULD_CHANGE and [c[0] for c in fake.calls] == ["is-active"]


def _late_config(node, tmp_path, **extra):
    settings = dict(late_check=True, driver_ready_file=str(tmp_path / "validations/driver-ready"), late_wait_seconds=3, driver_wait_seconds=0)
    settings.update(extra)
    return _guard_config(node, **settings)


def test_early_check_defers_to_the_late_check_when_the_driver_is_not_up(node, monkeypatch, tmp_path):
    fake, dummy = node()
    before = node.path.read_bytes()
    monkeypatch.setattr(guard.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(guard.inventory, "gather", lambda *a, **k: guard.inventory.empty_facts("nvml", "NVIDIA driver is not loaded"))
    out = io.StringIO()
    code = guard.check(_late_config(node, tmp_path), guard.JsonLog(out), run=fake)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert code == guard.EXIT_OK and [r["event"] for r in records] == ["start", "deferred", "finished"]
    assert records[-1]["status"] == "deferred" and fake.calls == [] and node.path.read_bytes() == before


def test_late_check_waits_for_the_ready_file_then_repairs_in_the_runtime_order(node, monkeypatch, tmp_path):
    fake, dummy = node()
    ready = tmp_path / "validations/driver-ready"
    naps = []

    def sleep(seconds):  # the driver container comes up during the wait
        naps.append(seconds)
        if len(naps) == 2:
            ready.parent.mkdir()
            ready.write_text("")

    monkeypatch.setattr(guard.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(guard.inventory, "gather", lambda *a, **k: dict(FACTS, backend="nvml"))
    out = io.StringIO()
    code = guard.check(_late_config(node, tmp_path), guard.JsonLog(out), run=fake, sleep=sleep, late=True)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    events = [r["event"] for r in records]
    assert code == guard.EXIT_OK and len(naps) == 2
    assert events[:3] == ["start", "driver_wait", "gpus_found"] and "does not exist yet" in records[1]["msg"]
    assert events.index("kubelet_stopped") < events.index("action") < events.index("kubelet_started")
    assert records[-1]["kubelet_restarted"] is True and records[0]["mode"] == "late check"


def test_late_check_without_a_driver_ever_ends_with_exit_3_and_touches_nothing(node, monkeypatch, tmp_path):
    fake, dummy = node()
    before = node.path.read_bytes()
    monkeypatch.setattr(guard.shutil, "which", lambda name: "/usr/bin/" + name)
    out = io.StringIO()
    code = guard.check(_late_config(node, tmp_path, late_wait_seconds=0), guard.JsonLog(out), run=fake, late=True)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert code == guard.EXIT_INVENTORY_UNKNOWN and records[-2]["event"] == "inventory_unknown"
    assert "driver-ready does not exist yet" in records[-2]["msg"]
    assert fake.calls == [] and node.path.read_bytes() == before


@pytest.mark.parametrize(
    "settings, field",
    [({"driver_root": "run/nvidia/driver"}, "driver_root"), ({"late_wait_seconds": 7200}, "late_wait_seconds"), ({"late_check": "yes"}, "late_check")],
)
def test_bad_late_settings_name_the_field(settings, field):
    with pytest.raises(guard.GpuopsError, match=field):
        guard.parse_config(json.dumps(settings), "gpuops.json")


def test_another_machines_gpu_facts_are_refused_and_nothing_changes(node):
    # ansible-core 2.21.5 leaked one host's facts to every host after a run_once task (ansible/ansible#87148):
    # compared with this node's checkpoint, another node's GPUs would call its valid IDs stale
    fake, kubelet = node()
    before = node.path.read_bytes()
    foreign = dict(FACTS, node_id="0" * 32)
    with pytest.raises(InventoryError, match="read on another machine .*nothing was changed.*ansible/ansible#87148"):
        repair.repair(foreign, node.options, kubelet)
    assert fake.calls == [] and node.path.read_bytes() == before
    # this node's own facts (and facts without node_id, as written by hand) are used as before
    own = dict(FACTS, node_id=repair.inventory.node_identity())
    assert repair.repair(own, node.options, kubelet, check_mode=True)["action"] == "pruned"
    assert repair.repair(FACTS, node.options, kubelet, check_mode=True)["action"] == "pruned"


def test_the_node_identity_hides_the_machine_id(tmp_path):
    machine_id = tmp_path / "machine-id"
    machine_id.write_text("0123456789abcdef0123456789abcdef\n")
    first = repair.inventory.node_identity((str(machine_id),))
    assert len(first) == 32 and "0123456789abcdef" not in first
    assert repair.inventory.node_identity((str(tmp_path / "missing"), str(machine_id))) == first
    machine_id.write_text("fedcba9876543210fedcba9876543210\n")
    assert repair.inventory.node_identity((str(machine_id),)) != first


def test_beside_the_host_kubelet_is_the_host_s_and_the_rescue_names_host_paths(tmp_path, monkeypatch):
    """The node pod on a host without python3: the module's files under the host's root, every systemctl and
    systemd-run call run chrooted into it, and the rescue (run later by the host's systemd) names host paths only."""
    from ansible_collections.gpuops.fleet.plugins.module_utils._node import hostroot
    root = str(tmp_path / "host")
    (tmp_path / "host/var/lib/kubelet/device-plugins").mkdir(parents=True)
    monkeypatch.setenv(hostroot.ENV, root)
    options = options_table.validate_options(checkpoint_path="/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")
    hostroot.localize(options, options_table.PATH_OPTIONS)
    assert options.checkpoint_path == root + "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    assert options.lock_dir == root + nodefile.DEFAULT_LOCK_DIR and options.backup_dir.startswith(root + "/")
    with open(options.checkpoint_path, "wb") as handle:
        handle.write(codec.encode(MIXED)[0])
    fake = FakeKubelet(options.checkpoint_path)
    prefix = hostroot.argv([], base=root)

    def chrooted(argv):
        assert argv[:len(prefix)] == prefix, "a host program runs chrooted into the host: %r" % (argv,)
        return fake(argv[len(prefix):])
    kubelet = repair.Kubelet("kubelet.service", run=hostroot.runner(chrooted), clock=fake.clock,
                             which=lambda name, path=None: hostroot.which(name, path="/usr/bin", base=root) or "/usr/bin/" + name)
    result = hostroot.to_host(repair.repair(FACTS, options, kubelet))
    assert fake.calls == [["is-active", "kubelet.service"], ["stop", "kubelet.service"], ["start", "kubelet.service"]]
    armed = fake.rescue_calls[0]
    # the same lock name as the boot guard's and an SSH run's on that host (the checkpoint's host path, hashed)
    monkeypatch.delenv(hostroot.ENV)
    on_host = nodefile.lock_path(nodefile.DEFAULT_LOCK_DIR, "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")
    assert armed[-3:] == [on_host, "/usr/bin/systemctl", "kubelet.service"]
    assert not any(root in a for a in armed), "the host's systemd runs it: no path of the pod in it"
    assert os.path.exists(root + armed[-3]), "the lock the rescue waits for is the file this run locked"
    assert result["action"] == "pruned" and result["checkpoint_path"] == "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    assert result["backup_path"].startswith(options.backup_dir[len(root):] + "/") and os.path.exists(root + result["backup_path"])
    assert entries(tmp_path / "host/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint") == [("valid-pod", {0: [NEW]}, b"keep-env")]


def test_a_kubelet_no_systemctl_can_stop_is_never_repaired_under(node):
    """A host without systemd (Talos), reached beside it or otherwise: kubelet's process runs, nothing here can stop it."""
    fake, dummy = node()
    before = node.path.read_bytes()
    kubelet = repair.Kubelet.unmanaged("kubelet.service", 4242)
    plan = repair.repair(FACTS, node.options, kubelet, check_mode=True)
    assert plan["action"] == "pruned" and plan["kubelet"]["state_before"] == "running" and not plan["kubelet"]["would_restart"]
    with pytest.raises(KubeletRunningError, match=r"kubelet runs on this host \(pid 4242\) and no systemctl here can stop it .*left alone") as err:
        repair.repair(FACTS, node.options, kubelet)
    assert err.value.result["action"] == "none" and err.value.result["planned_action"] == "pruned"
    assert node.path.read_bytes() == before and fake.calls == [] and not os.path.exists(repair._mark_path(node.options))
    # nothing to change: kubelet is not even looked at
    node(cp=UP_TO_DATE)
    assert repair.repair(FACTS, node.options, kubelet)["action"] == "none"


@pytest.mark.parametrize("state", ["inactive", "active"], ids=["kubelet-down", "rescue-fired"])
def test_the_plan_reads_a_killed_run_s_mark_so_the_node_is_not_up_to_date(node, state):
    """Issue 32 item 10: a repair killed after it stopped kubelet and rewrote the file left its mark; the rerun's plan
    said up to date, the node never reached the repair step, and kubelet stayed down until the rescue timer fired.
    The plan now reads the mark: the node needs the repair step until kubelet runs and the mark and timer are gone."""
    fake, kubelet = node(UP_TO_DATE, state=state)
    os.makedirs(node.options.lock_dir, exist_ok=True)
    repair._write_mark(repair._mark_path(node.options), "kubelet.service")
    fake.rescue_state = "active"
    plan = repair.repair(FACTS, node.options, kubelet, check_mode=True)
    assert plan["action"] == "none" and plan["repair_needed"] is True and plan["changed"] is True
    assert plan["kubelet"]["left_stopped_by_killed_run"] and plan["kubelet"]["would_start"] is (state == "inactive")
    assert "an earlier run was killed while kubelet.service was stopped" in plan["msg"]
    assert os.path.exists(repair._mark_path(node.options)) and fake.state == state, "check mode changes nothing"
    done = repair.repair(FACTS, node.options, kubelet)
    assert fake.state == "active" and fake.rescue_state == "inactive" and not os.path.exists(repair._mark_path(node.options))
    assert done["repair_needed"] is False and done["kubelet"]["started"] is (state == "inactive")
    again = repair.repair(FACTS, node.options, kubelet, check_mode=True)
    assert again["repair_needed"] is False and not again["changed"]
