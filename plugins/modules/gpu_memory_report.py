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
  - Credentials (O(bearer_token), O(password)) are never logged or returned, and never sent to another origin. A redirect
    is followed only within O(url)'s scheme, host and port (up to five); one elsewhere fails the task. Credentials in
    O(url) itself are refused (use O(username) and O(password)). TLS certificates are verified unless
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
    description: Seconds per query (at least 1).
    type: int
    default: 30
  max_response_bytes:
    description: The largest answer read per query; a larger one fails the task instead of filling the controller's memory.
    type: int
    default: 67108864
    version_added: 0.3.0
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
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.six.moves.urllib.parse import urlencode, urljoin, urlsplit
from ansible.module_utils.urls import open_url

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import gpu_memory_report as gmr
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError, ParameterError

MAX_REDIRECTS = 5


def origin(url):
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return (parts.scheme, (parts.hostname or "").lower(), port)


def _secret_free(text, secrets):
    for secret in secrets:
        if secret:
            text = text.replace(secret, "********")
    return text


def query(params, headers, expr, secrets):
    """One instant query; redirects followed by hand, only within the base URL's origin (credentials stay there)."""
    url = "%s/api/v1/query?%s" % (params["url"].rstrip("/"), urlencode({"query": expr}))
    home = origin(params["url"])
    for dummy in range(MAX_REDIRECTS + 1):
        try:
            response = open_url(url, headers=headers, validate_certs=params["validate_certs"], ca_path=params["ca_path"],
                                timeout=params["timeout"], method="GET", follow_redirects="none")
            try:
                body = _read(response, params["max_response_bytes"], expr)
            finally:
                response.close()
            return gmr.parse_response(body, expr)
        except gmr.PrometheusError:
            raise
        except Exception as exc:  # pylint: disable=broad-except
            # urllib's HTTPError: a redirect (followed here, or refused) or Prometheus' JSON error; anything else is the transport's
            code = getattr(exc, "code", None)
            text = _error_body(exc, params["max_response_bytes"])
            if code in (301, 302, 303, 307, 308):
                target = urljoin(url, (getattr(exc, "headers", None) or {}).get("Location") or "")
                if origin(target) != home:
                    raise gmr.PrometheusError("query %s: %s redirects to another origin (%s://%s:%s); the credentials are not sent there. "
                                              "Set url to the Prometheus that answers" % ((expr, gmr.safe_url(params["url"])) + origin(target))) from exc
                url = target
                continue
            if text.startswith("{"):
                return gmr.parse_response(text, expr)
            raise gmr.PrometheusError(_secret_free("query %s at %s: %s" % (expr, gmr.safe_url(params["url"]), exc), secrets)) from exc
    raise gmr.PrometheusError("query %s at %s: more than %d redirects" % (expr, gmr.safe_url(params["url"]), MAX_REDIRECTS))


def _error_body(exc, limit):
    """The body of an HTTP error (Prometheus puts its JSON error there), read once and closed; '' for other errors."""
    if not callable(getattr(exc, "read", None)):
        return ""
    try:
        return to_text(exc.read(limit))
    finally:
        exc.close()


def _read(response, limit, expr):
    body = response.read(limit + 1)
    if len(body) > limit:
        raise gmr.PrometheusError("query %s: the answer is over max_response_bytes (%d); raise it, or ask a smaller Prometheus" % (expr, limit))
    return to_text(body)


def check_params(p):
    """Refuse what would fail later with a message that does not name the option (or that would print a secret)."""
    if not isinstance(p["url"], str) or not p["url"].startswith(("http://", "https://")):
        raise ParameterError("url", "expected Prometheus' base URL such as https://prometheus.example:9090, got %r" % gmr.safe_url(p["url"]))
    try:
        parts = urlsplit(p["url"])
        port = parts.port  # urllib raises ValueError for a port that is not a number or out of range
    except ValueError as exc:
        raise ParameterError("url", "is not a valid URL (%s): %s; expected Prometheus' base URL such as https://prometheus.example:9090"
                             % (exc, gmr.safe_url(p["url"]))) from exc
    if not parts.hostname:
        raise ParameterError("url", "names no host: %s; expected Prometheus' base URL such as https://prometheus.example:9090" % gmr.safe_url(p["url"]))
    if port == 0:
        raise ParameterError("url", "port 0 is not a port: %s" % gmr.safe_url(p["url"]))
    if parts.username is not None or parts.password is not None:
        raise ParameterError("url", "holds credentials (%s); pass them as username and password (no_log) instead" % gmr.safe_url(p["url"]))
    if p["timeout"] < 1:
        raise ParameterError("timeout", "%d must be at least 1 second" % p["timeout"])
    if p["max_response_bytes"] < 1024:
        raise ParameterError("max_response_bytes", "%d is too small for any Prometheus answer (at least 1024)" % p["max_response_bytes"])
    if p["ca_path"] and not os.path.isfile(p["ca_path"]):
        raise ParameterError("ca_path", "%s is not a file (a PEM bundle of the CA that signed Prometheus' certificate)" % p["ca_path"])
    token = (p["bearer_token"] or "").strip()  # a token file's trailing newline is not part of the token
    if p["bearer_token"] is not None and (not token or any(ord(c) < 32 or ord(c) == 127 for c in token)):
        raise ParameterError("bearer_token", "is empty or holds a control character (value not shown)")
    for field in ("username", "password"):
        if p[field] is not None and any(ord(c) < 32 or ord(c) == 127 for c in p[field]):
            raise ParameterError(field, "holds a newline or another control character (value not shown)")
    return token


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
            max_response_bytes=dict(type="int", default=64 * 1024 * 1024),
            namespaces=dict(type="list", elements="str"),
            nodes=dict(type="list", elements="str"),
        ),
        mutually_exclusive=[("bearer_token", "username")],
        required_together=[("username", "password")],
        supports_check_mode=True,
    )
    p = module.params
    try:
        token = check_params(p)
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = "Bearer %s" % token
        elif p["username"]:
            headers["Authorization"] = "Basic %s" % to_text(base64.b64encode(("%s:%s" % (p["username"], p["password"])).encode("utf-8")))
        secrets = [token, p["password"], headers.get("Authorization", "").split(" ", 1)[-1] if p["username"] else None]
        results = dict((name, query(p, headers, expr, secrets)) for name, expr in gmr.QUERIES)
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
