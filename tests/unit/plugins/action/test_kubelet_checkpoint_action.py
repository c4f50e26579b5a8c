# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubelet_checkpoint's action plugin: ``settings`` merged under the task's own options, bad settings named."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuops.fleet.plugins.action.kubelet_checkpoint import merged_args


def test_settings_go_under_the_tasks_own_options():
    args, error = merged_args({"settings": {"strategy": "prune", "kubelet_unit": "kubelet.service", "backup_keep": 3},
                               "kubelet_unit": "", "gpus": {"available": True}})
    assert error is None
    assert args == {"strategy": "prune", "kubelet_unit": "", "backup_keep": 3, "gpus": {"available": True}}


def test_without_settings_the_arguments_are_the_tasks():
    assert merged_args({"strategy": "remove"}) == ({"strategy": "remove"}, None)
    assert merged_args({"settings": None, "strategy": "remove"}) == ({"strategy": "remove"}, None)


@pytest.mark.parametrize("settings, named", [
    ("strategy=prune", "settings: give a mapping"),
    (["strategy"], "settings: give a mapping"),
    ({"_ansible_check_mode": False}, "'_ansible_check_mode' is not an option"),
    ({"settings": {}}, "'settings' is not an option"),
    ({"": 1}, "'' is not an option"),
])
def test_bad_settings_are_refused_by_name(settings, named):
    args, error = merged_args({"settings": settings})
    assert args is None and named in error, error


# install_guard (issue 36): the plan and the guard's install in one task. The module calls are recorded with the
# task's check mode at the time of each call (what ActionBase._update_module_args turns into _ansible_check_mode).

GUARD = {"code": {"path": "/usr/local/lib/gpuops/gpuops.pyz"}, "units": [{"name": "gpuops.service", "enabled": True}]}


class _Task:
    def __init__(self, args, check_mode=False, async_val=0):
        self.args, self.check_mode, self.async_val = args, check_mode, async_val


class _Shell:
    tmpdir = None

    @staticmethod
    def quote(text):
        return "'%s'" % text


class _Connection:
    has_native_async = False
    _shell = _Shell()


def _action(args, replies, check_mode=False, async_val=0):
    """kubelet_checkpoint's ActionModule with its node calls recorded: ``replies`` maps a module name to the results it
    gives, in turn."""
    from ansible_collections.gpuops.fleet.plugins.action import kubelet_checkpoint as action_mod

    action = action_mod.ActionModule.__new__(action_mod.ActionModule)
    action._task, action._connection, action.calls, action.commands = _Task(args, check_mode, async_val), _Connection(), [], []
    # the node's temporary directories as ansible-core makes and removes them: a module call makes one where none is
    # (pipelining off: mkdir on the node), _remove_tmp_path removes it (rm on the node)
    shell = action._connection._shell = _Shell()
    action.tmpdirs, action.removed = [], []

    def execute(module_name, module_args, task_vars=None, wrap_async=False):
        if shell.tmpdir is None:
            shell.tmpdir = "/root/.ansible/tmp/ansible-tmp-%d" % (len(set(action.tmpdirs)) + 1)
        action.tmpdirs.append(shell.tmpdir)
        action.calls.append((module_name, action._task.check_mode, dict(module_args)))
        reply = replies[module_name].pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return dict(reply)

    def remove(path):
        if path:
            action.removed.append(path)
            shell.tmpdir = None

    def command(cmd, **kwargs):
        action.commands.append(cmd)
        return {"stdout": ""}

    action._execute_module, action._low_level_execute_command = execute, command
    action._remove_tmp_path = remove
    return action


def _run(action, monkeypatch):
    from ansible.plugins.action import ActionBase

    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    return action.run(task_vars={})


def _reading(needed, **extra):
    from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_install as guard_install

    stamp = guard_install.fingerprint(guard_install.request(GUARD)[0])
    return dict({"needed": needed, "error": None, "fingerprint": stamp, "changed": needed, "files": [], "units": [],
                 "selftest_owed": False, "left_alone": []}, **extra)


def test_install_guard_plans_in_check_mode_and_a_guard_in_place_gets_no_second_call(monkeypatch):
    # the module's own guard result has no fingerprint: the action adds it (here the stamp is already right)
    plan = {"changed": True, "repair_needed": True, "diff": {"before": "a", "after": "b"}, "guard": _reading(False)}
    action = _action({"guard": GUARD, "install_guard": True, "strategy": "prune"}, {"gpuops.fleet.kubelet_checkpoint": [plan]})
    result = _run(action, monkeypatch)
    # one call, the plan's, in check mode although the task is not: the checkpoint is never changed here
    assert [(name, check) for name, check, dummy in action.calls] == [("gpuops.fleet.kubelet_checkpoint", True)]
    assert "install_guard" not in action.calls[0][2] and action.calls[0][2]["guard"]["code"]["sha256"]
    assert action._task.check_mode is False, "the task's own mode is restored"
    # changed is the install's (none); the plan's would-be change is repair_needed, and its diff is not this task's
    assert result["changed"] is False and result["repair_needed"] is True and "diff" not in result
    assert result["guard_install"]["planned"] is True and result["guard_install"]["changed"] is False
    assert not action.commands


def test_install_guard_installs_outside_check_mode_where_the_plan_found_work(monkeypatch):
    plan = {"changed": False, "repair_needed": False, "guard": _reading(True, files=[{"path": GUARD["code"]["path"]}])}
    installed = {"changed": True, "files": [{"path": GUARD["code"]["path"]}], "selftest": {"rc": 0}, "diff": [{"after": "x"}],
                 "_ansible_parsed": True}
    action = _action({"guard": GUARD, "install_guard": True},
                     {"gpuops.fleet.kubelet_checkpoint": [plan], "gpuops.fleet.guard_install": [installed]})
    from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_install as guard_install

    builds = []
    real_build = guard_install.built
    monkeypatch.setattr(guard_install, "built", lambda: builds.append(1) or real_build())
    result = _run(action, monkeypatch)
    assert len(builds) == 1, "the code is asked for once per task: the plan's SHA-256 and the install's bytes come from one build"
    calls = [(name, check) for name, check, dummy in action.calls]
    assert calls == [("gpuops.fleet.kubelet_checkpoint", True), ("gpuops.fleet.guard_install", False)]
    # the plan read the code's file as different: its bytes go, with no sha256sum first
    assert action.calls[1][2]["code"]["data"] and not action.commands
    assert result["changed"] is True and result["guard_install"]["planned"] is False and result["guard_install"]["code"]["sent"]
    assert result["diff"] == [{"after": "x"}]
    assert not [k for k in result["guard_install"] if k.startswith("_ansible")], "ansible-core's own keys stay out of the nested result"


def test_the_plan_and_the_install_share_one_temporary_directory_on_the_node(monkeypatch):
    # issue 62: the install's module goes where the plan's went; one mkdir and one rm on the node for both calls
    plan = {"changed": False, "repair_needed": False, "guard": _reading(True, files=[{"path": GUARD["code"]["path"]}])}
    action = _action({"guard": GUARD, "install_guard": True},
                     {"gpuops.fleet.kubelet_checkpoint": [plan], "gpuops.fleet.guard_install": [{"changed": True}]})
    assert _run(action, monkeypatch)["changed"] is True
    assert [name for name, dummy, dummy2 in action.calls] == ["gpuops.fleet.kubelet_checkpoint", "gpuops.fleet.guard_install"]
    assert action.tmpdirs == ["/root/.ansible/tmp/ansible-tmp-1"] * 2 and action.removed == ["/root/.ansible/tmp/ansible-tmp-1"]
    assert action._connection._shell.tmpdir is None


@pytest.mark.parametrize("replies", [
    # no install call (the plan read the guard in place), the plan failing, the install raising, the plan raising
    {"gpuops.fleet.kubelet_checkpoint": [{"changed": False, "repair_needed": False, "guard": _reading(False)}]},
    {"gpuops.fleet.kubelet_checkpoint": [{"failed": True, "msg": "no NVML"}]},
    {"gpuops.fleet.kubelet_checkpoint": [{"changed": False, "repair_needed": False, "guard": _reading(True)}],
     "gpuops.fleet.guard_install": [OSError("connection lost")]},
    {"gpuops.fleet.kubelet_checkpoint": [OSError("connection lost")]},
], ids=["no-install", "plan-failed", "install-raised", "plan-raised"])
def test_the_temporary_directory_is_removed_once_whatever_the_task_ends_with(replies, monkeypatch):
    action = _action({"guard": GUARD, "install_guard": True}, replies)
    try:
        _run(action, monkeypatch)
    except OSError:
        pass
    assert action.removed == ["/root/.ansible/tmp/ansible-tmp-1"] and action._connection._shell.tmpdir is None


def test_install_guard_in_check_mode_keeps_the_plans_diff_and_sends_no_code(monkeypatch):
    plan = {"changed": True, "repair_needed": True, "diff": {"before": "a", "after": "b"}, "guard": _reading(True)}
    action = _action({"guard": GUARD, "install_guard": True},
                     {"gpuops.fleet.kubelet_checkpoint": [plan], "gpuops.fleet.guard_install": [{"changed": True, "files": []}]},
                     check_mode=True)
    result = _run(action, monkeypatch)
    assert [check for dummy, check, dummy2 in action.calls] == [True, True]
    assert "data" not in action.calls[1][2]["code"] and not action.commands
    assert result["changed"] is True and result["diff"] == {"before": "a", "after": "b"}


def test_install_guard_without_guard_only_plans_read_only(monkeypatch):
    action = _action({"install_guard": "yes"}, {"gpuops.fleet.kubelet_checkpoint": [{"changed": True, "repair_needed": True}]})
    result = _run(action, monkeypatch)
    assert [(name, check) for name, check, dummy in action.calls] == [("gpuops.fleet.kubelet_checkpoint", True)]
    assert result["changed"] is False and "guard_install" not in result


def test_without_install_guard_the_module_runs_in_the_tasks_mode(monkeypatch):
    action = _action({"strategy": "prune"}, {"gpuops.fleet.kubelet_checkpoint": [{"changed": True, "action": "pruned"}]})
    result = _run(action, monkeypatch)
    assert [check for dummy, check, dummy2 in action.calls] == [False] and result["changed"] is True


def test_a_failed_plan_installs_nothing_and_a_failed_install_fails_the_task(monkeypatch):
    action = _action({"guard": GUARD, "install_guard": True}, {"gpuops.fleet.kubelet_checkpoint": [{"failed": True, "msg": "corrupt"}]})
    result = _run(action, monkeypatch)
    assert len(action.calls) == 1 and result["failed"] and result["msg"] == "corrupt" and "guard_install" not in result
    action = _action({"guard": GUARD, "install_guard": True},
                     {"gpuops.fleet.kubelet_checkpoint": [{"repair_needed": False, "guard": _reading(True)}],
                      "gpuops.fleet.guard_install": [{"failed": True, "msg": "/usr is read-only"}]})
    result = _run(action, monkeypatch)
    assert result["failed"] and result["msg"] == "guard_install: /usr is read-only" and result["changed"] is False


@pytest.mark.parametrize("args, named", [
    ({"install_guard": "maybe"}, "install_guard: give true or false"),
    ({"install_guard": True, "guard": {"code": "/x"}}, "guard.code: give its path"),
])
def test_bad_install_guard_options_are_named(args, named, monkeypatch):
    action = _action(args, {})
    result = _run(action, monkeypatch)
    assert result["failed"] and result["msg"].startswith(named) and not action.calls


def test_install_guard_is_refused_with_async(monkeypatch):
    action = _action({"guard": GUARD, "install_guard": True}, {}, async_val=30)
    result = _run(action, monkeypatch)
    assert result["failed"] and "not with async" in result["msg"] and not action.calls


# role (issue 36): the checkpoint_guard role's variables as they come; the action plugin builds settings and guard from
# them, the same values the role's filters build, so the role's per-node tasks name no filter of the collection.

def _role(**kw):
    from tests.unit.plugins.filter.test_checkpoint_guard import BASE

    role = {"variables": dict(BASE, strategy="prune", backup_keep="3"), "install": "true",
            "install_tags": ["checkpoint_guard", "checkpoint_guard_install", "guard"],
            "sysroot": "/srv/node1", "unit_dir": "/etc/systemd/system", "hardening": "true", "late_check": "false",
            "require_persistent": "false", "manage_systemd": "false", "enabled": "true"}
    role.update(kw)
    return role


def test_role_gives_the_settings_and_the_install_the_filters_give():
    from ansible_collections.gpuops.fleet.plugins.filter.checkpoint_guard import checkpoint_guard_install_spec, checkpoint_guard_settings

    role = _role()
    args, error = merged_args({"role": role, "kubelet_unit": "", "install_guard": True}, {"ansible_run_tags": ["all"], "ansible_skip_tags": []})
    assert error is None, error
    want = dict(checkpoint_guard_settings(role["variables"])["module_args"], kubelet_unit="", install_guard=True)
    want["guard"] = checkpoint_guard_install_spec(role["variables"], root="/srv/node1", unit_dir="/etc/systemd/system", hardening="true",
                                                  late_check="false", require_persistent="false", manage_systemd="false", enabled="true")
    assert args == want
    # typed from the survey's strings, and the node's paths under the sysroot
    assert args["backup_keep"] == 3 and args["strategy"] == "prune" and args["kubelet_unit"] == ""
    assert args["guard"]["code"]["path"] == "/srv/node1/usr/local/lib/gpuops/gpuops.pyz"


@pytest.mark.parametrize("role, task_vars", [
    (_role(install="false"), {}),
    (_role(install=0), {}),
    (_role(), {"ansible_run_tags": ["checkpoint"], "ansible_skip_tags": []}),
    (_role(), {"ansible_run_tags": ["all"], "ansible_skip_tags": ["guard"]}),
])
def test_role_without_the_install_in_this_run_gives_settings_and_no_guard(role, task_vars):
    args, error = merged_args({"role": role}, task_vars)
    assert error is None and "guard" not in args and args["backup_keep"] == 3


@pytest.mark.parametrize("install", [True, "yes", 1])
def test_role_with_the_installs_own_tag_installs(install):
    args, error = merged_args({"role": _role(install=install)}, {"ansible_run_tags": ["guard"], "ansible_skip_tags": []})
    assert error is None and args["guard"]["units"][0]["name"] == "gpuops.service"


@pytest.mark.parametrize("args, named", [
    ({"role": _role(), "settings": {"strategy": "prune"}}, "role: give the role's variables or settings, not both"),
    ({"role": _role(), "guard": GUARD}, "role: give the role's variables or guard, not both"),
    ({"role": "checkpoint_guard"}, "gpuops.fleet.checkpoint_guard: role: give the checkpoint_guard role's variables (a mapping), not str"),
    ({"role": _role(colour="blue")}, "gpuops.fleet.checkpoint_guard: role.colour: unknown key"),
    ({"role": _role(variables="x")}, "gpuops.fleet.checkpoint_guard: checkpoint_guard_settings: expects a mapping"),
    ({"role": _role(variables=dict(_role()["variables"], backup_keep="many"))}, "gpuops.fleet.checkpoint_guard: checkpoint_guard_backup_keep"),
    ({"role": _role(install="perhaps")}, "gpuops.fleet.checkpoint_guard: checkpoint_guard_install"),
    ({"role": _role(install_tags="guard")}, "gpuops.fleet.checkpoint_guard: role.install_tags: give a list"),
    ({"role": _role(unit_dir="/etc/systemd/system\nExecStart=/bin/sh")}, "gpuops.fleet.checkpoint_guard: checkpoint_guard_unit_dir"),
])
def test_bad_role_variables_are_named_before_any_call(args, named, monkeypatch):
    action = _action(dict(args, install_guard=True), {})
    result = _run(action, monkeypatch)
    assert result["failed"] and result["msg"].startswith(named), result["msg"]
    assert not action.calls


def test_the_roles_per_node_tasks_name_no_filter_of_the_collection():
    """A task that names any gpuops.fleet filter makes each node's worker load every filter file of the collection and
    the settings code; the plan and the repair run once per node, so they pass the role's variables to the action
    plugin (role), which ansible-core's main process has loaded once (issue 36)."""
    import os
    import re

    tasks = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "checkpoint_guard", "tasks")
    for name in ("plan.yml", "repair.yml"):
        with open(os.path.join(tasks, name), encoding="utf-8") as handle:
            text = "\n".join(line for line in handle if not line.lstrip().startswith("#"))
        assert "role:" in text and not re.search(r"\|\s*gpuops\.fleet\.", text), name


# from_task_vars (issue 62): the role's tasks name no template argument; the action plugin reads the role's variables from
# the task's variables itself. What it reads must be exactly what the templated form gave the module.

def _task_vars(**kw):
    from tests.unit.plugins.filter.test_checkpoint_guard import BASE

    role = _role()
    found = dict(("checkpoint_guard_" + name, value) for name, value in role["variables"].items())
    found.update(("checkpoint_guard_" + key, role[key]) for key in ("install", "sysroot", "unit_dir", "hardening", "late_check",
                                                                    "require_persistent", "manage_systemd", "enabled"))
    found.update({"__checkpoint_guard_setting_names": sorted(BASE), "checkpoint_guard_kubelet_control": "true",
                  "checkpoint_guard_gpu_health": False, "checkpoint_guard_gpu_health_options": {"kernel_log": "none"},
                  "ansible_run_tags": ["all"], "ansible_skip_tags": []})
    found.update(kw)
    return found


def _from_vars(args, task_vars, monkeypatch):
    """The module's arguments (its one call) where the action plugin reads the role from ``task_vars``: the templar renders
    a value as a template only where it is one (here: a value "{{ name }}" is the variable name's value)."""
    from ansible.plugins.action import ActionBase

    action = _action(args, {"gpuops.fleet.kubelet_checkpoint": [{"changed": False, "guard": _reading(False)}]})

    class _Templar:
        @staticmethod
        def template(value):
            if isinstance(value, str) and value.startswith("{{ ") and value.endswith(" }}"):
                return task_vars[value[3:-3]]
            return value

    action._templar = _Templar()
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    result = action.run(task_vars=task_vars)
    return result, action


def test_from_task_vars_gives_the_module_what_the_templated_role_gave(monkeypatch):
    task_vars = _task_vars(checkpoint_guard_strategy="{{ my_strategy }}", my_strategy="remove")
    result, action = _from_vars({"role": {"from_task_vars": True, "install_tags": _role()["install_tags"]}, "install_guard": True},
                                task_vars, monkeypatch)
    assert not result.get("failed"), result
    role = dict(_role(), variables=dict(_role()["variables"], strategy="remove"))
    task = dict((key, role["variables"][key]) for key in ("backend", "driver_root", "kubelet_unit") if key in role["variables"])
    want, error = merged_args(dict(task, role=role), task_vars)
    assert error is None
    from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_install as guard_install

    want["guard"] = guard_install.request(want["guard"])[0]  # the code by its SHA-256, as the plugin sends it
    (name, dummy, sent), = action.calls
    assert name == "gpuops.fleet.kubelet_checkpoint" and sent == want and sent["strategy"] == "remove"
    assert "health" not in sent and "gpus" not in sent


def test_from_task_vars_reads_the_health_the_facts_and_kubelet_control(monkeypatch):
    facts = {"gpuops_gpus": {"available": True, "gpus": []}, "kubelet_unit": "elsewhere.service"}
    task_vars = _task_vars(checkpoint_guard_gpu_health="yes", checkpoint_guard_kubelet_control=0, ansible_facts=facts)
    result, action = _from_vars({"role": {"from_task_vars": True, "install_tags": ["guard"]}, "install_guard": True}, task_vars, monkeypatch)
    sent = action.calls[0][2]
    assert not result.get("failed") and sent["health"] == {"kernel_log": "none"} and sent["gpus"] == facts["gpuops_gpus"]
    # kubelet_control off: no kubelet unit, whatever the variable (and a node's facts name none of the settings)
    assert sent["kubelet_unit"] == ""
    # the repair step (no install_tags): the settings alone, no guard, no health read
    result, action = _from_vars({"role": {"from_task_vars": True}}, task_vars, monkeypatch)
    sent = action.calls[0][2]
    assert "guard" not in sent and "health" not in sent and sent["backup_keep"] == 3


@pytest.mark.parametrize("args, task_vars, named", [
    ({"role": {"from_task_vars": True}}, {"checkpoint_guard_strategy": "prune"},
     "gpuops.fleet.checkpoint_guard: role.from_task_vars: only in the gpuops.fleet.checkpoint_guard role's tasks"),
    ({"role": {"from_task_vars": "sometimes"}}, _task_vars(), "gpuops.fleet.checkpoint_guard: role.from_task_vars: expected true or false"),
    ({"role": {"from_task_vars": True, "variables": {}}}, _task_vars(), "gpuops.fleet.checkpoint_guard: role.variables: not with from_task_vars"),
    ({"role": {"from_task_vars": True}}, _task_vars(checkpoint_guard_kubelet_control="maybe"),
     "gpuops.fleet.checkpoint_guard: checkpoint_guard_kubelet_control: expected true or false"),
    ({"role": {"from_task_vars": True}}, _task_vars(checkpoint_guard_backup_keep="many"), "gpuops.fleet.checkpoint_guard: checkpoint_guard_backup_keep"),
    ({"role": {"from_task_vars": True}}, _task_vars(__checkpoint_guard_setting_names="strategy"),
     "gpuops.fleet.checkpoint_guard: __checkpoint_guard_setting_names: expected the role's list"),
])
def test_from_task_vars_refuses_by_name_before_any_call(args, task_vars, named, monkeypatch):
    result, action = _from_vars(args, task_vars, monkeypatch)
    assert result["failed"] and result["msg"].startswith(named), result["msg"]
    assert not action.calls


class _Places:
    """plugin_utils/_restart_place.Held's stand-in: records the order of take, the module's call and give_back."""

    def __init__(self, log, fail=None):
        self.log, self.fail = log, fail

    def __call__(self, spec, host, report):
        self.log.append(("held by", spec["run"], host))
        self.report = report
        return self

    def take(self):
        if self.fail:
            raise self.fail
        self.log.append("take")
        self.report["place"] = "gpuops-kubelet-restart-0"
        return self

    def give_back(self):
        self.log.append("give_back")


def _placed_run(monkeypatch, place, replies, check_mode=False, fail=None):
    from ansible.plugins.action import ActionBase

    from ansible_collections.gpuops.fleet.plugins.plugin_utils import _restart_place as restart_place

    log = []
    monkeypatch.setattr(restart_place, "Held", _Places(log, fail))
    action = _action({"strategy": "prune", "restart_place": place}, {"gpuops.fleet.kubelet_checkpoint": replies}, check_mode=check_mode)
    inner = action._execute_module

    def execute(**kwargs):
        log.append("module")
        return inner(**kwargs)
    action._execute_module = execute
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    return action.run(task_vars={"inventory_hostname": "gpu-7", "gpuops_node_name": "another-node"}), action, log


def test_a_restart_place_is_held_around_the_repair_and_given_back_also_when_it_fails(monkeypatch):
    place = {"limit": "2", "namespace": "gpuops-system", "run": "1042", "hold_seconds": "600", "wait_seconds": 60}
    result, action, log = _placed_run(monkeypatch, place, [{"changed": True, "action": "pruned"}])
    # the holder is the inventory's host name (a magic variable), never gpuops_node_name (a node's facts outrank the inventory)
    assert log == [("held by", "1042", "gpu-7"), "take", "module", "give_back"], log
    assert result["restart_place"]["place"] == "gpuops-kubelet-restart-0" and result["changed"] is True
    assert "restart_place" not in action.calls[0][2]  # the controller's: never sent to the node
    failed, dummy, log = _placed_run(monkeypatch, place, [{"failed": True, "msg": "kubelet did not start"}])
    assert log[-2:] == ["module", "give_back"] and failed["failed"]


def test_no_place_no_module_call_and_check_mode_takes_none(monkeypatch):
    from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.restart_slots import NoPlace

    place = {"limit": "2", "run": "1042"}
    result, action, log = _placed_run(monkeypatch, place, [], fail=NoPlace("1042/gpu-7", 2, ["9/a", "9/b"], 60))
    assert result["failed"] and "no kubelet was stopped" in result["msg"] and "9/a" in result["msg"] and action.calls == []
    result, action, log = _placed_run(monkeypatch, place, [{"changed": False}], check_mode=True)
    assert log == ["module"] and "restart_place" not in result
    result, action, log = _placed_run(monkeypatch, dict(place, limit="0"), [])
    assert result["failed"] and result["msg"].startswith("restart_place.limit:") and action.calls == [] and log == []


# Issue 62: ansible-core's main process imports this action plugin before it forks a worker per node; what the plugin loads
# then, each worker inherits. A fresh interpreter, as ansible-playbook starts: no builtin filter or test loaded until the
# plugin is imported, both after (the role's defaults render `| bool`, site.yml's `default`).
PREFORK = r"""
import json, sys
from ansible.plugins.loader import filter_loader, init_plugin_loader, test_loader
init_plugin_loader([sys.argv[1]])
def loaded():
    return [sorted(loader._cached_non_collection_wrappers) for loader in (filter_loader, test_loader)]
before = loaded()
import ansible_collections.gpuops.fleet.plugins.action.kubelet_checkpoint
print(json.dumps({"before": before, "after": loaded()}))
"""


def test_the_builtin_filters_and_tests_are_loaded_before_the_workers_fork():
    collections = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))),
                               "build", "collections")
    done = subprocess.run([sys.executable, "-c", PREFORK, collections], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["before"] == [[], []]
    filters, tests = found["after"]
    assert {"bool", "default", "ansible.builtin.bool", "ansible.builtin.default"} <= set(filters)
    assert {"defined", "ansible.builtin.defined", "match"} <= set(tests)
