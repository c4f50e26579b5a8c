# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures: one real control plane per session (hack/kube-cluster.sh), SIMULATED fleets per test."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kubefleet  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("cluster")
    made = []
    try:
        made.append(kubefleet.start_cluster(workdir))
        yield made[0]
    finally:
        for item in made:
            item.close()
        kubefleet.stop_cluster(workdir)
        kubefleet.close_left_connections()  # before pytest's own last gc.collect() (stop 69)


@pytest.fixture(scope="session")
def fake_lib_dir():
    return kubefleet.fakenode.build_lib(os.path.join(kubefleet.ROOT, "build", "fakes"))


@pytest.fixture()
def fleet(cluster, tmp_path, fake_lib_dir):
    made = []

    def make(nodes, **sim_options):
        made.append(kubefleet.Fleet(cluster, tmp_path, fake_lib_dir, nodes, **sim_options))
        return made[-1]

    yield make
    for item in made:
        item.stop()
