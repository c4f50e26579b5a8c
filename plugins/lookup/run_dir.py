# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: run_dir
short_description: The directory that belongs to this run (the job's artifacts dir, else the current directory)
version_added: 0.2.0
author: gpuops.fleet maintainers (@gpuops)
description:
  - Under ansible-runner, and so under AWX and AAP, the job's artifacts directory, which ansible-runner passes to the
    run as E(AWX_ISOLATED_DATA_DIR) (C(ansible_runner/config/_base.py)); files written there stay with the job.
  - Elsewhere the directory C(ansible-playbook) was started in (the controller process's working directory, not
    E(PWD), which a parent process may not have updated, and not the playbook's directory, which is inside the
    collection and may be read-only).
  - C(playbooks/site.yml) writes its report under it by default.
options: {}
"""

EXAMPLES = r"""
- name: Where this run's files go
  ansible.builtin.debug:
    msg: "{{ lookup('gpuops.fleet.run_dir') }}/gpuops-report"
"""

RETURN = r"""
_raw:
  description: One absolute directory path.
  type: list
  elements: path
"""

import os

from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        return [os.environ.get("AWX_ISOLATED_DATA_DIR") or os.getcwd()]
