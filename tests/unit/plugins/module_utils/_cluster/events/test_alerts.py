# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Alertmanager's notifications as GPU events (module_utils/_cluster/events/alerts.py, options.py): options named when bad, the token never
in a message, the node from the first node label that is a Kubernetes name, hostile labels bounded data."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import alerts
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import options as source_options
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import nodes
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import window as windows
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

TOKEN = "s3cret-token-0123456789"


def payload(*alert_list, status="firing"):
    # Alertmanager 0.25's webhook payload (version 4)
    return {"version": "4", "groupKey": "{}:{alertname=\"GPUXidErrors\"}", "truncatedAlerts": 0, "status": status,
            "receiver": "gpuops", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://am:9093",
            "alerts": list(alert_list)}


def alert(name="GPUXidErrors", status="firing", **labels):
    return {"status": status, "labels": dict({"alertname": name}, **labels), "annotations": {"summary": "x"},
            "startsAt": "2026-11-29T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://p", "fingerprint": "c0ffee"}


def options(**args):
    return source_options.check_alerts(dict({"token": TOKEN}, **args))


@pytest.mark.parametrize("args, field", [
    ({"bogus": 1}, "bogus"),
    ({"port": "0"}, "port"),
    ({"port": "http"}, "port"),
    ({"host": "a b"}, "host"),
    ({"path": "alerts"}, "path"),
    ({"path": "/a?b"}, "path"),
    ({"node_labels": []}, "node_labels"),
    ({"node_labels": ["no-dash"]}, "node_labels"),
    ({"fault_alerts": "GPUXidErrors,{{ x }}"}, "fault_alerts"),
    ({"certfile": "/c.pem"}, "keyfile"),
    ({"keyfile": "/k.pem"}, "certfile"),
    ({"certfile": "c.pem", "keyfile": "k.pem"}, "certfile"),
    ({"settle_seconds": "-1"}, "settle_seconds"),
    ({"max_bytes": 10}, "max_bytes"),
    ({"enabled": "maybe"}, "enabled"),
])
def test_a_bad_option_is_named(args, field):
    with pytest.raises(ParameterError) as err:
        options(**args)
    assert err.value.field == field


@pytest.mark.parametrize("token", [None, "", "short", "has a space in it 123", "tab\there-0123456789abc"])
def test_a_missing_or_weak_token_is_refused_without_showing_it(token):
    with pytest.raises(ParameterError) as err:
        source_options.check_alerts({"token": token})
    assert err.value.field == "token"
    if token:
        assert token not in str(err.value)


def test_the_token_file_is_read_and_its_errors_are_named(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")

    def read(name):
        with open(name, encoding="utf-8") as handle:
            return handle.read()

    got = source_options.check_alerts({"token_file": str(path)}, read=read)
    assert got["token"] == TOKEN
    for args, field in (({"token_file": str(tmp_path / "none")}, "token_file"), ({"token_file": "rel/path"}, "token_file"),
                        ({"token_file": str(path), "token": TOKEN}, "token")):
        with pytest.raises(ParameterError) as err:
            source_options.check_alerts(args, read=read)
        assert err.value.field == field


def test_a_switched_off_source_needs_no_token():
    assert source_options.check_alerts({"enabled": "False"})["enabled"] is False


@pytest.mark.parametrize("header, ok", [
    ("Bearer " + TOKEN, True),
    ("bearer " + TOKEN, False),
    ("Bearer " + TOKEN[:-1], False),
    ("Bearer " + TOKEN + "x", False),
    ("Basic " + TOKEN, False),
    (None, False),
    ("Bearer \u00e9" + TOKEN, False),
])
def test_only_the_bearer_token_is_authorized(header, ok):
    assert alerts.authorized(header, TOKEN) is ok


KNOWN = {"gpu-a", "gpu-b", "gpu-c", "all"} | set("gpu-%d" % n for n in range(20))


def test_each_alert_is_an_event_of_its_node_and_a_firing_fault_alert_is_a_fault():
    got = alerts.events(payload(alert(node="gpu-a", xid="79"), alert("GPUMemoryWaste", node="gpu-b"),
                                alert(status="resolved", Hostname="gpu-c"), alert(instance="10.0.0.1:9400")), options(), "t", KNOWN)
    assert [(e["gpuops"]["alert"], e["gpuops"]["node"], e["gpuops"]["status"], e["gpuops"]["fault"]) for e in got] == [
        ("GPUXidErrors", "gpu-a", "firing", True), ("GPUMemoryWaste", "gpu-b", "firing", False),
        ("GPUXidErrors", "gpu-c", "resolved", False), ("GPUXidErrors", None, "firing", False)]
    assert [e.get("meta") for e in got] == [{"hosts": ["gpu-a", "localhost"]}, {"hosts": ["gpu-b", "localhost"]},
                                            {"hosts": ["gpu-c", "localhost"]}, None]
    assert got[0]["gpuops"]["labels"] == {"alertname": "GPUXidErrors", "node": "gpu-a", "xid": "79"}


def test_the_first_node_label_decides_and_a_bad_name_is_no_node():
    assert alerts.node_of({"node": "gpu-a", "Hostname": "gpu-b"}, ["Hostname", "node"], KNOWN) == ("gpu-b", None)
    assert alerts.node_of({"node": "gpu-a", "Hostname": "gpu-b"}, ["node", "Hostname"], KNOWN) == ("gpu-a", None)
    # the first label present decides: a bad value there is no node, never the next label's
    assert alerts.node_of({"node": "GPU_A;rm -rf", "Hostname": "gpu-b"}, ["node", "Hostname"], KNOWN) == (None, "GPU_A;rm -rf")
    assert alerts.node_of({"instance": "gpu-a:9400"}, ["node"], KNOWN) == (None, None)


@pytest.mark.parametrize("value", ["all", "ungrouped", "gpu-z", "localhost", "gpu-a,gpu-b", "*", "~gpu.*", "gpu-[0:9]", "!gpu-a"])
def test_an_alert_names_only_a_gpu_node_the_watch_knows_never_a_pattern(value):
    """Issue 57, item 4: an alert whose node label was ``all`` passed the DNS-1123 check; ansible-rulebook joined meta.hosts
    into --limit all,localhost and the run covered every GPU node. A node is a GPU Node the ruleset's Node watch knows, and
    never an Ansible pattern word (a GPU Node named all is not one either); anything else is unknown_node, never a fault."""
    got = alerts.events(payload(alert(node=value)), options(), "t", KNOWN)[0]
    assert got["gpuops"]["node"] is None and got["gpuops"]["unknown_node"] == value and not got["gpuops"]["fault"]
    assert "meta" not in got
    # no Node watch in the ruleset: no name is known
    assert alerts.events(payload(alert(node="gpu-a")), options(), "t")[0]["gpuops"]["node"] is None


@pytest.mark.parametrize("body", [None, [], {}, {"alerts": "x"}, {"alerts": [1]}, {"alerts": [{"status": "firing"}]},
                                  {"alerts": [dict(alert(), status="pending")]}, {"alerts": [alert()] * (alerts.MAX_ALERTS + 1)}])
def test_what_is_not_alertmanagers_payload_is_refused(body):
    with pytest.raises(alerts.PayloadError):
        alerts.events(body, options(), "t")


def test_hostile_labels_stay_bounded_data():
    labels = dict(("l%03d" % i, "v") for i in range(200))
    labels.update({"node": "gpu-a", "summary": "{{ lookup('pipe', 'id') }}" * 100, "bad-key": "x", "n": 5})
    got = alerts.events(payload(alert(**labels)), options(), "t", KNOWN)[0]["gpuops"]
    assert len(got["labels"]) <= alerts.MAX_LABELS
    assert "bad-key" not in got["labels"] and "n" not in got["labels"]
    assert all(len(v) <= nodes.MAX_TEXT for v in got["labels"].values())
    assert got["node"] == "gpu-a"


def test_a_storm_of_alerts_and_node_faults_is_one_window_of_the_ruleset():
    queue = object.__new__(type("Q", (), {}))
    window = windows.shared(queue, 5, 600)
    assert windows.shared(queue, 5, 600) is window
    with pytest.raises(ParameterError) as err:
        windows.shared(queue, 7, 600)
    assert err.value.field == "settle_seconds"
    other = object.__new__(type("Q", (), {}))
    assert windows.shared(other, 7, 600) is not window
    for i, event in enumerate(alerts.events(payload(*[alert(node="gpu-%d" % n) for n in range(20)]), options(), "t", KNOWN)):
        window.add(event, 100 + i * 0.1)
    window.add({"gpuops": {"node": "gpu-3"}}, 101)  # the Node watch saw gpu-3's withheld GPU too
    assert window.flush(104, "t") is None
    batch = window.flush(105, "t")
    assert batch["gpuops"]["kind"] == "gpu_faults" and batch["gpuops"]["nodes"] == ["gpu-%d" % n for n in range(20)]
    assert window.flush(200, "t") is None


def test_the_window_is_the_rulesets_through_ansible_rulebooks_filtered_queues():
    engine = pytest.importorskip("ansible_rulebook.engine")
    import asyncio

    ruleset, other = asyncio.Queue(), asyncio.Queue()
    first, second = engine.FilteredQueue([], ruleset), engine.FilteredQueue([], ruleset)
    assert windows.shared(first, 5, 600) is windows.shared(second, 5, 600)
    assert windows.shared(engine.FilteredQueue([], other), 5, 600) is not windows.shared(first, 5, 600)
