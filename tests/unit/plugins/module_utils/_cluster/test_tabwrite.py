# -*- coding: utf-8 -*-
"""kubectl's table layout (Go's text/tabwriter)."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.pods import active
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.tabwrite import tabwrite


def test_tabwrite_matches_go_column_blocks():
    # a line without a tab ends the block: the columns below it are sized on their own
    assert tabwrite("a\tbb\t\nccc\td\t\n--\nx\ty\n") == "a    bb\nccc  d\n--\nx  y\n"


def test_a_pod_is_active_until_its_phase_is_terminal():
    assert active({"status": {"phase": "Running"}}) and active({}) and active({"status": {"phase": "Pending"}})
    assert not active({"status": {"phase": "Succeeded"}}) and not active({"status": {"phase": "Failed"}})
