# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_cluster.k8s_watch.Watcher without a cluster: the watch stream is scripted (kubernetes.watch.Watch replaced), so the
resume after a server-side end, the re-list on 410 Gone and the deadline are checked on their own."""

from __future__ import annotations

import types

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import k8s_watch as kw

pytest.importorskip("kubernetes")
from kubernetes.client.exceptions import ApiException  # noqa: E402  pylint: disable=wrong-import-position


def obj(name, version, ready=False):
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": str(version)}, "status": {"ready": ready}}


class Lister:
    """list_fn: returns the current objects; remembers the calls."""

    def __init__(self, objects, version):
        self.objects, self.version, self.calls = objects, version, []

    def __call__(self, *args, **kwargs):
        self.calls.append(kwargs)
        return types.SimpleNamespace(items=list(self.objects), metadata=types.SimpleNamespace(resource_version=str(self.version)))


class Client:
    @staticmethod
    def sanitize_for_serialization(item):
        return item


def scripted(streams, seen):
    """A Watch class whose successive stream() calls play ``streams`` (a list of event lists, or an exception)."""

    class FakeWatch:
        def stream(self, func, *args, **kwargs):
            seen.append(kwargs)
            script = streams.pop(0)
            if isinstance(script, Exception):
                raise script
            yield from script

        def stop(self):
            pass

    return FakeWatch


def event(kind, item):
    return {"type": kind, "raw_object": item}


def ready(watcher):
    return any(o["status"]["ready"] for o in watcher.values())


def test_a_wait_resumes_from_the_last_version_seen_when_the_server_ends_the_watch(monkeypatch):
    seen = []
    monkeypatch.setattr(kw.k8s_watch, "Watch", scripted([[event("MODIFIED", obj("a", 11))], [event("MODIFIED", obj("a", 12, ready=True))]], seen))
    lister = Lister([obj("a", 10)], 10)
    watcher = kw.Watcher(Client(), lister, "ns", label_selector="x=y")
    assert watcher.wait(ready, deadline=float("inf")) is True
    assert [s["resource_version"] for s in seen] == ["10", "11"]  # resumed where the first stream ended
    assert all(s["label_selector"] == "x=y" and s["timeout_seconds"] == kw.MAX_WATCH_SECONDS for s in seen)
    assert watcher.calls == 3 and len(lister.calls) == 1  # one list, two watch requests


def test_410_gone_lists_again_and_goes_on_from_there(monkeypatch):
    seen = []
    gone = ApiException(status=410, reason="Gone")
    monkeypatch.setattr(kw.k8s_watch, "Watch", scripted([gone, [event("ADDED", obj("b", 31, ready=True))]], seen))
    lister = Lister([obj("a", 10)], 10)
    watcher = kw.Watcher(Client(), lister, "ns")
    watcher.list()
    lister.version = 30
    assert watcher.wait(ready, deadline=float("inf")) is True
    assert [s["resource_version"] for s in seen] == ["10", "30"] and len(lister.calls) == 2
    assert sorted(n for dummy, n in watcher.objects) == ["a", "b"]


def test_deleted_objects_leave_and_the_deadline_ends_a_wait(monkeypatch):
    clock = iter([0.0, 0.0, 5.0, 20.0, 20.0])
    seen = []
    monkeypatch.setattr(kw.k8s_watch, "Watch", scripted([[event("DELETED", obj("a", 11)), event("ADDED", obj("c", 12))]], seen))
    watcher = kw.Watcher(Client(), Lister([obj("a", 10)], 10), "ns", _clock=lambda: next(clock))
    assert watcher.wait(ready, deadline=10.0) is False
    assert list(watcher.objects) == [("ns", "c")]
    assert seen[0]["timeout_seconds"] == 10


def test_other_api_errors_are_raised(monkeypatch):
    monkeypatch.setattr(kw.k8s_watch, "Watch", scripted([ApiException(status=403, reason="Forbidden")], []))
    watcher = kw.Watcher(Client(), Lister([], 1), "ns")
    with pytest.raises(ApiException):
        watcher.wait(ready, deadline=float("inf"))


def test_failure_words_api_errors_and_ours_once_for_every_k8s_module():
    from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
    assert kw.failure(ApiException(status=403, reason="Forbidden")) == {"msg": "Kubernetes API error: 403 Forbidden", "status": 403}
    assert kw.failure(ParameterError("batch_size", "expected an integer >= 1, got 0"))["msg"].startswith("batch_size")
