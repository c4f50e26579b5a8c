# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run the modules through Ansible itself: ansible-playbook on localhost against temp sysroots."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
PLAYBOOKS = os.path.join(ROOT, "tests", "integration", "playbooks")
RECAP = re.compile(r"^localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


@pytest.fixture()
def playbook(tmp_path):
    """playbook(name, env, **extra_vars) -> (ok, changed, failed, output); fails the test on a failed task."""

    def run(name, env, **extra_vars):
        env = dict(env)
        env.update(
            ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"),
            ANSIBLE_PYTHON_INTERPRETER=sys.executable,
            ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"),
            ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-remote"),
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_FORCE_COLOR="0",
            ANSIBLE_DEPRECATION_WARNINGS="0",
            ANSIBLE_RETRY_FILES_ENABLED="0",
        )
        extra_vars.setdefault("workdir", str(tmp_path))
        cmd = [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "-i", "localhost,", "-c", "local",
            "-e", json.dumps(extra_vars),
            os.path.join(PLAYBOOKS, name),
        ]
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        recap = RECAP.search(proc.stdout)
        assert proc.returncode == 0 and recap, proc.stdout[-6000:]
        ok, changed, unreachable, failed = (int(x) for x in recap.groups())
        assert (unreachable, failed) == (0, 0), proc.stdout[-6000:]
        return ok, changed, proc.stdout

    return run
