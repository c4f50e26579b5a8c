# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The boot guard's DaemonSet form on the REAL kubelet node: no SSH, no connection to the node, the API only.

The checkpoint_guard role's ``daemonset`` entry point builds the ConfigMap and the DaemonSet, applies them and rolls
them with gpuops.fleet.daemonset_rollout; the pod (this host's Debian Python, named by digest) installs the guard
into the host directories it mounts. The guard's directories are under the test's own directory on this host's
disk (a real node's are /usr/local/lib/gpuops, /etc/systemd/system ...), so the run leaves nothing on the machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import yaml

import realnode

BIN = os.path.dirname(sys.executable)
NS = "gpuops-guard"
A = "GPU-0a0a0a0a-1111-4111-8111-00000000000a"
SECONDS = []  # each play's wall time, in order: check, first, second, changed setting, refused (interpreter, tmpfs)


def play(node, tmp, host, extra=None, check=False):
    """ansible-playbook of the entry point as the API user gpuops; its report (checkpoint_guard_daemonset_report) and output."""
    variables = {
        "checkpoint_guard_daemonset_kubeconfig": os.path.join(node.cluster.workdir, "role.kubeconfig"),
        "checkpoint_guard_daemonset_image": node.python_image,
        "checkpoint_guard_daemonset_namespace": NS,
        "checkpoint_guard_daemonset_node_label_keys": [],
        "checkpoint_guard_daemonset_pod_timeout": 120,
        "checkpoint_guard_lib_dir": host + "/usr/local/lib/gpuops",
        "checkpoint_guard_bin": host + "/usr/local/bin/gpuops",
        "checkpoint_guard_config_path": host + "/etc/gpuops/gpuops.json",
        "checkpoint_guard_unit_dir": host + "/etc/systemd/system",
        "checkpoint_guard_backup_dir": host + "/var/lib/gpuops/backups",
    }
    variables.update(extra or {})
    report = tmp / "report.json"
    book = tmp / "guard-daemonset.yml"
    book.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False, "vars": variables,
        # the report is written also when the role fails the play (a node failed)
        "tasks": [{"block": [{"ansible.builtin.include_role": {"name": "gpuops.fleet.checkpoint_guard", "tasks_from": "daemonset"}}],
                   "always": [{"ansible.builtin.copy": {"dest": str(report), "content": "{{ checkpoint_guard_daemonset_report | to_json }}"},
                               "check_mode": False}]}],
    }]))
    if report.exists():
        report.unlink()
    cmd = [os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable, str(book)]
    started = time.monotonic()
    proc = subprocess.run(cmd + (["--check"] if check else []), cwd=str(tmp), env=realnode.ansible_env(tmp), capture_output=True, text=True,
                          timeout=600, check=False)
    SECONDS.append(round(time.monotonic() - started, 1))
    return (json.loads(report.read_text()) if report.exists() else None), proc.stdout + proc.stderr


def test_the_guard_daemonset_form_installs_through_the_api_only(real_node, tmp_path):
    node = real_node
    node.up([A])
    node.namespace(NS)
    # as the API user gpuops with exactly docs/rbac/guard-daemonset.yml's grants (the control plane runs RBAC)
    realnode.grant(node.cluster, "guard-daemonset.yml", NS)
    # on this machine's disk, like a node's /usr/local and /etc (pytest's tmp_path is under the checkout)
    host = str(tmp_path / "host")
    offset = node.cluster.audit_offset()
    planned, out = play(node, tmp_path, host, check=True)
    assert planned is not None, out
    assert planned["check_mode"] is True and not os.path.exists(host), "check mode wrote on the node"
    assert node.cluster.apps.list_namespaced_daemon_set(NS).items == [], "check mode created the DaemonSet"
    check_calls = realnode.api_calls(node.cluster, offset)

    offset = node.cluster.audit_offset()

    report, out = play(node, tmp_path, host)
    assert report is not None and "failed=0" in out, out
    assert report["installed"] == [realnode.NAME] and report["failed"] == [], report
    calls = realnode.api_calls(node.cluster, offset)
    # what the pod installed, on the host: the controller's code byte for byte, the units enabled by their links
    code = pathlib.Path(host + "/usr/local/lib/gpuops/gpuops.pyz").read_bytes()
    assert hashlib.sha256(code).hexdigest() == report["code_sha256"]
    units = host + "/etc/systemd/system"
    assert os.readlink(units + "/multi-user.target.wants/gpuops.service") == units + "/gpuops.service"
    assert os.readlink(units + "/kubelet.service.wants/gpuops.service") == units + "/gpuops.service"
    assert "ExecStart=%s/usr/local/bin/gpuops check --config %s/etc/gpuops/gpuops.json" % (host, host) in pathlib.Path(units + "/gpuops.service").read_text()
    assert stat.S_IMODE(os.stat(host + "/var/lib/gpuops/backups").st_mode) == 0o700
    # the installed command runs this host's Python on the shipped code (read-only: no checkpoint here is the real one's)
    version = subprocess.run([host + "/usr/local/bin/gpuops", "--version"], capture_output=True, text=True, check=False)
    assert version.returncode == 0 and version.stdout.startswith("gpuops "), version
    # the pod as the API has it: no privilege, only the guard's directories from the host
    pod = node.cluster.core.list_namespaced_pod(NS).items[0]
    first_uid = pod.metadata.uid
    assert not pod.spec.host_pid and not pod.spec.host_network and pod.spec.automount_service_account_token is False
    for ctr in pod.spec.init_containers + pod.spec.containers:
        assert ctr.security_context.privileged is False and ctr.security_context.capabilities.drop == ["ALL"]
        assert ctr.security_context.read_only_root_filesystem is True and ctr.image == node.python_image
    assert [m.mount_path for m in pod.spec.containers[0].volume_mounts] == ["/gpuops"]  # the waiting one: no host directory
    assert report["host_mounts"] == sorted(
        host + p for p in ("/etc/gpuops", "/etc/systemd/system", "/usr/local/bin", "/usr/local/lib/gpuops", "/var/lib/gpuops/backups"))
    # and, read-only, the directory of the guard's interpreter (checkpoint_guard_python, this host's /usr/bin/python3)
    volumes = dict((v.host_path.path, v.name) for v in pod.spec.volumes if v.host_path)
    assert report["host_mounts_read_only"] == ["/usr/bin"] and sorted(volumes) == sorted(report["host_mounts"] + ["/usr/bin"])
    assert [m.read_only for m in pod.spec.init_containers[0].volume_mounts if m.name == volumes["/usr/bin"]] == [True]

    # a second run: the same template, nothing replaced, nothing written on the node
    before = os.stat(units + "/gpuops.service").st_mtime_ns
    again, out = play(node, tmp_path, host)
    assert again is not None and again["daemonset_changed"] is False and again["failed"] == [], out
    assert node.cluster.core.list_namespaced_pod(NS).items[0].metadata.uid == first_uid
    assert os.stat(units + "/gpuops.service").st_mtime_ns == before

    # a changed setting is a new revision: the pod is replaced and the host's configuration follows
    changed, out = play(node, tmp_path, host, {"checkpoint_guard_strategy": "prune"})
    assert changed is not None and changed["daemonset_changed"] is True and changed["installed"] == [realnode.NAME], out
    assert json.loads(pathlib.Path(host + "/etc/gpuops/gpuops.json").read_text())["strategy"] == "prune"
    assert node.cluster.core.list_namespaced_pod(NS).items[0].metadata.uid != first_uid

    # a node without the guard's interpreter (COS, Flatcar: no python3): the pod refuses before writing, naming the variable
    written = dict((p, os.stat(p).st_mtime_ns) for p in (units + "/gpuops.service", host + "/etc/gpuops/gpuops.json"))
    missing = "/usr/bin/python3-gpuops-absent"
    refused, out = play(node, tmp_path, host, {"checkpoint_guard_python": missing, "checkpoint_guard_daemonset_pod_timeout": 90})
    assert refused is not None and refused["failed"] == [realnode.NAME], out
    reasons = [row.get("reason") or "" for row in refused["nodes"] if row["node"] == realnode.NAME]
    assert any("checkpoint_guard_python: %s is not on this node: nothing was changed" % missing in reason for reason in reasons), (reasons, out)
    assert dict((p, os.stat(p).st_mtime_ns) for p in written) == written, "the refused install wrote on the node"

    # a unit directory on tmpfs (Container-Optimized OS's /etc): the pod refuses, the rollout names the variable
    volatile = tempfile.mkdtemp(prefix="gpuops-knode-shm-", dir="/dev/shm")
    try:
        refused, out = play(node, tmp_path, host, {"checkpoint_guard_unit_dir": volatile + "/units", "checkpoint_guard_daemonset_pod_timeout": 60})
        assert refused is not None and refused["failed"] == [realnode.NAME], out
        reasons = [row.get("reason") or "" for row in refused["nodes"] if row["node"] == realnode.NAME]
        assert any("checkpoint_guard_unit_dir: /host%s/units is on tmpfs" % volatile in reason for reason in reasons), (reasons, out)
        # kubelet made the hostPath directory (DirectoryOrCreate); the install wrote nothing into it
        assert os.listdir(volatile + "/units") == []
    finally:
        shutil.rmtree(volatile)
    os.makedirs(os.path.join(realnode.ROOT, "out"), exist_ok=True)
    with open(os.path.join(realnode.ROOT, "out", "knode-guard-daemonset.json"), "w") as handle:
        json.dump({"api_calls_check": check_calls, "api_calls_first_run": calls, "api_requests_first_run": sum(calls.values()),
                   "seconds": dict(zip(("check", "first", "second", "changed_setting", "refused_interpreter", "refused_tmpfs"), SECONDS))},
                  handle, indent=1, sort_keys=True)
