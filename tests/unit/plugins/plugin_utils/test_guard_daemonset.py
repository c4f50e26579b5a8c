# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The boot guard's DaemonSet form: the manifests (least privilege, values as data) and the pod's own command run
against its ConfigMap's bytes."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import io
import re
import subprocess
import sys
import tempfile
import time
import zipfile

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.filter.checkpoint_guard import checkpoint_guard_daemonset, checkpoint_guard_settings
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_daemonset as gd
from ansible_collections.gpuops.fleet.plugins.module_utils._node import mounts
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_code

IMAGE = "registry.example/gpuops-ee@sha256:" + "0" * 64
RAW = {
    "checkpoint_path": "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", "backup_dir": "/var/lib/gpuops/backups",
    "backup_keep": 10, "lock_dir": "/run/gpuops", "lock_timeout": 30, "strategy": "auto", "on_corrupt": "report",
    "resources": ["nvidia.com/gpu"], "backend": "auto", "nvidia_smi": "", "max_bytes": 16777216, "driver_wait_seconds": 30,
    "restart_kubelet": True, "kubelet_unit": "kubelet.service", "config_path": "/etc/gpuops/gpuops.json", "bin": "/usr/local/bin/gpuops",
    "python": "/usr/bin/python3", "lib_dir": "/usr/local/lib/gpuops", "after_units": ["nvidia-persistenced.service"],
    "timeout_seconds": 120, "environment": {},
}


def build(raw=None, **kw):
    return checkpoint_guard_daemonset(checkpoint_guard_settings(dict(RAW, **(raw or {}))), kw.pop("image", IMAGE), **kw)


def pod_of(out):
    return out["daemonset"]["spec"]["template"]["spec"]


def test_the_pod_mounts_only_the_guard_directories_and_holds_no_privilege():
    out = build(node_label_keys=["nvidia.com/gpu.present"])
    pod = pod_of(out)
    init, ctr = pod["initContainers"][0], pod["containers"][0]
    host_paths = [v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v]
    assert out["mounts"] == ["/etc/gpuops", "/etc/systemd/system", "/usr/local/bin", "/usr/local/lib/gpuops", "/var/lib/gpuops/backups"]
    # and the guard's interpreter's directory, read-only and never created (the install looks whether python3 is there)
    assert host_paths == out["mounts"] + out["read_only_mounts"] and out["read_only_mounts"] == ["/usr/bin"]
    assert [v["hostPath"]["type"] for v in pod["volumes"] if "hostPath" in v] == ["DirectoryOrCreate"] * 5 + ["Directory"]
    assert [m["mountPath"] for m in init["volumeMounts"]] == ["/gpuops"] + ["/host" + p for p in host_paths]
    assert [m.get("readOnly", False) for m in init["volumeMounts"]] == [True] + [False] * 5 + [True]
    spec = json.loads(out["configmap"]["data"]["install.json"])
    assert spec["interpreter"] == {"path": "/host/usr/bin/python3", "shown": "/usr/bin/python3", "name": "checkpoint_guard_python"}
    # the waiting container holds no host directory
    assert ctr["volumeMounts"] == [{"name": "guard", "mountPath": "/gpuops", "readOnly": True}] and init["volumeMounts"][0]["readOnly"] is True
    for container in (init, ctr):
        assert container["securityContext"] == {"runAsUser": 0, "runAsGroup": 0, "privileged": False, "allowPrivilegeEscalation": False,
                                                "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
        assert container["image"] == IMAGE
    assert not set(pod) & {"hostPID", "hostNetwork", "hostIPC", "serviceAccountName"} and pod["automountServiceAccountToken"] is False
    # the template's own launcher checks the code, then the code checks the spec, both by the template's SHA-256s
    assert init["command"] == ["python3", "-c", gd.LAUNCHER, "/gpuops/gpuops.pyz", out["code_sha256"], "install", "--spec", "/gpuops/install.json",
                               "--spec-sha256", out["spec_sha256"]]
    assert ctr["command"] == ["python3", "-c", gd.LAUNCHER, "/gpuops/gpuops.pyz", out["code_sha256"], "wait"]
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"
    annotations = out["daemonset"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"gpuops.fleet/code-sha256": out["code_sha256"], "gpuops.fleet/spec-sha256": out["spec_sha256"]}
    assert out["daemonset"]["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "Exists"}]}]
    # the command under the library directory: one hostPath fewer (a directory under another is covered by its mount)
    fewer = build({"bin": "/usr/local/lib/gpuops/gpuops", "backup_dir": "/usr/local/lib/gpuops/backups"})
    assert fewer["mounts"] == ["/etc/gpuops", "/etc/systemd/system", "/usr/local/lib/gpuops"]
    # an interpreter inside a guard directory (a venv under the library directory) needs no mount of its own
    venv = pod_of(build({"python": "/usr/local/lib/gpuops/venv/bin/python3"}))
    assert "host-python" not in [v["name"] for v in venv["volumes"]]


def test_the_configmap_carries_the_code_the_controller_builds_and_a_change_is_a_new_pod_template():
    out = build()
    code = base64.b64decode(out["configmap"]["binaryData"]["gpuops.pyz"])
    assert code == _guard_code.build()[0] and out["code_sha256"] == hashlib.sha256(code).hexdigest()
    with zipfile.ZipFile(io.BytesIO(code)) as archive:
        assert "__main__.py" in archive.namelist()  # python3 gpuops.pyz COMMAND
    annotations = out["daemonset"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"gpuops.fleet/code-sha256": out["code_sha256"], "gpuops.fleet/spec-sha256": out["spec_sha256"]}
    assert build()["daemonset"] == out["daemonset"]  # the same settings, the same template: nothing to roll
    changed = build({"strategy": "prune"})
    assert changed["spec_sha256"] != out["spec_sha256"] and changed["code_sha256"] == out["code_sha256"]
    spec = json.loads(out["configmap"]["data"]["install.json"])
    assert spec["require_persistent"] is True and spec["code"]["source"] == "/gpuops/gpuops.pyz"
    assert all(entry["path"].startswith("/host/") for key in ("directories", "files", "links", "absent") for entry in spec[key])
    # the units are enabled by their WantedBy= links; the wrapper and the unit name the host's paths, not /host
    assert spec["links"] == [{"path": "/host/etc/systemd/system/multi-user.target.wants/gpuops.service", "target": "/etc/systemd/system/gpuops.service"},
                             {"path": "/host/etc/systemd/system/kubelet.service.wants/gpuops.service", "target": "/etc/systemd/system/gpuops.service"}]
    assert "/host" not in "".join(f["content"] for f in spec["files"])
    # with the late check both units want multi-user.target: its .wants directory is made once
    late = json.loads(build(late_check=True)["configmap"]["data"]["install.json"])
    wants = [d["path"] for d in late["directories"] if d["path"].endswith(".wants")]
    assert wants == ["/host/etc/systemd/system/multi-user.target.wants", "/host/etc/systemd/system/kubelet.service.wants"]
    assert {"path": "/host/etc/systemd/system/multi-user.target.wants/gpuops-late.service",
            "target": "/etc/systemd/system/gpuops-late.service"} in late["links"]
    off = json.loads(build(enabled=False)["configmap"]["data"]["install.json"])
    assert off["links"] == [] and {"path": spec["links"][0]["path"]} in off["absent"]


@pytest.mark.parametrize("kw, message", [
    ({"image": ""}, "checkpoint_guard_daemonset_image: not set"),
    ({"image": "registry.example/gpuops-ee:1.0"}, "checkpoint_guard_daemonset_image: 'registry.example/gpuops-ee:1.0' names no digest"),
    ({"image": IMAGE + "\nhostPID: true"}, "checkpoint_guard_daemonset_image: "),
    ({"name": "Guard"}, "checkpoint_guard_daemonset_name: 'Guard' is not a DNS-1123 label"),
    ({"namespace": "kube-system\n  hostNetwork: true"}, "checkpoint_guard_daemonset_namespace: "),
    ({"node_label_keys": ["ok/key", "bad key"]}, r"checkpoint_guard_daemonset_node_label_keys\[1\]: 'bad key' is not a label key"),
    ({"python": "python3; rm -rf /"}, "checkpoint_guard_daemonset_python: "),
    ({"tolerations": "all"}, "checkpoint_guard_daemonset_tolerations: must be a list"),
])
def test_bad_values_are_refused_naming_the_variable(kw, message):
    with pytest.raises(AnsibleFilterError, match=message):
        build(**kw)


def test_a_value_stays_data_in_the_manifest():
    # a toleration value written to break out of YAML is one string in the manifest, whatever prints it
    sneaky = {"key": "x", "operator": "Equal", "value": "v\n    hostPID: true", "effect": "NoSchedule"}
    out = build(tolerations=[sneaky])
    text = yaml.safe_dump(out["daemonset"])
    assert yaml.safe_load(text) == out["daemonset"] and "hostPID" not in yaml.safe_load(text)["spec"]["template"]["spec"]
    assert pod_of(out)["tolerations"] == [sneaky]


def _lay_out(out, tmp_path, host):
    """The pod's view on this machine: the ConfigMap's keys as files, and /host/<dir> as ``host``/<dir> (the one
    substitution; everything else is the spec's bytes)."""
    cm = tmp_path / "configmap"
    cm.mkdir()
    text = out["configmap"]["data"]["install.json"]
    laid = text.replace('"%s/' % gd.HOST, '"%s/' % host).replace('"%s/' % gd.CONFIG_DIR, '"%s/' % cm)
    (cm / "install.json").write_text(laid)
    (cm / "gpuops.pyz").write_bytes(base64.b64decode(out["configmap"]["binaryData"]["gpuops.pyz"]))
    argv = list(pod_of(out)["initContainers"][0]["command"])
    argv[0] = sys.executable
    # the laid-out spec's own SHA-256 stands for the template's (its paths are this machine's)
    argv[argv.index("--spec-sha256") + 1] = hashlib.sha256(laid.encode("utf-8")).hexdigest()
    return [a.replace(gd.CONFIG_DIR + "/", str(cm) + "/") for a in argv]


def _catches_sigterm(pid):
    """Whether the process has its SIGTERM handler installed (proc(5): SigCgt, a hex mask, bit 15 - 1)."""
    with open("/proc/%d/status" % pid) as handle:
        caught = [line.split()[1] for line in handle if line.startswith("SigCgt:")]
    return bool(caught) and bool(int(caught[0], 16) >> 14 & 1)


def _run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, check=False)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def test_the_pods_command_installs_from_its_configmap_then_a_second_start_changes_nothing(tmp_path):
    out = build()
    host = tmp_path / "host"
    argv = _lay_out(out, tmp_path, str(host))
    # a node without the guard's interpreter (checkpoint_guard_python): refused, the reason its last line, nothing written
    rc, lines, err = _run(argv)
    assert rc != 0 and [line["event"] for line in lines] == ["install_failed"], (lines, err)
    assert "checkpoint_guard_python: /usr/bin/python3 is not on this node: nothing was changed" in lines[0]["msg"]
    assert not host.exists()
    (host / "usr/bin").mkdir(parents=True)
    os.symlink(sys.executable, str(host / "usr/bin/python3"))
    rc, lines, err = _run(argv)
    assert (rc, err) == (0, "") and [line["event"] for line in lines] == ["installed"]
    first = lines[0]
    assert first["changed"] is True and first["code_sha256"] == out["code_sha256"]
    logged = re.search(out["log_pattern"], json.dumps(first, separators=(",", ":")))
    assert logged.group("sha256") == out["code_sha256"] and logged.group("spec_sha256") == argv[argv.index("--spec-sha256") + 1]
    assert (host / "usr/local/lib/gpuops/gpuops.pyz").read_bytes() == base64.b64decode(out["configmap"]["binaryData"]["gpuops.pyz"])
    assert os.readlink(str(host / "etc/systemd/system/kubelet.service.wants/gpuops.service")) == "/etc/systemd/system/gpuops.service"
    assert "ExecStart=/usr/local/bin/gpuops check --config /etc/gpuops/gpuops.json" in (host / "etc/systemd/system/gpuops.service").read_text()
    assert oct(os.stat(str(host / "var/lib/gpuops/backups")).st_mode & 0o777) == "0o700"
    # the installed command runs (its wrapper names the host's paths: run the code as the wrapper would)
    version = subprocess.run([sys.executable, str(host / "usr/local/lib/gpuops/gpuops.pyz"), "--version"], stdout=subprocess.PIPE,
                             text=True, check=True)
    assert version.stdout.startswith("gpuops ")
    # the pod restarted (a node reboot, a deleted pod): nothing written again
    rc, lines, err = _run(argv)
    assert rc == 0 and lines[0]["changed"] is False and lines[0]["written"] == lines[0]["links"] == []
    # the pod's container: keeps running, and SIGTERM (the pod deleted) ends it with 0 at once
    proc = subprocess.Popen([sys.executable] + [a.replace(gd.CONFIG_DIR + "/", str(tmp_path / "configmap") + "/")
                                                for a in pod_of(out)["containers"][0]["command"][1:]], stdout=subprocess.PIPE, universal_newlines=True)
    deadline = time.monotonic() + 30
    while not _catches_sigterm(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None and _catches_sigterm(proc.pid)
    proc.terminate()
    assert proc.wait(timeout=10) == 0 and json.loads(proc.stdout.read())["event"] == "stopped"
    proc.stdout.close()


def test_a_unit_directory_on_tmpfs_fails_the_pod_naming_the_variable_and_writes_nothing(tmp_path):
    shm = "/dev/shm"
    held = mounts.holding(shm, mounts.read())
    if held is None or held.fstype != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm on this machine")
    volatile = tempfile.mkdtemp(prefix="gpuops-test-", dir=shm)
    try:
        out = build(unit_dir=volatile + "/units")
        argv = _lay_out(out, tmp_path, str(tmp_path / "host"))
        text = (tmp_path / "configmap" / "install.json").read_text()
        # the unit directory only: /host<volatile> is the tmpfs directory itself
        text = text.replace(str(tmp_path / "host") + volatile, volatile)
        (tmp_path / "configmap" / "install.json").write_text(text)
        argv[argv.index("--spec-sha256") + 1] = hashlib.sha256(text.encode("utf-8")).hexdigest()
        rc, lines, err = _run(argv)
        assert rc == 6 and lines[-1]["event"] == "install_failed"
        assert "checkpoint_guard_unit_dir: %s/units is on tmpfs" % volatile in lines[-1]["msg"]
        assert not os.path.exists(str(tmp_path / "host")) and os.listdir(volatile) == []
    finally:
        os.rmdir(volatile)


@pytest.mark.parametrize("tamper", ["spec_extra_unit", "code_sha_null", "code_replaced"])
def test_a_configmap_changed_apart_from_its_daemonset_installs_nothing(tmp_path, tamper):
    """Issue 32 item 4: the pod ran whatever its ConfigMap held as root. An edited spec with an extra unit and its
    .wants link was installed (the log still named the controller's code SHA, all the rollout compared), and with
    code.sha256 null other code was installed. Now the template's launcher checks the code, the code checks the spec,
    and the spec's code.sha256 must be the code's."""
    out = build()
    host = tmp_path / "host"
    argv = _lay_out(out, tmp_path, str(host))
    (host / "usr/bin").mkdir(parents=True)
    os.symlink(sys.executable, str(host / "usr/bin/python3"))
    cm = tmp_path / "configmap"
    spec = json.loads((cm / "install.json").read_text())
    if tamper == "spec_extra_unit":
        spec["files"].append({"path": str(host / "etc/systemd/system/evil.service"), "content": "[Service]\nExecStart=/bin/sh -c id\n",
                              "mode": "0644", "unit": True})
        spec["links"].append({"path": str(host / "etc/systemd/system/multi-user.target.wants/evil.service"),
                              "target": "/etc/systemd/system/evil.service"})
        (cm / "install.json").write_text(json.dumps(spec))
        reason = "install.json has SHA-256 .*, the pod template says .*: the ConfigMap was changed apart from its DaemonSet"
    elif tamper == "code_sha_null":
        spec["code"]["sha256"] = None
        text = json.dumps(spec)
        (cm / "install.json").write_text(text)
        # even with the spec's SHA-256 in the template matching the edited spec, a null code.sha256 is refused
        argv[argv.index("--spec-sha256") + 1] = hashlib.sha256(text.encode("utf-8")).hexdigest()
        reason = "code.sha256 must be the code's SHA-256, got None"
    else:
        (cm / "gpuops.pyz").write_bytes(b"PK\x05\x06" + b"\0" * 18)
        reason = "gpuops.pyz has SHA-256 .*, the pod template says .*: the ConfigMap was changed apart from its DaemonSet; nothing was run"
    rc, lines, err = _run(argv)
    assert rc == 6 and lines[-1]["event"] == "install_failed", (lines, err)
    assert re.search(reason, lines[-1]["msg"]), lines[-1]["msg"]
    assert not (host / "etc").exists() and not (host / "usr/local").exists(), "nothing was written"
