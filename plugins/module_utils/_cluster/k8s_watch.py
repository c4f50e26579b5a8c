# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: a bounded, resumable list-and-watch of one kind of
object, for waits that must not poll (``daemonset_rollout``).

The kubernetes client's ``Watch.stream`` does not retry when ``timeout_seconds`` is given, so
each call here is one watch request, bounded by the time left; when the server ends it (its
timeout, or a dropped connection) it is resumed from the last resourceVersion seen, and on
``410 Gone`` (that version was compacted away) the objects are listed again. The watcher keeps
every object it has seen by name, so consecutive waits (batch after batch) share one stream of
events and never list again. A ``listener`` (the event source ``gpuops.fleet.gpu_nodes``) is told of
each list (``listed(items, resource_version, first)``) and each notification (``event(type, object)``),
bookmarks included (``allow_watch_bookmarks``).

The objects are the API's JSON as is: the list is read raw (``_preload_content=False``) and the watch's events are not
turned into the client's models (its ``Watch`` deserializes each event into a model unless it has no return type), which
at a thousand Nodes updating their status every 10 seconds was most of the event source's CPU. ``keep=False`` keeps no
objects (the event source's tracker keeps what it needs of them); ``page=N`` lists N objects a call (the API's
``limit`` and ``continue``: one consistent snapshot), and ``slim(object)`` reduces each object as it arrives, so a list of
a thousand Nodes with their images is never held whole.
"""

from __future__ import annotations

import json
import time

try:
    from kubernetes import watch as k8s_watch
    from kubernetes.client.exceptions import ApiException
except ImportError:  # the module reports a missing kubernetes library
    k8s_watch = None
    ApiException = Exception

# longest single watch request (the API server's own cap is --min-request-timeout, 1800 s)
MAX_WATCH_SECONDS = 300


def listed(list_fn, slim=None, page=500, **kwargs):
    """Every object of a list call, the API's JSON read raw ``page`` a call (no client models: at 5,000 Nodes those were most
    of a plan's time and memory), each reduced by ``slim`` as it arrives."""
    return Watcher(list_fn, _keep=False, _page=page, _slim=slim, **kwargs).list()


class Watcher:
    """Objects of one list call (``list_fn(*args, **kwargs)``), kept current by watching it."""

    def __init__(self, list_fn, *args, **kwargs):
        self.clock = kwargs.pop("_clock", time.monotonic)
        self.keep = kwargs.pop("_keep", True)
        self.page = kwargs.pop("_page", None)
        self.slim = kwargs.pop("_slim", None)
        self.list_fn = list_fn
        self.args = args
        self.kwargs = kwargs
        self.objects = {}
        self.resource_version = None
        self.calls = 0
        self.listener = None

    @staticmethod
    def key(obj):
        meta = obj.get("metadata") or {}
        return (meta.get("namespace"), meta.get("name"))

    def _page(self, token):
        kwargs = dict(self.kwargs, _preload_content=False)
        if self.page:
            kwargs["limit"] = self.page
        if token:
            kwargs["_continue"] = token
        response = self.list_fn(*self.args, **kwargs)
        self.calls += 1
        status = getattr(response, "status", 200)
        if not isinstance(status, int) or not 200 <= status <= 299:  # the client raises it itself before v35, not after
            raise ApiException(status=status, reason=getattr(response, "reason", None))
        listed = json.loads(response.data)
        items = listed.get("items") or []
        return [self.slim(obj) for obj in items] if self.slim else items, listed.get("metadata") or {}

    def list(self):
        """List (one call, or one a page; the API's JSON read as is); returns the objects as dicts."""
        items, meta = self._page(None)
        while meta.get("continue"):
            more, meta = self._page(meta["continue"])
            items.extend(more)
        first = self.resource_version is None
        self.objects = dict((self.key(obj), obj) for obj in items) if self.keep else {}
        self.resource_version = meta.get("resourceVersion")
        if self.listener is not None:
            self.listener.listed(items, self.resource_version, first)
        return items

    def values(self):
        return list(self.objects.values())

    def _apply(self, event):
        obj = event.get("raw_object") or {}
        if self.slim and event.get("type") != "BOOKMARK":
            obj = self.slim(obj)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if self.keep and event.get("type") == "DELETED":
            self.objects.pop(self.key(obj), None)
        elif self.keep and event.get("type") in ("ADDED", "MODIFIED"):
            self.objects[self.key(obj)] = obj
        if version:
            self.resource_version = version
        if self.listener is not None:
            self.listener.event(event.get("type"), obj)

    def wait(self, done, deadline):
        """Watch until ``done(self)`` is true (True) or ``deadline`` (a ``clock`` time) passes (False)."""
        if self.resource_version is None:
            self.list()
        while not done(self):
            left = deadline - self.clock()
            if left <= 0:
                return False
            seconds = max(1, int(min(left, MAX_WATCH_SECONDS) + 0.999))
            stream = k8s_watch.Watch()
            # no return type: Watch gives each event's JSON (raw_object) and builds no model of it; its ERROR events
            # (410 Gone) are handled as with one
            stream.get_return_type = lambda func: None
            self.calls += 1
            try:
                for event in stream.stream(self.list_fn, *self.args, resource_version=self.resource_version,
                                           timeout_seconds=seconds, _request_timeout=seconds + 30, **self.kwargs):
                    self._apply(event)
                    if done(self):
                        stream.stop()
                        return True
                    if self.clock() >= deadline:
                        stream.stop()
                        break
            except ApiException as exc:
                if getattr(exc, "status", None) != 410:
                    raise
                self.list()  # our resourceVersion is too old: start again from the current state
        return True


def failure(exc):
    """fail_json's arguments for a typed error of ours or of the API (one wording for every k8s module)."""
    status = getattr(exc, "status", None)
    if isinstance(exc, ApiException) and status is not None:
        return {"msg": "Kubernetes API error: %s %s" % (status, getattr(exc, "reason", "")), "status": status}
    out = dict(getattr(exc, "result", None) or {})  # what a typed error carries beside its message (e.g. the plan)
    out["msg"] = str(exc)
    return out
