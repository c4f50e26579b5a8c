# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_workload_audit's logic: each bad pattern of field report 004 is found with its fix; a clean pod and a pod
that has nothing to do with GPUs are not."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import workload_audit as wa
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

HOST, CTR = "/home/kubernetes/bin/nvidia", "/usr/local/nvidia"


def pod(name, containers, volumes=(), labels=None, node="gpu-a"):
    return {"metadata": {"namespace": "ml", "name": name, "labels": labels or {}},
            "spec": {"nodeName": node, "containers": containers, "volumes": list(volumes)}}


def gpu_ctr(name="train", env=None, mounts=(), privileged=False):
    ctr = {"name": name, "resources": {"limits": {"nvidia.com/gpu": "1"}}, "env": env or [], "volumeMounts": list(mounts)}
    if privileged:
        ctr["securityContext"] = {"privileged": True}
    return ctr


LD = [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64:/usr/lib"}]


def kinds(row):
    return [f["kind"] for f in row["findings"]]


def run(*pods):
    return wa.audit(list(pods), HOST, CTR, ["nvidia.com/"], wa.DEFAULT_IGNORE)


def test_a_clean_gpu_pod_has_no_finding():
    clean = pod("clean", [gpu_ctr(env=LD, mounts=[{"name": "nvidia", "mountPath": CTR, "readOnly": True}])],
                [{"name": "nvidia", "hostPath": {"path": HOST}}])
    result = run(clean, pod("web", [{"name": "nginx", "image": "nginx"}]))
    assert [r["name"] for r in result["pods"]] == ["clean"]  # the pod without a GPU is not audited
    assert result["clean"] and result["findings"] == 0 and result["by_node"] == {"gpu-a": 0}


def test_the_field_reports_pod_privileged_with_swapped_mounts():
    mounts = [{"name": "bin", "mountPath": CTR + "/lib64"}, {"name": "lib", "mountPath": CTR + "/bin"}]
    swapped = pod("swapped", [gpu_ctr(privileged=True, mounts=mounts)],
                  [{"name": "bin", "hostPath": {"path": HOST + "/bin"}}, {"name": "lib", "hostPath": {"path": HOST + "/lib64"}}])
    (row,) = run(swapped)["pods"]
    assert kinds(row) == ["privileged", "swapped_mount", "swapped_mount", "ld_library_path"]
    assert row["findings"][1]["fix"] == ("mount /home/kubernetes/bin/nvidia/bin at /usr/local/nvidia/bin, or the whole "
                                         "/home/kubernetes/bin/nvidia read-only at /usr/local/nvidia")
    assert row["findings"][0]["fix"].startswith("remove privileged: true; request the GPU as a resource (nvidia.com/gpu)")
    assert row["findings"][3]["fix"].startswith("add /usr/local/nvidia/lib64 to LD_LIBRARY_PATH")


def test_dev_from_the_host_and_a_misplaced_install_dir():
    mounts = [{"name": "dev", "mountPath": "/dev"}, {"name": "n0", "mountPath": "/dev/nvidia0"}, {"name": "nv", "mountPath": "/opt/nvidia"}]
    bad = pod("devs", [{"name": "c", "env": LD, "volumeMounts": mounts}],
              [{"name": "dev", "hostPath": {"path": "/dev"}}, {"name": "n0", "hostPath": {"path": "/dev/nvidia0"}},
               {"name": "nv", "hostPath": {"path": HOST}}])
    (row,) = run(bad)["pods"]
    assert kinds(row) == ["misplaced_mount", "dev_mounted", "device_node_mounted"]
    assert row["findings"][0]["fix"] == "mount it at /usr/local/nvidia (the driver was built for that path), read-only"


def test_the_driver_installer_itself_is_not_audited_and_init_containers_are():
    installer = pod("installer", [gpu_ctr(privileged=True)], labels={"k8s-app": "nvidia-driver-installer"})
    init = pod("init", [{"name": "app"}])
    init["spec"]["initContainers"] = [gpu_ctr(name="warmup", env=LD, privileged=True)]
    result = run(installer, init)
    assert [(r["name"], kinds(r)) for r in result["pods"]] == [("init", ["privileged"])]
    assert result["by_node"] == {"gpu-a": 1} and not result["clean"]


@pytest.mark.parametrize("args, field", [
    (("relative", CTR, ["nvidia.com/"], []), "install_dir"),
    ((HOST, CTR, [], []), "resource_prefixes"),
    ((HOST, CTR, ["nvidia.com/"], ["k8s-app"]), "ignore_pods_with_labels"),
])
def test_bad_parameters_name_the_field(args, field):
    with pytest.raises(ParameterError) as err:
        wa.check_params(*args)
    assert err.value.field == field
