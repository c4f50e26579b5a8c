# -*- coding: utf-8 -*-
"""What hack/states_doc.py and hack/eda_docs.py share: a page (or a part of one) written from the code, or, with --check,
compared with it (exit 1 where it differs, naming the command that writes it)."""

import os
import sys


def write_or_check(path, new, argv, command):
    """Write ``new`` to ``path`` atomically where it differs; with ``--check`` in ``argv`` only compare. The exit status."""
    try:
        with open(path, encoding="utf-8") as handle:
            old = handle.read()
    except FileNotFoundError:
        old = None
    if "--check" in argv:
        if old != new:
            sys.stderr.write("%s is stale: run %s\n" % (path, command))
            return 1
        return 0
    if old != new:
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            handle.write(new)
        os.replace(path + ".tmp", path)
    return 0
