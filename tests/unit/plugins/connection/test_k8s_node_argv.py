# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""k8s_node builds kubectl's argv with kubernetes.core's own private ``_build_exec_cmd`` and cuts its
``exec -i POD [-c C] --`` tail off. This pins that contract on the kubernetes.core installed beside the
ansible-core under test: ``make unit`` runs it on the main venv's, ``make matrix`` on each line's
(kubernetes.core 2.4, 3.2, 5.4, 6.4 and 6.6 with ansible 9, 10, 11, 13 and 14)."""

from __future__ import annotations

import pytest
import yaml

from ansible import constants as C
from ansible.errors import AnsibleConnectionFailure
from ansible.playbook.play_context import PlayContext

from ansible_collections.gpuops.fleet.plugins.connection import k8s_node


def _connection(**variables):
    C.config.initialize_plugin_configuration_definitions("connection", k8s_node.__name__, yaml.safe_load(k8s_node.DOCUMENTATION)["options"])
    context = PlayContext()
    context.remote_addr = "gpu-1"
    conn = k8s_node.Connection(context, None, kubectl_command="/usr/bin/kubectl")
    conn._load_name = k8s_node.__name__
    conn.set_options(var_options=variables)
    conn.set_option("kubectl_pod", "gpuops-node-abc")
    conn.set_option("kubectl_container", "node")
    return conn


def test_the_prefix_keeps_kubernetes_core_s_auth_arguments_and_namespace_and_no_exec_tail():
    conn = _connection(ansible_kubectl_kubeconfig="/etc/ops/kubeconfig", ansible_kubectl_context="prod", ansible_kubectl_token="s3cret",
                       ansible_kubectl_namespace="gpuops-system", ansible_kubectl_extra_args="--request-timeout=30s")
    argv, censored = conn._kubectl()
    assert argv[0] == "/usr/bin/kubectl"
    for flag, value in (("--kubeconfig", "/etc/ops/kubeconfig"), ("--context", "prod"), ("-n", "gpuops-system"), ("--token", "s3cret")):
        assert argv[argv.index(flag) + 1] == value, (flag, argv)
    assert "--request-timeout=30s" in argv
    assert "s3cret" not in censored and len(censored) == len(argv)
    assert "exec" not in argv and "--" not in argv and "gpuops-node-abc" not in argv


def test_a_tail_in_another_form_fails_by_name(monkeypatch):
    conn = _connection(ansible_kubectl_namespace="gpuops-system")
    parent = k8s_node.KubectlConnection._build_exec_cmd

    def reordered(self, cmd):
        argv, censored = parent(self, cmd)
        return argv[:-1] + ["--stdin"], censored[:-1] + ["--stdin"]

    monkeypatch.setattr(k8s_node.KubectlConnection, "_build_exec_cmd", reordered)
    with pytest.raises(AnsibleConnectionFailure, match="not one gpuops.fleet.k8s_node supports"):
        conn._kubectl()
