# -*- coding: utf-8 -*-
"""The gpu_remediation role and the actions table (module_utils/_common/health/actions.py) hold together, as
test_options.py holds the checkpoint_guard role to its settings table: the argument spec's choices, the role's blocks (one
flag per automated action), the stages it registers and the report reads, and no action spelled anywhere but the table.
Adding a step: its row in the table, its block in the role (``when: gpu_remediation_target.runs_<name>``, registering its
stages) and its code; each test below fails where one of them is missing."""

from __future__ import annotations

import ast
import os
import re

import yaml

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import outcome, states
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import actions

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLE = os.path.join(ROOT, "roles", "gpu_remediation")


def _read(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return handle.read()


def _tasks(tasks):
    for task in tasks or ():
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def test_the_allowed_actions_choices_are_the_tables_automated_actions():
    spec = yaml.safe_load(_read("meta", "argument_specs.yml"))
    option = spec["argument_specs"]["select"]["options"]["gpu_remediation_allowed_actions"]
    assert option["choices"] == list(actions.AUTOMATED)
    assert set(option["default"]) <= set(actions.AUTOMATED)


def test_each_stage_is_registered_once_and_every_registered_result_is_a_stage():
    registered = [t["register"] for t in _tasks(yaml.safe_load(_read("tasks", "main.yml"))) if "register" in t]
    assert sorted(registered) == sorted(outcome.STAGE_VARS + outcome.AFTER_REPORT)
    assert len(set(registered)) == len(registered)
    # the report reads them in the table's order
    assert list(actions.STAGES)[0] == "quarantine" and list(actions.STAGES)[-3:] == ["recovery", "diag", "release"]


def test_the_role_reads_only_flags_the_targets_give_and_runs_a_block_for_each_automated_action():
    text = _read("tasks", "main.yml")
    used = set(re.findall(r"gpu_remediation_target\.(\w+)", text))
    plan = {"nodes": [{"node": "n%d" % i, "host": "h%d" % i, "action": a, "batch": 1, "gpus": []} for i, a in enumerate(actions.ACTING)]}
    given = set()
    for target in outcome.targets(plan, "remediate", list(actions.AUTOMATED), now=0)["act"]:
        given |= set(target)
    assert used - given == set()
    assert set("runs_" + a for a in actions.AUTOMATED) <= used
    # each automated action's block is the one its flag opens; its stages are registered inside it
    blocks = dict((t["when"], t) for t in _tasks(yaml.safe_load(text)) if "block" in t and isinstance(t.get("when"), str))
    for name in actions.AUTOMATED:
        block = next(b for when, b in blocks.items() if "gpu_remediation_target.runs_" + name in when)
        inside = set(t.get("register") for t in _tasks(block["block"]))
        stage_vars = dict(zip(outcome.STAGES, outcome.STAGE_VARS))
        assert set(stage_vars[s] for s in actions.TABLE[name]["stages"]) <= inside, name


def test_no_stage_is_registered_over_a_role_variable():
    # a result registered as gpu_remediation_verify would hide the role's switch of the verification pod
    defaults = yaml.safe_load(_read("defaults", "main.yml"))
    spec = yaml.safe_load(_read("meta", "argument_specs.yml"))["argument_specs"]
    variables = set(defaults) | set(v for entry in spec.values() for v in entry.get("options") or {})
    assert set(outcome.STAGE_VARS) & variables == set()


def _yaml_strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _yaml_strings(key)
            yield from _yaml_strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _yaml_strings(value)


def _quoted_in_jinja(text):
    return re.findall(r"""['"]([a-z_]+)['"]""", text)


# the health code: every file of its three rooms and the plugins that serve it
HEALTH = [os.path.join(ROOT, "plugins", "module_utils", room) for room in ("_common/health", "_node/health", "_cluster/remediation")] + [
    os.path.join(ROOT, "plugins", kind, name) for kind, name in (
        ("filter", "remediation.py"), ("action", "gpu_remediation_plan.py"), ("action", "gpu_quarantine.py"))]


def _health_files():
    for path in HEALTH:
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                if name.endswith(".py"):
                    yield os.path.join(path, name)
        else:
            yield path


def _code_strings(path):
    """The string constants of a file that may spell an action: not docstrings, not a dict's keys (a result's field names,
    such as gpu_reset's ``reset``), not a method's arguments (``decode(..., "replace")``). ``none``, a word of many
    vocabularies (NVIDIA_VISIBLE_DEVICES, the kernel log's source), counts where it is the value of an ``action``."""
    with open(path, "rb") as handle:
        tree = ast.parse(handle.read(), path)
    skip, actions_none = set(), []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        if isinstance(node, ast.Dict):
            skip.update(id(k) for k in node.keys if k is not None)
            actions_none.extend(v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and k.value == "action")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            skip.update(id(a) for a in node.args)
        if isinstance(node, ast.keyword) and node.arg == "action":
            actions_none.append(node.value)
    out = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip
           and n.value != actions.NONE]
    return out + [n.value for n in actions_none if isinstance(n, ast.Constant) and n.value == actions.NONE]


def test_no_action_is_spelled_outside_the_table():
    home = os.path.join(ROOT, "plugins", "module_utils", "_common", "health", "actions.py")
    spelled = []
    for path in _health_files():
        if path != home:
            spelled.extend((os.path.relpath(path, ROOT), s) for s in _code_strings(path) if s in actions.NAMES)
    # the defaults hold the allowed actions' default, which the argument spec's test holds to the table
    assert set(yaml.safe_load(_read("defaults", "main.yml"))["gpu_remediation_allowed_actions"]) <= set(actions.AUTOMATED)
    for part in (("tasks", "main.yml"), ("tasks", "select.yml")):
        data = yaml.safe_load(_read(*part))
        for value in _yaml_strings(data):
            spelled.extend(("roles/gpu_remediation/" + "/".join(part), s) for s in [value] + _quoted_in_jinja(value) if s in actions.NAMES)
    assert spelled == [], "\n".join("%s: %r" % x for x in spelled)


def test_the_check_finds_a_spelled_action(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""reset is fine in a docstring"""\nSTEP = "reset"\nROW = {"reset": 1, "action": "none"}\nb"x".decode("utf-8", "replace")\n'
                   'OTHER = ("all", "none")\n')
    assert sorted(_code_strings(str(bad))) == ["all", "none", "reset"]
    assert _quoted_in_jinja("gpu_remediation_target.step == 'reboot'") == ["reboot"]


def test_no_function_of_the_health_code_reaches_60_lines():
    # the decision as rules, the plan and the quarantine in named steps: a function a reviewer reads at once
    names = ("gpu_health_info", "gpu_reset", "gpu_quarantine", "gpu_remediation_plan", "node_reboot")
    modules = [os.path.join(ROOT, "plugins", "modules", n + ".py") for n in names]
    long = []
    events = os.path.join(ROOT, "plugins", "module_utils", "_cluster", "events")
    rooms = [os.path.join(events, n) for n in sorted(os.listdir(events)) if n.endswith(".py")]
    for path in list(_health_files()) + modules + rooms:
        with open(path, "rb") as handle:
            tree = ast.parse(handle.read(), path)
        long.extend((os.path.relpath(path, ROOT), n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
                    if isinstance(n, ast.FunctionDef) and n.end_lineno - n.lineno + 1 >= 60)
    assert long == []


# the remediation's states (module_utils/_cluster/remediation/states.py): the role, the quarantine, the plan, the outcome and
# the event source read them there; adding a state is its row, the code that moves a node there, and a test (the guide's
# diagram is written from the table: python hack/states_doc.py); each test below fails where one of them is missing
STATE_FILES = HEALTH + [os.path.join(ROOT, "plugins", "module_utils", "_cluster", "events", "nodes.py"),
                        os.path.join(ROOT, "plugins", "modules", "gpu_quarantine.py")]


def _module_states():
    """gpu_quarantine's ``state`` option's choices: what a task asks of the module (``released``: release the node), another
    vocabulary than the remediation's states."""
    from ansible_collections.gpuops.fleet.plugins.modules import gpu_quarantine
    return set(gpu_quarantine.ARGUMENT_SPEC["state"]["choices"])


def test_no_state_is_spelled_outside_the_table():
    home = os.path.join(ROOT, "plugins", "module_utils", "_cluster", "remediation", "states.py")
    names = set(states.NAMES) - _module_states()
    assert states.RELEASED not in names and states.DRAINED in names  # the one word the two vocabularies share
    spelled = []
    for root in STATE_FILES:
        for path in [root] if os.path.isfile(root) else sorted(os.path.join(root, n) for n in os.listdir(root) if n.endswith(".py")):
            if path != home:
                spelled.extend((os.path.relpath(path, ROOT), s) for s in _code_strings(path) if s in names)
    for part in (("tasks", "main.yml"), ("tasks", "select.yml")):
        for value in _yaml_strings(yaml.safe_load(_read(*part))):
            spelled.extend(("roles/gpu_remediation/" + "/".join(part), s) for s in [value] + _quoted_in_jinja(value) if s in names)
    assert spelled == [], "\n".join("%s: %r" % x for x in spelled)


def test_the_role_stops_where_the_table_says_and_the_report_says_why():
    tasks = list(_tasks(yaml.safe_load(_read("tasks", "main.yml"))))
    whens = [str(t.get("when")) for t in tasks if "gpu_remediation_quarantine.stops" in str(t.get("when"))]
    assert whens == ["gpu_remediation_quarantine.stops", "not gpu_remediation_quarantine.stops"]
    target, row = {"node": "n", "host": "h", "action": actions.RESET}, {"gpus": ["GPU-0"]}
    for name in states.NAMES:
        held = outcome._held(target, row, {"step": name, "stops": states.TABLE[name]["stops"]})  # pylint: disable=protected-access
        if states.TABLE[name]["stops"]:
            assert held["outcome"] == name and held["next"] == states.TABLE[name]["waits_for"]
            assert held["quarantined"] is states.TABLE[name]["holds"]
        else:
            assert held is None, name


def test_every_state_is_moved_to_by_the_code_and_named_by_a_test():
    # a row with no code that moves a node there (``states.<NAME>`` outside the table), or no test that names it, fails here
    code = ""
    for root in STATE_FILES:
        for path in [root] if os.path.isfile(root) else [os.path.join(root, n) for n in os.listdir(root) if n.endswith(".py")]:
            if not path.endswith("states.py"):
                with open(path) as handle:
                    code += handle.read()
    tests = ""
    for top, dummy, names in os.walk(os.path.join(ROOT, "tests")):  # the unit tests, and those on a real API server
        for name in names:
            if name.startswith("test_") and name.endswith(".py") and name != "test_states.py":
                with open(os.path.join(top, name)) as handle:
                    tests += handle.read()
    constants = dict((getattr(states, c), c) for c in dir(states) if c.isupper() and isinstance(getattr(states, c), str))
    for name in states.NAMES:
        assert "states.%s" % constants[name] in code, "no code moves a node to %s (states.%s)" % (name, constants[name])
        assert name in tests or ".%s" % constants[name] in tests, "no test names the state %s" % name


def _select(tmp_path, **variables):
    """The role's select tasks (tasks_from select) through ansible-playbook on the controller, with a plan of one node:
    (the run's output, whether a task after the options' check ran)."""
    import json
    import subprocess
    import sys

    plan = {"nodes": [{"node": "n1", "host": "h1", "action": "reset", "batch": 1}]}
    playbook = tmp_path / "select.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Select", "ansible.builtin.include_role": {"name": "gpuops.fleet.gpu_remediation", "tasks_from": "select"},
         "vars": dict({"gpu_remediation_plan_result": plan, "gpu_remediation_mode": "report"}, **variables)},
        {"name": "After select", "ansible.builtin.copy": {"content": "ran\n", "dest": str(tmp_path / "after")}}]}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", json.dumps({"ansible_python_interpreter": sys.executable}), str(playbook)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc.stdout + proc.stderr, (tmp_path / "after").exists()


def test_an_option_a_node_module_reads_is_checked_before_any_node_is_touched(tmp_path):
    """Issue 59, item 4: gpu_remediation_evidence_max_bytes below 16,384 was refused by gpu_rma_evidence on the node, after
    the node had been quarantined and reset (its report's evidence null). The role's select (the controller, before any
    node) checks each variable a node module reads with that module's own row, naming the variable; a survey's string is
    read as its number."""
    out, after = _select(tmp_path, gpu_remediation_evidence_max_bytes="100")
    assert not after and "gpu_remediation_evidence_max_bytes" in out and "16384 or more" in out and "no node was touched" in out, out[-3000:]
    for name, bad in (("gpu_remediation_diag_level", 5), ("gpu_remediation_rescue_seconds", "5")):
        out, after = _select(tmp_path, **{name: bad})
        assert not after and name in out, out[-3000:]
    out, after = _select(tmp_path, gpu_remediation_evidence_max_bytes="20000", gpu_remediation_diag_level="0")
    assert after, out[-3000:]
