# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_cluster.k8s_watch.Watcher without a cluster: the watch stream is scripted (kubernetes.watch.Watch replaced), so the
resume after a server-side end, the re-list on 410 Gone and the deadline are checked on their own."""

from __future__ import annotations

import json

import pytest

import kube_list

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
        return kube_list.listed(self.objects, self.version)


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
    watcher = kw.Watcher(lister, "ns", label_selector="x=y")
    assert watcher.wait(ready, deadline=float("inf")) is True
    assert [s["resource_version"] for s in seen] == ["10", "11"]  # resumed where the first stream ended
    assert all(s["label_selector"] == "x=y" and s["timeout_seconds"] == kw.MAX_WATCH_SECONDS for s in seen)
    assert watcher.calls == 3 and len(lister.calls) == 1  # one list, two watch requests


def test_410_gone_lists_again_and_goes_on_from_there(monkeypatch):
    seen = []
    gone = ApiException(status=410, reason="Gone")
    monkeypatch.setattr(kw.k8s_watch, "Watch", scripted([gone, [event("ADDED", obj("b", 31, ready=True))]], seen))
    lister = Lister([obj("a", 10)], 10)
    watcher = kw.Watcher(lister, "ns")
    watcher.list()
    lister.version = 30
    assert watcher.wait(ready, deadline=float("inf")) is True
    assert [s["resource_version"] for s in seen] == ["10", "30"] and len(lister.calls) == 2
    assert sorted(n for dummy, n in watcher.objects) == ["a", "b"]


def test_deleted_objects_leave_and_the_deadline_ends_a_wait(monkeypatch):
    clock = iter([0.0, 0.0, 5.0, 20.0, 20.0])
    seen = []
    monkeypatch.setattr(kw.k8s_watch, "Watch", scripted([[event("DELETED", obj("a", 11)), event("ADDED", obj("c", 12))]], seen))
    watcher = kw.Watcher(Lister([obj("a", 10)], 10), "ns", _clock=lambda: next(clock))
    assert watcher.wait(ready, deadline=10.0) is False
    assert list(watcher.objects) == [("ns", "c")]
    assert seen[0]["timeout_seconds"] == 10


def test_other_api_errors_are_raised(monkeypatch):
    monkeypatch.setattr(kw.k8s_watch, "Watch", scripted([ApiException(status=403, reason="Forbidden")], []))
    watcher = kw.Watcher(Lister([], 1), "ns")
    with pytest.raises(ApiException):
        watcher.wait(ready, deadline=float("inf"))


def test_failure_words_api_errors_and_ours_once_for_every_k8s_module():
    from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
    assert kw.failure(ApiException(status=403, reason="Forbidden")) == {"msg": "Kubernetes API error: 403 Forbidden", "status": 403}
    assert kw.failure(ParameterError("batch_size", "expected an integer >= 1, got 0"))["msg"].startswith("batch_size")


class Pager:
    """list_fn of a server that pages (``limit``, ``_continue``): the objects in pages, one resourceVersion."""

    def __init__(self, objects, version):
        self.objects, self.version, self.calls = objects, version, []

    def __call__(self, *args, **kwargs):
        self.calls.append(kwargs)
        start = int(kwargs.get("_continue") or 0)
        end = start + (kwargs.get("limit") or len(self.objects))
        answer = kube_list.listed(self.objects[start:end], self.version)
        if end < len(self.objects):
            data = json.loads(answer.data)
            data["metadata"]["continue"] = str(end)
            answer.data = json.dumps(data).encode()
        return answer


def test_a_paged_list_is_one_snapshot_and_each_object_is_slimmed_as_it_arrives(monkeypatch):
    seen = []
    monkeypatch.setattr(kw.k8s_watch, "Watch", scripted([[event("MODIFIED", dict(obj("a", 11, ready=True), big="x" * 100))]], seen))
    pager = Pager([dict(obj(n, 10), big="x" * 100) for n in "abcde"], 10)
    listener = type("L", (), {"listed": lambda self, items, rv, first: got.append((items, rv, first)),
                              "event": lambda self, kind, o: got.append((kind, o))})()
    got = []
    watcher = kw.Watcher(pager, _page=2, _slim=lambda o: {"metadata": o["metadata"], "status": o["status"]}, _keep=False)
    watcher.listener = listener
    watcher.list()
    assert [(c.get("limit"), c.get("_continue"), c["_preload_content"]) for c in pager.calls] == [(2, None, False), (2, "2", False), (2, "4", False)]
    items, rv, first = got[0]
    assert [o["metadata"]["name"] for o in items] == list("abcde") and rv == "10" and first is True
    assert all("big" not in o for o in items) and watcher.values() == []  # slimmed; kept nowhere (_keep False)
    assert watcher.wait(lambda w: len(got) > 1, deadline=float("inf")) is True
    assert got[1] == ("MODIFIED", {"metadata": obj("a", 11)["metadata"], "status": {"ready": True}})
    assert "limit" not in seen[0] and "_continue" not in seen[0]  # the watch is one request, from the list's version


def test_a_failed_list_is_the_apis_error():
    class Failing:
        def __call__(self, *args, **kwargs):
            return type("R", (), {"status": 403, "reason": "Forbidden", "data": b"{}"})()

    with pytest.raises(ApiException) as err:
        kw.Watcher(Failing()).list()
    assert err.value.status == 403
