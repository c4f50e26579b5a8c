# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the multi-pod job a pod belongs to, pure (no API calls). When one worker of a
distributed job is evicted the whole job loses it, so the remediation's report names the job and every pod of it, not
the one pod.

By the labels each controller documents and sets on its pods, most specific first:

* JobSet (``jobset.sigs.k8s.io/jobset-name``, with ``replicatedjob-name`` and ``job-index``: sigs.k8s.io/jobset's
  api/jobset/v1alpha2 constants), whose child Jobs' labels the pods also carry;
* Kubeflow's training jobs (``training.kubeflow.org/job-name``, ``replica-type``, ``replica-index``, ``operator-name``:
  kubeflow/common pkg/apis/common/v1/constants.go), PyTorchJob, MPIJob, TFJob and the others, the kind from the pod's
  controller reference where it is one of them (an MPIJob's launcher is a Job's pod: the labels still name the MPIJob);
* a Job (``batch.kubernetes.io/job-name``, or ``job-name`` before 1.27), indexed where the pod has
  ``batch.kubernetes.io/job-completion-index`` (annotation since 1.21, label since 1.28).

The label values are the pod's (its namespace's users wrote them): they are only matched and reported, and a selector
built from one is checked as a label value before it is used.
"""

from __future__ import annotations

import re

JOBSET = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_INDEX = "jobset.sigs.k8s.io/job-index"
KUBEFLOW_JOB = "training.kubeflow.org/job-name"
KUBEFLOW_TYPE = "training.kubeflow.org/replica-type"
KUBEFLOW_INDEX = "training.kubeflow.org/replica-index"
KUBEFLOW_OPERATOR = "training.kubeflow.org/operator-name"
JOB_NAME = ("batch.kubernetes.io/job-name", "job-name")
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
KUBEFLOW_KINDS = ("PyTorchJob", "MPIJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob", "MXJob")
# operator-name values -> kind, where the pod's controller is not the job itself (training-operator's and mpi-operator's)
_OPERATOR_KIND = {"pytorchjob-controller": "PyTorchJob", "mpijob-controller": "MPIJob", "mpi-operator": "MPIJob",
                  "tfjob-controller": "TFJob", "xgboostjob-controller": "XGBoostJob", "paddlejob-controller": "PaddleJob",
                  "jaxjob-controller": "JAXJob"}
_LABEL_VALUE = re.compile(r"\A(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z")


def _meta(obj):
    return obj.get("metadata") or {}


def _controller_kind(pod):
    for ref in _meta(pod).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller"):
            return ref.get("kind")
    return None


def _value(labels, key):
    value = labels.get(key)
    return value if isinstance(value, str) and value and len(value) <= 63 and _LABEL_VALUE.match(value) else None


def job_of(pod):
    """``{"kind", "name", "namespace", "selector", "index"}`` of the multi-pod job ``pod`` belongs to, or None."""
    meta = _meta(pod)
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        return None
    namespace = meta.get("namespace")
    name = _value(labels, JOBSET)
    if name:
        index = [labels.get(k) for k in (JOBSET_REPLICATED, JOBSET_INDEX) if _value(labels, k)]
        return {"kind": "JobSet", "name": name, "namespace": namespace, "selector": "%s=%s" % (JOBSET, name),
                "index": "/".join(index) or None}
    name = _value(labels, KUBEFLOW_JOB)
    if name:
        kind = _controller_kind(pod)
        if kind not in KUBEFLOW_KINDS:
            kind = _OPERATOR_KIND.get(labels.get(KUBEFLOW_OPERATOR), "Kubeflow training job")
        index = [labels.get(k) for k in (KUBEFLOW_TYPE, KUBEFLOW_INDEX) if _value(labels, k)]
        return {"kind": kind, "name": name, "namespace": namespace, "selector": "%s=%s" % (KUBEFLOW_JOB, name),
                "index": "/".join(index) or None}
    for key in JOB_NAME:
        name = _value(labels, key)
        if name:
            index = _value(labels, COMPLETION_INDEX) or (meta.get("annotations") or {}).get(COMPLETION_INDEX)
            return {"kind": "Job" if index is None else "Job (indexed)", "name": name, "namespace": namespace,
                    "selector": "%s=%s" % (key, name), "index": str(index)[:16] if index is not None else None}
    return None


def members(job, pods):
    """The pods of ``pods`` (any node) that belong to ``job``, as ``[{pod, node, phase}]``, sorted."""
    out = []
    for pod in pods or ():
        other = job_of(pod)
        if other and (other["selector"], other["namespace"]) == (job["selector"], job["namespace"]):
            meta = _meta(pod)
            out.append({"pod": "%s/%s" % (meta.get("namespace"), meta.get("name")), "node": (pod.get("spec") or {}).get("nodeName"),
                        "phase": (pod.get("status") or {}).get("phase")})
    return sorted(out, key=lambda m: m["pod"])
