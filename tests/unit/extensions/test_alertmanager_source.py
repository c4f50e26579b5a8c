# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The event source gpuops.fleet.alertmanager's entry point, as ansible-rulebook runs it: a bad option named, a switched-off
source waits without listening. The receiver itself is tests/unit/plugins/module_utils/_cluster/events/test_webhook.py's and
test_receiver.py's."""

from __future__ import annotations

import asyncio

import pytest

from alertmanager_client import TOKEN

import eda_source

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError


def test_the_entry_point_names_a_bad_option_and_a_switched_off_source_waits():
    module = eda_source.load("gpuops_alertmanager_source2", "alertmanager")

    async def go(args, seconds=None):
        task = asyncio.ensure_future(module.main(asyncio.Queue(), args))
        done, dummy = await asyncio.wait([task], timeout=seconds)
        if not done:
            task.cancel()
            return "waiting"
        return task.result()

    with pytest.raises(ParameterError) as err:
        asyncio.run(go({"token": TOKEN, "port": "x"}))
    assert err.value.field == "port"
    with pytest.raises(ParameterError) as err:
        asyncio.run(go({}))
    assert err.value.field == "token"
    assert asyncio.run(go({"enabled": False}, seconds=0.5)) == "waiting"
