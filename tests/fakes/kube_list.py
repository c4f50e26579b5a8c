# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A list call's answer as the kubernetes client gives it both ways: the objects (``items``, ``metadata``), and, as with
``_preload_content=False`` (module_utils/_cluster/k8s_watch.py reads lists raw), the HTTP response (``status``, ``data``:
the API's JSON)."""

from __future__ import annotations

import json
import types


def listed(items, resource_version):
    items = list(items)
    return types.SimpleNamespace(items=items, metadata=types.SimpleNamespace(resource_version=str(resource_version)), status=200,
                                 data=json.dumps({"items": items, "metadata": {"resourceVersion": str(resource_version)}}).encode())
