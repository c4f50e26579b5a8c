# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every manifest template of every cluster role, with a hostile value for every string variable.

A value a user passes is data: it may not add a YAML key, a list item or a document, and a
valid name YAML reads as another type ("no", "null", "1e3") must stay that string. For each
template and each ``type: str`` variable of the role's argument specs, the template is rendered
once with a marker value and once per hostile value, with Ansible's own filters; the hostile
rendering must be exactly the marker rendering with the marker replaced by the hostile text
(same keys, same items, same documents, the literal value). Names are also checked against
DNS-1123 by the roles' preflight (``gpuops.fleet.k8s_names``): see test_k8s_names_*.
"""

from __future__ import annotations

import os
import re

import jinja2
import pytest
import yaml

import role_checks  # tests/unit/roles/role_checks.py  # pylint: disable=import-error

from ansible_collections.gpuops.fleet.plugins.filter.checked_values import checked_values

HOSTILE = [
    'x\ncommand: [sh, -c, "id"]',  # a new key after a newline
    "x\n  finalizers: [evil]",  # a nested key
    'a", "b',  # out of a flow list
    "x'y\"z #c",  # quotes and a comment
    "- item",
    "{evil: 1}",
    "no",  # YAML 1.1 boolean
    "null",
    "1e3",
]
MARKER = "gpuopsmarkervalue"  # unchanged by the templates' own filters (regex_replace to a metric label)

# the internal values each role computes before it renders (what its tasks set)
INTERNAL = {
    "device_plugin": {
        "__device_plugin_settings": {"image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1", "container": {"args": [], "env": [{"name": "A", "value": "1"}]}},
    },
    "driver_installer": {
        "__driver_installer_labels": {"k8s-app": "nvidia-driver-installer"},
        "__driver_installer_container_dir": "/usr/local/nvidia",
    },
    "gpu_monitoring": {"gpu_monitoring_environment": {"LD_LIBRARY_PATH": "/run/nvidia/driver/usr/lib"}},
    "gpu_sharing": {},
}
TEMPLATES = {
    "device_plugin": ["daemonset.yml.j2", "verify-pod.yml.j2"],
    "driver_installer": ["daemonset.yml.j2", "verify-pod.yml.j2"],
    "gpu_monitoring": ["dcgm-exporter.yml.j2", "prometheus-operator.yml.j2", "scrape-config.yml.j2", "rules.yml.j2",
                       "gpuops-metrics.service.j2", "gpuops-metrics.timer.j2"],
    "gpu_sharing": ["daemonset.yml.j2", "device-plugin-rbac.yml.j2", "extender.yml.j2"],
}
CONTEXT = {"inventory_hostname": "gpu-a", "ansible_managed": "Ansible managed", "groups": {"all": []}, "hostvars": {}}


def _values(role):
    values = dict(role_checks.load(role, "defaults", "main.yml"))
    if os.path.exists(os.path.join(role_checks.ROOT, "roles", role, "vars", "main.yml")):
        values.update(role_checks.load(role, "vars", "main.yml") or {})
    values.update(INTERNAL[role], **CONTEXT)
    env = role_checks.jinja_env(role)
    for dummy in range(4):  # defaults that refer to other variables
        for key, value in list(values.items()):
            if isinstance(value, str) and "{{" in value:
                try:
                    values[key] = env.from_string(value).render(**values)
                except jinja2.UndefinedError:
                    pass
    return values


def string_variables(role):
    specs = role_checks.load(role, "meta", "argument_specs.yml")["argument_specs"]
    names = set()
    for entry in specs.values():
        for name, spec in (entry.get("options") or {}).items():
            if spec.get("type", "str") == "str":
                names.add(name)
    return sorted(names)


def internal_numbers(role):
    specs = role_checks.load(role, "meta", "argument_specs.yml")["argument_specs"]
    return sorted(name for entry in specs.values() for name, spec in (entry.get("options") or {}).items() if spec.get("type") == "int")


def render(role, name, values):
    text = role_checks.render_text(role, name, values)
    if name.endswith((".service.j2", ".timer.j2")):
        return _unit_structure(text)
    return list(yaml.safe_load_all(text))


def _unit_structure(text):
    """A systemd unit as data: each line a [key, words...] list, comments dropped (a value that adds a line or an
    argument changes it)."""
    return [[line.split("=", 1)[0]] + line.split("=", 1)[-1].split() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def refused(role, var, value):
    """Whether the role's preflight (gpuops.fleet._checked_values over its __<role>_checks) refuses ``value`` for ``var``."""
    internal = role_checks.load(role, "vars", "main.yml") or {}
    for name in ("__%s_checks" % role, "__%s_node_checks" % role):
        for kind, fields in (internal.get(name) or {}).items():
            if var in fields:
                try:
                    checked_values({kind: {var: value}})
                except Exception:  # pylint: disable=broad-except
                    return True
    return False


def _replace(node, old, new):
    if isinstance(node, dict):
        return dict((_replace(k, old, new), _replace(v, old, new)) for k, v in node.items())
    if isinstance(node, list):
        return [_replace(v, old, new) for v in node]
    if isinstance(node, str):
        return node.replace(old, new)
    return node


def _mentions(node, text):
    if isinstance(node, dict):
        return any(_mentions(k, text) or _mentions(v, text) for k, v in node.items())
    if isinstance(node, list):
        return any(_mentions(v, text) for v in node)
    return isinstance(node, str) and text in node


def _cases():
    """(role, template, variable) for every string variable that reaches the template."""
    cases = []
    for role, names in sorted(TEMPLATES.items()):
        values = _values(role)
        for name in names:
            for var in string_variables(role):
                if _mentions(render(role, name, dict(values, **{var: MARKER})), MARKER):
                    cases.append((role, name, var))
    return cases


CASES = _cases()


@pytest.mark.parametrize("role, name, var", CASES)
def test_a_hostile_value_renders_as_that_literal_value(role, name, var):
    values = _values(role)
    benign = render(role, name, dict(values, **{var: MARKER}))
    for hostile in HOSTILE:
        if refused(role, var, hostile):
            continue  # the preflight stops it before anything is rendered
        got = render(role, name, dict(values, **{var: hostile}))
        assert got == _replace(benign, MARKER, hostile), "%s=%r changed the structure of %s/%s" % (var, hostile, role, name)


def test_every_template_renders_with_the_defaults():
    # and the cases above really ran: most string variables reach some manifest
    for role, names in TEMPLATES.items():
        for name in names:
            assert render(role, name, _values(role)), (role, name)
    reached = set(var for dummy, dummy2, var in CASES)
    assert {"device_plugin_container_name", "driver_installer_image_pull_policy", "gpu_monitoring_namespace", "gpu_sharing_namespace"} <= reached


# --------------------------------------------------------------------------- the checks themselves

@pytest.mark.parametrize("value", ["kube-system", "a", "a" * 63, "gpu-0"])
def test_dns_labels_pass(value):
    assert checked_values({"dns_label": {"x_namespace": value}}) is True


@pytest.mark.parametrize("value", ["", "Kube", "a_b", "-a", "a-", "a" * 64, "a.b", "no\nfinalizers: [x]", 'a"', 5, None])
def test_what_is_not_a_dns_label_is_refused_naming_the_variable(value):
    with pytest.raises(Exception) as err:
        checked_values({"dns_label": {"device_plugin_namespace": value}})
    assert re.search(r"device_plugin_namespace: .* is not a DNS-1123 label.*set device_plugin_namespace to a valid value", str(err.value)), str(err.value)


def test_subdomains_allow_dots_up_to_253():
    assert checked_values({"dns_subdomain": {"n": "nvidia.device-plugin", "m": ".".join(["a" * 63] * 3) + ".a"}})
    for bad in ("a..b", ".a", "a" * 254, "A.b"):
        with pytest.raises(Exception, match="n: .* is not a DNS-1123 subdomain"):
            checked_values({"dns_subdomain": {"n": bad}})


@pytest.mark.parametrize("kind, good, bad", [
    ("duration", ["30s", "5m", "1h30m", "0m"], ["5 m", "5m\n", "", "1.5h", "5m}"]),
    ("timespan", ["15s", "1min", "1h30min"], ["15 s", "15s\nExecStartPre=/bin/x", "1min 30s"]),
    ("label_key", ["cgpu", "nvidia.com/gpu.present", "a_b.c"], ["a b", "-a", "a/b/c", "x\ny"]),
    ("label_value", ["true", "", "v1.0_a-b"], ["-a", "a b", "x" * 64]),
    ("resource_name", ["nvidia.com/gpu", "aliyun.com/gpu-mem"], ['x"}', "a b/c"]),
    ("url", ["https://example.com/runbook"], ["https://x y", "javascript:alert(1)", 'https://x"']),
    ("unit_path", ["/var/lib/x"], ["relative", "/a b", "/a\nUser=root", "/a%n"]),
    ("pull_policy", ["Always", "IfNotPresent", "Never"], ["always", "IfNotPresent\ncommand: [sh]"]),
])
def test_each_kind(kind, good, bad):
    for value in good:
        assert checked_values({kind: {"v": value}})
    for value in bad:
        with pytest.raises(Exception, match="^v: "):
            checked_values({kind: {"v": value}})
    assert checked_values({kind + "_or_empty": {"v": ""}})


def test_every_check_names_a_variable_of_its_role_and_every_such_variable_is_checked():
    for role in TEMPLATES:
        internal = role_checks.load(role, "vars", "main.yml") or {}
        # a string variable, or a number that reaches a rule as text (gpu_monitoring_max_quarantine_seconds, kind seconds)
        specs = set(string_variables(role)) | set(internal_numbers(role))
        for name in ("__%s_checks" % role, "__%s_node_checks" % role):
            for kind, fields in (internal.get(name) or {}).items():
                for var, expr in fields.items():
                    assert var in specs and var in expr, (role, kind, var)


@pytest.mark.parametrize("environment", [{"A": "x\nExecStartPre=/bin/sh -c id"}, {"A\nUser": "root"}, {"A": {"nested": 1}}])
def test_the_metrics_unit_refuses_an_environment_that_could_add_a_line(environment):
    values = dict(_values("gpu_monitoring"), gpu_monitoring_environment=environment)
    with pytest.raises(Exception, match="gpu_monitoring_environment"):
        render("gpu_monitoring", "gpuops-metrics.service.j2", values)
