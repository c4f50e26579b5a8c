# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubelet_checkpoint and kubelet_checkpoint_info run by ansible-playbook on a temp sysroot.

The stale checkpoint tells the seed's story (shared/seeds/000): the node now has
GPU-68ce64fb-..., kubelet's checkpoint still lists GPU-7fd52bfc-... for pod
300f47eb-... (container app-3g-v1), next to an RDMA device that must survive.
"""

from __future__ import annotations

import base64

import fakenode

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec

NEW = "GPU-68ce64fb-ea68-5ad6-7e72-31f3f07378df"
OLD = "GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb"
# AllocResp of the real 3-GPU fixture (NVIDIA_VISIBLE_DEVICES + device specs).
ALLOC = base64.b64decode(
    "CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS03N2E3MDJkYi1lMzdmLTNhNzQtZDQ2ZC1jNTcxM2Y2NjA1OGMaJAoOL2Rldi9udmlkaWFjdGwSDi9kZXYv"
    "bnZpZGlhY3RsGgJydxomCg8vZGV2L252aWRpYS11dm0SDy9kZXYvbnZpZGlhLXV2bRoCcncaMgoVL2Rldi9udmlkaWEtdXZtLXRvb2xzEhUvZGV2L252aWRpYS11"
    "dm0tdG9vbHMaAnJ3Gi4KEy9kZXYvbnZpZGlhLW1vZGVzZXQSEy9kZXYvbnZpZGlhLW1vZGVzZXQaAnJ3GiAKDC9kZXYvbnZpZGlhMBIML2Rldi9udmlkaWEwGgJydw=="
)


def stale_checkpoint(path):
    cp = codec.Checkpoint(
        "v2",
        [
            codec.PodDevicesEntry("300f47eb-e5c3-4d0b-9a87-925837b67732", "app-3g-v1", "nvidia.com/gpu", {0: [OLD]}, ALLOC),
            codec.PodDevicesEntry("5b1e0c2a-0d4e-4f57-a2b1-7a1c1c0e9f10", "trainer", "rdma/hca", {0: ["mlx5_0"]}, None),
        ],
        {"nvidia.com/gpu": [OLD], "rdma/hca": ["mlx5_0"]},
    )
    data, dummy = codec.encode(cp)
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def test_kubelet_checkpoint_playbook(fake_node, playbook, tmp_path):
    env = fake_node([fakenode.gpu(NEW)])
    src = stale_checkpoint(str(tmp_path / "stale.json"))
    ok, changed, out = playbook("kubelet_checkpoint.yml", env, stale_checkpoint=src, stale_uuid=OLD, new_uuid=NEW)
    assert "rescued=3 " in out
    # copy x5 (four installs + corrupt), directory, removal, prune, auto (check and real),
    # corrupt removal, and the two check-mode runs of remove and prune that predict a change (13);
    # the running-kubelet section: state dir, state, two installs, its check-mode and real repair (6)
    assert changed == 19, out
    assert ok == 49, out  # 35 before the four tasks of the auto section, 10 in the running-kubelet one


BESIDE = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: plan (check mode)
      gpuops.fleet.kubelet_checkpoint: {kubelet_unit: '', strategy: remove, gpus: "{{ facts }}"}
      check_mode: true
      register: plan
    - name: repair
      gpuops.fleet.kubelet_checkpoint: {kubelet_unit: '', strategy: remove, gpus: "{{ facts }}"}
      register: done
    - name: again
      gpuops.fleet.kubelet_checkpoint: {kubelet_unit: '', strategy: remove, gpus: "{{ facts }}"}
      register: again
    - name: described
      gpuops.fleet.kubelet_checkpoint_info: {}
      register: info
    - name: show
      ansible.builtin.debug:
        msg: "RESULTS={{ {'plan': plan, 'done': done, 'again': again, 'info': info} | to_json }}"
"""


def host_root(tmp_path):
    """A host's root as the node pod sees it (``tmp_path/host``): its /var/lib/kubelet an absolute link to its data
    disk, and the seed's stale checkpoint there."""
    import os
    root = tmp_path / "host"
    (root / "mnt/data/kubelet/device-plugins").mkdir(parents=True)
    (root / "var/lib").mkdir(parents=True)
    os.symlink("/mnt/data/kubelet", str(root / "var/lib/kubelet"))
    stale_checkpoint(str(root / "mnt/data/kubelet/device-plugins/kubelet_internal_checkpoint"))
    return root


def test_beside_the_host_the_module_takes_and_reports_host_paths(playbook, tmp_path):
    """GPUOPS_HOST_ROOT set (the node pod on a host without python3): the default host paths are reached under the
    root, through the host's /var/lib/kubelet link to its data disk; every path in the results is the host's."""
    import json
    import os
    import re
    root = host_root(tmp_path)
    (tmp_path / "beside.yml").write_text(BESIDE)
    facts = {"available": True, "reason": None, "count": 1, "gpus": [{"index": 0, "uuid": NEW}]}
    env = dict(os.environ, GPUOPS_HOST_ROOT=str(root))
    ok, changed, out = playbook(str(tmp_path / "beside.yml"), env, facts=facts)
    results = json.loads(re.search(r'"RESULTS=(.*)"\s*$', out, re.M).group(1).replace('\\"', '"'))
    path = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    assert results["plan"]["changed"] and results["plan"]["action"] == "removed" and results["plan"]["host_root"] == str(root)
    done = results["done"]
    assert done["action"] == "removed" and done["checkpoint_path"] == path, done
    assert done["backup_path"].startswith("/var/lib/gpuops/backups/") and os.path.isfile(str(root) + done["backup_path"]), done
    for name in ("plan", "done", "again", "info"):
        shown = json.dumps(dict(results[name], host_root=None))
        assert str(root) not in shown, (name, shown)
    assert not os.path.exists(str(root / "mnt/data/kubelet/device-plugins/kubelet_internal_checkpoint")), "moved aside on the host's disk"
    assert not results["again"]["changed"] and results["info"]["exists"] is False, results["info"]
    assert changed == 2, out  # the plan (check mode says what would change) and the repair


HEALTH = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: the plan's call, with the health read (issue 36)
      gpuops.fleet.kubelet_checkpoint: {kubelet_unit: '', checkpoint_path: "{{ workdir }}/none", health: {kernel_log: none, gpus_expected: 2}}
      check_mode: true
      register: plan
    - name: the health module alone
      gpuops.fleet.gpu_health_info: {kernel_log: none, gpus_expected: 2}
      register: alone
    - name: a bad health option
      gpuops.fleet.kubelet_checkpoint: {kubelet_unit: '', checkpoint_path: "{{ workdir }}/none", health: {kernel_log: syslog}}
      check_mode: true
      register: bad
      ignore_errors: true
    - name: show
      ansible.builtin.debug:
        msg: "RESULTS={{ {'plan': plan, 'alone': alone, 'bad': bad} | to_json }}"
"""


def test_the_plan_reads_the_gpus_health_in_its_own_call_as_gpu_health_info_does(fake_node, playbook, tmp_path):
    import json
    import re
    env = fake_node([fakenode.gpu(NEW), fakenode.gpu(OLD, bus="00000000:00:08.0", minor=1)])
    (tmp_path / "health.yml").write_text(HEALTH)
    ok, changed, out = playbook(str(tmp_path / "health.yml"), env)
    results = json.loads(re.search(r"RESULTS=(\{.*\})", out).group(1).replace('\\"', '"'))
    read, alone = results["plan"]["ansible_facts"]["gpuops_gpu_health"], results["alone"]["ansible_facts"]["gpuops_gpu_health"]
    assert read["available"] and [g["uuid"] for g in read["gpus"]] == [NEW, OLD] and read["gpus_expected"] == 2
    assert read["verdict"] == alone["verdict"] and read["gpus"] == alone["gpus"]
    assert results["plan"]["ansible_facts"]["gpuops_gpus"]["count"] == 2, "the plan's own facts are still there"
    assert results["bad"]["failed"] and results["bad"]["msg"].startswith("health: value of kernel_log must be one of"), results["bad"]
