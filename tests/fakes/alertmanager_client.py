# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Alertmanager's side of the webhook for the tests of the receiver (module_utils/_cluster/events/webhook.py, receiver.py) and
of the sources: a token, an alert as Alertmanager sends it, a POST as its Go client makes it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

TOKEN = "s3cret-token-0123456789"


KNOWN = set(["gpu-a", "gpu-x", "gpu-y"] + ["gpu-%d" % n for n in range(20)])


def alert(node, name="GPUXidErrors", status="firing"):
    return {"status": status, "labels": {"alertname": name, "node": node, "xid": "79"}, "annotations": {},
            "startsAt": "2026-11-29T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "f-" + node}


def post(port, body, token=TOKEN, path="/alerts"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data, method="POST",
                                     headers=dict({"Content-Type": "application/json"}, **({"Authorization": "Bearer " + token} if token else {})))
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def get(port, path):
    """``(status, text)`` of a GET (a probe)."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()
