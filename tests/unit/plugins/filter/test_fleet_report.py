# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet summary filters: table and Markdown from per-node rows."""

from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.filter import fleet_report as fr

OLD = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
NEW = "GPU-68ce64fb-ea68-5ad6-7e72-31f3f07378df"
ROWS = [
    {
        "node": "b-replaced",
        "simulated": True,
        "gpus": 1,
        "driver": "535.104.05",
        "layout": "v2",
        "status": "stale",
        "stale": {"nvidia.com/gpu": [OLD]},
        "action": "removed",
        "backup": "/var/lib/gpuops/backups/kubelet_internal_checkpoint.20261121T203112.745190Z",
        "msg": "stale device IDs nvidia.com/gpu: %s: moved the checkpoint aside" % OLD,
    },
    {
        "node": "a-no-driver",
        "simulated": False,
        "gpus": 0,
        "driver": None,
        "inventory_reason": "NVIDIA driver is not loaded",
        "layout": "v2",
        "status": "inventory_unknown",
        "stale": {},
        "action": "skipped",
        "backup": None,
        "msg": "",
    },
    {"node": "c-share", "gpus": 2, "status": "stale", "stale": {"aliyun.com/gpu-mem": ["%s-_-%d" % (OLD, n) for n in range(3)]}, "action": "pruned"},
]


def test_table_has_one_aligned_line_per_node_sorted_then_notes():
    lines = fr.fleet_table(ROWS).splitlines()
    assert lines[0].split() == ["node", "GPUs", "driver", "layout", "checkpoint", "stale", "IDs", "action", "kubelet", "backup"]
    assert set(lines[1]) == {"-", " "}
    assert [line.split()[0] for line in lines[2:5]] == ["a-no-driver", "b-replaced", "c-share"]
    assert lines[2].split()[:2] == ["a-no-driver", "unknown"]
    assert "1 (simulated)" in lines[3] and OLD in lines[3] and lines[3].rstrip().endswith("745190Z")
    assert "3 (%s-_-0, ...)" % OLD in lines[4]
    # every column starts at the same offset on every row
    col = lines[0].index("checkpoint")
    assert all(line[col:].split()[0] in ("checkpoint", "inventory_unknown", "stale") for line in lines[2:5])
    assert lines[5:] == ["b-replaced: stale device IDs nvidia.com/gpu: %s: moved the checkpoint aside" % OLD]


def test_markdown_says_simulated_and_escapes_pipes():
    rows = ROWS + [{"node": "d|pipe", "status": "no_result", "msg": "no result: a|b"}]
    doc = fr.fleet_markdown(rows)
    assert doc.startswith("# gpuops fleet summary\n\n> Nodes marked (simulated) run on SIMULATED GPUs")
    table = [line for line in doc.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(rows)
    assert all(line.count(" | ") == 8 for line in table if not line.startswith("|---"))
    assert "| d\\|pipe | - |" in doc
    assert "`%s`" % OLD in doc
    assert "- **d\\|pipe**: no result: a\\|b" in doc


HOSTILE_TEXT = ("faulty\n# Pwned\n\n[click](http://evil.example/x) ![i](http://evil.example/i.png) <script>alert(1)</script> "
                "<http://evil.example> www.evil.example *bold* __u__ ~~s~~ `code` &amp; a|b\r\x00\x1b[31m\u2028tail")


def test_markdown_keeps_every_node_provided_cell_literal_one_row_no_structure():
    """Issue 48, item 4: a node's own text (its verdict's state, its message, its node name) in fleet-summary.md. Rendered by a
    CommonMark parser with GFM tables: one table, one row per node, no heading, link, image or HTML of the node's, and no
    bare URL left for GFM's autolinks; the text itself is all there, as text."""
    from markdown_it import MarkdownIt

    rows = [{"node": "n1", "status": "up_to_date", "gpu_health": {"state": HOSTILE_TEXT, "action": "reset", "gpus": ["GPU-1"]}},
            {"node": "evil|node\n## h", "status": HOSTILE_TEXT, "msg": HOSTILE_TEXT, "backup": "/ok/path`x` [a](b)"},
            {"node": "n3", "status": "stale", "backup": "/var/lib/gpuops/backups/kubelet_internal_checkpoint.1"}]
    doc = fr.fleet_markdown(rows)
    html = MarkdownIt("commonmark").enable("table").render(doc)
    tags = re.findall(r"<([a-z][a-z0-9]*)\b", html)
    assert set(tags) == {"h1", "h2", "table", "thead", "tbody", "tr", "th", "td", "ul", "li", "strong", "code"}, sorted(set(tags))
    assert (tags.count("table"), tags.count("tr"), tags.count("h1"), tags.count("h2"), tags.count("li"), tags.count("strong")) == (
        1, 1 + len(rows), 1, 1, 1, 1), html  # the one note's node name is the report's own bold
    assert "<h1>gpuops fleet summary</h1>" in html and "<h2>Notes</h2>" in html
    assert "http://" not in doc and "www.evil" not in doc and "\x1b" not in doc and "\x00" not in doc
    assert "[click](http://evil.example/x)" in html.replace("&quot;", '"')  # the node's text stays, as literal text
    assert "<code>/var/lib/gpuops/backups/kubelet_internal_checkpoint.1</code>" in html
    assert "<code>/ok/path" not in html  # a path that is not one stays escaped text


def test_no_simulated_banner_for_real_nodes():
    assert "SIMULATED" not in fr.fleet_markdown([{"node": "n1", "gpus": 8, "status": "up_to_date"}])


@pytest.mark.parametrize("bad", [None, "rows", [1], {"node": "x"}])
def test_bad_input_is_a_filter_error(bad):
    with pytest.raises(AnsibleFilterError, match="expects a list of per-node summary dicts"):
        fr.fleet_table(bad)


def _summary(node, offset=None, restarted=False, **extra):
    row = {"node": node, "status": "stale", "action": "removed", "kubelet_restarted": restarted, "kubelet_down_seconds": 0.42}
    if offset is not None:
        row["restart_batch"] = {"hosts": ["x"], "offset": offset}
    row.update(extra)
    return row


def test_rows_number_the_restart_batches_in_the_order_they_ran_and_mark_missing_nodes():
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    # offsets as site.yml records them (as strings from Jinja): batches start at 0, 2 and 4
    summaries = [_summary("n1", "2", True), _summary("n2", "0", True), None, _summary("n4", "0", True), _summary("n5", "4", False)]
    rows = fr.fleet_rows(summaries, nodes)
    assert [r["node"] for r in rows] == nodes
    assert [r.get("restart_batch") for r in rows] == [2, 1, None, 1, 3]
    assert rows[2] == {"node": "n3", "status": "no_result", "msg": fr.NO_RESULT}
    assert fr.restart_batches(rows) == [(1, ["n2", "n4"]), (2, ["n1"])]  # n5's batch failed before its restart
    table = fr.fleet_table(rows)
    assert "restarted (batch 1), down 0.4 s" in table
    assert table.splitlines()[-1] == "kubelet restarted on 3 node(s), in 2 batch(es): batch 1: n2, n4; batch 2: n1"
    assert "## kubelet restarts\n\n- batch 1: n2, n4\n- batch 2: n1\n" in fr.fleet_markdown(rows)


def test_check_mode_and_plan_only_rows_say_what_would_happen():
    rows = [_summary("n1", kubelet_would_restart=True, action="none", planned_action="pruned")]
    line = fr.fleet_table(rows).splitlines()[2]
    assert "planned: pruned" in line and "would restart" in line


@pytest.mark.parametrize("summaries, nodes", [([None], ["a", "b"]), ("x", ["a"]), ([1], ["a"])])
def test_rows_bad_input_is_a_filter_error(summaries, nodes):
    with pytest.raises(AnsibleFilterError, match="fleet_rows"):
        fr.fleet_rows(summaries, nodes)


def _node_vars(node, plan=None, reconcile=None, **extra):
    found = {"inventory_hostname": node, "gpuops_lab": True,
             "ansible_facts": {"gpuops_gpus": {"count": 1, "driver_version": "535.104.05", "reason": None, "gpus": [{"uuid": NEW}]}}}
    if plan is not None:
        found["checkpoint_guard_plan"] = plan
    if reconcile is not None:
        found["checkpoint_guard_reconcile"] = reconcile
    found.update(extra)
    return found


PLAN_STALE = {"status": "stale", "action": "removed", "layout": "v2", "stale": {"nvidia.com/gpu": [OLD]}, "msg": "stale",
              "kubelet": {"would_restart": True}}


def test_node_summary_after_a_repair_takes_the_repair_result():
    done = {"status": "stale", "action": "removed", "layout": "v2", "backup_path": "/b", "msg": "moved",
            "kubelet": {"restarted": True, "down_seconds": 0.2}}
    plan = dict(PLAN_STALE, guard_install={"changed": True, "selftest": {"rc": 0}})
    row = fr.fleet_node_summary(_node_vars("n1", plan, done, gpuops_restart_batch={"hosts": ["n1"], "offset": 0}), ["n1"])
    assert row == {"node": "n1", "simulated": True, "gpus": 1, "gpu_uuids": [NEW], "driver": "535.104.05", "inventory_reason": None,
                   "layout": "v2", "status": "stale", "stale": {}, "action": "removed", "planned_action": None, "backup": "/b",
                   "kubelet_restarted": True, "kubelet_would_restart": False, "kubelet_left_stopped": False, "kubelet_started": False,
                   "kubelet_down_seconds": 0.2,
                   "restart_batch": {"hosts": ["n1"], "offset": 0}, "guard": "installed", "msg": "moved"}


@pytest.mark.parametrize("check_mode, in_repair, action, planned", [
    (True, True, "removed", None),     # check mode: the plan is the would-be repair
    (False, False, "none", "removed"),  # --tags that plan only: planned, not done
    (True, False, "none", "removed"),
])
def test_node_summary_from_the_plan(check_mode, in_repair, action, planned):
    skipped = {"skipped": True, "changed": False}
    row = fr.fleet_node_summary(_node_vars("n1", PLAN_STALE, skipped), ["n1"], repair_nodes=["n1"] if in_repair else [], check_mode=check_mode)
    assert (row["action"], row["planned_action"], row["kubelet_would_restart"], row["guard"]) == (action, planned, True, "not installed")
    assert row["stale"] == {"nvidia.com/gpu": [OLD]}


def test_node_summary_of_a_node_that_left_the_run_is_none_and_bad_input_is_a_filter_error():
    assert fr.fleet_node_summary(_node_vars("gone", PLAN_STALE), ["other"]) is None
    with pytest.raises(AnsibleFilterError, match="fleet_node_summary: expects a node's variables"):
        fr.fleet_node_summary("n1", ["n1"])
    skipped = fr.fleet_node_summary(_node_vars("n2", {"status": "inventory_unknown", "action": "skipped"}, gpuops_lab="false"), ["n2"])
    assert (skipped["action"], skipped["planned_action"], skipped["simulated"], skipped["status"]) == ("skipped", None, False, "inventory_unknown")


def test_the_gpu_workloads_column_appears_only_when_the_workloads_were_audited():
    plain = fr.fleet_node_summary(_node_vars("gpu-a"), ["gpu-a"])
    assert "workloads" not in plain and "GPU workloads" not in fr.fleet_table([plain])
    by_node = {"k8s-gpu-a": 2}
    audited = [fr.fleet_node_summary(_node_vars("gpu-a", gpuops_k8s_node_name="k8s-gpu-a"), ["gpu-a"], workload_findings=by_node),
               fr.fleet_node_summary(_node_vars("gpu-b"), ["gpu-b"], workload_findings=by_node)]
    assert [r["workloads"] for r in audited] == [2, 0]
    table = fr.fleet_table(audited).splitlines()
    assert table[0].endswith("GPU workloads")
    assert table[2].endswith("2 finding(s)") and table[3].endswith("ok")
    assert "| GPU workloads |" in fr.fleet_markdown(audited)


def test_the_gpu_sharing_column_from_the_cluster_or_else_the_checkpoint():
    shared = {"gpus": [{"uuid": OLD, "index": None, "allocated_gib": 3, "total_gib": 15, "pods": 1},
                       {"uuid": NEW, "index": 0, "allocated_gib": 4, "total_gib": 15, "pods": 1}],
              "allocated_gib": 9, "total_gib": 30, "percent": 30, "unattributed_gib": 2}
    plain = fr.fleet_node_summary(_node_vars("gpu-a", {"status": "up_to_date"}), ["gpu-a"])
    assert "sharing" not in plain and "GPU sharing" not in fr.fleet_table([plain])
    # no cluster: what the node's own checkpoint holds, saying so
    node_only = fr.fleet_node_summary(_node_vars("gpu-s", {"status": "stale", "shared_memory": shared}), ["gpu-s"])
    assert node_only["sharing"]["source"] == "checkpoint"
    table = fr.fleet_table([plain, node_only]).splitlines()
    assert table[0].endswith("GPU sharing") and table[2].endswith(" -")
    assert table[3].endswith("9/30 GiB (30%), from checkpoint, 1 GPU gone, 2 GiB unattributed")
    assert table[-1].startswith("GPU sharing from checkpoint: node-derived (no cluster was read)")
    # with a cluster (gpu_share_info's nodes, by Kubernetes node name) the cluster's figures win
    nodes = [{"name": "k8s-gpu-s", "mode": "true", "allocated_gib": 8, "total_gib": 15, "percent": 53}]
    cluster = fr.fleet_node_summary(_node_vars("gpu-s", {"status": "stale", "shared_memory": shared}, gpuops_k8s_node_name="k8s-gpu-s"),
                                    ["gpu-s"], gpu_share=nodes)
    assert cluster["sharing"] == {"source": "cluster", "shared": True, "mode": "true", "allocated_gib": 8, "total_gib": 15, "percent": 53}
    assert fr.fleet_table([cluster]).splitlines()[2].endswith("8/15 GiB (53%) mode true")
    assert "node-derived" not in fr.fleet_table([cluster])
    whole = fr.fleet_node_summary(_node_vars("gpu-a"), ["gpu-a"], gpu_share=nodes)
    assert whole["sharing"] == {"source": "cluster", "shared": False}
    assert fr.fleet_table([cluster, whole]).splitlines()[2].endswith("off (whole GPUs)")
    # a cluster without any sharing node: no column
    assert "GPU sharing" not in fr.fleet_table([whole])
    assert "| GPU sharing |" in fr.fleet_markdown([cluster])


def test_the_gpu_memory_column_when_prometheus_was_read():
    nodes = [{"node": "k8s-gpu-a", "gpus": 2, "used_gib": 15.4, "total_gib": 32.0, "percent": 48}]
    read = fr.fleet_node_summary(_node_vars("gpu-a", gpuops_k8s_node_name="k8s-gpu-a"), ["gpu-a"], gpu_memory=nodes)
    unknown = fr.fleet_node_summary(_node_vars("gpu-b"), ["gpu-b"], gpu_memory=nodes)
    assert read["gpu_memory"] == {"used_gib": 15.4, "total_gib": 32.0, "percent": 48} and unknown["gpu_memory"] is None
    table = fr.fleet_table([read, unknown]).splitlines()
    assert table[0].endswith("GPU memory") and table[2].endswith("15.4/32.0 GiB (48%)") and table[3].endswith(" -")
    assert "GPU memory" not in fr.fleet_table([fr.fleet_node_summary(_node_vars("gpu-a"), ["gpu-a"])])


@pytest.mark.parametrize("installed, check_mode, guard", [
    ({"changed": True, "selftest": {"rc": 0}}, False, "installed"),    # written, self-tested
    ({"changed": False, "selftest": None}, False, "installed"),        # a second run: in place, nothing to test again
    ({"changed": False, "selftest": None}, True, "installed"),         # check mode, already in place
    ({"changed": True, "selftest": None}, True, "not installed"),      # check mode: it would be written
    ({"failed": True, "msg": "the installed guard does not run"}, False, "not installed"),
    ({"skipped": True, "changed": False}, False, "not installed"),
    (None, False, "not installed"),
])
def test_node_summary_says_whether_the_guard_is_in_place(installed, check_mode, guard):
    # the install runs in the plan's task (kubelet_checkpoint's install_guard): its result is the plan's guard_install
    plan = {"status": "up_to_date", "action": "none"}
    if installed is not None:
        plan["guard_install"] = installed
    node = _node_vars("n1", plan)
    assert fr.fleet_node_summary(node, ["n1"], check_mode=check_mode)["guard"] == guard


def test_the_repair_play_s_nodes_are_decided_once_from_each_node_s_plan():
    """Issue 36: site.yml's repair play takes its hosts from this filter, not from a group_by task per node."""
    from ansible_collections.gpuops.fleet.plugins.filter.fleet_report import checkpoint_repair_nodes

    hostvars = {
        "stale": {"checkpoint_guard_plan": {"repair_needed": True}},
        "marked": {"checkpoint_guard_plan": {"repair_needed": True, "action": "none"}, "checkpoint_guard_reconcile_now": "yes"},
        "fine": {"checkpoint_guard_plan": {"repair_needed": False}},
        "held": {"checkpoint_guard_plan": {"repair_needed": True}, "checkpoint_guard_reconcile_now": "false"},
        "plan-failed": {"checkpoint_guard_plan": {"failed": True, "repair_needed": True}},
        # the install runs in the plan's task: its failure fails the plan's result
        "install-failed": {"checkpoint_guard_plan": {"repair_needed": True, "failed": True, "guard_install": {"failed": True}}},
        "unreachable": {"checkpoint_guard_plan": {"unreachable": True}},
        "not-planned": {},
    }
    nodes = sorted(hostvars)
    assert checkpoint_repair_nodes(nodes, hostvars) == ["marked", "stale"]
    assert checkpoint_repair_nodes(nodes, hostvars, ["checkpoint"], []) == ["marked", "stale"]
    assert checkpoint_repair_nodes(nodes, hostvars, ["all"], []) == ["marked", "stale"]
    # the run's tags leave the repair out, as they left out the group_by task
    assert checkpoint_repair_nodes(nodes, hostvars, ["guard"], []) == []
    assert checkpoint_repair_nodes(nodes, hostvars, ["all"], ["checkpoint"]) == []
    with pytest.raises(AnsibleFilterError, match="node held: checkpoint_guard_reconcile_now: expected true or false"):
        checkpoint_repair_nodes(["held"], {"held": dict(hostvars["held"], checkpoint_guard_reconcile_now="maybe")})


@pytest.mark.parametrize("run_tags, skip_tags, runs", [
    (["all"], [], True), (["guard"], [], True), (["facts", "checkpoint"], [], False), (["tagged"], [], True),
    (["all"], ["guard"], False), (["all"], ["tagged"], False), (None, None, True),
])
def test_tags_run_as_ansible_decides_for_a_tagged_task(run_tags, skip_tags, runs):
    assert fr.tags_run(["checkpoint_guard", "checkpoint_guard_install", "guard"], run_tags, skip_tags) is runs


def test_without_variables_no_node_is_chosen_for_the_repair():
    """ansible-playbook --syntax-check (ansible-lint's) templates the repair play's hosts with no hostvars."""
    from ansible_collections.gpuops.fleet.plugins.filter.fleet_report import checkpoint_repair_nodes

    assert checkpoint_repair_nodes(["gpu-1", "gpu-2"], {}, [], []) == []


def _role_spec():
    from ansible_collections.gpuops.fleet.plugins.plugin_utils import _role_specs

    return _role_specs.role_spec("checkpoint_guard")


def test_role_arguments_are_checked_once_per_distinct_set_with_ansible_cores_own_messages(monkeypatch):
    """site.yml checks checkpoint_guard's argument spec on the controller (issue 36): nodes sharing their group
    variables are one check; a node with its own bad value is named alone; a playbook variable checked as its alias."""
    spec = _role_spec()
    group = {"checkpoint_guard_strategy": "prune", "checkpoint_guard_backup_keep": "3", "ansible_host": "x", "inventory_hostname": "n"}
    hostvars = dict(("node-%02d" % i, dict(group)) for i in range(12))
    hostvars["node-07"] = dict(group, checkpoint_guard_backup_keep="many")
    hostvars["node-09"] = dict(group, gpuops_gpu_health="maybe")
    checks = []
    real = fr.ArgumentSpecValidator.validate

    def counted(self, parameters, *args, **kwargs):
        checks.append(dict(parameters))
        return real(self, parameters, *args, **kwargs)
    monkeypatch.setattr(fr.ArgumentSpecValidator, "validate", counted)
    found = fr.role_argument_errors(sorted(hostvars) + ["not-in-hostvars"], hostvars, "checkpoint_guard", {"checkpoint_guard_gpu_health": "gpuops_gpu_health"})
    assert len(checks) == 3, checks  # the ten alike, node-07, node-09
    assert all(set(c) <= set(spec) for c in checks), "only the role's variables are checked"
    by_node = dict((tuple(f["nodes"]), f) for f in found)
    assert set(by_node) == {("node-07",), ("node-09",)}
    assert "checkpoint_guard_backup_keep" in by_node[("node-07",)]["msg"] and "unable to convert to int" in by_node[("node-07",)]["msg"]
    assert by_node[("node-09",)]["errors"][0].startswith("argument 'checkpoint_guard_gpu_health' is of type str")
    assert by_node[("node-09",)]["msg"].startswith("1 node(s) (node-09): ")


def test_role_arguments_that_pass_give_no_error_and_many_nodes_are_named_in_short():
    spec = _role_spec()
    assert "checkpoint_guard_strategy" in spec and "checkpoint_guard_daemonset_image" in spec
    assert fr.role_argument_errors(["a", "b"], {"a": {}, "b": {"checkpoint_guard_strategy": "auto"}}, "checkpoint_guard") == []
    hostvars = dict(("n%d" % i, {"checkpoint_guard_strategy": "nuke"}) for i in range(8))
    found = fr.role_argument_errors(sorted(hostvars), hostvars, "checkpoint_guard")
    assert len(found) == 1 and len(found[0]["nodes"]) == 8
    assert found[0]["msg"].startswith("8 node(s) (n0, n1, n2, n3, n4, and 3 more): ") and "checkpoint_guard_strategy" in found[0]["msg"]
    with pytest.raises(AnsibleFilterError, match="'../checkpoint_guard' is not a role name"):
        fr.role_argument_errors(["a"], {"a": {}}, "../checkpoint_guard")
    with pytest.raises(AnsibleFilterError, match="role checkpoint_guard has no entry point 'mian'"):
        fr.role_argument_errors(["a"], {"a": {}}, "checkpoint_guard", entry_point="mian")
    with pytest.raises(AnsibleFilterError, match="no argument spec for role no_such_role"):
        fr.role_argument_errors(["a"], {"a": {}}, "no_such_role")


def test_a_role_without_a_spec_or_entry_point_is_a_filter_error_naming_it():
    from ansible.errors import AnsibleFilterError

    for role, entry, said in (("../../etc", "main", "is not a role name"), ("no_such_role", "main", "no argument spec for role no_such_role"),
                              ("checkpoint_guard", "nope", "has no entry point 'nope'")):
        with pytest.raises(AnsibleFilterError, match=said):
            fr.role_argument_errors(["a"], {"a": {}}, role, entry_point=entry)


def test_the_slices_reports_join_into_one_each_slice_named_and_a_node_twice_named():
    from ansible_collections.gpuops.fleet.plugins.filter.fleet_report import fleet_reports_merge  # pylint: disable=import-outside-toplevel

    one = {"check_mode": False, "job": {"awx_job_id": 11, "awx_workflow_job_id": 10, "nodes": 2}, "nodes": [{"node": "n3"}, {"node": "n1"}]}
    two = {"check_mode": False, "job": {"awx_job_id": 12, "awx_workflow_job_id": 10, "nodes": 2}, "nodes": [{"node": "n2"}, {"node": "n1", "x": 1}]}
    merged = fleet_reports_merge([one, two])
    assert [r["node"] for r in merged["nodes"]] == ["n1", "n2", "n3"] and "x" not in merged["nodes"][0]
    assert [(s["job"], s["nodes"]) for s in merged["slices"]] == [(11, 2), (12, 2)]
    assert merged["conflicts"] == [{"node": "n1", "slices": [1, 2]}] and not merged["check_mode"] and not merged["mixed_modes"]
    assert fleet_reports_merge([dict(one, check_mode=True), two])["mixed_modes"]
    for bad in ("report", [{"nodes": [{"name": "n1"}]}]):
        with pytest.raises(AnsibleFilterError):
            fleet_reports_merge(bad)
