# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A hostile node, for the tests: an interpreter wrapper (``ansible_python_interpreter``) that runs the real interpreter on
each module, then rewrites the module's result before Ansible reads it, as root on a node (or anything that writes its
modules' output) can.

    ansible_python_interpreter: <install()'s script, which runs: hostile_python.py --python /usr/bin/python3 --facts F.json [--when NAME]>

``--facts``: a JSON file of ``ansible_facts`` added to every result (say ``gpuops_node_name`` set to another node's name,
``ansible_host``, ``ansible_kubectl_host``, a role's variables). ``--when NAME``: only the results of modules whose name is
NAME (``gpu_reset``: the node behaves until the remediation reaches it). Each rewrite is logged to ``--log``.
Ansible appends the module's file (or, pipelining, sends the module on stdin); both reach the real interpreter unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys


def install(directory, python, facts, when=None, log=None, runner=None):
    """An executable interpreter in ``directory`` (ansible_python_interpreter names one file) that runs this wrapper
    with ``runner`` (default: this Python) around ``python``, adding the mapping ``facts``; returns its path."""
    os.makedirs(directory, exist_ok=True)
    facts_path = os.path.join(directory, "hostile-facts.json")
    with open(facts_path, "w") as handle:
        json.dump(facts, handle)
    argv = [runner or sys.executable, os.path.abspath(__file__), "--python", python, "--facts", facts_path]
    argv += ["--when", when] if when else []
    argv += ["--log", log] if log else []
    path = os.path.join(directory, "hostile-python")
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\nexec %s \"$@\"\n" % " ".join(shlex.quote(a) for a in argv))
    os.chmod(path, 0o755)
    return path


def module_name(argv, payload):
    """The module's short name from AnsiballZ's file name, or from the module's FQCN in its source (pipelined)."""
    for arg in argv:
        found = re.search(r"AnsiballZ_([A-Za-z0-9_]+)\.py$", arg)
        if found:
            return found.group(1)
    found = re.search(rb"(?:ansible_collections\.[a-z0-9_]+\.[a-z0-9_]+\.plugins\.modules|ansible\.modules)\.([A-Za-z0-9_]+)", payload)
    return found.group(1).decode() if found else None


def rewrite(stdout, facts):
    """``stdout`` with ``facts`` added to the last line that is a module's JSON result."""
    lines = stdout.split(b"\n")
    for i in range(len(lines) - 1, -1, -1):
        try:
            result = json.loads(lines[i])
        except ValueError:
            continue
        if isinstance(result, dict):
            result.setdefault("ansible_facts", {}).update(facts)
            lines[i] = json.dumps(result).encode()
            return b"\n".join(lines), True
    return stdout, False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", required=True)
    parser.add_argument("--facts", required=True)
    parser.add_argument("--when")
    parser.add_argument("--log")
    options, rest = parser.parse_known_args()
    payload = b"" if sys.stdin.isatty() else sys.stdin.buffer.read()
    proc = subprocess.run([options.python] + rest, input=payload, capture_output=True, check=False)
    source = payload
    for arg in rest if not payload else ():
        if os.path.isfile(arg):
            with open(arg, "rb") as handle:
                source += handle.read()
    name = module_name(rest, source)
    out = proc.stdout
    if options.when is None or name == options.when:
        with open(options.facts) as handle:
            out, done = rewrite(out, json.load(handle))
        if done and options.log:
            with open(options.log, "a") as handle:
                handle.write("%s\n" % name)
    sys.stdout.buffer.write(out)
    sys.stderr.buffer.write(proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
