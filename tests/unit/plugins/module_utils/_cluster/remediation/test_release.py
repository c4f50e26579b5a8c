# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release (_cluster/remediation/release.py) on the fake API: the ledger's entry closed first, only what is ours taken
off, the condition True; a node with nothing of ours is no change; check mode writes nothing."""

from __future__ import annotations

import math

from fake_core_api import GOOD, NOW, WHERE, ApiError, FakeApi, params

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import marks, release, states
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import quarantine as q
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.session import Session


def test_a_release_of_a_node_whose_entry_has_a_nan_time_releases_it():
    """The review's case: an entry with at NaN made every release of that node crash. Its entry is unreadable, so it is not
    the node's open entry: the release removes the node's marks and says so."""
    api = FakeApi(dict(ledgers.empty(), entries=[dict(GOOD, node="a", at=float("nan")), dict(GOOD)]))
    q.quarantine(Session(api, params(), False, ApiError, now=NOW))
    released = release.release(Session(api, params(state="released"), False, ApiError, now=NOW + 5))
    assert released["changed"] and released["recover_seconds"] == 5 and not api.node["spec"]["unschedulable"]
    back = ledgers.parse(api.cm, WHERE)
    assert [(e["node"], e["closed_at"]) for e in back["entries"]] == [("b", None), ("a", NOW + 5)] and len(back["invalid"]) == 1


def test_a_node_with_nothing_of_ours_is_no_change_and_check_mode_writes_nothing():
    api = FakeApi(ledgers.empty())
    calm = release.release(Session(api, params(state="released"), False, ApiError, now=NOW))
    assert calm["changed"] is False and api.calls == []
    q.quarantine(Session(api, params(), False, ApiError, now=NOW))
    calls = list(api.calls)
    preview = release.release(Session(api, params(state="released"), True, ApiError, now=NOW + 60))
    assert preview["changed"] is True and preview["msg"] == "would release a" and api.calls == calls
    done = release.release(Session(api, params(state="released"), False, ApiError, now=NOW + 60))
    assert done["changed"] and done["untainted"] and done["recover_seconds"] == 60
    assert marks.TAINT_KEY not in str(api.node["spec"]) and marks.REMEDIATION not in api.node["metadata"]["annotations"]
    (entry,) = ledgers.parse(api.cm, WHERE)["entries"]
    assert (entry["result"], entry["closed_at"], entry["recover_seconds"]) == ("recovered", NOW + 60, 60)
    # the move to released is the table's: a closed entry is never moved again
    assert states.TABLE[states.RELEASED]["next"] == () and math.isfinite(entry["recover_seconds"])
    again = release.release(Session(api, params(state="released"), False, ApiError, now=NOW + 90))
    assert again["changed"] is False
