#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: guard_code
short_description: Install the node-side gpuops command's code as one file
version_added: 0.3.0
description:
  - Builds, on the controller, one zip of the C(gpuops) command (the boot guard and C(gpuops metrics)) - its entry point
    and every module_util it imports, found from its imports - and copies it to O(dest) with C(ansible.builtin.copy),
    one transfer per node instead of one per file. Python runs it from there (zipimport); C(/usr/local/bin/gpuops) is
    a three-line wrapper that puts it on C(sys.path).
  - Reproducible - the same collection gives the same bytes (sorted entries, a fixed time and mode, stored
    uncompressed), so a second run changes nothing.
  - The C(gpuops.fleet.checkpoint_guard) role uses it; it runs through its action plugin on the controller.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  dest:
    description: Absolute path of the file on the node.
    type: path
    required: true
  mode:
    description: Its mode.
    type: str
    default: "0644"
seealso:
  - module: gpuops.fleet.kubelet_checkpoint
"""

EXAMPLES = r"""
- name: The boot guard's code, one file
  gpuops.fleet.guard_code:
    dest: /usr/local/lib/gpuops/gpuops.pyz
"""

RETURN = r"""
files:
  description: The archive's entries.
  returned: always
  type: list
  elements: str
  sample: [gpuops_main.py, ansible_collections/gpuops/fleet/plugins/module_utils/_node/guard.py]
size:
  description: Its size in bytes.
  returned: always
  type: int
  sample: 207565
sha256:
  description: Its SHA-256 (the same for the same collection).
  returned: always
  type: str
  sample: 9f2c...
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(dest=dict(type="path", required=True), mode=dict(type="str", default="0644")), supports_check_mode=True)
    module.fail_json(msg="gpuops.fleet.guard_code builds its file on the controller: it runs through its action plugin, not on its own")


if __name__ == "__main__":
    main()
