# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/gpu_monitoring.yml (role gpu_monitoring) against a real API server with SIMULATED nodes:
dcgm-exporter rolled onto the GPU nodes only; without the Prometheus Operator the scrape jobs, rules
and dashboard are rendered as files; with its CRDs, a ServiceMonitor and a PrometheusRule; a
second run changes nothing."""

from __future__ import annotations

import yaml

IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter@sha256:" + "ab" * 32


def monitoring_vars(f, tmp_path, **extra):
    values = {"gpu_monitoring_namespace": f.namespace, "gpu_monitoring_dcgm_image": IMAGE, "gpu_monitoring_dcgm_node_selector": f.label,
              "gpu_monitoring_pod_timeout": 30, "gpu_monitoring_render_dir": str(tmp_path / "rendered"), "gpu_monitoring_nodes": False,
              "gpu_monitoring_prometheus_labels": {"release": "kube-prometheus-stack"}}
    values.update(extra)
    return values


def test_exporter_rules_and_dashboard_with_and_without_the_operator(fleet, tmp_path):
    f = fleet([{"name": "a", "gpus": ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]},
               {"name": "b", "gpus": ["GPU-1b7d2a3e-5c8f-4e61-9a0d-3f2c4b5a6d7e"]}])
    # an image by tag is refused before anything changes
    rc, run = f.play(monitoring_vars(f, tmp_path, gpu_monitoring_dcgm_image="nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3"), playbook="gpu_monitoring.yml")
    assert rc != 0 and "must name dcgm-exporter by digest" in run.failure()
    assert f.cluster.apps.list_namespaced_daemon_set(f.namespace).items == []

    rc, run = f.play(monitoring_vars(f, tmp_path), playbook="gpu_monitoring.yml")
    assert rc == 0, run.failure()
    pods = f.cluster.core.list_namespaced_pod(f.namespace, label_selector="app.kubernetes.io/name=dcgm-exporter").items
    assert sorted(p.spec.node_name for p in pods) == sorted(n["name"] for n in f.nodes)
    assert all(p.status.phase == "Running" for p in pods)
    report = run.localhost("Keep the report (gpu_monitoring_report)")["ansible_facts"]["gpu_monitoring_report"]
    assert report["prometheus_operator"] is False and sorted(r["node"] for r in report["nodes"]) == sorted(n["name"] for n in f.nodes)
    assert sorted(p.name for p in (tmp_path / "rendered").iterdir()) == [
        "gpuops-gpu-memory-dashboard.json", "gpuops-gpu-memory.rules.yml", "gpuops-scrape-configs.yml"]
    dashboard = f.cluster.core.read_namespaced_config_map("gpuops-gpu-memory-dashboard", f.namespace)
    assert dashboard.metadata.labels["grafana_dashboard"] == "1" and "GPU APP" in dashboard.data["gpuops-gpu-memory.json"]
    assert f.cluster.core.read_namespaced_service("dcgm-exporter", f.namespace).spec.ports[0].port == 9400

    # with the Prometheus Operator's CRDs: a ServiceMonitor and a PrometheusRule carrying the same rules
    f.cluster.prometheus_operator_crds()
    rc, run = f.play(monitoring_vars(f, tmp_path), playbook="gpu_monitoring.yml")
    assert rc == 0, run.failure()
    monitor = f.cluster.custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", f.namespace, "servicemonitors", "dcgm-exporter")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "dcgm-exporter"}}
    rule = f.cluster.custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", f.namespace, "prometheusrules", "gpuops-gpu-memory")
    rendered = yaml.safe_load((tmp_path / "rendered" / "gpuops-gpu-memory.rules.yml").read_text())
    assert rule["spec"] == rendered
    # nothing deleted, nothing changed the second time
    rc, run = f.play(monitoring_vars(f, tmp_path), playbook="gpu_monitoring.yml")
    assert rc == 0, run.failure()
    assert run.changed == 0
