# -*- coding: utf-8 -*-
"""Write the guide's table and diagram of a node's remediation states from the table itself
(plugins/module_utils/_cluster/remediation/states.py), between the guide's two markers; --check: exit 1 where the guide
differs (tests/unit/plugins/module_utils/_cluster/remediation/test_states.py runs the same comparison)."""

import os
import sys

import docgen

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
GUIDE = os.path.join(ROOT, "docs", "docsite", "rst", "guide_health.rst")
BEGIN = ".. BEGIN states: written by hack/states_doc.py from states.py; edit the table, not this"
END = ".. END states"


def load():
    """states.py, imported as the collection's (its one import is the collection's error base)."""
    link = os.path.join(ROOT, "build", "collections")
    if os.path.isdir(os.path.join(link, "ansible_collections", "gpuops", "fleet")):
        sys.path.insert(0, link)
    from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import states
    return states


def written(text, table):
    """``text`` (the guide) with the block between the markers made ``table``'s; ValueError where a marker is missing."""
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n\n" + table + "\n" + text[stop:]


def main(argv):
    with open(GUIDE, encoding="utf-8") as handle:
        text = handle.read()
    return docgen.write_or_check(GUIDE, written(text, load().diagram()), argv, "python hack/states_doc.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
