#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_memory_report
short_description: GPU memory used vs allocated per pod, per GPU and per node, from Prometheus
version_added: 0.3.0
description:
  - Read-only. Queries a Prometheus that evaluates the C(gpuops.fleet.gpu_monitoring) role's recording rules (five
    instant queries, whatever the fleet's size) and returns field report 003's two views. "GPU APP", per pod - the GPU
    memory its processes use (C(gpuops metrics), per process through NVML) against what it was given (its
    C(aliyun.com/gpu-mem) limit, or the memory of the whole GPUs it holds). "GPU Node", per GPU and per node - used
    against total.
  - Credentials (O(bearer_token), O(password)) are never logged or returned. TLS certificates are verified unless
    O(validate_certs=false).
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.attributes
  - gpuops.fleet.attributes.info_module
options:
  url:
    description: Prometheus' base URL (the one whose C(/api/v1/query) answers), e.g. V(https://prometheus.example:9090).
    type: str
    required: true
  bearer_token:
    description: Sent as C(Authorization Bearer) (a service account token, an API key).
    type: str
  username:
    description: Basic authentication user.
    type: str
  password:
    description: Basic authentication password.
    type: str
  validate_certs:
    description: Verify the server's TLS certificate.
    type: bool
    default: true
  ca_path:
    description: A CA bundle to verify the server's certificate with.
    type: path
  timeout:
    description: Seconds per query.
    type: int
    default: 30
  namespaces:
    description: Report only pods of these namespaces.
    type: list
    elements: str
  nodes:
    description: Report only these nodes (Kubernetes node names; the C(node) label).
    type: list
    elements: str
seealso:
  - module: gpuops.fleet.gpu_share_info
"""

EXAMPLES = r"""
- name: GPU memory per pod and per GPU
  gpuops.fleet.gpu_memory_report:
    url: https://prometheus.monitoring.svc:9090
    bearer_token: "{{ lookup('ansible.builtin.file', '/var/run/secrets/kubernetes.io/serviceaccount/token') }}"
  register: gpu_memory

- name: Show the views
  ansible.builtin.debug:
    msg: "{{ gpu_memory.table.splitlines() }}"

- name: Pods over their shared-GPU allocation
  ansible.builtin.debug:
    msg: "{{ gpu_memory.pods | selectattr('over_allocated') | map(attribute='pod') | list }}"
"""

RETURN = r"""
pods:
  description: Per pod (namespace and name order), the "GPU APP" view.
  returned: always
  type: list
  elements: dict
  sample:
    - {namespace: ml, pod: app-6g-v1-0, node: gpu-b, gpus: [{gpu: "1", uuid: GPU-1b7d..., used_gib: 6.0}], used_gib: 6.0,
       shared_allocated_gib: 4.0, whole_gpus: null, allocated_gib: 4.0, percent: 150, over_allocated: true}
gpus:
  description: Per GPU, the "GPU Node" view - node, gpu, uuid, used_gib, total_gib, percent.
  returned: always
  type: list
  elements: dict
nodes:
  description: Per node - gpus, used_gib, total_gib, percent.
  returned: always
  type: list
  elements: dict
table:
  description: Both views as aligned text.
  returned: always
  type: str
queries:
  description: How many queries were sent.
  returned: always
  type: int
  sample: 5
msg:
  description: One sentence on what was found.
  returned: always
  type: str
"""

import base64

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.six.moves.urllib.parse import urlencode
from ansible.module_utils.urls import open_url

from ansible_collections.gpuops.fleet.plugins.module_utils import _gpu_memory_report as gmr
from ansible_collections.gpuops.fleet.plugins.module_utils._errors import GpuopsError


def query(params, headers, expr):
    url = "%s/api/v1/query?%s" % (params["url"].rstrip("/"), urlencode({"query": expr}))
    try:
        response = open_url(url, headers=headers, validate_certs=params["validate_certs"], ca_path=params["ca_path"],
                            timeout=params["timeout"], method="GET")
        body = to_text(response.read())
    except Exception as exc:  # pylint: disable=broad-except
        # urllib's HTTPError carries Prometheus' JSON error; anything else is the transport's
        detail = getattr(exc, "read", None)
        text = to_text(detail()) if callable(detail) else ""
        if text.startswith("{"):
            return gmr.parse_response(text, expr)
        raise gmr.PrometheusError("query %s at %s: %s" % (expr, params["url"], exc))
    return gmr.parse_response(body, expr)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            bearer_token=dict(type="str", no_log=True),
            username=dict(type="str"),
            password=dict(type="str", no_log=True),
            validate_certs=dict(type="bool", default=True),
            ca_path=dict(type="path"),
            timeout=dict(type="int", default=30),
            namespaces=dict(type="list", elements="str"),
            nodes=dict(type="list", elements="str"),
        ),
        mutually_exclusive=[("bearer_token", "username")],
        required_together=[("username", "password")],
        supports_check_mode=True,
    )
    p = module.params
    if not p["url"].startswith(("http://", "https://")):
        module.fail_json(msg="url: expected Prometheus' base URL such as https://prometheus.example:9090, got %r" % p["url"])
    headers = {"Accept": "application/json"}
    if p["bearer_token"]:
        headers["Authorization"] = "Bearer %s" % p["bearer_token"]
    elif p["username"]:
        headers["Authorization"] = "Basic %s" % to_text(base64.b64encode(("%s:%s" % (p["username"], p["password"])).encode("utf-8")))
    try:
        results = dict((name, query(p, headers, expr)) for name, expr in gmr.QUERIES)
        doc = gmr.report(results, p["namespaces"], p["nodes"])
    except GpuopsError as exc:
        module.fail_json(msg=str(exc))
    over = [r for r in doc["pods"] if r["over_allocated"]]
    msg = "%d pod(s) on %d GPU(s) of %d node(s)" % (len(doc["pods"]), len(doc["gpus"]), len(doc["nodes"]))
    if over:
        msg += "; over their allocation: %s" % ", ".join("%s/%s" % (r["namespace"], r["pod"]) for r in over)
    module.exit_json(changed=False, table=gmr.table(doc), queries=len(gmr.QUERIES), msg=msg, **doc)


if __name__ == "__main__":
    main()
