# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Nothing a node returns may act on another node (issue 48, item 1).

A module's result can set facts, and facts outrank inventory variables. ansible-core drops its own connection variables
from module facts, not a collection's: a node could rename itself (``gpuops_node_name``), choose the controller's settings
(a role's variables) or the k8s_node connection's server and credentials (``ansible_kubectl_*``). The rule
(plugin_utils/_node_trust.py) refuses such a host at every controller-side step. Here: the rule itself; that it covers
every variable the collection reads (the roles' argument specs, the connection's variables, the playbooks' and roles'
templates); and, through ansible-playbook, a hostile interpreter wrapper (tests/fakes/hostile_python.py) against a
controller-side module, the k8s_node connection and the plan's action plugin.
"""

from __future__ import annotations

import glob
import os
import re
import stat
import subprocess
import sys

import hostile_python
import jinja2
import jinja2.meta
import pytest
import yaml

from ansible_collections.gpuops.fleet.plugins.action.gpu_remediation_plan import health_rows
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _node_trust as trust

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


@pytest.mark.parametrize("name", ["gpuops_node_name", "gpuops_kubeconfig", "kubectl_host", "kubectl_token", "kubectl_kubeconfig",
                                  "k8s_node_pipelining", "pipelining", "gpu_remediation_target", "gpu_remediation_report_dir",
                                  "device_plugin_namespace", "checkpoint_guard_environment", "gpu_sharing_enabled", "awx_job_id"])
def test_a_fact_named_as_a_controller_variable_is_refused(name):
    assert trust.refused({name: "victim", "gpuops_gpus": {}}) == [name]
    assert re.match("host n1 returned facts named as variables the controller acts on \\('%s'\\)" % name, trust.refusal("n1", {name: "x"}))


@pytest.mark.parametrize("name", ["gpuops_gpus", "gpuops_gpu_health", "hostname", "default_ipv4", "discovered_interpreter_python", "local"])
def test_the_collections_own_node_facts_and_others_are_data(name):
    assert trust.refused({name: {}}) == []


def _names_in_template(text):
    env = jinja2.Environment()
    try:
        return jinja2.meta.find_undeclared_variables(env.parse(text))
    except jinja2.TemplateSyntaxError:
        return set()


def _walk(value, found, defined, key=None):
    """Free variable names of every template in ``value`` (a playbook or task file), and the names it defines itself."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in ("vars", "set_fact", "ansible.builtin.set_fact", "module_defaults") and isinstance(v, dict):
                defined.update(x for x in v if isinstance(x, str))
            if k in ("register", "loop_var") and isinstance(v, str):
                defined.add(v)
            _walk(v, found, defined, k)
    elif isinstance(value, list):
        for item in value:
            _walk(item, found, defined, key)
    elif isinstance(value, str):
        if key in ("when", "failed_when", "changed_when", "until"):
            found.update(_names_in_template("{{ %s }}" % value))
        elif "{{" in value or "{%" in value:
            found.update(_names_in_template(value))


# the variables ansible-core sets itself, which no fact can override (magic variables), and Jinja's and Ansible's globals
MAGIC = {"inventory_hostname", "hostvars", "groups", "ansible_check_mode", "ansible_run_tags", "ansible_skip_tags", "ansible_play_hosts_all",
         "ansible_play_batch", "ansible_play_hosts", "ansible_failed_result", "ansible_failed_task", "omit", "item", "lookup", "query",
         "ansible_facts", "ansible_loop", "ansible_diff_mode", "playbook_dir", "role_path", "ansible_version", "ansible_parent_role_names",
         "inventory_dir", "ansible_config_file", "ansible_verbosity", "now", "undef", "range", "dict", "q", "ansible_limit",
         "ansible_play_role_names", "ansible_role_names", "ansible_collection_name", "ansible_dependent_role_names", "group_names",
         "true", "false", "True", "False", "none", "None"}


def test_every_variable_the_collection_reads_is_one_a_node_may_not_set():
    """The roles' argument specs, the k8s_node connection's variables, the inventory plugin's host variables and every free
    variable of the playbooks' and roles' templates (less what they define themselves and ansible-core's magic variables)
    lie in the rule's namespaces: a new variable outside them fails here, not on a fleet."""
    names = set()
    for spec in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")):
        with open(spec) as handle:
            for entry in yaml.safe_load(handle)["argument_specs"].values():
                names.update(entry.get("options") or {})
    with open(os.path.join(ROOT, "plugins", "connection", "k8s_node.py")) as handle:
        source = handle.read()
    doc = yaml.safe_load(source.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])
    for option in doc["options"].values():
        names.update(v["name"] for v in option.get("vars") or () if v["name"] != "ansible_facts")
    names.update(["gpuops_node_name", "gpuops_gpu_count", "gpuops_gpu_resources", "gpuops_gpu_product", "gpuops_gpu_sharing",
                  "gpuops_node_cordoned", "gpuops_node_ready", "gpuops_kubelet_version", "ansible_kubectl_kubeconfig", "ansible_kubectl_context"])
    found, defined = set(), set()
    files = glob.glob(os.path.join(ROOT, "playbooks", "*.yml")) + glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))
    for path in files:
        with open(path) as handle:
            _walk(yaml.safe_load(handle), found, defined)
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "defaults", "main.yml")) + glob.glob(os.path.join(ROOT, "roles", "*", "vars", "main.yml")):
        with open(path) as handle:
            values = yaml.safe_load(handle) or {}
        defined.update(values)
        _walk(values, found, defined)
    names.update(found - defined - MAGIC)
    assert len(names) > 150, len(names)
    uncovered = sorted(n for n in names if not trust.refused({n[len("ansible_"):] if n.startswith("ansible_") else n: 1})
                       and n not in trust.NODE_FACTS and not n.startswith("__"))
    assert uncovered == [], "read by the collection, but a node may set them as facts: %s" % uncovered


def test_the_plans_action_plugin_plans_a_host_that_renamed_itself_for_nothing():
    hostvars = {
        "a": {"gpuops_node_name": "victim", "ansible_facts": {"gpuops_node_name": "victim", "gpuops_gpu_health": {"available": True}}},
        "b": {"gpuops_node_name": "b", "ansible_facts": {"gpuops_gpu_health": {"available": True}}},
    }
    rows = dict((r["host"], r) for r in health_rows(hostvars, ["a", "b"]))
    assert rows["a"]["node"] == "a" and rows["a"]["health"] == {} and "gpuops_node_name" in rows["a"]["untrusted"]
    assert rows["b"] == {"host": "b", "node": "b", "health": {"available": True}, "entries": []}


FACTS = {"gpuops_node_name": "victim-node", "ansible_host": "victim-node", "ansible_connection": "local",
         "ansible_kubectl_host": "https://127.0.0.1:9", "ansible_kubectl_token": "stolen", "gpuops_kubeconfig": "/tmp/other-cluster",
         "gpu_remediation_target": {"node": "victim-node", "host": "a", "action": "reboot", "step": "reboot", "row": {"gpus": []}}}


def test_a_hostile_node_reaches_no_controller_step_and_its_connection_makes_no_request(tmp_path):
    """Through ansible-playbook: the node's first module returns FACTS (tests/fakes/hostile_python.py). Then a controller
    module for it (delegated to localhost, as the roles run them) refuses, naming the facts; the k8s_node connection refuses
    before kubectl runs (a kubectl on PATH that would record any call); ansible-core itself dropped ansible_host."""
    calls = tmp_path / "kubectl-calls"
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    kubectl = fake_bin / "kubectl"
    kubectl.write_text("#!/bin/sh\necho \"$@\" >> %s\nexit 1\n" % calls)
    kubectl.chmod(kubectl.stat().st_mode | stat.S_IXUSR)
    interpreter = hostile_python.install(str(tmp_path / "hostile"), sys.executable, FACTS, log=str(tmp_path / "rewrites"))
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {
        "a": {"ansible_connection": "local", "ansible_python_interpreter": interpreter, "gpuops_node_name": "a"}}}}))
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "a", "gather_facts": False, "tasks": [
        {"name": "any module on the node", "ansible.builtin.ping": {}},
        {"name": "what the host's variables say now",
         "ansible.builtin.debug": {"msg": "NAME={{ gpuops_node_name }} HOST={{ ansible_host | default('unset') }}"}},
        {"name": "a controller module for the node", "gpuops.fleet.gpu_quarantine": {"state": "released", "node": "{{ gpuops_node_name }}"},
         "delegate_to": "localhost", "ignore_errors": True, "register": "controller"},
        {"name": "the result", "ansible.builtin.debug": {"msg": "CONTROLLER={{ controller.msg }}"}},
        {"name": "the node over the API", "ansible.builtin.command": "true",
         "vars": {"ansible_connection": "gpuops.fleet.k8s_node", "ansible_python_interpreter": sys.executable}},
    ]}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), PATH="%s:%s" % (fake_bin, os.environ["PATH"]), ANSIBLE_DEPRECATION_WARNINGS="0")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(play)],
                          env=env, capture_output=True, text=True, check=False)
    out = proc.stdout + proc.stderr
    assert (tmp_path / "rewrites").read_text().split() == ["ping"], out  # the wrapper did rewrite the module's result
    # the fact did override the inventory; ansible-core dropped ansible_host (a magic variable: the host's own name)
    assert "NAME=victim-node HOST=a" in out, out[:4000]
    assert "CONTROLLER=host a returned facts named as variables the controller acts on ('gpu_remediation_target', 'gpuops_kubeconfig', " \
           "'gpuops_node_name', 'kubectl_host', 'kubectl_token')" in out, out[-3000:]
    refusal = "host a returned facts named as variables the controller acts on"
    assert "UNREACHABLE" in out and refusal in out.split("UNREACHABLE", 1)[1], out[-3000:]
    assert not calls.exists(), calls.read_text()  # kubectl never ran: no request left the controller
