# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the gpu_remediation role fetches of a node's bug report (outcome.bug_report_fetch, the filter _bug_report_fetch):
issue 57, item 5. The role fetched evidence.bug_report.path from the node whenever the node's result named one, whatever
gpu_remediation_evidence_bug_report said and whatever its size: the node named what the controller fetched."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.filter.remediation import bug_report_fetch

DIR = "/var/lib/gpuops/evidence"
GOOD = {"bug_report": {"path": DIR + "/nvidia-bug-report-5b0e6f0a-0000-4000-8000-000000000001.log.gz", "bytes": 4096, "sha256": "0" * 64}}


def stat(size, exists=True, isreg=True):
    return {"stat": {"exists": exists, "isreg": isreg, "size": size}}


def test_only_what_the_run_allowed_in_the_directory_it_chose_under_the_cap():
    assert bug_report_fetch(GOOD, True, DIR, 1 << 20) == {"path": GOOD["bug_report"]["path"]}
    assert bug_report_fetch(GOOD, True, DIR + "/", 1 << 20, stat(4096)) == {"path": GOOD["bug_report"]["path"]}
    assert "not allowed" in bug_report_fetch(GOOD, False, DIR, 1 << 20)["skipped"]
    assert "not allowed" in bug_report_fetch(GOOD, "false", DIR, 1 << 20)["skipped"]  # an AWX survey's string
    assert bug_report_fetch(None, True, DIR, 1 << 20) == {"skipped": "the node wrote no bug report"}


@pytest.mark.parametrize("path", ["/etc/shadow", "/root/.kube/config", DIR + "/../../../etc/shadow", DIR + "/x/nvidia-bug-report-1.log.gz",
                                  DIR + "/nvidia-bug-report-1.log.gz/../../../etc/shadow", "/var/lib/gpuops/evidence-x/nvidia-bug-report-1.log",
                                  DIR + "/nvidia-bug-report-" + "a" * 37 + ".log", DIR + "/nvidia-bug-report-1.log.gz\n", 5, None])
def test_a_path_the_node_named_outside_the_runs_choice_is_never_fetched(path):
    got = bug_report_fetch({"bug_report": {"path": path, "bytes": 10}}, True, DIR, 1 << 20)
    assert "path" not in got and got["skipped"], got


@pytest.mark.parametrize("reported, now", [(1 << 30, None), (10, 1 << 30), ("10", None), (True, None), (None, None)])
def test_a_size_over_the_cap_as_reported_or_as_it_is_now_is_never_fetched(reported, now):
    evidence = {"bug_report": dict(GOOD["bug_report"], bytes=reported)}
    got = bug_report_fetch(evidence, True, DIR, 1 << 20, stat(now) if now is not None else None)
    assert "path" not in got and "over gpu_remediation_evidence_bug_report_max_bytes" in got["skipped"], got


def test_a_file_that_is_not_a_regular_one_now_is_never_fetched():
    assert "not a regular file" in bug_report_fetch(GOOD, True, DIR, 1 << 20, stat(10, isreg=False))["skipped"]
    assert "not a regular file" in bug_report_fetch(GOOD, True, DIR, 1 << 20, stat(10, exists=False))["skipped"]
