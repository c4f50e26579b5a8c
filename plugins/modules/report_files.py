#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: report_files
short_description: Write a run's report files on the controller, with no module run and no connection
version_added: 0.4.0
description:
  - Writes the files of a run's report (the fleet summary's Markdown, JSON and fleet page, the GPU health report, a
    remediation's report) into a directory on the controller, making the directory (mode C(0755)) where it is missing.
  - Each file is written whole to a temporary file beside it and renamed over the old one, with mode C(0644), so a reader,
    or a run killed midway, finds the old file or the new one, never a part of one.
  - Runs on the controller, in ansible-core's own process, through the module's action plugin, whatever host the task
    runs for; no module runs and no connection is opened. The C(ansible.builtin.file) and C(ansible.builtin.copy) tasks
    it replaces cost a Python process per file and the modules' packaging at every run.
  - The report is the run's output, not the fleet's state - the files are written in check mode too, and the task never
    reports a change.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.attributes
attributes:
  check_mode:
    support: full
    details:
      - The files are written in check mode too (the report is what a check run is for); nothing else is changed.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - Never reports a change; each run rewrites the files with its own report.
options:
  dir:
    description:
      - The report directory on the controller (C(~) is expanded); made where it is missing.
    type: path
    required: true
  files:
    description:
      - The files to write, in this order.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - The file's name inside O(dir) - a plain name, no C(/), not C(.) or C(..).
        type: str
        required: true
      content:
        description:
          - The file's text, written as UTF-8.
        type: str
        required: true
seealso:
  - module: ansible.builtin.copy
"""

EXAMPLES = r"""
- name: Write the report (Markdown and JSON)
  gpuops.fleet.report_files:
    dir: "{{ gpuops_report_dir }}"
    files:
      - name: fleet-summary.md
        content: "{{ gpuops_fleet_rows | gpuops.fleet.fleet_markdown }}"
      - name: fleet-summary.json
        content: "{{ {'nodes': gpuops_fleet_rows} | to_nice_json(indent=2) }}"
"""

RETURN = r"""
dir:
  description: The report directory, as an absolute path.
  returned: success
  type: str
  sample: /runner/artifacts/1234/gpuops-report
files:
  description: The files written, in order.
  returned: success
  type: list
  elements: dict
  contains:
    path:
      description: The file's path.
      type: str
      sample: /runner/artifacts/1234/gpuops-report/fleet-summary.md
    size:
      description: Its size in bytes.
      type: int
      sample: 2048
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dir=dict(type="path", required=True),
            files=dict(type="list", elements="dict", required=True,
                       options=dict(name=dict(type="str", required=True), content=dict(type="str", required=True))),
        ),
        supports_check_mode=True,
    )
    module.fail_json(msg="gpuops.fleet.report_files runs on the controller through its action plugin; run it as a task "
                         "(not through another action)")


if __name__ == "__main__":
    main()
