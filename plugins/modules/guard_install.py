#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: guard_install
short_description: Install the node-side gpuops command, its configuration and units in one step
version_added: 0.3.0
description:
  - Installs the boot guard on a node with one call instead of a task per file - the directories, the command's code
    (one file), the wrapper, the configuration and the units (each written atomically, only when its bytes or mode
    differ), then a self-test of the installed command, the C(/dev/char) links of the NVIDIA device nodes, one
    C(systemctl daemon-reload) when a unit file changed, and each unit enabled or disabled.
  - The code is one zip built on the controller by the action plugin from the C(gpuops) command's entry point and the
    collection's node code (C(plugins/module_utils/_node), C(_common)) whole - reproducible, the same collection gives
    the same bytes. The action plugin first reads the node's file's SHA-256 with C(sha256sum) (a shell command, no
    module) and sends the bytes only where it differs (never in check mode), so every run is one module call per node
    and a second run sends no code.
  - The C(gpuops.fleet.checkpoint_guard) role installs the guard through M(gpuops.fleet.kubelet_checkpoint)'s C(role)
    option, in the plan's task, with the files C(gpuops.fleet._checkpoint_guard_files)'s code builds from its checked
    settings. Use the role.
author:
  - gpuops.fleet maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: Text files show their before and after; the code file shows its SHA-256.
  idempotent:
    support: full
options:
  spec:
    description:
      - This module's options as one mapping, merged under the options the task names (those win) by the module's
        action plugin on the controller; so a role passes its one built value without a templated argument dict,
        which ansible-core 2.19 and later warn is unsafe. Keys must be options of this module.
    type: dict
    version_added: 0.4.0
  planned:
    description:
      - The RV(gpuops.fleet.kubelet_checkpoint#module:guard) result of a plan that read this install, read-only, in
        its own round trip (M(gpuops.fleet.kubelet_checkpoint)'s O(gpuops.fleet.kubelet_checkpoint#module:guard) option).
      - Where it says the install would change nothing and owes no self-test, for exactly this task's options (its
        C(fingerprint)), the node gets no call at all and the result is that reading (RV(planned) is V(true)). Where it
        says a change is needed, the code's bytes go only where it found the node's file different (no
        C(sha256sum) first). A reading for other options, or one that failed, is not trusted.
    type: dict
    version_added: 0.4.0
  directories:
    description: Directories to create (with their parents) and give a mode, in this order.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path.
        type: path
        required: true
      mode:
        description: Octal mode, e.g. C("0755").
        type: str
        required: true
      name:
        description: The setting it comes from (e.g. C(checkpoint_guard_lib_dir)), named when its filesystem is refused.
        type: str
  require_persistent:
    description:
      - Refuse, before anything changes, a directory in O(directories) on tmpfs or ramfs (empty again after a reboot,
        such as Container-Optimized OS's C(/etc)). A directory on a read-only mount is always refused (an image-based
        node's C(/usr)); the filesystem is read from C(/proc/self/mountinfo).
    type: bool
    default: false
  code:
    description: Where the command's code goes. The action plugin adds its SHA-256 and, where needed, its bytes.
    type: dict
    required: true
    suboptions:
      path:
        description: Absolute path of the file, e.g. C(/usr/local/lib/gpuops/gpuops.pyz).
        type: path
        required: true
      mode:
        description: Octal mode.
        type: str
        default: "0644"
      sha256:
        description: SHA-256 of the file the controller built (set by the action plugin).
        type: str
      data:
        description: The file's bytes, base64 (set by the action plugin only where the node's file differs; never logged).
        type: str
  files:
    description: Text files to write, in this order (the wrapper, the configuration, the units).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path.
        type: path
        required: true
      content:
        description: The file's text.
        type: str
        required: true
      mode:
        description: Octal mode.
        type: str
        required: true
      unit:
        description: Whether it is a systemd unit file (a change makes one C(systemctl daemon-reload)).
        type: bool
        default: false
  absent:
    description:
      - Paths to remove when present (what an older layout or a switched-off feature left); a directory goes whole.
      - An entry with O(absent[].only) or O(absent[].contains) is removed only when it holds nothing but the guard's own
        older files; otherwise it is left alone and named in RV(left_alone), with a warning.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path.
        type: path
        required: true
      unit:
        description: The systemd unit this file is, disabled before it is removed (with O(systemd=true)).
        type: str
      only:
        description:
          - A directory's one subtree, such as V(gpuops/fleet) - the directory is removed only when, level by level, it
            holds nothing but that subtree (and Python's C(__pycache__) and C(__init__.py)).
        type: str
      contains:
        description: A file is removed only when its bytes contain this text (the guard's older entry point names its import).
        type: str
  links:
    description:
      - Symlinks to make after the files (for example a unit's C(.wants/) links where systemd cannot be asked), each
        made atomically; a path that exists and is not a symlink is refused.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the link.
        type: path
        required: true
      target:
        description: What it points to.
        type: str
        required: true
  selftest:
    description:
      - The installed command to run once the files are in place (read-only, e.g. C(gpuops report --config ...)). Exit
        codes 0, 3, 4 and 5 mean the guard works; any other fails the task with its output.
      - Run when a file was written or removed, when the install's manifest (C(gpuops-install.json) beside the code)
        does not say that it passed (an earlier run failed it, or was killed before it), or every time with
        O(selftest.always=true). A failed install stays failed until the self-test passes. Not run in check mode.
    type: dict
    suboptions:
      argv:
        description: The command and its arguments.
        type: list
        elements: str
        required: true
      environment:
        description: Environment variables added for it (e.g. C(LD_LIBRARY_PATH) of the driver).
        type: dict
        default: {}
      always:
        description: Run it even when nothing changed.
        type: bool
        default: false
  systemd:
    description: Whether systemd manages the units here (false in a sysroot or a container without systemd).
    type: bool
    default: false
  dev_char_symlinks:
    description:
      - With O(systemd=true), create C(/dev/char/MAJOR:MINOR) links for the NVIDIA device nodes before any daemon-reload
        (nvidia-container-toolkit#251), where C(/dev/nvidiactl) exists.
    type: bool
    default: false
  units:
    description: Units to enable or disable (with O(systemd=true)), after the daemon-reload.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Unit name.
        type: str
        required: true
      enabled:
        description: Whether it starts at boot.
        type: bool
        required: true
seealso:
  - module: gpuops.fleet.kubelet_checkpoint
"""

EXAMPLES = r"""
# What the gpuops.fleet.checkpoint_guard role installs, as this module's options (shortened)
- name: Install the boot guard
  gpuops.fleet.guard_install:
    directories:
      - {path: /usr/local/lib/gpuops, mode: "0755"}
    code:
      path: /usr/local/lib/gpuops/gpuops.pyz
    files:
      - path: /usr/local/bin/gpuops
        content: "{{ wrapper_text }}"
        mode: "0755"
      - path: /etc/systemd/system/gpuops.service
        content: "{{ unit_text }}"
        mode: "0644"
        unit: true
    selftest:
      argv: [/usr/local/bin/gpuops, report, --config, /etc/gpuops/gpuops.json]
    systemd: true
    dev_char_symlinks: true
    units:
      - {name: gpuops.service, enabled: true}

# One round trip per node where nothing changes: the plan reads whether this install would change anything, and
# the install trusts that reading (the checkpoint_guard role does both in one task: kubelet_checkpoint's install_guard)
- name: Plan (read-only), and read the guard's install
  gpuops.fleet.kubelet_checkpoint:
    guard: "{{ guard_spec }}"
  check_mode: true
  register: plan

- name: Install the boot guard where the plan found something to change
  gpuops.fleet.guard_install:
    spec: "{{ guard_spec }}"
    planned: "{{ plan.guard }}"
"""

RETURN = r"""
planned:
  description: Whether the result is the plan's reading (O(planned)), with no call on the node.
  returned: always
  type: bool
  version_added: 0.4.0
code:
  description: The command's code file the controller built.
  returned: always
  type: dict
  contains:
    path: {description: Where it is on the node., type: str}
    sha256: {description: Its SHA-256 (the same for the same collection)., type: str}
    size: {description: Its size in bytes., type: int}
    entries: {description: The archive's entries., type: list, elements: str}
    sent: {description: Whether its bytes were sent to this node in this run., type: bool}
directories:
  description: Directories created (V(created)) or given their mode (V(mode)).
  returned: always
  type: list
  elements: dict
filesystems:
  description: The filesystem of each directory in O(directories) (C(path), C(filesystem), C(mount)), as checked.
  returned: always
  type: list
  elements: dict
links:
  description: Symlinks made (C(path), C(target), C(action)).
  returned: always
  type: list
  elements: dict
files:
  description: Files written, each with its C(path), C(action) (V(created), V(updated), V(mode)) and C(sha256).
  returned: always
  type: list
  elements: dict
removed:
  description: Paths removed, each with the unit disabled first, if any.
  returned: always
  type: list
  elements: dict
selftest:
  description: The self-test's C(rc), C(cmd), C(stdout) and C(stderr); null where it did not run (check mode, nothing changed).
  returned: always
  type: dict
dev_char_symlinks:
  description: C(created), C(present) and C(conflicts) of the /dev/char links; null where not run.
  returned: always
  type: dict
daemon_reload:
  description: Whether systemd was (or in check mode would be) reloaded.
  returned: always
  type: bool
units:
  description: Units enabled or disabled, each with C(unit) and C(enabled).
  returned: always
  type: list
  elements: dict
left_alone:
  description: Entries of O(absent) that hold more than the guard's own older files, each with C(path) and C(reason); nothing was removed there.
  returned: always
  type: list
  elements: dict
selftest_owed:
  description: Whether the self-test is still owed (its last run failed, or a run was killed before it); false once it passed.
  returned: always
  type: bool
manifest:
  description: The install's manifest (the directories the guard created and the self-test's state), beside the code.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._node import edge
from ansible_collections.gpuops.fleet.plugins.module_utils._node.install import ARGUMENT_SPEC, checked, install


def main():
    module = AnsibleModule(argument_spec=dict(ARGUMENT_SPEC, spec=dict(type="dict"), planned=dict(type="dict")), supports_check_mode=True)
    if module.params["spec"] is not None or module.params["planned"] is not None:
        module.fail_json(msg="spec and planned: taken by the action plugin of gpuops.fleet.guard_install on the controller; run the "
                         "module as a task (not through another action), or give the options themselves")

    def run(argv, env):
        return module.run_command(argv, environ_update=env or {})

    # an install step that failed says what was done before it (InstallError.result, merged by edge.run)
    result = edge.run(module, lambda: install(checked(module.params), run, check_mode=module.check_mode, diff=module._diff))
    for row in result["left_alone"]:
        module.warn("left alone, not the guard's to remove: %s" % row["reason"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
