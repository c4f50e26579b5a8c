# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpuops.fleet.alertmanager: an ansible-rulebook event source that receives Alertmanager's webhook notifications, with a
token, and turns the gpu_monitoring role's GPU alerts into GPU events of their node.

``ansible.eda.alertmanager`` is not installable here (Galaxy only, not on PyPI) and takes every request: it has no
authentication and puts the request's headers, an ``Authorization`` header included, into every event. This source:

- answers ``POST <path>`` (``/alerts``) only with ``Authorization: Bearer <token>`` (Alertmanager's ``http_config.authorization``;
  the token from ``token`` or ``token_file``, compared in constant time); any other request gets 401 and emits nothing;
  ``GET /healthz`` answers ``up`` (liveness, no data); ``GET /readyz`` answers ``ready``, or 503 while a Node watch that
  shares the window has not listed the GPU Nodes yet (alerts are then answered 503, which Alertmanager sends again);
- holds a port anyone may reach (module_utils/_cluster/events/receiver.py): headers and body each within ``read_timeout`` seconds
  (10), at most ``max_connections`` (256) at once, a new one taking the place of the oldest that has not sent its headers;
  no request line, header or body is ever logged, and refusals are logged once a minute, not per connection;
- bounds a notification (``max_bytes``, 1 MiB; 1,000 alerts) and answers 400 to one that is not Alertmanager's payload;
- emits one ``gpu_alert`` event per alert (``gpuops``: alert, status, node, labels, fault, starts_at, fingerprint), never a
  header; ``meta.hosts`` is the alert's node (the first of ``node_labels`` it carries: ``node``, ``Hostname``,
  ``kubernetes_node``) and the controller, only where that is a GPU Node that the ruleset's ``gpuops.fleet.gpu_nodes``
  source knows (a label's value is the exporter's word, and dcgm-exporter's ``Hostname`` is written on the node itself: it
  never names a host the Node watch does not know, nor an Ansible pattern such as ``all``); another is ``unknown_node``,
  an event and never a fault;
- adds a firing alert of ``fault_alerts`` (GPUXidErrors, GPURecoveryActionRequired, GPURowRemapFailure, GPULost) to the
  ruleset's fault window, shared with ``gpuops.fleet.gpu_nodes``: ``gpu_faults`` once per ``settle_seconds`` window for all
  its nodes, each node at most once per ``flap_seconds`` (module_utils/_cluster/events/window.py);
- serves TLS with ``certfile`` and ``keyfile``.

Options: DOCUMENTATION below, as ansible.eda declares its sources' (the docs site's "Event sources" page is written
from it, hack/eda_docs.py); a bad option fails the source, naming it.

Example::

    sources:
      - gpuops.fleet.alertmanager:
          host: 0.0.0.0
          port: 5000
          token_file: /run/secrets/alertmanager-token
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
short_description: Alertmanager's webhook notifications of GPU alerts, with a token, as GPU events of their node
description:
  - "Answers C(POST) on O(path) only with C(Authorization: Bearer <token>) (Alertmanager's C(http_config.authorization); the
    token compared in constant time); any other request gets 401 and emits nothing; C(GET /healthz) answers C(up) (liveness); C(GET /readyz) answers
    C(ready), or 503 while a Node watch sharing the window has not yet listed the GPU Nodes (its alerts are then answered 503,
    a status Alertmanager retries, rather than judged of unknown nodes)."
  - Holds a port anyone may reach - headers and body each within O(read_timeout), at most O(max_connections) at once; no
    request line, header or body is ever logged; refusals are logged once a minute.
  - Emits one C(gpu_alert) event per alert (C(gpuops) - alert, status, node, labels, fault, starts_at, fingerprint), never a
    header. C(meta.hosts) is the alert's node (the first of O(node_labels) it carries) and the controller, only where that
    is a GPU Node that the ruleset's M(gpuops.fleet.gpu_nodes) source knows; another is C(unknown_node), an event and never
    a fault.
  - A firing alert of O(fault_alerts) joins the ruleset's fault window shared with M(gpuops.fleet.gpu_nodes) (one
    C(gpu_faults) per O(settle_seconds), each node at most once per O(flap_seconds)).
  - Alone, its alerts name no node (it knows no GPU Node); beside a M(gpuops.fleet.gpu_nodes) source of the same ruleset it
    shares that source's fault window (the older form). M(gpuops.fleet.gpu_nodes)' O(ignore:alertmanager) option runs this
    receiver inside the Node watch's source instead, one fault window owned by one source - the form to use.
  - A bad option fails the source, naming it; the token never appears in a message.
options:
  host:
    description: The address to listen on (C(0.0.0.0) in an EDA controller activation).
    type: str
    default: 127.0.0.1
  port:
    description: The port to listen on.
    type: int
    default: 5000
  path:
    description: The URL path Alertmanager posts to (not C(/healthz) or C(/readyz), the probes).
    type: str
    default: /alerts
  token:
    description: The bearer token Alertmanager sends (at least 16 characters); give O(token) or O(token_file).
    type: str
  token_file:
    description: An absolute path of a file that holds the token.
    type: str
  node_labels:
    description: The alert labels that name its node, the first found wins (a comma-separated string too).
    type: list
    elements: str
    default: [node, Hostname, kubernetes_node]
  fault_alerts:
    description: The alerts that are GPU faults (the others are events only).
    type: list
    elements: str
    default: [GPUXidErrors, GPURecoveryActionRequired, GPURowRemapFailure, GPULost]
  max_bytes:
    description: The largest notification body, in bytes (1024 to 67108864).
    type: int
    default: 1048576
  read_timeout:
    description: Seconds a request's headers, then its body, may take (1 to 300).
    type: int
    default: 10
  max_connections:
    description: Connections held at once (8 to 4096); a new one takes the place of the oldest that has not sent its headers.
    type: int
    default: 256
  certfile:
    description: An absolute path of the TLS certificate (with O(keyfile)).
    type: str
  keyfile:
    description: An absolute path of the TLS key (with O(certfile)).
    type: str
  settle_seconds:
    description: As M(gpuops.fleet.gpu_nodes)'s (the ruleset's sources share it).
    type: int
    default: 5
  flap_seconds:
    description: As M(gpuops.fleet.gpu_nodes)'s.
    type: int
    default: 600
  retry_max_seconds:
    description: As M(gpuops.fleet.gpu_nodes)'s.
    type: int
    default: 3600
  enabled:
    description: False, the source waits and emits nothing (a rulebook may carry it switched off).
    type: bool
    default: true
"""

EXAMPLES = r"""
# as ansible.eda's examples: the source's entry of a ruleset's sources (the receiver alone; with the Node watch, one fault
# window: gpuops.fleet.gpu_nodes' alertmanager option, whose example is a whole ruleset)
- gpuops.fleet.alertmanager:
    host: 0.0.0.0
    port: 5000
    token_file: /run/secrets/alertmanager-token
"""

import asyncio
import os
import sys


def _import():
    """The collection's code: from the installed collections, else from the tree this file is in (ansible-rulebook loads
    a source by its path: the folder that holds ansible_collections/ is seven folders above this file's)."""
    try:
        from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import options, webhook, window
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.abspath(os.path.join(here, *[os.pardir] * 7)))
        from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import options, webhook, window
    return options, webhook, window


options, webhook, windows = _import()
serve = webhook.serve  # the receiver (module_utils/_cluster/events/webhook.py)


async def main(queue, args):
    """ansible-rulebook's entry point: the receiver alone. Its fault window is the ruleset's (``window.shared``), shared with a
    ``gpuops.fleet.gpu_nodes`` source of the same ruleset: the older form; ``gpu_nodes``' ``alertmanager`` option runs this
    receiver inside the Node watch's source, one window owned by one source."""
    checked = options.check_alerts(args, read=webhook.read)
    if not checked["enabled"]:
        await asyncio.Event().wait()  # switched off: a source that returned would end the rulebook
        return
    window = windows.shared(queue, checked["settle_seconds"], checked["flap_seconds"], checked["retry_max_seconds"])
    await serve(checked, queue.put, window)


if __name__ == "__main__":
    # a quick look without ansible-rulebook: print the events (GPUOPS_ALERTS_TOKEN=... python alertmanager.py)

    class _Print:
        async def put(self, event):
            print(event, flush=True)

    asyncio.run(main(_Print(), {"token": os.environ.get("GPUOPS_ALERTS_TOKEN")}))
