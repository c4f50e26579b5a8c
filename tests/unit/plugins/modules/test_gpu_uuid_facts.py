# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_uuid_facts run by ansible-playbook against a fake node."""

from __future__ import annotations

import fakenode

NEW = "GPU-68ce64fb-ea68-5ad6-7e72-31f3f07378df"


def test_gpu_uuid_facts_playbook(fake_node, playbook, tmp_path):
    env = fake_node(
        [
            fakenode.gpu(NEW),
            fakenode.gpu("GPU-11111111-2222-3333-4444-555555555555", fakenode.A100, "00000000:00:08.0", 40960, 1, mig=1),
            fakenode.mig(1, 0, "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "1g.5gb", 7, 0, 4864),
        ]
    )
    bad = fakenode.write_config(str(tmp_path / "bad.cfg"), [], init_error=9)
    ok, changed, out = playbook("gpu_uuid_facts.yml", env, bad_config=bad, new_uuid=NEW)
    assert (ok, changed) == (8, 0), out
    assert "rescued=2 " in out
