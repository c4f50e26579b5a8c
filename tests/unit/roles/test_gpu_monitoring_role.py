# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_monitoring: the rules, scrape jobs and dashboard as the role renders them (tasks_from: render,
through ansible-playbook), checked with Debian's real promtool: `check rules`, `check config`, and
`test rules` with series built from field report 003's numbers; the dashboard queries only series
the rules record."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

import role_checks  # tests/unit/roles/role_checks.py  # pylint: disable=import-error

sys.path.insert(0, os.path.join(role_checks.ROOT, "tests", "prometheus"))
import promrig  # noqa: E402  pylint: disable=import-error,wrong-import-position

ROOT = role_checks.ROOT
BIN = os.path.join(ROOT, ".venv", "bin")
GIB = 1024 ** 3
PROMTOOL = shutil.which("promtool")


def render(out_dir, **extra):
    """tasks_from: render into ``out_dir`` through ansible-playbook (the role's own code path; tests/prometheus' rig)."""
    return promrig.render_role(out_dir, **extra)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    assert PROMTOOL, "promtool is missing: apt-get install prometheus (hack/check-deps.sh --install does)"
    return render(tmp_path_factory.mktemp("gpu-monitoring"))


def promtool(*args):
    return subprocess.run([PROMTOOL] + list(args), capture_output=True, text=True, timeout=120, check=False)


def test_argument_specs_match_defaults_and_the_readme_lists_every_variable():
    assert role_checks.spec_problems("gpu_monitoring", entries=("main", "render", "node")) == []
    assert role_checks.undocumented_vars("gpu_monitoring") == []


def test_promtool_checks_the_rules(rendered):
    proc = promtool("check", "rules", str(rendered / "gpuops-gpu-memory.rules.yml"))
    assert proc.returncode == 0 and "SUCCESS: 19 rules found" in proc.stdout, proc.stdout + proc.stderr
    rules = yaml.safe_load((rendered / "gpuops-gpu-memory.rules.yml").read_text())
    alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
    assert sorted(a["alert"] for a in alerts) == ["GPUExporterDown", "GPULost", "GPUMemoryMetricsDown", "GPUMemoryOverAllocation", "GPUMemoryWaste",
                                                  "GPUNodeStuckInQuarantine",
                                                  "GPURecoveryActionRequired", "GPURowRemapFailure", "GPUXidCountMissing", "GPUXidErrors"]
    for alert in alerts:
        assert alert["annotations"]["runbook"] and alert["annotations"]["runbook_url"].endswith("#" + alert["alert"].lower())


@pytest.mark.parametrize("static", [False, True])
def test_promtool_checks_a_prometheus_config_with_the_scrape_jobs(rendered, tmp_path, static):
    out = rendered
    if static:
        targets = [{"node": "gpu-a", "address": "10.0.0.7"}, {"node": "gpu-b", "dcgm": "10.0.0.8:9401", "node_exporter": "10.0.0.8:9101"}]
        out = render(tmp_path, gpu_monitoring_scrape_static_targets=targets)
    jobs = yaml.safe_load((out / "gpuops-scrape-configs.yml").read_text())
    assert [j["job_name"] for j in jobs] == ["dcgm-exporter", "node-exporter"]
    if not static:
        # Debian builds Prometheus without Kubernetes service discovery ("field kubernetes_sd_configs
        # not found"), so promtool here checks the static variant; this one is checked for its shape
        assert jobs[0]["kubernetes_sd_configs"] == [{"role": "endpoints", "namespaces": {"names": ["gpu-monitoring"]}}]
        assert jobs[1]["kubernetes_sd_configs"] == [{"role": "node"}]
        relabel = dict((r["target_label"], r) for r in jobs[1]["relabel_configs"])
        assert relabel["__address__"]["replacement"] == "${1}:9100" and relabel["node"]["source_labels"] == ["__meta_kubernetes_node_name"]
        assert re.match(relabel["__address__"]["regex"] + "$", "10.0.0.7:10250").group(1) == "10.0.0.7"
        return
    assert jobs[0]["static_configs"] == [{"targets": ["10.0.0.7:9400"], "labels": {"node": "gpu-a"}},
                                         {"targets": ["10.0.0.8:9401"], "labels": {"node": "gpu-b"}}]
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "15s"}, "rule_files": [str(rendered / "gpuops-gpu-memory.rules.yml")],
                                      "scrape_configs": jobs}))
    proc = promtool("check", "config", str(config))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def series(name, labels, value, minutes=180):
    text = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    values = value if isinstance(value, str) else "%sx%d" % (value, minutes)
    return {"series": "%s{%s}" % (name, text), "values": values}


def pod(namespace, name, uid, node, limits, used=None, gpu=None):
    """kube-state-metrics' series of a pod, and gpuops metrics' for its process on ``gpu`` (gpu index, uuid)."""
    out = [series("kube_pod_info", {"namespace": namespace, "pod": name, "uid": uid, "node": node, "job": "kube-state-metrics"}, 1)]
    for resource, value in limits.items():
        out.append(series("kube_pod_container_resource_limits", {"namespace": namespace, "pod": name, "container": name.rsplit("-", 1)[0],
                                                                 "resource": resource, "unit": "integer", "node": node, "job": "kube-state-metrics"}, value))
    if used is not None:
        out.append(series("gpuops_pod_gpu_memory_used_bytes", {"pod_uid": uid, "container": name.rsplit("-", 1)[0], "gpu": gpu[0], "uuid": gpu[1],
                                                               "node": node, "job": "node-exporter"}, used))
    return out


def gpu(node, index, uuid, used, total=16 * GIB):
    labels = {"node": node, "gpu": index, "uuid": uuid, "job": "node-exporter"}
    return [series("gpuops_gpu_memory_total_bytes", labels, total), series("gpuops_gpu_memory_used_bytes", labels, used)]


# Field report 003: app-3g-v1 holds a whole 16 GiB GPU and uses 3.4 GiB of it (20%: waste); on a
# shared GPU, app-6g-v1 asks for 4 GiB and uses 6 GiB (over-allocation, that pod only), next to the
# two app-3g-v1 replicas with 4 GiB each that use 3 GiB (nothing to say); a pod of the same name in
# another namespace uses 3 of its 4 GiB (nothing: alerts group by namespace and pod).
GA, GB, GC = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0", "GPU-1b7d2a3e-5c8f-4e61-9a0d-3f2c4b5a6d7e", "GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb"
DCGM_C1 = {"gpu": "1", "UUID": GA[:-1] + "1", "device": "nvidia1", "modelName": "Tesla V100-SXM2-16GB", "Hostname": "gpu-c", "job": "dcgm-exporter",
           "node": "gpu-c"}
DCGM_D0 = {"gpu": "0", "UUID": GA[:-1] + "d", "device": "nvidia0", "modelName": "Tesla V100-SXM2-16GB", "Hostname": "gpu-d", "job": "dcgm-exporter",
           "node": "gpu-d"}
INPUT = (
    pod("default", "app-3g-v1-0", "u-3g", "gpu-a", {"nvidia_com_gpu": 1}, used=int(3.4 * GIB), gpu=("0", GA))
    + gpu("gpu-a", "0", GA, int(3.4 * GIB))
    + pod("ml", "app-6g-v1-0", "u-6g", "gpu-b", {"aliyun_com_gpu_mem": 4}, used=6 * GIB, gpu=("0", GB))
    + pod("shared", "app-3g-v1-0", "u-s0", "gpu-b", {"aliyun_com_gpu_mem": 4}, used=3 * GIB, gpu=("0", GB))
    + pod("shared", "app-3g-v1-1", "u-s1", "gpu-b", {"aliyun_com_gpu_mem": 4}, used=3 * GIB, gpu=("0", GB))
    + gpu("gpu-b", "0", GB, 12 * GIB)
    + pod("team-b", "app-6g-v1-0", "u-6g-b", "gpu-c", {"aliyun_com_gpu_mem": 4}, used=3 * GIB, gpu=("0", GC))
    # a training pod that uses its whole GPU well: no waste
    + pod("ml", "train-0", "u-train", "gpu-c", {"nvidia_com_gpu": 1}, used=14 * GIB, gpu=("1", GA[:-1] + "1"))
    + gpu("gpu-c", "0", GC, 3 * GIB) + gpu("gpu-c", "1", GA[:-1] + "1", 14 * GIB)
    # dcgm-exporter on gpu-c: XID 79 at 61m, counted in the exporter's 5-minute window (DCGM_EXP_XID_ERRORS_COUNT, one series per
    # XID, 0 without an xid label otherwise), while the last-value gauge DCGM_FI_DEV_XID_ERRORS keeps 79 until the exporter restarts
    + [series("DCGM_FI_DEV_XID_ERRORS", DCGM_C1, "0x60 79x119"),
       series("DCGM_EXP_XID_ERRORS_COUNT", dict(DCGM_C1, window_size_in_ms="300000"), "0x60 _x5 0x114"),
       series("DCGM_EXP_XID_ERRORS_COUNT", dict(DCGM_C1, window_size_in_ms="300000", xid="79"), "_x60 1x4 _x115"),
       series("DCGM_FI_DEV_FB_USED", DCGM_C1, 14336),
       # gpu-d's exporter runs upstream's default counters: no windowed XID count
       series("DCGM_FI_DEV_FB_USED", DCGM_D0, 0),
       series("up", {"job": "dcgm-exporter", "instance": "10.0.0.7:9400", "node": "gpu-a"}, "1x60 0x119"),
       series("gpuops_metrics_up", {"job": "node-exporter", "node": "gpu-c"}, 1),
       series("gpuops_metrics_up", {"job": "node-exporter", "node": "gpu-b", "reason": "NVIDIA driver is not loaded (NVML: Driver Not Loaded)"},
              "1x60 0x119")]
)


def expand(text, labels):
    """An annotation as Prometheus would expand it, for the {{ $labels.x }} it uses (the summaries are written out)."""
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text)


def expected(annotations, alert, labels, summary, description=None):
    found = annotations[alert]
    return {"exp_labels": labels, "exp_annotations": {
        "summary": summary, "description": description or expand(found["description"], labels),
        "runbook": found["runbook"], "runbook_url": found["runbook_url"]}}


def test_the_rules_on_the_field_reports_numbers(rendered, tmp_path):
    rules_file = str(rendered / "gpuops-gpu-memory.rules.yml")
    rules = yaml.safe_load((rendered / "gpuops-gpu-memory.rules.yml").read_text())
    annotations = dict((r["alert"], r["annotations"]) for g in rules["groups"] for r in g["rules"] if "alert" in r)
    xid = dict(DCGM_C1, severity="critical", window_size_in_ms="300000", xid="79")
    missing = {"Hostname": "gpu-d", "severity": "info"}  # one per exporter: no GPU, pod or job labels (issue 48, item 12)
    down = {"severity": "warning", "job": "dcgm-exporter", "instance": "10.0.0.7:9400", "node": "gpu-a"}
    stale = {"severity": "warning", "job": "node-exporter", "node": "gpu-b", "reason": "NVIDIA driver is not loaded (NVML: Driver Not Loaded)"}
    tests = {"rule_files": [rules_file], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": INPUT,
        "promql_expr_test": [
            {"expr": "namespace_pod:gpuops_gpu_memory_used_bytes:sum{namespace=\"ml\", pod=\"app-6g-v1-0\"}", "eval_time": "10m",
             "exp_samples": [{"labels": 'namespace_pod:gpuops_gpu_memory_used_bytes:sum{namespace="ml",node="gpu-b",pod="app-6g-v1-0"}',
                              "value": 6 * GIB}]},
            {"expr": "namespace_pod:gpuops_gpu_memory_allocated_bytes:sum{pod=\"app-6g-v1-0\"}", "eval_time": "10m",
             "exp_samples": [
                 {"labels": 'namespace_pod:gpuops_gpu_memory_allocated_bytes:sum{namespace="ml",node="gpu-b",pod="app-6g-v1-0"}', "value": 4 * GIB},
                 {"labels": 'namespace_pod:gpuops_gpu_memory_allocated_bytes:sum{namespace="team-b",node="gpu-c",pod="app-6g-v1-0"}', "value": 4 * GIB}]},
            # 3.4 GiB (truncated to whole bytes) of 16 GiB: 21.25 %, just under
            {"expr": "round(namespace_pod_gpu:gpuops_gpu_memory_used:ratio{pod=\"app-3g-v1-0\", namespace=\"default\"} * 1000)", "eval_time": "10m",
             "exp_samples": [{"labels": '{gpu="0",namespace="default",node="gpu-a",pod="app-3g-v1-0",uuid="%s"}' % GA, "value": 212}]},
            {"expr": "node_gpu:gpuops_gpu_memory_used_bytes:max{node=\"gpu-b\"}", "eval_time": "10m",
             "exp_samples": [{"labels": 'node_gpu:gpuops_gpu_memory_used_bytes:max{gpu="0",node="gpu-b",uuid="%s"}' % GB, "value": 12 * GIB}]},
            {"expr": "node:gpuops_gpu_memory_total_bytes:sum{node=\"gpu-c\"}", "eval_time": "10m",
             "exp_samples": [{"labels": 'node:gpuops_gpu_memory_total_bytes:sum{node="gpu-c"}', "value": 32 * GIB}]},
        ],
        "alert_rule_test": [
            # for: 1h, so not yet at 30 minutes; then only the whole-GPU pod that uses 21% of its GPU
            {"eval_time": "30m", "alertname": "GPUMemoryWaste", "exp_alerts": []},
            {"eval_time": "2h", "alertname": "GPUMemoryWaste", "exp_alerts": [expected(
                annotations, "GPUMemoryWaste", {"severity": "info", "namespace": "default", "pod": "app-3g-v1-0", "node": "gpu-a", "gpu": "0", "uuid": GA},
                "default/app-3g-v1-0 uses 21% of GPU 0 on gpu-a")]},
            # only ml/app-6g-v1-0: not team-b's pod of the same name, not the two 3 GiB replicas
            {"eval_time": "4m", "alertname": "GPUMemoryOverAllocation", "exp_alerts": []},
            {"eval_time": "10m", "alertname": "GPUMemoryOverAllocation", "exp_alerts": [expected(
                annotations, "GPUMemoryOverAllocation", {"severity": "warning", "namespace": "ml", "pod": "app-6g-v1-0", "node": "gpu-b"},
                "ml/app-6g-v1-0 uses 6GiB of GPU memory, more than it was allocated")]},
            {"eval_time": "59m", "alertname": "GPUXidErrors", "exp_alerts": []},
            {"eval_time": "61m", "alertname": "GPUXidErrors", "exp_alerts": [expected(
                annotations, "GPUXidErrors", xid, "GPU 1 (%s) on gpu-c reported XID 79 1 times in the last 300000 ms" % xid["UUID"])]},
            # the window passed: resolved, though the last-value gauge still says 79 (the old rule's alert never resolved)
            {"eval_time": "70m", "alertname": "GPUXidErrors", "exp_alerts": []},
            # gpu-d's exporter serves no windowed count (after gpu_monitoring_exporter_down_for); gpu-c's does: nothing for it
            {"eval_time": "4m", "alertname": "GPUXidCountMissing", "exp_alerts": []},
            {"eval_time": "10m", "alertname": "GPUXidCountMissing", "exp_alerts": [expected(
                annotations, "GPUXidCountMissing", missing, "dcgm-exporter on gpu-d serves no windowed XID count for its 1 GPUs")]},
            {"eval_time": "62m", "alertname": "GPUExporterDown", "exp_alerts": []},
            {"eval_time": "70m", "alertname": "GPUExporterDown", "exp_alerts": [expected(
                annotations, "GPUExporterDown", down, "dcgm-exporter 10.0.0.7:9400 is down")]},
            {"eval_time": "70m", "alertname": "GPUMemoryMetricsDown", "exp_alerts": [expected(
                annotations, "GPUMemoryMetricsDown", stale, "gpuops metrics on gpu-b is not reporting GPU memory per pod",
                description="NVIDIA driver is not loaded (NVML: Driver Not Loaded)")]},
        ],
    }]}
    # promtool compares annotations only where exp_annotations is given
    test_file = tmp_path / "field-report.test.yml"
    test_file.write_text(yaml.safe_dump(tests, width=1000))
    proc = promtool("test", "rules", str(test_file))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _metric_names(expr):
    names = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{|\s*$|\))", expr))
    return set(n for n in names if ":" in n or n.startswith(("gpuops_", "DCGM_", "kube_")))


def test_the_dashboard_queries_only_what_the_rules_record(rendered):
    rules = yaml.safe_load((rendered / "gpuops-gpu-memory.rules.yml").read_text())
    recorded = dict((r["record"], r["expr"]) for g in rules["groups"] for r in g["rules"] if "record" in r)
    dashboard = json.loads((rendered / "gpuops-gpu-memory-dashboard.json").read_text())
    titles = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert titles == ["GPU APP", "GPU Node"]
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    queries += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    assert len(queries) == 11
    for query in queries:
        names = _metric_names(query) or set(re.findall(r"label_values\(([^,]+),", query))
        assert names and names <= set(recorded), (query, names - set(recorded))
    # every label a legend or variable names is one the recorded series carry (their `by` clause)
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            (name,) = _metric_names(target["expr"])
            by = set(re.findall(r"by \(([^)]*)\)", recorded[name])[0].replace(" ", "").split(","))
            if name.endswith(":ratio"):
                by = set(re.findall(r"by \(([^)]*)\)", recorded["namespace_pod_gpu:gpuops_gpu_memory_used_bytes:sum"])[0].replace(" ", "").split(","))
            assert set(re.findall(r"\{\{(\w+)\}\}", target["legendFormat"])) <= by, (target, by)
            assert set(re.findall(r"(\w+)=~", target["expr"])) <= by, (target, by)


@pytest.fixture(scope="module")
def node_install(tmp_path_factory):
    """The boot guard's install step (the gpuops command), then tasks_from: node, into a sysroot (no systemd)."""
    root = tmp_path_factory.mktemp("node")
    play = root / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "gpuops.fleet.checkpoint_guard"},
         "vars": {"checkpoint_guard_reconcile_now": False, "checkpoint_guard_sysroot": str(root), "checkpoint_guard_python": "/usr/bin/python3",
                  "checkpoint_guard_checkpoint_path": "%s/kubelet_internal_checkpoint" % root}},
        {"ansible.builtin.include_role": {"name": "gpuops.fleet.gpu_monitoring", "tasks_from": "node"},
         "vars": {"gpu_monitoring_sysroot": str(root), "gpu_monitoring_node_name": "gpu-node-7",
                  "gpu_monitoring_environment": {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64"}}}]}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return root


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_the_metrics_timer_passes_systemd_analyze_and_runs_the_installed_command(node_install):
    units = node_install / "etc/systemd/system"
    service = (units / "gpuops-metrics.service").read_text()
    assert ("ExecStart=/usr/local/bin/gpuops metrics --textfile /var/lib/node_exporter/textfile_collector/gpuops.prom --node gpu-node-7"
            in service)
    assert "ReadWritePaths=/var/lib/node_exporter/textfile_collector" in service and "ProtectSystem=strict" in service
    assert 'Environment="LD_LIBRARY_PATH=/usr/local/nvidia/lib64"' in service
    assert "OnUnitActiveSec=15s" in (units / "gpuops-metrics.timer").read_text()
    assert (node_install / "var/lib/node_exporter/textfile_collector").is_dir()
    # verify checks that ExecStart exists on this machine: point it at the sysroot's copy (the only edit)
    checked = node_install / "verify"
    checked.mkdir()
    (checked / "gpuops-metrics.service").write_text(service.replace("ExecStart=/usr/local/bin/gpuops", "ExecStart=%s/usr/local/bin/gpuops" % node_install))
    shutil.copy(str(units / "gpuops-metrics.timer"), str(checked / "gpuops-metrics.timer"))
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(checked / "gpuops-metrics.service"), str(checked / "gpuops-metrics.timer")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")
    helped = subprocess.run([str(node_install / "usr/local/bin/gpuops"), "metrics", "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert helped.returncode == 0 and "--textfile" in helped.stdout and "--node" in helped.stdout


def test_dcgm_exporter_renders_unprivileged_with_the_socket_read_only():
    defaults = role_checks.load("gpu_monitoring", "defaults", "main.yml")
    internal = role_checks.load("gpu_monitoring", "vars", "main.yml")

    def daemonset(**extra):
        values = dict(defaults, ansible_managed="managed", gpu_monitoring_dcgm_image="nvcr.io/nvidia/k8s/dcgm-exporter@sha256:" + "0" * 64, **extra)
        values.update((k, v) for k, v in internal.items() if k.startswith("__gpu_monitoring_") and "counters" in k)
        docs = role_checks.render_docs("gpu_monitoring", "dcgm-exporter.yml.j2", values)
        return docs, [d for d in docs if d["kind"] == "DaemonSet"][0]["spec"]["template"]["spec"]

    docs, spec = daemonset()
    assert [d["kind"] for d in docs] == ["ConfigMap", "DaemonSet", "Service"]
    counters = docs[0]["data"]["counters.csv"]
    assert all(name in counters for name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_XID_ERRORS",
                                             "DCGM_EXP_XID_ERRORS_COUNT"))
    (ctr,) = spec["containers"]
    assert "privileged" not in ctr["securityContext"] and ctr["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"} in ctr["env"]
    assert {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True} in ctr["volumeMounts"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"} and spec["automountServiceAccountToken"] is False
    docs, profiling = daemonset(gpu_monitoring_dcgm_profiling=True)
    assert profiling["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert "DCGM_FI_PROF_DRAM_ACTIVE" in docs[0]["data"]["counters.csv"]
