# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection (controller side): a run's report files, written on the controller.

``write`` is gpuops.fleet.report_files' whole work, done by its action plugin in the controller's own process: the
directory made where missing, each file written whole to a temporary file beside it and renamed over the old one (a
reader, or a run killed midway, sees the old file or the new one, never a part). No module runs for it: the
``ansible.builtin.file`` and ``ansible.builtin.copy`` tasks this replaces cost a Python process per file and the
modules' packaging at every run (issue 62).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

MODE = 0o644
DIR_MODE = 0o755


def checked(directory, files):
    """``(directory, [(name, text)])`` of the module's options; a ParameterError names the field and the fix."""
    if not isinstance(directory, str) or not directory.strip() or "\x00" in directory:
        raise ParameterError("dir", "give the report directory's path (a non-empty string)")
    if not isinstance(files, list) or not files:
        raise ParameterError("files", "give a list of {name, content}, one per file")
    out, seen = [], set()
    for index, item in enumerate(files):
        field = "files[%d]" % index
        if not isinstance(item, Mapping):
            raise ParameterError(field, "give a mapping {name, content}, not %s" % type(item).__name__)
        unknown = sorted(set(item) - {"name", "content"})
        if unknown:
            raise ParameterError("%s.%s" % (field, unknown[0]), "not an option here (name and content only)")
        name, content = item.get("name"), item.get("content")
        if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\x00" in name or name.startswith(".gpuops-"):
            raise ParameterError(field + ".name", "give a plain file name inside dir (no /, not . or ..), got %r" % (name,))
        if name in seen:
            raise ParameterError(field + ".name", "%r is named twice" % name)
        if not isinstance(content, str):
            raise ParameterError(field + ".content", "give the file's text (a string), not %s" % type(content).__name__)
        seen.add(name)
        out.append((name, content))
    return directory, out


def write(directory, files):
    """Write ``checked``'s files into ``directory`` (made with mode 0755 where missing), each atomically with mode 0644.
    Returns ``[{"path", "size"}]``; an OSError names the path it failed on (the files written before it stay)."""
    directory = os.path.abspath(os.path.expanduser(directory))
    os.makedirs(directory, mode=DIR_MODE, exist_ok=True)
    written = []
    for name, content in files:
        path = os.path.join(directory, name)
        data = content.encode("utf-8")
        handle, temp = tempfile.mkstemp(prefix=".gpuops-", dir=directory)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.chmod(temp, MODE)
            os.replace(temp, path)
        except BaseException:
            if os.path.exists(temp):
                os.unlink(temp)
            raise
        written.append({"path": path, "size": len(data)})
    return written
