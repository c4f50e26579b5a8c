# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugin_utils/_pod_stream: the API client configured from k8s_node's options as kubectl reads them (the real kubernetes
client's kubeconfig loader), and a command's end read from the stream's status channel. The stream itself against a real
API server and kubelet: tests/knode (the story through the API, gpuops_node_exec_transport api)."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.plugin_utils import _pod_stream as pod_stream

pytestmark = pytest.mark.skipif(pod_stream.unsupported() is not None, reason=str(pod_stream.unsupported()))


def bearer(cfg):
    """The Authorization header the client sends (auth_settings: the same on the client's old and new key names)."""
    return cfg.auth_settings()["BearerToken"]["value"]


def kubeconfig(tmp_path, token="kc-token", server="https://kc.example:6443"):
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "main",
              "clusters": [{"name": "c", "cluster": {"server": server}}, {"name": "other", "cluster": {"server": "https://other:6443"}}],
              "users": [{"name": "u", "user": {"token": token}}],
              "contexts": [{"name": "main", "context": {"cluster": "c", "user": "u"}}, {"name": "prod", "context": {"cluster": "other", "user": "u"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    return path, config


def test_the_kubeconfig_file_or_mapping_and_its_context_then_the_options_override_it(tmp_path):
    path, config = kubeconfig(tmp_path)
    cfg = pod_stream.configuration(str(path))
    assert cfg.host == "https://kc.example:6443" and bearer(cfg) == "Bearer kc-token"
    assert pod_stream.configuration(str(path), "prod").host == "https://other:6443"
    assert pod_stream.configuration(config, "prod").host == "https://other:6443", "a mapping, as kubernetes.core's connection takes"
    cfg = pod_stream.configuration(str(path), "", "https://api.example:443", "opt-token", "/c.pem", "/k.pem", "/ca.pem")
    assert (cfg.host, cfg.cert_file, cfg.key_file, cfg.ssl_ca_cert) == ("https://api.example:443", "/c.pem", "/k.pem", "/ca.pem")
    assert bearer(cfg) == "Bearer opt-token"
    assert cfg.verify_ssl is True, "the server's certificate is always verified"


def test_without_a_kubeconfig_the_environment_s_is_read_and_a_server_alone_will_do(tmp_path, monkeypatch):
    path, dummy = kubeconfig(tmp_path, server="https://from-env:6443")
    monkeypatch.setattr(pod_stream.k8s_config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    assert pod_stream.configuration().host == "https://from-env:6443"
    monkeypatch.setattr(pod_stream.k8s_config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "none"))
    cfg = pod_stream.configuration(host="https://api.example:443", token="t")
    assert cfg.host == "https://api.example:443" and bearer(cfg) == "Bearer t"


def test_a_kubeconfig_the_client_cannot_use_is_named_and_its_content_never_shown(tmp_path):
    path, config = kubeconfig(tmp_path, token="s3cret-token")
    with pytest.raises(pod_stream.StreamError, match="kubectl_kubeconfig: the API client cannot use it") as failed:
        pod_stream.configuration(str(path), "no-such-context")
    assert "s3cret-token" not in str(failed.value)
    with pytest.raises(pod_stream.StreamError, match="kubectl_kubeconfig"):
        pod_stream.configuration(str(tmp_path / "missing"))


@pytest.mark.parametrize("status, expected", [
    (b'{"metadata":{},"status":"Success"}', (0, "")),
    (b'{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}', (3, "")),
    (b'{"status":"Failure","reason":"InternalError","message":"OCI runtime exec failed"}', (None, "OCI runtime exec failed")),
    (b"", (None, "the exec stream ended without the command's status")),
    (b"not json", (None, "the exec stream's status is not a metav1.Status (8 bytes)")),
])
def test_the_command_s_end_comes_from_the_status_channel(status, expected):
    assert pod_stream.exit_status(status) == expected


def test_a_command_that_outlives_its_timeout_has_no_exit_status():
    class Open:
        written = b""

        def write_stdin(self, data):
            self.written += data

        def is_open(self):
            return True

        def update(self, timeout=0):
            pass

        def read_channel(self, channel):
            return b"partial" if channel == 1 else b""

        def close(self):
            self.closed = True

    opened = Open()
    ticks = iter(range(100))
    original = pod_stream.k8s_stream
    pod_stream.k8s_stream = lambda *args, **kwargs: opened
    try:
        rc, out, err = pod_stream.run(type("Core", (), {"connect_get_namespaced_pod_exec": None})(), "ns", "pod", "c", ["true"], b"x" * 70000,
                                      timeout=5, clock=lambda: next(ticks))
    finally:
        pod_stream.k8s_stream = original
    assert rc is None and err.endswith(b"exec: no end in 5 s") and out.startswith(b"partial") and opened.closed
    assert opened.written == b"x" * 70000


@pytest.mark.parametrize("status, why", [
    (b'{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[1]}}', "without an ExitCode cause"),
    (b'{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"%s"}]}}' % (b"9" * 5000),
     "an exit code that is not a process's"),
    (b'{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"256"}]}}', "not a process's"),
    (b'{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":["1"]}]}}', "not a process's"),
    (b'{"status":"Failure","reason":"NonZeroExitCode","details":"x"}', "without an ExitCode cause"),
    (b'{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":{"a":1}}}', "without an ExitCode cause"),
    (b'{"status":"Failure","message":["a"]}', "the exec failed"),
    (b"[" * 100000, "is not a metav1.Status"),
    (b'{"status":"Failure","message":"' + b"m" * 70000 + b'"}', "is not a metav1.Status"),
])
def test_a_malformed_status_gives_no_exit_status_with_a_reason_never_an_exception(status, why):
    """Issue 48, item 5: what a status frame says is the node's kubelet's word; one of another shape is no exit status."""
    rc, reason = pod_stream.exit_status(status)
    assert rc is None and why in reason, reason


def test_a_command_that_writes_more_than_the_cap_is_cut_off_and_the_controller_keeps_no_more(monkeypatch):
    """256 MiB on stdout: the controller keeps MAX_OUTPUT (here 1 MiB), stops reading, closes the stream, and the command has
    no exit status, the error naming the cap; Python's own allocations stay near the cap (they were the whole output)."""
    import tracemalloc

    class Flood:
        sent = 0
        closed = False

        def write_stdin(self, data):
            pass

        def is_open(self):
            return not self.closed

        def update(self, timeout=0):
            pass

        def read_channel(self, channel):
            if channel != 1 or self.sent >= 256 * 1024 * 1024:
                return b""
            self.sent += 64 * 1024
            return b"x" * (64 * 1024)

        def close(self):
            self.closed = True

    flood = Flood()
    monkeypatch.setattr(pod_stream, "MAX_OUTPUT", 1024 * 1024)
    monkeypatch.setattr(pod_stream, "k8s_stream", lambda *args, **kwargs: flood)
    tracemalloc.start()
    try:
        rc, out, err = pod_stream.run(type("Core", (), {"connect_get_namespaced_pod_exec": None})(), "ns", "pod", "c", ["cat", "big"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rc is None and len(out) == 1024 * 1024 and flood.closed
    assert b"wrote more than 1 MiB on stdout, the most the controller keeps (MAX_OUTPUT)" in err
    assert flood.sent < 2 * 1024 * 1024, "it kept reading after the cap"
    assert peak < 4 * 1024 * 1024, peak
