# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: what the controller-side modules of the ``k8s`` action
group share - kubernetes.core's client and authentication options and module class, one API
client, and one way to end on a typed error (ours or the API's: ``_k8s_watch.failure``; kubernetes.core's
own, such as a missing kubernetes library or kubeconfig: its ``fail_from_exception``)."""

from __future__ import annotations

import copy

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_watch import ApiException, failure
from ansible_collections.kubernetes.core.plugins.module_utils.ansiblemodule import AnsibleModule
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException


def k8s_module(options, **kwargs):
    """The module, with kubernetes.core's auth options besides ``options``; check mode supported."""
    argument_spec = copy.deepcopy(AUTH_ARG_SPEC)
    argument_spec.update(options)
    return AnsibleK8SModule(module_class=AnsibleModule, argument_spec=argument_spec, supports_check_mode=True, **kwargs)


def api_client(module):
    """The kubernetes ApiClient kubernetes.core built from the module's auth options."""
    return get_api_client(module=module).client.client


def run(module, work, extra=None):
    """``work()``'s result; a typed error of ours or of the API ends the module with fail_json, once
    (with ``extra()``'s keys besides the message, e.g. the API calls made so far)."""
    try:
        return work()
    except (GpuopsError, ApiException) as exc:
        module.fail_json(**dict(extra() if extra else {}, **failure(exc)))
    except CoreException as exc:
        module.fail_from_exception(exc)
    return None
