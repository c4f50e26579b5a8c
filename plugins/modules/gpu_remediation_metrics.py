#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_remediation_metrics
short_description: The GPU remediation's own metrics (quarantined nodes, outcomes, time to release) for Prometheus
version_added: 0.4.0
description:
  - Reads the remediation ledger ConfigMap, the controller's own record, and returns the remediation's metrics in Prometheus'
    text format for node_exporter's textfile collector (C(playbooks/gpu_remediation_metrics.yml) writes them to a C(.prom)
    file). Nothing is read from the Nodes, since a node's kubelet may write the annotation C(gpuops.fleet/gpu-remediation) on its
    own Node as easily as the quarantine does, so it would say what the node likes.
  - A value that cannot be written as UTF-8 (a tampered ledger's lone surrogate) is the label value C(unreadable); the
    other series are written.
  - C(gpuops_remediation_quarantined{k8s_node, action, step}) for each node quarantined by gpuops.fleet now, and
    C(gpuops_remediation_quarantine_started_timestamp_seconds{k8s_node}) (the label C(k8s_node), since the scrape's own C(node)
    label names the host whose node_exporter serves the file), when its quarantine began (its open ledger entry), which
    the alert C(GPUNodeStuckInQuarantine) of the role C(gpuops.fleet.gpu_monitoring) compares with C(time()), so the
    alert fires on time between two writes.
  - C(gpuops_remediation_outcomes{result}) and the histogram C(gpuops_remediation_release_seconds) over the closed entries
    the ledger keeps (the ledger is trimmed by size, so these are a window of the latest remediations, gauges, not
    counters), and C(gpuops_remediation_breaker_tripped).
  - The text holds no time of its own, so the file changes only when the remediation does (node_exporter's
    C(node_textfile_mtime_seconds) tells its age).
  - Reads only; check mode reads too.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.k8s_auth_options
  - gpuops.fleet.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  namespace:
    description: The ledger ConfigMap's namespace.
    type: str
    default: gpuops-system
notes:
  - Needs C(get) on the ledger ConfigMap in O(namespace).
requirements:
  - kubernetes (Python client)
"""

EXAMPLES = r"""
- name: The remediation's metrics
  gpuops.fleet.gpu_remediation_metrics:
  register: metrics

- name: For node_exporter's textfile collector
  ansible.builtin.copy:
    content: "{{ metrics.text }}"
    dest: /var/lib/prometheus/node-exporter/gpuops-remediation.prom
    mode: "0644"
"""

RETURN = r"""
text:
  description: The metrics in Prometheus' text exposition format (version 0.0.4), ending with a newline.
  returned: always
  type: str
quarantined:
  description: The nodes quarantined by gpuops.fleet now.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import metrics
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_module import api_client, k8s_module, run
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_watch import ApiException

try:
    from kubernetes.client.api import core_v1_api
except ImportError:
    # AnsibleK8SModule reports a missing kubernetes library itself
    pass


def main():
    module = k8s_module(dict(namespace=dict(type="str", default="gpuops-system")))

    def work():
        client = api_client(module)
        api = core_v1_api.CoreV1Api(client)
        ledger, dummy = ledgers.read(api, module.params["namespace"], ApiException)
        ours = sorted(set(e["node"] for e in ledger.get("entries") or () if not e.get("closed_at")))
        return {"changed": False, "text": metrics.render(ledger), "quarantined": ours}

    module.exit_json(**run(module, work))


if __name__ == "__main__":
    main()
