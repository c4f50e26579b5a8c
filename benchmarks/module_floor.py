# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What one call of the checkpoint plan costs on its node, beside ping's (issue 62; prints figures; not a test).

A no-change run of site.yml makes one module call per node, as ``ansible -m ping`` does: what it costs above ping is the
controller's side (benchmarks/fleet.py's ``ctl`` column) and the module's own CPU on the node. This bench measures the
second alone, without ansible's workers or SSH around it, on one lab node (SIMULATED GPUs: lab/fleet.py):

1. a one-node lab, site.yml run on it twice: the second run is a no-change run, its module kept
   (``ANSIBLE_KEEP_REMOTE_FILES``), and ``ansible -m ping`` kept the same way;
2. each kept AnsiballZ run alone, in turn, ``--runs`` times (default 15), each time a new Python as ansible starts it on
   a node; the median CPU (user + system) of each:

   - ``ping``: ansible.builtin.ping;
   - ``imports``: the plan's AnsiballZ with one argument out of its choices (``strategy``): ansible-core's imports, the
     collection's node code imported and the arguments checked, then ``fail_json``: the least any call of the module costs;
   - ``no-change plan``: the plan as the no-change run sent it (it also reads the GPUs through pynvml, the checkpoint and
     the boot guard's files);

3. of the plan, once more under a wrapper: the CPU that CPython's zipimport spends compiling the collection's node code
   (it keeps no bytecode for a zip) and ansible-core's, per call;
4. what a bytecode cache on the node would save (issue 62's open decision; SIMULATED, not a feature of the collection):
   the plan under the same wrapper ``--runs`` times without a cache and ``--runs`` times with one (the collection's code
   objects as the first run compiled them, marshalled to a temporary folder, keyed by the source's SHA-256), in turn;
   the median CPU of each.

    .venv/bin/python benchmarks/module_floor.py [--runs 15]

The budget of issue 62's no-change goal (1.05x ping) is 5 % of ping's CPU per host in benchmarks/fleet.py --ssh (about
1.07 s at 200 nodes on this rig's 2 cores: about 53 ms), the controller's side and the module's together.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, ".venv", "bin")

# run inside the child: the AnsiballZ under a zipimport wrapper that adds up the CPU of each compile, by whose file it is
SPLIT = r"""
import json, runpy, sys, time, zipimport
spent = {"collection": 0.0, "ansible-core": 0.0, "files": 0}
compile_source = zipimport._compile_source
def timed(pathname, source):
    start = time.process_time()
    try:
        return compile_source(pathname, source)
    finally:
        spent["collection" if "/ansible_collections/gpuops/" in pathname else "ansible-core"] += time.process_time() - start
        spent["files"] += 1
zipimport._compile_source = timed
if len(sys.argv) > 2:  # a simulated bytecode cache in folder argv[2]: the collection's code as an earlier run compiled it
    import hashlib, marshal, os
    def cached(pathname, source, compile_source=timed, folder=sys.argv[2]):
        if "/ansible_collections/gpuops/" not in pathname:
            return compile_source(pathname, source)
        path = os.path.join(folder, hashlib.sha256(source).hexdigest())
        try:
            with open(path, "rb") as handle:
                return marshal.loads(handle.read())
        except FileNotFoundError:
            code = compile_source(pathname, source)
            with open(path + ".tmp", "wb") as handle:
                handle.write(marshal.dumps(code))
            os.replace(path + ".tmp", path)
            return code
    zipimport._compile_source = cached
sys.argv = [sys.argv[1]]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    sys.stderr.write("SPLIT " + json.dumps(spent) + "\n")
"""


def environment():
    env = dict(os.environ)
    env.update(ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")
    return env


def check(argv, env):
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit("%s failed (%d):\n%s" % (" ".join(argv[:3]), done.returncode, (done.stdout + done.stderr)[-3000:]))


def kept(folder, name):
    """The one kept AnsiballZ file ``name`` under ``folder`` (ansible's remote temporary directories)."""
    found = glob.glob(os.path.join(folder, "ansible-tmp-*", name))
    if len(found) != 1:
        sys.exit("expected one kept %s under %s, found %d" % (name, folder, len(found)))
    return found[0]


def cpu_ms(argv, env):
    """(CPU milliseconds of the child, its stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000.0, done.stdout, done.stderr


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="how many times each module runs (default 15)")
    opts = parser.parse_args(argv)
    if opts.runs < 1:
        parser.error("--runs: give 1 or more")
    sys.path.insert(0, os.path.join(ROOT, "lab"))
    import fleet as lab  # pylint: disable=import-outside-toplevel
    import yaml  # pylint: disable=import-outside-toplevel

    env = environment()
    work = tempfile.mkdtemp(prefix="gpuops-module-floor-")
    try:
        lab.generate(1, os.path.join(work, "lab"))
        inventory = os.path.join(work, "lab", "inventory.yml")
        site = [os.path.join(BIN, "ansible-playbook"), "-i", inventory, os.path.join(ROOT, "playbooks", "site.yml"), "-e",
                "gpuops_report_dir=" + os.path.join(work, "report")]
        check(site, env)  # the first run: the guard installed, the checkpoint as it should be
        plan_dir, ping_dir = os.path.join(work, "keep-plan"), os.path.join(work, "keep-ping")
        check(site, dict(env, ANSIBLE_KEEP_REMOTE_FILES="1", ANSIBLE_REMOTE_TMP=plan_dir))
        check([os.path.join(BIN, "ansible"), "-i", inventory, "gpu_nodes", "-m", "ansible.builtin.ping"],
              dict(env, ANSIBLE_KEEP_REMOTE_FILES="1", ANSIBLE_REMOTE_TMP=ping_dir))
        plan, ping = kept(plan_dir, "AnsiballZ_kubelet_checkpoint.py"), kept(ping_dir, "AnsiballZ_ping.py")
        with open(plan, encoding="utf-8") as handle:
            text = handle.read()
        bad, count = re.subn(r'"strategy": "[a-z]+"', '"strategy": "out-of-choices"', text, count=1)
        if count != 1:
            sys.exit("the kept plan names no strategy: is this site.yml's plan?")
        imports = os.path.join(work, "imports.py")
        with open(imports, "w", encoding="utf-8") as handle:
            handle.write(bad)
        # the node's environment, as the role gives it to the module (the fake NVML and systemd of the lab's node)
        with open(inventory, encoding="utf-8") as handle:
            host = next(iter(yaml.safe_load(handle)["gpu_nodes"]["hosts"].values()))
        node_env = dict(os.environ, **dict((k, str(v)) for k, v in (host.get("checkpoint_guard_environment") or {}).items()))
        python = host.get("ansible_python_interpreter") or sys.executable
        cases = [("ping", ping), ("imports", imports), ("no-change plan", plan)]
        spent = dict((name, []) for name, dummy in cases)
        for number in range(opts.runs):
            for name, path in cases:
                ms, out, err = cpu_ms([python, path], node_env)
                if number == 0:
                    reply = json.loads(out)
                    wanted = {"ping": lambda r: r.get("ping") == "pong", "imports": lambda r: r.get("failed") and "strategy" in r.get("msg", ""),
                              "no-change plan": lambda r: not r.get("failed") and r.get("changed") is False}[name]
                    if not wanted(reply):
                        sys.exit("%s did not answer as expected: %s %s" % (name, out[:500], err[-500:]))
                spent[name].append(ms)
        dummy, dummy2, err = cpu_ms([python, "-c", SPLIT, plan], node_env)
        split = json.loads([line for line in err.splitlines() if line.startswith("SPLIT ")][-1][6:])
        cache = os.path.join(work, "bytecode")
        os.mkdir(cache)
        cpu_ms([python, "-c", SPLIT, plan, cache], node_env)  # fills the cache
        wrapped = {"without": [], "with": []}
        for number in range(opts.runs):
            for name, extra in (("without", []), ("with", [cache])):
                ms, out, err = cpu_ms([python, "-c", SPLIT, plan] + extra, node_env)
                if json.loads(out).get("changed") is not False:
                    sys.exit("the plan under the wrapper (%s a cache) did not answer as expected: %s" % (name, out[:500]))
                wrapped[name].append(ms)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ping_ms = statistics.median(spent["ping"])
    print("one lab node (SIMULATED GPUs), each kept AnsiballZ run alone %d times, Python %s" % (opts.runs, sys.version.split()[0]))
    print("%-16s %10s %10s %12s" % ("module", "median ms", "min ms", "above ping"))
    for name, dummy in cases:
        median = statistics.median(spent[name])
        print("%-16s %10.1f %10.1f %12s" % (name, median, min(spent[name]), "-" if name == "ping" else "%+.1f ms" % (median - ping_ms)))
    print("the plan's zipimport compiles, one call: %d files, the collection's node code %.1f ms, ansible-core's %.1f ms"
          % (split["files"], split["collection"] * 1000, split["ansible-core"] * 1000))
    without, with_cache = statistics.median(wrapped["without"]), statistics.median(wrapped["with"])
    print("the plan under that wrapper, median of %d: %.1f ms without a bytecode cache, %.1f ms with one (SIMULATED): %+.1f ms"
          % (opts.runs, without, with_cache, with_cache - without))
    return 0


if __name__ == "__main__":
    sys.exit(main())
