# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuops.fleet.report_files: a run's report written on the controller, atomically, with no module and no connection."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpuops.fleet.plugins.plugin_utils import _report_files


class _Task:
    def __init__(self, args, check_mode=False):
        self.args, self.check_mode, self.async_val = args, check_mode, 0


def _run(args, monkeypatch, check_mode=False):
    from ansible.plugins.action import ActionBase

    from ansible_collections.gpuops.fleet.plugins.action import report_files as action_mod

    action = action_mod.ActionModule.__new__(action_mod.ActionModule)
    action._task = _Task(args, check_mode)

    def refuse(*args, **kwargs):
        raise AssertionError("report_files ran a module or a command")

    action._execute_module = action._low_level_execute_command = refuse
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    return action.run(task_vars={})


def test_the_files_are_written_whole_with_their_modes_in_check_mode_too_and_never_a_change(tmp_path, monkeypatch):
    where = tmp_path / "a" / "report"
    files = [{"name": "fleet-summary.md", "content": "# fleet\n"}, {"name": "fleet-summary.json", "content": '{"nodes": []}\n'},
             {"name": "page.html", "content": "<p>é</p>"}]
    for check_mode in (False, True):
        result = _run({"dir": str(where), "files": files}, monkeypatch, check_mode)
        assert not result.get("failed") and result["changed"] is False, result
        assert result["files"] == [{"path": str(where / f["name"]), "size": len(f["content"].encode())} for f in files]
        assert [(where / f["name"]).read_text(encoding="utf-8") for f in files] == [f["content"] for f in files]
        assert stat.S_IMODE(os.stat(where).st_mode) == 0o755
        assert all(stat.S_IMODE(os.stat(where / f["name"]).st_mode) == 0o644 for f in files)
        # nothing left beside them (no temporary file)
        assert sorted(os.listdir(where)) == sorted(f["name"] for f in files)
        files = [dict(f, content=f["content"] + "second run\n") for f in files]


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch):
    (tmp_path / "fleet-summary.md").write_text("old\n")

    def broken(src, dst):
        raise OSError(28, "No space left on device", dst)

    monkeypatch.setattr(_report_files.os, "replace", broken)
    result = _run({"dir": str(tmp_path), "files": [{"name": "fleet-summary.md", "content": "new\n"}]}, monkeypatch)
    assert result["failed"] and result["msg"].startswith("dir: could not write the report under %s: No space left on device" % tmp_path)
    assert (tmp_path / "fleet-summary.md").read_text() == "old\n" and os.listdir(tmp_path) == ["fleet-summary.md"]


@pytest.mark.parametrize("args, named", [
    ({"files": [{"name": "a", "content": ""}]}, "dir: give the report directory's path"),
    ({"dir": "", "files": [{"name": "a", "content": ""}]}, "dir: give the report directory's path"),
    ({"dir": "REPORT", "files": []}, "files: give a list of {name, content}"),
    ({"dir": "REPORT", "files": "a.md"}, "files: give a list of {name, content}"),
    ({"dir": "REPORT", "files": ["a.md"]}, "files[0]: give a mapping {name, content}, not str"),
    ({"dir": "REPORT", "files": [{"name": "../etc/passwd", "content": "x"}]}, "files[0].name: give a plain file name inside dir"),
    ({"dir": "REPORT", "files": [{"name": "..", "content": "x"}]}, "files[0].name: give a plain file name inside dir"),
    ({"dir": "REPORT", "files": [{"name": "a", "content": "x"}, {"name": "a", "content": "y"}]}, "files[1].name: 'a' is named twice"),
    ({"dir": "REPORT", "files": [{"name": "a", "content": {"nodes": []}}]}, "files[0].content: give the file's text (a string), not dict"),
    ({"dir": "REPORT", "files": [{"name": "a", "content": "x", "mode": "0777"}]}, "files[0].mode: not an option here"),
    ({"dir": "REPORT", "files": [{"name": "a", "content": "x"}], "dest": "/etc"}, "dest: not an option of gpuops.fleet.report_files"),
])
def test_bad_options_are_named_and_nothing_is_written(args, named, monkeypatch, tmp_path):
    where = tmp_path / "report"
    if args.get("dir") == "REPORT":
        args = dict(args, dir=str(where))
    result = _run(args, monkeypatch)
    assert result["failed"] and result["msg"].startswith(named), result["msg"]
    assert not where.exists()
