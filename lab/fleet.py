# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A lab fleet of N nodes with SIMULATED GPUs, for scale runs (`make lab NODES=200`).

The node kinds are the five hosts of lab/inventory.yml (healthy, replaced GPU, gpushare,
corrupt checkpoint, driver not loaded), with their host variables; the group variables are
lab/inventory.yml's too, with the checkout's paths made absolute; those that lab/inventory.yml templates from
the node's name or the controller's Python are written out per node as plain values, as a fleet's inventory names each
node's paths (a template per variable is a Jinja compile each time a task renders it: the lab's cost, not the
collection's). Node i gets a kind from a
fixed pattern, so every N has the same realistic mix: of each 50 nodes, 40 healthy, 5 with a
replaced GPU, 2 gpushare, 2 corrupt, 1 without a driver (80/10/4/4/2 %).

Each node's sysroot is what lab/setup.yml makes for a lab node (the fake NVML description,
kubelet's checkpoint, a running simulated kubelet), written directly by this script: 200
nodes take well under a second, where the playbook took minutes.

    .venv/bin/python lab/fleet.py --nodes 200 [--out out/fleet]
writes OUT/inventory.yml and OUT/nodes/<node>/. Nothing here is real hardware.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "fakes"))

import fakenode  # noqa: E402  pylint: disable=wrong-import-position

# of each 50 nodes: the kind of node i % 50 (lab/inventory.yml's host names)
PATTERN = (
    ["lab-healthy"] * 40 + ["lab-replaced-gpu"] * 5 + ["lab-gpushare"] * 2 + ["lab-corrupt"] * 2 + ["lab-no-driver"]
)
# spread the unhealthy ones through the fleet (and through the name-sorted restart batches)
PATTERN = [PATTERN[(i * 7) % 50] for i in range(50)]


class _Plain(yaml.SafeDumper):
    """No &anchors/*aliases: every host's variables written out in full."""

    def ignore_aliases(self, data):
        return True


def load_lab():
    with open(os.path.join(ROOT, "lab", "inventory.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def kind_of(index):
    return PATTERN[index % len(PATTERN)]


def group_vars(lab, out):
    """lab/inventory.yml's group variables, with the checkout's and this fleet's paths made absolute."""
    found = dict(lab["gpu_nodes"]["vars"])
    fakes = os.path.join(ROOT, "build", "fakes")
    found["gpuops_lab_root"] = os.path.join(out, "nodes", "{{ inventory_hostname }}")
    env = dict(found["checkpoint_guard_environment"])
    env["LD_LIBRARY_PATH"] = fakes
    env["PATH"] = fakes + ":/usr/local/bin:/usr/bin:/bin"
    found["checkpoint_guard_environment"] = env
    return found


# what the group variables template, written out per host instead
_LAB_ROOT = "{{ gpuops_lab_root }}"
_PLAYBOOK_PYTHON = "{{ ansible_playbook_python }}"


def _literal(value, root, python):
    if isinstance(value, str):
        return value.replace(_LAB_ROOT, root).replace(_PLAYBOOK_PYTHON, python)
    if isinstance(value, dict):
        return dict((k, _literal(v, root, python)) for k, v in value.items())
    if isinstance(value, list):
        return [_literal(v, root, python) for v in value]
    return value


def split_vars(group, out, python):
    """(group variables without templates, a function giving one host's variables that had them, as literal values).

    A fleet's inventory names each node's paths (a dynamic inventory writes them out); a template per variable costs
    ansible-core 2.19+ a Jinja compile each time a task renders it, on each node (issue 36), which is the lab's cost,
    not the collection's. ``python``: the interpreter for the "nodes" and the guard (the lab's ansible_playbook_python)."""
    templated = dict((k, v) for k, v in group.items() if k != "gpuops_lab_root" and (_LAB_ROOT in repr(v) or _PLAYBOOK_PYTHON in repr(v)))
    plain = dict((k, v) for k, v in group.items() if k not in templated and k != "gpuops_lab_root")

    def host(name):
        root = os.path.join(out, "nodes", name)
        found = _literal(templated, root, python)
        found["gpuops_lab_root"] = root
        return found
    return plain, host


def sysroot(root, host_vars, defaults):
    """One node's sysroot, as lab/setup.yml makes it."""
    device_plugins = os.path.join(root, "var", "lib", "kubelet", "device-plugins")
    os.makedirs(device_plugins)
    os.makedirs(os.path.join(root, "run", "systemd"))
    records = [
        fakenode.gpu(uuid, bus="00000000:00:%02x.0" % (7 + index), minor=index)
        for index, uuid in enumerate(host_vars["gpuops_lab_gpus"])
    ]
    fakenode.write_config(os.path.join(root, "fake_nvml.cfg"), records, init_error=int(host_vars.get("gpuops_lab_init_error", 0)))
    checkpoint = host_vars.get("gpuops_lab_checkpoint", defaults["gpuops_lab_checkpoint"])
    target = os.path.join(device_plugins, "kubelet_internal_checkpoint")
    shutil.copyfile(os.path.join(ROOT, "lab", "files", checkpoint), target)
    os.chmod(target, 0o600)
    with open(os.path.join(root, "run", "systemd", "kubelet.service.state"), "w", encoding="utf-8") as handle:
        handle.write("active\n")


def generate(nodes, out, python=None, kind=None):
    """Write OUT/inventory.yml and the sysroots; returns {node: kind}. Each node's paths (and ``python``, default this
    interpreter) are written out as its own variables (split_vars). ``kind`` (a lab host's name): every node of it, not
    the mix."""
    lab = load_lab()
    out = os.path.abspath(out)
    if os.path.isdir(os.path.join(out, "nodes")):
        shutil.rmtree(os.path.join(out, "nodes"))
    os.makedirs(out, exist_ok=True)
    defaults = lab["gpu_nodes"]["vars"]
    kinds = lab["gpu_nodes"]["hosts"]
    hosts = {}
    mix = {}
    width = max(4, len(str(nodes)))
    plain, per_host = split_vars(group_vars(lab, out), out, python or sys.executable)
    for index in range(nodes):
        name = "fleet-%0*d" % (width, index + 1)
        node_kind = kind or kind_of(index)
        host_vars = dict(kinds[node_kind] or {})
        host_vars["gpuops_lab_kind"] = node_kind
        sysroot(os.path.join(out, "nodes", name), host_vars, defaults)
        host_vars.update(per_host(name))
        hosts[name] = host_vars
        mix[name] = node_kind
    inventory = {
        "gpu_nodes": {"vars": plain, "hosts": hosts},
        "all": lab.get("all", {}),
    }
    with open(os.path.join(out, "inventory.yml") + ".tmp", "w", encoding="utf-8") as handle:
        handle.write("# generated by lab/fleet.py: %d nodes with SIMULATED GPUs (not real hardware)\n" % nodes)
        yaml.dump(inventory, handle, Dumper=_Plain, default_flow_style=False, sort_keys=True)
    os.replace(os.path.join(out, "inventory.yml") + ".tmp", os.path.join(out, "inventory.yml"))
    return mix


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200, help="how many nodes (default 200)")
    parser.add_argument("--out", default=os.path.join(ROOT, "out", "fleet"), help="where (default out/fleet)")
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error("--nodes must be at least 1")
    fakenode.build_lib(os.path.join(ROOT, "build", "fakes"))
    start = time.monotonic()
    mix = generate(args.nodes, args.out)
    counts = {}
    for kind in mix.values():
        counts[kind] = counts.get(kind, 0) + 1
    print(
        "lab fleet: %d nodes with SIMULATED GPUs in %s (%.2f s): %s"
        % (args.nodes, os.path.abspath(args.out), time.monotonic() - start, ", ".join("%s %d" % item for item in sorted(counts.items())))
    )
    print("run: .venv/bin/ansible-playbook -i %s playbooks/site.yml" % os.path.join(os.path.abspath(args.out), "inventory.yml"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
