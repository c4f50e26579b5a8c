# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""driver_installer: argument specs match defaults, internal variables are private, the README lists every
variable; the templates render the installer privileged and nothing else (the pause container, the verification pod)."""

from __future__ import annotations

import role_checks  # tests/unit/roles/role_checks.py  # pylint: disable=import-error


def render(name, **extra):
    defaults = role_checks.load("driver_installer", "defaults", "main.yml")
    internal = {"__driver_installer_labels": {"k8s-app": "nvidia-driver-installer"}, "__driver_installer_container_dir": "/usr/local/nvidia"}
    values = dict(defaults, ansible_managed="managed", driver_installer_image="r/i@sha256:" + "0" * 64,
                  driver_installer_version="535.104.05", **internal)
    values.update(extra)
    (doc,) = role_checks.render_docs("driver_installer", name, values)
    return doc


def test_argument_specs_match_defaults_keys_and_values():
    assert role_checks.spec_problems("driver_installer", entries=("main", "node_facts", "verify")) == []


def test_internal_vars_are_private():
    assert role_checks.non_private_vars("driver_installer") == []


def test_readme_documents_every_variable():
    assert role_checks.undocumented_vars("driver_installer") == []


def test_only_the_installer_is_privileged_in_both_variants():
    for variant, extra_mount in (("cos", "/build/cos-tools"), ("ubuntu", "/boot")):
        ds = render("daemonset.yml.j2", driver_installer_variant=variant)
        spec = ds["spec"]["template"]["spec"]
        assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
        (installer,) = spec["initContainers"]
        assert installer["securityContext"] == {"privileged": True}
        mounts = {m["mountPath"]: m["name"] for m in installer["volumeMounts"]}
        assert mounts["/usr/local/nvidia"] == "nvidia-install-dir-host" and extra_mount in mounts and "/dev" in mounts
        host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
        assert host["nvidia-install-dir-host"] == "/home/kubernetes/bin/nvidia" and host["root-mount"] == "/"
        (pause,) = spec["containers"]
        assert "privileged" not in pause["securityContext"] and pause["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert term == [{"matchExpressions": [{"key": "cloud.google.com/gke-accelerator", "operator": "Exists"}]}]
        assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        env = {e["name"]: e["value"] for e in installer["env"]}
        assert env["NVIDIA_DRIVER_VERSION"] == "535.104.05" and env["NVIDIA_INSTALL_DIR_CONTAINER"] == "/usr/local/nvidia"
        assert spec.get("hostPID", False) is (variant == "cos")


def test_the_verification_pod_is_a_workload_without_privileges_and_with_the_right_paths():
    pod = render("verify-pod.yml.j2")
    (ctr,) = pod["spec"]["containers"]
    assert ctr["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert ctr["resources"]["limits"] == {"nvidia.com/gpu": 1}
    env = {e["name"]: e["value"] for e in ctr["env"]}
    assert env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64" and env["PATH"].startswith("/usr/local/nvidia/bin:")
    assert ctr["volumeMounts"] == [{"name": "nvidia", "mountPath": "/usr/local/nvidia", "readOnly": True}]
    assert pod["spec"]["volumes"][0]["hostPath"] == {"path": "/home/kubernetes/bin/nvidia", "type": "Directory"}
    assert ctr["command"] == ["nvidia-smi", "-L"]
