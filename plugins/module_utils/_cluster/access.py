# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: where the controller's Kubernetes API access comes from, in kubernetes.core's
own order (``k8s/client.py`` ``_create_configuration``, 6.x: a host with credentials; else a kubeconfig or context given;
else the in-cluster ServiceAccount, then ``KUBECONFIG`` or ``~/.kube/config``), and the message that names what to set
where there is none. Pure: the options, the environment and a file test are given."""

from __future__ import annotations

import os

TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"  # kubernetes.config.incluster_config's SERVICE_TOKEN_FILENAME


def source(params, env, exists):
    """``(where, path)``: where kubernetes.core takes the API access from with these options (``params``: its auth options),
    this environment (``env``) and files (``exists(path)``); ``(None, None)`` where it finds none."""
    def given(name):
        return params.get(name) or env.get("K8S_AUTH_" + name.upper())

    if given("host") and (given("api_key") or (given("username") and given("password")) or (given("cert_file") and given("key_file"))):
        return ("the host option" if params.get("host") else "K8S_AUTH_HOST"), None
    if given("kubeconfig"):
        return ("the kubeconfig option" if params.get("kubeconfig") else "K8S_AUTH_KUBECONFIG"), given("kubeconfig")
    if given("context"):
        return "the context option", None
    if env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT") and exists(TOKEN):
        return "the in-cluster ServiceAccount", None
    default = (env.get("KUBECONFIG") or "").split(os.pathsep)[0] or os.path.join(env.get("HOME") or "~", ".kube", "config")
    if exists(default):
        return ("KUBECONFIG" if env.get("KUBECONFIG") else "~/.kube/config"), default
    return None, None


def message(needed_by, without_cluster, where, error=None):
    """The error that names what to set (and, where kubernetes.core tried and failed, what it said)."""
    what = ("no Kubernetes API is configured on this controller" if where is None
            else "the Kubernetes API from %s could not be used" % where)
    text = ("%s needs the Kubernetes API, and %s. Set one of: gpuops_kubeconfig (-e gpuops_kubeconfig=/path/to/kubeconfig, or "
            "the role's own *_kubeconfig variable), the environment variable K8S_AUTH_KUBECONFIG (an AWX credential of type "
            "OpenShift or Kubernetes API Bearer Token sets K8S_AUTH_HOST and K8S_AUTH_API_KEY), a kubeconfig at ~/.kube/config, "
            "or run it in the cluster with a ServiceAccount (docs/rbac/ holds the Roles each playbook needs)." % (needed_by, what))
    if without_cluster:
        text += " Without a cluster: %s." % without_cluster.rstrip(".")
    if error:
        text += " kubernetes.core said: %s: %s" % (type(error).__name__, str(error)[:500])
    return text
