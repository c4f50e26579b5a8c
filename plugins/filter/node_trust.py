# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter gpuops.fleet._trusted_hosts: the hosts whose facts name no variable the controller acts on
(plugin_utils/_node_trust.py); the playbooks' plumbing, private (a leading underscore)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.gpuops.fleet.plugins.plugin_utils import _node_trust

display = Display()


def trusted_hosts(hosts, hostvars):
    """``hosts`` less those whose ``ansible_facts`` name a controller variable; a warning names each one left out."""
    if hosts is None:
        return []
    if isinstance(hosts, str) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError("_trusted_hosts: expects a list of inventory host names, got %s" % type(hosts).__name__)
    kept = []
    for host in hosts:
        why = _node_trust.refusal(host, _node_trust.host_facts(hostvars, host))
        if why:
            display.warning(why)
            continue
        kept.append(host)
    return kept


class FilterModule:
    def filters(self):
        return {"_trusted_hosts": trusted_hosts}
