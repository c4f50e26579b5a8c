# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 61, item 2: a playbook that needs the Kubernetes API, run without one, stops before its first node task with a
message that names what to set and what runs without a cluster (it ended with kubernetes.core's "Invalid kube-config file.
No configuration found." alone, after the nodes' health had been read)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import access

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


@pytest.mark.parametrize("params, env, files, want", [
    ({}, {}, (), (None, None)),
    ({}, {"HOME": "/h"}, ("/h/.kube/config",), ("~/.kube/config", "/h/.kube/config")),
    ({}, {"HOME": "/h", "KUBECONFIG": "/k/one:/k/two"}, ("/k/one",), ("KUBECONFIG", "/k/one")),
    ({}, {"HOME": "/h", "KUBECONFIG": "/k/gone"}, ("/h/.kube/config",), (None, None)),  # kubernetes.config reads KUBECONFIG's
    # in-cluster first (kubernetes.core's order), where its token is there
    ({}, {"HOME": "/h", "KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, (access.TOKEN, "/h/.kube/config"),
     ("the in-cluster ServiceAccount", None)),
    ({}, {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, (), (None, None)),
    ({"kubeconfig": "/given"}, {"K8S_AUTH_KUBECONFIG": "/env"}, (), ("the kubeconfig option", "/given")),
    ({}, {"K8S_AUTH_KUBECONFIG": "/env"}, (), ("K8S_AUTH_KUBECONFIG", "/env")),  # said even where it is missing: its load says why
    ({}, {"K8S_AUTH_HOST": "https://api", "K8S_AUTH_API_KEY": "t0ken"}, (), ("K8S_AUTH_HOST", None)),
    ({}, {"K8S_AUTH_HOST": "https://api"}, (), (None, None)),  # a host without credentials is no access
    ({"context": "prod"}, {}, (), ("the context option", None)),
])
def test_the_access_is_found_where_kubernetes_core_would_take_it(params, env, files, want):
    assert access.source(params, env, lambda path: path in files) == want


def test_the_message_names_what_to_set_and_what_runs_without_a_cluster_and_never_a_credential():
    text = access.message("playbooks/x.yml", "gpu_health.yml reports the nodes' health.", None)
    for word in ("playbooks/x.yml needs the Kubernetes API", "gpuops_kubeconfig", "K8S_AUTH_KUBECONFIG", "~/.kube/config", "ServiceAccount",
                 "Without a cluster: gpu_health.yml reports the nodes' health."):
        assert word in text, (word, text)
    said = access.message("p", None, "K8S_AUTH_HOST", ValueError("x" * 2000))
    assert "from K8S_AUTH_HOST could not be used" in said and "kubernetes.core said: ValueError: " + "x" * 500 in said and "x" * 501 not in said


def _run(tmp_path, playbook, env_extra=None, extra_vars=None):
    """``playbook`` on an inventory of one GPU node that cannot be reached (TEST-NET-1): any node task would make it
    unreachable in the recap. No Kubernetes access in the environment: no K8S_AUTH_*, no KUBECONFIG, an empty HOME."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {"gpu-7": {"ansible_host": "192.0.2.1", "ansible_connection": "ssh"}}},
                                         "all": {"vars": {"ansible_python_interpreter": sys.executable}}}))
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith(("K8S_AUTH_", "KUBECONFIG", "KUBERNETES_SERVICE")))
    env.update(HOME=str(tmp_path), ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), **(env_extra or {}))
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), os.path.join(ROOT, "playbooks", playbook)]
    for key, value in (extra_vars or {}).items():
        argv += ["-e", "%s=%s" % (key, value)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False, cwd=str(tmp_path))
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("playbook", ["gpu_remediation.yml", "device_plugin.yml", "driver_installer.yml", "gpu_sharing.yml",
                                      "gpu_remediation_metrics.yml", "gpu_monitoring.yml"])
def test_a_playbook_that_needs_the_api_stops_before_any_node_naming_what_to_set(tmp_path, playbook):
    rc, out = _run(tmp_path, playbook)
    assert rc != 0, out[-3000:]
    for word in ("playbooks/%s needs the Kubernetes API" % playbook, "no Kubernetes API is configured", "gpuops_kubeconfig",
                 "K8S_AUTH_KUBECONFIG", "ServiceAccount", "Without a cluster: playbooks/gpu_health.yml reports the nodes' GPU health"):
        assert word in out, (word, out[-3000:])
    assert "Invalid kube-config file" not in out
    recap = out[out.index("PLAY RECAP"):]
    assert "gpu-7" not in recap and "localhost" in recap, recap  # no node task ran


def test_a_kubeconfig_that_cannot_be_used_is_named_with_kubernetes_cores_words_and_a_server_that_cannot_be_reached(tmp_path):
    rc, out = _run(tmp_path, "gpu_remediation.yml", {"K8S_AUTH_KUBECONFIG": str(tmp_path / "missing.kubeconfig")})
    assert rc != 0 and "from K8S_AUTH_KUBECONFIG could not be used" in out and "kubernetes.core said: " in out, out[-3000:]
    assert "gpu-7" not in out[out.index("PLAY RECAP"):]
    token = "s3cret-bearer-0123456789abcdef"
    config = tmp_path / "refused.kubeconfig"
    config.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "x",
                                      "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                                      "users": [{"name": "u", "user": {"token": token}}],
                                      "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    rc, out = _run(tmp_path, "device_plugin.yml", extra_vars={"device_plugin_kubeconfig": str(config)})
    assert rc != 0 and "from the kubeconfig option could not be used" in out and "127.0.0.1" in out and token not in out, out[-3000:]


def test_site_yml_on_the_lab_without_a_cluster_still_runs_its_device_plugin_stage_off():
    """site.yml imports device_plugin.yml with the stage off by default: its API check is skipped with it."""
    with open(os.path.join(ROOT, "playbooks", "device_plugin.yml")) as handle:
        first = yaml.safe_load(handle)[0]
    assert first["hosts"] == "localhost" and "gpuops.fleet.cluster_access_info" in first["tasks"][0]
    assert "gpuops_device_plugin | default(gpuops_device_plugin_default" in first["tasks"][0]["when"]
