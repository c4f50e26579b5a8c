# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: each node module compiled once when it is imported from a zip.

The node code always runs from a zip: a module's AnsiballZ payload and the boot guard's ``gpuops.pyz``
are imported by CPython's ``zipimport``, which holds sources, no bytecode. There, importing a source
module compiles it **twice**: the import system asks ``zipimporter.get_filename`` for the module's
file while it builds the spec, and ``get_filename`` finds it by compiling the code (``_get_module_code``);
then ``get_code`` compiles it again to run it (python/cpython#141276, open; the fix, python/cpython#153799,
is not merged; CPython 3.8 to 3.14 all do it). For the checkpoint plan that was about half the
module's CPU on the node beyond ping's (the collection's node code is about 200 KB of source).

:func:`install` keeps what ``_get_module_code`` returned for each (archive, prefix, module) of the
process, so the second call for the same module is a dictionary read: the same code object the first
compile made, from the same bytes (a zip's entries do not change under a running process). Errors are
not kept (a module not found is asked again, as before). It is installed by ``_node/__init__.py`` only
when that package itself was imported from a zip (the node's processes), never in a controller or a
test that imports the node code from files; a Python without ``_get_module_code`` (another zipimport)
is left as it is, and a call with more arguments than today's two, or for an importer without zipimport's ``archive``
and ``prefix``, goes to zipimport's own helper uncached (the node code runs before kubelet at boot: a later CPython must
never fail an import here, nor get one zip's code for another's module).
"""

from __future__ import annotations

import zipimport

# the attribute that marks the wrapper, so a second install (another package, a re-import) adds nothing
MARK = "_gpuops_compile_once"


def from_zip(spec):
    """True when ``spec`` (a module's ``__spec__``) was loaded by zipimport."""
    return isinstance(getattr(spec, "loader", None), zipimport.zipimporter)


def install(spec):
    """Compile each module of the zip once from now on, when ``spec`` came from a zip; True when installed by this call."""
    found = getattr(zipimport, "_get_module_code", None)
    if not from_zip(spec) or found is None or getattr(found, MARK, False):
        return False
    compiled = {}

    def once(importer, fullname, *more, **named):
        archive, prefix = getattr(importer, "archive", None), getattr(importer, "prefix", None)
        if more or named or archive is None or prefix is None:
            # a zipimport whose helper takes more than these two, or whose importer does not name its zip and place:
            # its own answer, every time (never one zip's code for another's module of the same name)
            return found(importer, fullname, *more, **named)
        key = (archive, prefix, fullname)
        done = compiled.get(key)
        if done is None:
            done = compiled[key] = found(importer, fullname)
        return done

    setattr(once, MARK, True)
    zipimport._get_module_code = once
    return True
