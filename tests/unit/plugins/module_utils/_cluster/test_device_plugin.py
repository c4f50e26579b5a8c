# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Device-plugin versions, options, CPUManager preflight, plan and per-node checks."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import device_plugin as dp
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

A = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
B = "GPU-68ce64fb-ea68-5ad6-7e72-31f3f07378df"


# -- versions: release history, not semver --------------------------------------------------

@pytest.mark.parametrize("older, newer", [
    ("1.11", "1.0.0-beta"),          # k8s-named tags came first
    ("1.0.0-beta4", "1.0.0-beta6"),
    ("1.0.0-beta6", "v0.6.0"),       # the trap: beta6 = v0.5.0 < v0.6.0
    ("v0.7.0-rc.8", "v0.7.0"),
    ("v0.9.0", "v0.14.1-ubi8"),
    ("0.14.5", "v0.17.1"),
])
def test_versions_follow_release_history(older, newer):
    assert dp.parse_version(older).key < dp.parse_version(newer).key


def test_beta_tags_map_to_their_reissued_versions():
    assert dp.parse_version("1.0.0-beta6").effective == "v0.5.0"
    assert dp.parse_version("1.0.0-beta").effective == "v0.0.0"
    assert dp.parse_version("1.0.0-beta4").describe() == "1.0.0-beta4 (= v0.3.0)"


@pytest.mark.parametrize("tag, has", [
    ("1.0.0-beta5", False), ("1.0.0-beta6", True), ("v0.4.0", False), ("v0.5.0", True),
    ("1.11", False), ("v0.17.1", True), ("v0.5.0-rc.1", False),
])
def test_pass_device_specs_arrived_with_beta6(tag, has):
    assert dp.parse_version(tag).has("pass_device_specs") is has


@pytest.mark.parametrize("tag, hint", [
    ("latest", "not a device-plugin version"),
    ("", "expected the plugin's image tag"),
    ("1.0.0-beta7", "no 1.0.0-beta after beta6"),
    ("1.2.0", "did you mean"),
])
def test_bad_versions_name_the_variable_and_the_fix(tag, hint):
    with pytest.raises(ParameterError) as err:
        dp.parse_version(tag)
    assert err.value.field == "device_plugin_version"
    assert hint in str(err.value)


def test_image_reference_refuses_a_tag_in_the_repository():
    assert dp.image_reference("nvcr.io/nvidia/k8s-device-plugin", "v0.17.1") == "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
    assert dp.image_reference("registry:5000/k8s-device-plugin", "v0.9.0") == "registry:5000/k8s-device-plugin:v0.9.0"
    with pytest.raises(ParameterError, match="device_plugin_image"):
        dp.image_reference("nvcr.io/nvidia/k8s-device-plugin:v0.9.0", "v0.17.1")


# -- options -> container -------------------------------------------------------------------------

def test_new_versions_get_every_option_as_environment():
    cfg = dp.container_config(dp.parse_version("v0.17.1"), {"pass_device_specs": True, "device_list_strategy": ["envvar", "cdi-cri"]})
    assert cfg["args"] == []
    assert {e["name"]: e["value"] for e in cfg["env"]} == {
        "PASS_DEVICE_SPECS": "true", "DEVICE_ID_STRATEGY": "uuid", "DEVICE_LIST_STRATEGY": "envvar,cdi-cri",
        "MIG_STRATEGY": "none", "FAIL_ON_INIT_ERROR": "true"}


def test_versions_before_v090_get_flags_they_know():
    # v0.5.0..v0.8.x read flags only: an environment variable would be silently ignored
    assert dp.container_config(dp.parse_version("1.0.0-beta6"), {"pass_device_specs": True}) == {
        "args": ["--pass-device-specs=true"], "env": [], "problems": []}
    cfg = dp.container_config(dp.parse_version("v0.7.0"), {"pass_device_specs": True, "mig_strategy": "single"})
    assert cfg["args"] == ["--device-list-strategy=envvar", "--fail-on-init-error=true", "--mig-strategy=single",
                           "--pass-device-specs=true"]


@pytest.mark.parametrize("tag, options, var", [
    ("1.0.0-beta4", {"pass_device_specs": True}, "device_plugin_pass_device_specs"),
    ("v0.8.0", {"device_id_strategy": "index"}, "device_plugin_device_id_strategy"),
    ("v0.6.0", {"mig_strategy": "mixed"}, "device_plugin_mig_strategy"),
    ("v0.13.0", {"device_list_strategy": ["envvar", "volume-mounts"]}, "device_plugin_device_list_strategy"),
    ("v0.14.5", {"device_list_strategy": ["cdi-cri"]}, "device_plugin_device_list_strategy"),
])
def test_options_a_version_lacks_are_problems_with_a_fix_that_works(tag, options, var):
    problems = dp.container_config(dp.parse_version(tag), options)["problems"]
    assert [p["option"] for p in problems] == [var]
    assert problems[0]["fix"].startswith("set device_plugin_version to v0.17.1 (")
    # the other way out names a value that differs from the one refused (not "leave it at its default")
    assert "or set %s: " % var in problems[0]["fix"]
    refused = problems[0]["problem"].split("=", 1)[1].split(" needs", 1)[0]
    assert "or set %s: %s" % (var, refused) not in problems[0]["fix"]


def test_beta4_with_the_role_defaults_names_a_fix_that_works():
    # the role's default is pass_device_specs: true, which 1.0.0-beta4 lacks: the hint must not say "leave it at its default"
    problem = dp.container_config(dp.parse_version("1.0.0-beta4"), {"pass_device_specs": True})["problems"][0]
    assert "default" not in problem["fix"]
    assert problem["fix"] == ("set device_plugin_version to v0.17.1 (v0.5.0 is the oldest that has it), or set "
                              "device_plugin_pass_device_specs: false (safe only where no node runs kubelet with cpuManagerPolicy=static)")


def test_an_option_problem_and_a_static_node_are_both_named():
    # defect: with a static node and default options on an old version, the option check fired first and hid the node
    version = dp.parse_version("1.0.0-beta4")
    problems = dp.container_config(version, {"pass_device_specs": True})["problems"]
    facts = {"gpu-a": _facts("static"), "gpu-b": _facts("none")}
    result = dp.preflight(version, {"pass_device_specs": True}, ["gpu-a", "gpu-b"], facts, problems)
    nodes = [p["node"] for p in result["problems"]]
    assert nodes == ["every targeted node (2: gpu-a, gpu-b)", "gpu-a (cpuManagerPolicy=static from config file /var/lib/kubelet/config.yaml)"]
    assert result["refused"] == ["gpu-a", "gpu-b"]
    assert "does not pass device specs" in result["problems"][1]["problem"]


@pytest.mark.parametrize("options, var", [
    ({"pass_device_specs": "maybe"}, "device_plugin_pass_device_specs"),
    ({"fail_on_init_error": 2}, "device_plugin_fail_on_init_error"),
    ({"mig_strategy": "all"}, "device_plugin_mig_strategy"),
    ({"device_list_strategy": []}, "device_plugin_device_list_strategy"),
])
def test_malformed_options_name_the_variable(options, var):
    with pytest.raises(ParameterError) as err:
        dp.normalize_options(options)
    assert err.value.field == var


@pytest.mark.parametrize("text, expected", [("false", False), ("False", False), ("no", False), ("0", False), ("true", True), ("yes", True), ("1", True)])
def test_booleans_from_extra_vars_or_surveys_are_converted(text, expected):
    # -e device_plugin_pass_device_specs=false arrives as the string "false"
    options = dp.normalize_options({"pass_device_specs": text, "fail_on_init_error": text})
    assert options["pass_device_specs"] is expected and options["fail_on_init_error"] is expected


# -- preflight ----------------------------------------------------------------------------------

def _facts(policy, source="config file /var/lib/kubelet/config.yaml", error=None):
    return {"cpu_manager_policy": policy, "source": source, "error": error}


def test_preflight_refuses_an_old_plugin_on_a_static_node_only():
    facts = {"gpu-a": _facts("static"), "gpu-b": _facts("none")}
    result = dp.preflight(dp.parse_version("1.0.0-beta4"), {"pass_device_specs": False}, ["gpu-a", "gpu-b"], facts)
    assert [p["node"] for p in result["problems"]] == ["gpu-a (cpuManagerPolicy=static from config file /var/lib/kubelet/config.yaml)"]
    assert "NVML: Unknown Error" in result["problems"][0]["problem"]
    assert "v0.17.1" in result["problems"][0]["fix"]


def test_preflight_wants_pass_device_specs_on_static_nodes():
    result = dp.preflight(dp.parse_version("v0.17.1"), {"pass_device_specs": False}, ["gpu-a"], {"gpu-a": _facts("static")})
    assert result["problems"][0]["fix"] == "set device_plugin_pass_device_specs: true"
    ok = dp.preflight(dp.parse_version("v0.17.1"), {"pass_device_specs": True}, ["gpu-a"], {"gpu-a": _facts("static")})
    assert ok["problems"] == [] and ok["warnings"] == []


def test_preflight_mig_needs_v090_under_static():
    result = dp.preflight(dp.parse_version("v0.8.2"), {"pass_device_specs": True, "mig_strategy": "single"},
                          ["gpu-a"], {"gpu-a": _facts("static")})
    assert len(result["problems"]) == 1 and "fixed in v0.9.0" in result["problems"][0]["problem"]


def test_preflight_never_acts_on_an_unknown_node():
    facts = {"gpu-b": _facts(None, source=None, error="no running kubelet")}
    result = dp.preflight(dp.parse_version("v0.17.1"), {"pass_device_specs": True}, ["gpu-a", "gpu-b"], facts)
    assert [p["node"] for p in result["problems"]] == ["gpu-a", "gpu-b"]
    assert "no kubelet facts" in result["problems"][0]["problem"]
    assert "no running kubelet" in result["problems"][1]["problem"]


def test_preflight_warns_without_pass_device_specs_on_none_nodes():
    result = dp.preflight(dp.parse_version("v0.17.1"), {"pass_device_specs": False}, ["gpu-a"], {"gpu-a": _facts("none")})
    assert result["problems"] == [] and "pass_device_specs is false" in result["warnings"][0]


# -- other managers of the plugin (GPU Operator, Helm, another DaemonSet) -------------------

def _plugin_ds(namespace, name, image="nvcr.io/nvidia/k8s-device-plugin:v0.14.1", labels=None, annotations=None, owners=None):
    return {"metadata": {"namespace": namespace, "name": name, "labels": labels or {}, "annotations": annotations or {},
                         "ownerReferences": owners or []},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}


OURS = ("kube-system", "nvidia-device-plugin-daemonset")


@pytest.mark.parametrize("policy, refused", [
    ({"metadata": {"name": "cluster-policy"}, "spec": {}}, True),                            # unset = enabled (IsEnabled)
    ({"metadata": {"name": "cluster-policy"}, "spec": {"devicePlugin": {"enabled": True}}}, True),
    ({"metadata": {"name": "cluster-policy"}, "spec": {"devicePlugin": {"enabled": False}}}, False),
])
def test_a_cluster_policy_with_its_plugin_enabled_is_refused(policy, refused):
    problems = dp.other_managers([policy], [], *OURS)
    assert bool(problems) is refused
    if refused:
        assert problems[0]["node"] == "ClusterPolicy cluster-policy" and "spec.devicePlugin.enabled: false" in problems[0]["fix"]


@pytest.mark.parametrize("ds, manager", [
    (_plugin_ds(*OURS, labels={"app.kubernetes.io/managed-by": "Helm"},
                annotations={"meta.helm.sh/release-name": "nvdp", "meta.helm.sh/release-namespace": "kube-system"}),
     "Helm (release kube-system/nvdp)"),
    (_plugin_ds(*OURS, owners=[{"kind": "ClusterPolicy", "name": "cluster-policy", "apiVersion": "nvidia.com/v1"}]),
     "the NVIDIA GPU Operator (owner ClusterPolicy cluster-policy)"),
    (_plugin_ds(*OURS, labels={"app.kubernetes.io/managed-by": "argocd"}), "argocd"),
])
def test_our_daemonset_managed_by_someone_else_is_refused(ds, manager):
    (problem,) = dp.other_managers([], [ds], *OURS)
    assert problem["node"] == "DaemonSet kube-system/nvidia-device-plugin-daemonset"
    assert problem["problem"] == "it is managed by %s, which would undo this role's changes" % manager


def _labelled_node(name, **labels):
    return {"metadata": {"name": name, "labels": labels}}


def test_another_plugin_daemonset_on_our_nodes_is_refused_and_unrelated_ones_or_ours_are_not():
    nodes = [_labelled_node("gpu-a", pool="gpu"), _labelled_node("gpu-b", pool="gpu"), _labelled_node("cpu-a", pool="cpu"),
             _labelled_node("gpu-x", pool="other")]
    helm = _plugin_ds("nvidia", "nvdp-nvidia-device-plugin", labels={"app.kubernetes.io/managed-by": "Helm"},
                      annotations={"meta.helm.sh/release-name": "nvdp"})
    elsewhere = _plugin_ds("team", "their-plugin")
    elsewhere["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "other"}   # only on a node we do not target
    others = [
        _plugin_ds(*OURS, labels={"app.kubernetes.io/managed-by": "gpuops.fleet"}),  # ours, as the role labels it: fine
        _plugin_ds("kube-system", "kube-proxy", image="registry.k8s.io/kube-proxy:v1.20.2"),
        helm,                                                                  # no nodeSelector: every node
        elsewhere,
    ]
    (problem,) = dp.other_managers(None, others, *OURS, nodes=nodes, node_selector={"pool": "gpu"})
    assert problem["node"] == "DaemonSet nvidia/nvdp-nvidia-device-plugin"
    assert "(managed by Helm (release nvidia/nvdp)) on 2 node(s) this role targets (gpu-a, gpu-b)" in problem["problem"]
    assert dp.other_managers(None, [elsewhere], *OURS, nodes=nodes, node_selector={"pool": "gpu"}) == []
    assert dp.format_problems([problem]).startswith("- DaemonSet nvidia/nvdp-nvidia-device-plugin: it already runs")


@pytest.mark.parametrize("text", ["v0.17.1\n", "v0.17.1 ", " v0.17.1", "v0.7.0-rc.8\n", "1.0.0-beta6\n"])
def test_a_version_with_white_space_around_it_is_refused_not_carried_into_the_image(text):
    # "$" matched before a trailing newline, and the tag went into the image reference as given
    with pytest.raises(ParameterError, match="device_plugin_version: .* is not a device-plugin version"):
        dp.parse_version(text)


def test_an_image_repository_with_white_space_is_refused():
    with pytest.raises(ParameterError, match="device_plugin_image: .* holds white space"):
        dp.image_reference("nvcr.io/nvidia/k8s-device-plugin\n", "v0.17.1")
