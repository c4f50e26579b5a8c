# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""hack/adversarial-pass.py over every module: 1,778 hostile option values, none may end in a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the modules as nobody: needs root to drop to it")
def test_no_hostile_option_value_ends_in_a_traceback(tmp_path):
    report = tmp_path / "pass.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "hack", "adversarial-pass.py"), "--json", str(report)],
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    results = json.loads(report.read_text())
    modules = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "plugins", "modules")) if f.endswith(".py"))
    assert sorted({r["module"] for r in results}) == modules
    assert len(results) >= 1500, len(results)
    # the pass reached the modules' own checks, not only ansible-core's type coercion
    assert any(r["verdict"] == "failed" and "must be an absolute path" in (r["detail"] or "") for r in results)
