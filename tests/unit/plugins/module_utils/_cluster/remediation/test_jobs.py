# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The multi-pod job of a pod (_cluster/remediation/jobs.py): by the labels each controller documents (JobSet, Kubeflow's
training jobs, a Job, indexed or not), and every pod of it in its namespace; a label value that is no label value is never a
selector."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import jobs


def _pod(namespace, name, labels, owner=None):
    refs = [{"kind": owner[0], "name": owner[1], "controller": True}] if owner else []
    return {"metadata": {"namespace": namespace, "name": name, "labels": labels, "ownerReferences": refs}, "status": {"phase": "Running"}}


@pytest.mark.parametrize("labels, owner, expected", [
    ({"jobset.sigs.k8s.io/jobset-name": "llm", "jobset.sigs.k8s.io/replicatedjob-name": "workers", "jobset.sigs.k8s.io/job-index": "3",
      "batch.kubernetes.io/job-name": "llm-workers-3"}, ("Job", "llm-workers-3"), ("JobSet", "llm", "workers/3")),
    ({"training.kubeflow.org/job-name": "bert", "training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "1",
      "training.kubeflow.org/operator-name": "pytorchjob-controller"}, ("PyTorchJob", "bert"), ("PyTorchJob", "bert", "worker/1")),
    # an MPIJob's launcher is a Job's pod: the labels still name the MPIJob
    ({"training.kubeflow.org/job-name": "nccl", "training.kubeflow.org/job-role": "launcher",
      "training.kubeflow.org/operator-name": "mpi-operator"}, ("Job", "nccl-launcher"), ("MPIJob", "nccl", None)),
    ({"batch.kubernetes.io/job-name": "sweep", "batch.kubernetes.io/job-completion-index": "7"}, ("Job", "sweep"), ("Job (indexed)", "sweep", "7")),
    ({"job-name": "old"}, ("Job", "old"), ("Job", "old", None)),
    ({"app": "serve"}, ("ReplicaSet", "serve-1"), None),
    ({"training.kubeflow.org/job-name": "x y"}, None, None),  # not a label value: never a selector
])
def test_the_multi_pod_job_of_a_pod_by_its_controllers_documented_labels(labels, owner, expected):
    found = jobs.job_of(_pod("ml", "p", labels, owner))
    assert (found and (found["kind"], found["name"], found["index"])) == (expected or None)
    if found:
        other = _pod("ml", "other", labels)
        members = jobs.members(found, [other, _pod("ml", "stranger", {"app": "x"}), _pod("ml2", "far", labels)])
        assert [m["pod"] for m in members] == ["ml/other"]
