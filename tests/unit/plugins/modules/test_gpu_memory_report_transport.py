# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_memory_report's transport against real HTTP servers on loopback: credentials never cross an origin
(a redirect to another port is another origin), never appear in a message, and every bad option or answer
is named. (Prometheus itself, with TLS and basic auth, is tested in tests/prometheus.)"""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import gpu_memory_report as gmr
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.modules import gpu_memory_report as module

TOKEN = "s3cr3t-token-value"
EMPTY = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()


class Server:
    """A loopback HTTP server whose handler is a function of the request path; it records every request."""

    def __init__(self, answer):
        self.requests = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                outer.requests.append({"path": self.path, "authorization": self.headers.get("Authorization")})
                code, headers, body = answer(self.path, outer)
                self.send_response(code)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def servers():
    made = []

    def make(answer):
        made.append(Server(answer))
        return made[-1]

    yield make
    for server in made:
        server.close()


def params(url, **extra):
    p = {"url": url, "bearer_token": TOKEN, "username": None, "password": None, "validate_certs": True, "ca_path": None,
         "timeout": 5, "max_response_bytes": 64 * 1024 * 1024, "namespaces": None, "nodes": None}
    p.update(extra)
    return p


def ask(p):
    token = module.check_params(p)
    headers = {"Authorization": "Bearer %s" % token}
    return module.query(p, headers, "up", [token])


def test_a_redirect_to_another_origin_is_refused_and_gets_no_credentials(servers):
    elsewhere = servers(lambda path, s: (200, {}, EMPTY))
    prometheus = servers(lambda path, s: (302, {"Location": elsewhere.url + path}, b""))
    with pytest.raises(gmr.PrometheusError) as err:
        ask(params(prometheus.url))
    assert "redirects to another origin (http://127.0.0.1:%s)" % elsewhere.url.rsplit(":", 1)[1] in str(err.value)
    assert TOKEN not in str(err.value)
    assert elsewhere.requests == [], "the other origin was asked at all"
    assert [r["authorization"] for r in prometheus.requests] == ["Bearer " + TOKEN]


def test_a_redirect_within_the_origin_is_followed_with_the_credentials(servers):
    def answer(path, server):
        if path.startswith("/api/"):
            return 307, {"Location": "/prometheus" + path}, b""
        return 200, {}, EMPTY

    prometheus = servers(answer)
    assert ask(params(prometheus.url)) == []
    assert [(r["path"].split("?")[0], r["authorization"]) for r in prometheus.requests] == [
        ("/api/v1/query", "Bearer " + TOKEN), ("/prometheus/api/v1/query", "Bearer " + TOKEN)]


def test_an_answer_over_the_limit_is_refused(servers):
    prometheus = servers(lambda path, s: (200, {}, b" " * 5000 + EMPTY))
    with pytest.raises(gmr.PrometheusError, match="over max_response_bytes \\(2048\\)"):
        ask(params(prometheus.url, max_response_bytes=2048))


def test_a_transport_error_never_prints_the_token(servers):
    # a token with a newline in the middle would end up in http.client's "Invalid header value" message
    with pytest.raises(ParameterError) as err:
        module.check_params(params("http://127.0.0.1:9", bearer_token="abc\ndef"))
    assert str(err.value) == "bearer_token: is empty or holds a control character (value not shown)"
    # a token file's trailing newline is not part of the token
    assert module.check_params(params("http://127.0.0.1:9", bearer_token=TOKEN + "\n")) == TOKEN


@pytest.mark.parametrize("extra, field", [
    ({"timeout": 0}, "timeout"), ({"timeout": -1}, "timeout"), ({"ca_path": "/nonexistent/ca.pem"}, "ca_path"),
    ({"max_response_bytes": 0}, "max_response_bytes"), ({"password": "pa\nss", "username": "u", "bearer_token": None}, "password"),
])
def test_bad_options_are_named(extra, field):
    with pytest.raises(ParameterError) as err:
        module.check_params(params("https://prometheus.example:9090", **extra))
    assert err.value.field == field and "pa\nss" not in str(err.value)


@pytest.mark.parametrize("url, reason", [
    ("http://[::1", "Invalid IPv6 URL"), ("http://prom:abc", "Port could not be cast"), ("http://prom:99999", "Port out of range"),
    ("http://", "names no host"), ("http://prom:0", "port 0"), ("http://admin:hunter2@prom:abc", "Port could not be cast"),
])
def test_a_url_that_urllib_cannot_read_is_named_not_a_traceback(url, reason):
    """Issue 32 item 12: these ended in 'Module failed:' with an unhandled ValueError."""
    with pytest.raises(ParameterError) as err:
        module.check_params(params(url))
    assert err.value.field == "url" and reason in str(err.value) and "hunter2" not in str(err.value), str(err.value)


def test_credentials_in_the_url_are_refused_without_printing_them():
    with pytest.raises(ParameterError) as err:
        module.check_params(params("https://admin:hunter2@prometheus.example:9090"))
    assert err.value.field == "url" and "hunter2" not in str(err.value) and "***@prometheus.example:9090" in str(err.value)


@pytest.mark.parametrize("body, message", [
    ({"status": "success", "data": "x"}, "the answer's data is not an object"),
    ({"status": "success", "data": {"resultType": "vector", "result": "x"}}, "the answer's result is not a list"),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": "x"}]}}, "a sample is not"),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "x"]}]}}, "a sample's value is not a number"),
    ({"status": "success", "data": {"resultType": "vector", "result": ["x"]}}, "a sample is not"),
])
def test_malformed_answers_are_named_not_python_errors(body, message):
    with pytest.raises(gmr.PrometheusError, match="query up: " + message):
        gmr.parse_response(json.dumps(body), "up")


def test_values_that_are_not_finite_are_left_out():
    body = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"uuid": "a"}, "value": [1, "+Inf"]}, {"metric": {"uuid": "b"}, "value": [1, "NaN"]}, {"metric": {"uuid": "c"}, "value": [1, "2"]}]}}
    assert gmr.parse_response(json.dumps(body), "up") == [({"uuid": "c"}, 2.0)]
    # and the report of an infinite ratio no longer overflows
    doc = gmr.report({"gpu_total": [({"node": "n", "gpu": "0", "uuid": "a"}, 16.0)], "gpu_used": gmr.parse_response(json.dumps(body), "q")})
    assert doc["gpus"][0]["percent"] is None
