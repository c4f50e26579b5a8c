# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubelet's effective cpuManagerPolicy from flags and KubeletConfiguration files (node side)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node import kubelet_config as kc
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

# kubeadm's files, as kubeadm writes them
KUBEADM_FLAGS = ('KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock '
                 '--pod-infra-container-image=registry.k8s.io/pause:3.9"\n')
KUBELET_CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
cgroupDriver: systemd
cpuManagerPolicy: static
cpuManagerReconcilePeriod: 0s
reservedSystemCPUs: "0,1"
"""


def write(root, path, text):
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as handle:
        handle.write(text)
    return full


def test_parse_flags_like_pflag():
    flags = kc.parse_flags(["--config=/etc/k.yaml", "--cpu-manager-policy", "static", "--v=2", "--rotate-certificates",
                            "--hostname-override", "Node-7", "--cpu-manager-policy=none"])
    assert flags == {"config": "/etc/k.yaml", "cpu-manager-policy": "none", "v": "2", "rotate-certificates": "true",
                     "hostname-override": "Node-7"}


def test_kubeadm_node_reads_the_config_file(tmp_path):
    write(tmp_path, kc.KUBEADM_FLAGS_ENV, KUBEADM_FLAGS)
    write(tmp_path, kc.KUBEADM_CONFIG, KUBELET_CONFIG)
    result = kc.read(root=str(tmp_path), hostname="gpu-a")
    assert result["cpu_manager_policy"] == "static"
    assert result["source"] == "config file /var/lib/kubelet/config.yaml"
    assert result["flags_from"] == kc.KUBEADM_FLAGS_ENV
    assert result["node_name"] == "gpu-a" and result["error"] is None


def test_a_flag_wins_over_the_config_file(tmp_path):
    write(tmp_path, kc.KUBEADM_FLAGS_ENV, KUBEADM_FLAGS)
    write(tmp_path, kc.KUBEADM_CONFIG, KUBELET_CONFIG)
    write(tmp_path, "/etc/default/kubelet", "KUBELET_EXTRA_ARGS='--cpu-manager-policy=none --hostname-override=GPU-B'\n")
    result = kc.read(root=str(tmp_path), hostname="ignored")
    assert result["cpu_manager_policy"] == "none"
    assert result["source"].startswith("flag --cpu-manager-policy (/var/lib/kubelet/kubeadm-flags.env, /etc/default/kubelet)")
    assert result["node_name"] == "gpu-b"


def test_default_is_none_when_nothing_sets_it(tmp_path):
    write(tmp_path, kc.KUBEADM_FLAGS_ENV, KUBEADM_FLAGS)
    write(tmp_path, kc.KUBEADM_CONFIG, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
    result = kc.read(root=str(tmp_path), hostname="n")
    assert result["cpu_manager_policy"] == "none" and result["source"].startswith("kubelet's default")


def test_json_config_and_cmdline_parameter(tmp_path):
    write(tmp_path, "/etc/kubernetes/kubelet.json", '{"kind": "KubeletConfiguration", "cpuManagerPolicy": "static"}')
    result = kc.read(root=str(tmp_path), cmdline=["--config", "/etc/kubernetes/kubelet.json"], hostname="n")
    assert (result["cpu_manager_policy"], result["flags_from"]) == ("static", "cmdline parameter")


@pytest.mark.parametrize("files, error", [
    ({}, "no running kubelet, and none of"),
    ({kc.KUBEADM_FLAGS_ENV: KUBEADM_FLAGS}, "config file /var/lib/kubelet/config.yaml does not exist"),
    ({kc.KUBEADM_FLAGS_ENV: KUBEADM_FLAGS, kc.KUBEADM_CONFIG: "cpuManagerPolicy: [static\n"}, "is not valid YAML/JSON"),
    ({kc.KUBEADM_FLAGS_ENV: KUBEADM_FLAGS, kc.KUBEADM_CONFIG: "kind: KubeProxyConfiguration\n"}, "not a KubeletConfiguration"),
])
def test_unknown_policy_is_reported_not_guessed(tmp_path, files, error):
    for path, text in files.items():
        write(tmp_path, path, text)
    result = kc.read(root=str(tmp_path), hostname="n")
    assert result["cpu_manager_policy"] is None
    assert error in result["error"]


def test_running_kubelet_process_is_found_in_proc(tmp_path):
    proc = tmp_path / "proc"
    write(proc, "/1/cmdline", "/sbin/init\0")
    write(proc, "/4242/cmdline", "/usr/bin/kubelet\0--config=/var/lib/kubelet/config.yaml\0--cpu-manager-policy=static\0")
    write(tmp_path, kc.KUBEADM_CONFIG, KUBELET_CONFIG.replace("static", "none"))
    result = kc.read(root=str(tmp_path), proc=str(proc), hostname="n")
    assert result["flags_from"] == "running kubelet (pid 4242)"
    assert result["cpu_manager_policy"] == "static" and result["source"].startswith("flag --cpu-manager-policy")


def test_cmdline_must_be_a_list():
    with pytest.raises(ParameterError, match="cmdline"):
        kc.read(cmdline="--cpu-manager-policy=static")


@pytest.mark.parametrize("config, cmdline, value", [
    ("cpuManagerPolicy: bogus\n", [], "'bogus'"),
    ("cpuManagerPolicy: Static\n", [], "'Static'"),  # kubelet's names are case-sensitive
    ("cpuManagerPolicy: 5\n", [], "'5'"),
    ("", ["--cpu-manager-policy"], "'true'"),  # a bare flag: pflag reads it as true
])
def test_a_policy_kubelet_does_not_know_is_an_error_not_a_result(tmp_path, config, cmdline, value):
    write(tmp_path, "/etc/kubernetes/kubelet.yaml", "kind: KubeletConfiguration\n" + config)
    result = kc.read(root=str(tmp_path), cmdline=["--config", "/etc/kubernetes/kubelet.yaml"] + cmdline, hostname="n")
    assert result["cpu_manager_policy"] is None
    assert result["error"].startswith("cpuManagerPolicy %s (" % value) and "is not one kubelet knows (none, static" in result["error"]


def test_beside_the_host_the_host_s_config_and_name_are_read(tmp_path, monkeypatch):
    """The node pod on a host without python3 (GPUOPS_HOST_ROOT): kubelet's files are the host's, under its root,
    and the node's name is the host's own (the pod's would be the pod's name)."""
    root = tmp_path / "host"
    write(root, kc.KUBEADM_CONFIG, KUBELET_CONFIG)
    write(root, "/etc/hostname", "GPU-Node-7\n")
    monkeypatch.setenv("GPUOPS_HOST_ROOT", str(root))
    result = kc.read_on_node(cmdline=["--config=/var/lib/kubelet/config.yaml"])
    assert (result["cpu_manager_policy"], result["node_name"], result["config_path"]) == ("static", "gpu-node-7", "/var/lib/kubelet/config.yaml")
    # a sysroot given as a host path is reached under the root too (and has no live process)
    write(root, "/srv/image" + kc.KUBEADM_CONFIG, KUBELET_CONFIG.replace("static", "none"))
    result = kc.read_on_node(root="/srv/image", cmdline=["--config=/var/lib/kubelet/config.yaml"], hostname="n")
    assert result["cpu_manager_policy"] == "none" and result["error"] is None, result


def test_beside_the_host_absolute_links_are_the_host_s_and_a_loop_is_named(tmp_path, monkeypatch):
    """Issue 32 item 8: beside the host, absolute /etc/hostname and config.yaml links gave the pod's hostname and "config
    file does not exist", and an absolute /etc/default/kubelet link holding --cpu-manager-policy=static gave none."""
    root = tmp_path / "host"
    (root / "etc" / "default").mkdir(parents=True)
    (root / "data" / "kubelet").mkdir(parents=True)
    (root / "run").mkdir()
    (root / "run" / "hostname").write_text("gpu-host-7\n")
    os.symlink("/run/hostname", str(root / "etc" / "hostname"))
    (root / "data" / "kubelet" / "config.yaml").write_text("kind: KubeletConfiguration\ncpuManagerPolicy: static\n")
    (root / "var" / "lib" / "kubelet").mkdir(parents=True)
    os.symlink("/data/kubelet/config.yaml", str(root / "var" / "lib" / "kubelet" / "config.yaml"))
    (root / "data" / "default-kubelet").write_text('KUBELET_EXTRA_ARGS="--cpu-manager-policy=static"\n')
    os.symlink("/data/default-kubelet", str(root / "etc" / "default" / "kubelet"))
    monkeypatch.setenv("GPUOPS_HOST_ROOT", str(root))
    result = kc.read_on_node(cmdline=["--config=/var/lib/kubelet/config.yaml"])
    assert result["error"] is None and result["cpu_manager_policy"] == "static" and result["node_name"] == "gpu-host-7", result
    flags = kc.read(root=str(root), hostname="n")
    assert flags["cpu_manager_policy"] == "static" and flags["flags_from"] == "/etc/default/kubelet", flags
    # a link loop is an error that says so, never "does not exist"
    os.symlink("/var/lib/kubelet/loop", str(root / "var" / "lib" / "kubelet" / "loop"))
    looped = kc.read_on_node(cmdline=["--config=/var/lib/kubelet/loop"])
    assert looped["cpu_manager_policy"] is None and "link loop" in looped["error"] and "does not exist" not in looped["error"], looped
