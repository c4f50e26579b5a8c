# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection (controller side): a command in a pod over the API server's exec stream.

The kubernetes Python client's websocket (``kubernetes.stream``) from the controller's own process, where ``kubectl exec``
would start a process that reads the kubeconfig, asks the API server for the pod, then opens the same stream: one request
per command instead of two, and no process. The protocol is the API server's ``v4.channel.k8s.io`` (kubelet 1.20 speaks
no later one): one byte names the channel of each frame, 0 stdin, 1 stdout, 2 stderr, 3 the command's end as a
``metav1.Status`` (``NonZeroExitCode`` with its ``ExitCode`` cause). That protocol cannot close stdin (``v5.channel.k8s.io``
added the close signal, Kubernetes 1.30), so the caller sends a command's stdin with its size and the command reads
exactly that many bytes (``node_pod.exec_argv``'s ``stdin_size``).

Bytes, not text: the client's ``binary`` streams (kubernetes 30, kubernetes-client/python#2194), so a fetched file or a
module's output is never decoded and re-encoded on the way.
"""

from __future__ import annotations

import json
import re
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError

# The kubernetes client, imported on first use only: its import and its core API (CoreV1Api, a 63,000-line module loaded
# on first use) cost a process 1.1 s of CPU with compiled bytecode, 1.7 s without (measured on this rig), and every
# task's worker is a process of its own, so a run that keeps to kubectl never pays it.
k8s_client = k8s_config = k8s_stream = ConfigException = ApiException = None
_MISSING = None
_LOADED = False


def _load():
    """Import the kubernetes client once per process; why it cannot serve (a sentence), or None."""
    global k8s_client, k8s_config, k8s_stream, ConfigException, ApiException, _MISSING, _LOADED  # pylint: disable=global-statement
    if not _LOADED:
        _LOADED = True
        try:  # pylint: disable=import-outside-toplevel
            import inspect

            from kubernetes import client as k8s_client
            from kubernetes import config as k8s_config
            from kubernetes.config.config_exception import ConfigException
            from kubernetes.stream import stream as k8s_stream
            from kubernetes.stream import ws_client
            from kubernetes.client.rest import ApiException
        except ImportError as exc:
            _MISSING = "the kubernetes Python client is not installed on the controller (%s)" % exc
        else:
            if "binary" not in inspect.signature(ws_client.WSClient.__init__).parameters:
                _MISSING = "this kubernetes Python client (before 30) cannot carry bytes on an exec stream"
    return _MISSING


STDOUT, STDERR, ERROR = 1, 2, 3
# stdin goes in frames of at most this many bytes
CHUNK = 64 * 1024
# the most of a command's stdout (a module's result, a fetched file) and stderr the controller keeps in its memory: a command
# that writes more is cut off there and gets no exit status (its task fails naming this), so a node cannot fill the
# controller's memory (256 MiB of output took the controller process from 49 to 562 MiB before)
MAX_OUTPUT = 64 * 1024 * 1024
MAX_ERRORS = 4 * 1024 * 1024
# a status frame (metav1.Status) is a few hundred bytes; more is not one
MAX_STATUS = 64 * 1024
# an exit status the stream may report: a process's, 0 to 255 (more digits are not one)
_EXIT_CODE = re.compile(r"\A[0-9]{1,3}\Z")


class StreamError(GpuopsError):
    """The API client could not be configured from the connection's options (names the option and the fix)."""


def unsupported():
    """Why this controller cannot use the exec stream (a sentence), or None where it can (the client is then imported)."""
    return _load()


def configuration(kubeconfig="", context="", host="", token="", client_cert="", client_key="", ca_cert=""):
    """The API client's configuration from the connection's options, as kubectl makes its own from the same flags.

    The kubeconfig (the option's file or mapping; else ``KUBECONFIG`` or ``~/.kube/config``; else, with no server given,
    the pod's in-cluster service account), its ``context`` where given; then each option given overrides what it set.
    A kubeconfig that cannot be read raises StreamError naming the option (never its content: it may hold a token)."""
    if _load():
        raise StreamError("gpuops_node_exec_transport: %s; install kubernetes>=30 beside ansible-core, or set it to kubectl" % _MISSING)
    cfg = k8s_client.Configuration()
    context = context or None
    try:
        if isinstance(kubeconfig, dict):
            k8s_config.load_kube_config_from_dict(kubeconfig, context=context, client_configuration=cfg, persist_config=False)
        elif kubeconfig:
            k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg, persist_config=False)
        else:
            try:
                k8s_config.load_kube_config(context=context, client_configuration=cfg, persist_config=False)
            except ConfigException:
                if not host:
                    k8s_config.load_incluster_config(client_configuration=cfg)
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        raise StreamError("kubectl_kubeconfig: the API client cannot use it (%s: %s); give a readable kubeconfig, or the server "
                          "and credentials as options" % (type(exc).__name__, _first_line(exc))) from None
    if host:
        cfg.host = host
    if token:  # in place of the kubeconfig's (its key name differs between client versions; an exec plugin's refresh too)
        cfg.api_key = {"authorization": "Bearer " + token}
        cfg.api_key_prefix = {}
        cfg.refresh_api_key_hook = None
    if client_cert:
        cfg.cert_file = client_cert
    if client_key:
        cfg.key_file = client_key
    if ca_cert:
        cfg.ssl_ca_cert = ca_cert
    return cfg


def _first_line(exc):
    return (str(exc).strip().splitlines() or [""])[0][:300]


def api(cfg):
    """The core API on a client of its own: ``kubernetes.stream`` swaps that client's request method while it opens a stream."""
    return k8s_client.CoreV1Api(k8s_client.ApiClient(cfg))


def exit_status(status):
    """The command's exit status from the stream's status channel (bytes of a ``metav1.Status``), or None with the reason.

    ``Success``: 0. ``NonZeroExitCode``: its ``ExitCode`` cause, 0 to 255. Anything else (the exec itself failed, the stream
    ended without a status: kubelet went away, or a status that is not one: a cause of another shape, an exit code that is
    no process's) is no exit status: (None, why)."""
    try:
        parsed = json.loads(status[:MAX_STATUS].decode("utf-8", "replace")) if status.strip() and len(status) <= MAX_STATUS else None
    except (ValueError, RecursionError):
        parsed = None
    if not isinstance(parsed, dict):
        return None, "the exec stream ended without the command's status" if not status.strip() else \
            "the exec stream's status is not a metav1.Status (%d bytes)" % len(status)
    if parsed.get("status") == "Success":
        return 0, ""
    if parsed.get("reason") == "NonZeroExitCode":
        details = parsed.get("details")
        causes = details.get("causes") if isinstance(details, dict) else None
        for cause in causes if isinstance(causes, list) else ():
            if not isinstance(cause, dict) or cause.get("reason") != "ExitCode":
                continue
            message = cause.get("message")
            if isinstance(message, str) and _EXIT_CODE.match(message) and int(message) <= 255:
                return int(message), ""
            return None, "the exec stream's status gives an exit code that is not a process's (0 to 255): %r" % (str(message)[:40],)
        return None, "the exec stream's status says NonZeroExitCode without an ExitCode cause"
    message = parsed.get("message") or parsed.get("reason")
    return None, (message if isinstance(message, str) else "the exec failed")[:500]


def run(core, namespace, pod, container, argv, data=None, timeout=None, clock=time.monotonic):
    """Run ``argv`` in the pod's container: (rc, stdout, stderr), bytes; rc None where there is no exit status (the
    stream was refused or broke, or ``timeout`` seconds passed), stderr then saying why.

    ``data`` (bytes) goes to the command's stdin, which ``argv`` must read by size (see the module's docstring). It is
    sent whole before any output is read: the connection's commands (a pipelined module, a file put) read all their
    input before they write much, so neither side's buffers fill while the other waits."""
    _load()
    try:
        resp = k8s_stream(core.connect_get_namespaced_pod_exec, pod, namespace, command=list(argv), container=container or None,
                          stdin=bool(data), stdout=True, stderr=True, tty=False, _preload_content=False, binary=True)
    except ApiException as exc:  # the upgrade refused (the pod gone: NotFound; kubelet restarting: its error), or no connection
        return None, b"", ("exec: %s" % _first_line(exc.reason or exc)).encode()
    out, err, status = _Kept(MAX_OUTPUT), _Kept(MAX_ERRORS), _Kept(MAX_STATUS)
    try:
        for start in range(0, len(data or b""), CHUNK):
            resp.write_stdin(data[start:start + CHUNK])
        deadline = None if timeout is None else clock() + timeout
        while resp.is_open():
            if deadline is not None and clock() > deadline:
                return None, out.value(), err.value() + b"exec: no end in %d s" % timeout
            resp.update(timeout=1)
            _drain(resp, out, err, status)
            if out.over:
                return None, out.value(), _too_much(err)
        _drain(resp, out, err, status)
    except Exception as exc:  # pylint: disable=broad-exception-caught
        # websocket-client's errors (a closed or reset connection) and the socket's share no base class but Exception
        return None, out.value(), err.value() + ("exec stream broke: %s: %s" % (type(exc).__name__, _first_line(exc))).encode()
    finally:
        resp.close()
    if out.over:
        return None, out.value(), _too_much(err)
    rc, why = exit_status(status.value())
    return rc, out.value(), err.value() + (("exec: %s" % why).encode() if rc is None else b"")


def _too_much(err):
    return err.value() + ("exec: the command wrote more than %d MiB on stdout, the most the controller keeps (MAX_OUTPUT): the rest "
                          "was not read, and the command's outcome is unknown" % (MAX_OUTPUT // (1024 * 1024))).encode()


class _Kept:
    """A channel's bytes, up to ``limit``: what comes beyond is dropped and ``over`` says so."""

    def __init__(self, limit):
        self.limit, self.size, self.over, self.parts = limit, 0, False, []

    def add(self, chunk):
        room = self.limit - self.size
        if len(chunk) > room:
            self.over = True
            chunk = chunk[:max(0, room)]
        if chunk:
            self.parts.append(chunk)
            self.size += len(chunk)

    def value(self):
        return b"".join(self.parts)


def _drain(resp, out, err, status):
    for channel, into in ((STDOUT, out), (STDERR, err), (ERROR, status)):
        chunk = resp.read_channel(channel)
        if chunk:
            into.add(chunk if isinstance(chunk, bytes) else chunk.encode())
