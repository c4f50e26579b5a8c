# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the proof, through the API alone, that a node rebooted (module node_reboot).

A reboot is proven by the Node's ``status.nodeInfo.bootID`` (kubelet reports the kernel's
``/proc/sys/kernel/random/boot_id``, a new random UUID at every boot: ``pkg/kubelet/nodestatus/setters.go``,
``MachineInfo``; cAdvisor reads the file) differing from the one read before the reboot, and by the
``Ready`` condition being ``True`` in that same status, written by the kubelet of the new boot. A bootID
that never changes within ``timeout`` fails: the node did not reboot (or its kubelet never came back),
and the caller must not carry on as if it had. Both are read from one watch of the one Node (no polling).
"""

from __future__ import annotations

import re
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_watch import Watcher
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import check_value
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError, ResultError

# what kubelet reports: the kernel's boot_id, a UUID (the simulated nodes of the tests report one too)
BOOT_ID = re.compile(r"\A[0-9A-Za-z-]{1,64}\Z")


class NodeRebootError(ResultError):
    """The node did not come back from a reboot within the timeout (``result`` says what was seen)."""


def check_params(p):
    """The module's parameters, checked; ParameterError names the option and the fix."""
    p = dict(p)
    check_value("node", p.get("node"), "dns_subdomain")
    previous = p.get("previous_boot_id")
    if not isinstance(previous, str) or not BOOT_ID.match(previous):
        raise ParameterError("previous_boot_id", "%r is not a boot ID: give the Node's status.nodeInfo.bootID read before the reboot "
                                                 "(gpu_quarantine returns it as boot_id_at_quarantine)" % (previous,))
    if p.get("timeout", 0) <= 0:
        raise ParameterError("timeout", "%r must be a positive number of seconds" % (p.get("timeout"),))
    return p


def boot_state(node):
    """``(bootID, ready)`` of a Node (a dict as the API serves it); ready only where the Ready condition is True."""
    status = node.get("status") or {}
    boot_id = (status.get("nodeInfo") or {}).get("bootID") or ""
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
    return boot_id, ready


def wait_rebooted(api, p, check_mode, clock=time.monotonic):
    """The module's result: the node's new bootID once it differs from ``previous_boot_id`` with Ready True."""
    start = clock()
    watch = Watcher(api.list_node, field_selector="metadata.name=%s" % p["node"], _clock=clock)
    nodes = watch.list()
    if not nodes:
        raise NodeRebootError("node %s: no such Node" % p["node"])
    boot_id, ready = boot_state(nodes[0])
    result = {"node": p["node"], "previous_boot_id": p["previous_boot_id"], "boot_id": boot_id, "ready": ready,
              "rebooted": boot_id != p["previous_boot_id"], "changed": False}
    if check_mode:
        return dict(result, msg="would wait up to %d s for node %s to report a bootID other than %s, Ready"
                    % (p["timeout"], p["node"], p["previous_boot_id"]))

    def done(w):
        found = w.values()
        if not found:
            return False
        boot, up = boot_state(found[0])
        return boot != p["previous_boot_id"] and up

    watch.wait(done, start + p["timeout"])
    found = watch.values()
    boot_id, ready = boot_state(found[0]) if found else ("", False)
    result.update(boot_id=boot_id, ready=ready, rebooted=bool(boot_id) and boot_id != p["previous_boot_id"], seconds=int(clock() - start),
                  api_calls=watch.calls)
    if not result["rebooted"]:
        raise NodeRebootError("node %s did not reboot: its bootID is still %s after %d s (was the reboot command run on that node, and did it "
                              "reach systemd?)" % (p["node"], p["previous_boot_id"], p["timeout"]), result)
    if not ready:
        raise NodeRebootError("node %s rebooted (bootID %s) but is not Ready after %d s: its kubelet did not come back"
                              % (p["node"], boot_id, p["timeout"]), result)
    msg = "node %s rebooted (bootID %s -> %s) and is Ready after %d s" % (p["node"], p["previous_boot_id"], boot_id, result["seconds"])
    return dict(result, msg=msg)
