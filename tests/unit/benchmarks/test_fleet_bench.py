# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet bench's ping references (benchmarks/fleet.py --ping-each, issue 62): each stage against the pings of its own
minutes, not the run's first ping alone."""

from __future__ import annotations

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("gpuops_fleet_bench", os.path.join(ROOT, "benchmarks", "fleet.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(name, wall, ctl):
    # (wall, peak RSS, rc, tail, CPU, module CPU, module calls): controller CPU = CPU - module CPU
    return (name, (wall, 50.0, 0, "", ctl + 1.0, 1.0, 10))


def test_without_ping_each_every_stage_against_the_first_ping(bench):
    rows = [row("lab set-up", 1.0, 0.0), row("ansible -m ping", 100.0, 10.0), row("check stage", 110.0, 12.0),
            row("second full run", 120.0, 13.0)]
    found = bench.ping_references(rows)
    assert 0 not in found  # the lab's set-up has no ratio
    assert found == {1: (100.0, 10.0), 2: (100.0, 10.0), 3: (100.0, 10.0)}


def test_with_ping_each_a_stage_against_the_pings_on_both_sides(bench):
    rows = [row("lab set-up", 1.0, 0.0), row("ansible -m ping", 100.0, 10.0), row("check stage", 110.0, 12.0),
            row(bench.PING_AFTER, 140.0, 14.0), row("full repair", 300.0, 30.0), row(bench.PING_AFTER, 160.0, 16.0),
            row("second full run", 150.0, 15.0), row(bench.PING_AFTER, 150.0, 15.0)]
    found = bench.ping_references(rows)
    assert found[2] == (120.0, 12.0)  # (100 + 140) / 2
    assert found[4] == (150.0, 15.0)  # (140 + 160) / 2
    assert found[6] == (155.0, 15.5)  # (160 + 150) / 2
    # a ping's own row: against the first ping (the drift shows as 1.40x, 1.60x, 1.50x)
    assert [found[i] for i in (1, 3, 5, 7)] == [(100.0, 10.0)] * 4


def test_a_stage_without_a_ping_after_it_takes_the_one_before(bench):
    rows = [row("lab set-up", 1.0, 0.0), row("ansible -m ping", 100.0, 10.0), row("check stage", 110.0, 12.0),
            row(bench.PING_AFTER, 140.0, 14.0), row("full repair", 300.0, 30.0)]
    assert bench.ping_references(rows)[4] == (140.0, 14.0)
