# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Adversarial pass over every module's options: no bad input may end in a traceback (issue 32).

For each module it reads the real argument spec (``AnsibleModule.__init__`` stopped at its first line,
so the spec is what the module passes, doc fragments and kubernetes.core's auth options included),
then runs the module once per (option, hostile value) as Ansible runs it (its ``main()`` reading the
arguments Ansible hands it, in a child forked once the module is imported), as the unprivileged user
``nobody`` with a temp HOME and the cluster at a closed port
(``https://127.0.0.1:9``), in check mode and for real (a cluster module in check mode only: its real
run meets the same closed port; kubernetes.core's auth options are left to its own tests). Every
other option keeps the baseline below.

A case passes when the module answers one JSON object: success, or ``failed`` with a message. It is
counted as a **traceback** when a Python traceback is printed beside the answer, there is no JSON, or the
message is only an exception's text (``KeyError``, ``TypeError: ...``, ``object has no attribute``). The report
lists each such case; exit 1 when there is any. One traceback is ansible-core's, not ours, and is counted
apart: an option with suboptions given a scalar (``code: 5``) fails in ansible-core's own argument check
before any module code runs (ansible/ansible#81631, open; 2.16 to 2.21). The action plugins that build
such options (guard_install) check them first.

    .venv/bin/python hack/adversarial-pass.py [MODULE ...] [--jobs N] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, "build", "collections")
MODULES = os.path.join(ROOT, "plugins", "modules")
sys.path.insert(0, COLLECTIONS)
CLOSED = "https://127.0.0.1:9"
# the options a module needs to get past its first check, so the hostile value meets the code behind it
BASELINE = {
    "device_plugin_preflight": {"name": "nvidia-device-plugin", "namespace": "kube-system", "version": "v0.17.0",
                                "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
                                "selector_labels": {"app": "nvidia-device-plugin"}},
    "gpu_memory_report": {"url": "http://127.0.0.1:9"},
    "guard_install": {"code": {"version": "0.3.0", "sha256": "0" * 64}},
    "rejected_pods": {"nodes": ["gpu-1"]},
    "daemonset_rollout": {"name": "nvidia-device-plugin", "namespace": "kube-system"},
    "gpu_quarantine": {"state": "quarantined", "node": "gpu-1", "action": "reset", "gpus": ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]},
    "gpu_reset": {"gpus": ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]},
    "gpu_diag": {"gpus": ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]},
    "node_reboot": {"node": "gpu-1", "previous_boot_id": "5b0e6f0a-0000-4000-8000-000000000001", "timeout": 1},
    # its module only refuses (the action plugin writes, on the controller: tests/unit/plugins/action/test_report_files_action.py)
    "report_files": {"dir": "/nonexistent/gpuops-report", "files": [{"name": "fleet-summary.md", "content": "# fleet\n"}]},
}
STR = ["", " ", "\x00", "a\nb: c", "../../../etc/passwd", "x" * 5000, "{{ 7 * 7 }}", "\u00fcn\u00efc\u00f6de\u2028", "-1",
       "--help", 123, ["list"], {"d": 1}]
PATH = ["", "relative/p", "/nonexistent/a", "/dev/zero", "/proc/self/mem", "/\x00x", "/", "/tmp/../etc", "//", "/" + "a" * 5000]
INT = [-1, 0, 2 ** 64, "abc", "1.5", "", True, [1], {"a": 1}]
FLOAT = ["nan", "inf", -1, "x", 1e308]
BOOL = ["maybe", 2, [], {"a": 1}]
LIST = ["a,b", [], [None], [""], [{"a": 1}], [["x"]], ["\x00"], {"a": 1}, 5]
DICT = ["str", [], {"": None}, {"a": {"b": ["c"]}}, {"\x00": 1}, 5, {"a": "x" * 5000}]
RAW = ["", None, [], {}, "x" * 5000, {"a": [None]}, 7]
BY_TYPE = {"str": STR, "path": PATH, "int": INT, "float": FLOAT, "bool": BOOL, "list": LIST, "dict": DICT, "raw": RAW, "jsonarg": STR}
# an answer that is an exception's text, not a message naming the option and the fix
BARE = re.compile(r"^(\w+Error|KeyError|TypeError|AttributeError|IndexError)\b|object has no attribute|object is not subscriptable|"
                  r"unhashable type|not supported between instances|Traceback|MODULE FAILURE")


class _Spec(Exception):
    pass


def load(name):
    return importlib.import_module("ansible_collections.gpuops.fleet.plugins.modules.%s" % name)


def spec_of(module):
    """The argument spec ``module`` passes to AnsibleModule: its ``main()`` run in this process up to that call."""
    from ansible.module_utils import basic

    def stop(self, argument_spec=None, *args, **kwargs):
        raise _Spec(dict(argument_spec or {}, **kwargs.get("_extra", {})))

    saved = basic.AnsibleModule.__init__
    basic.AnsibleModule.__init__ = stop
    try:
        module.main()
    except _Spec as found:
        return found.args[0]
    except SystemExit:
        return None
    finally:
        basic.AnsibleModule.__init__ = saved
    return None


def values_for(option):
    kind = option.get("type", "str")
    if callable(kind):
        kind = "raw"
    out = list(BY_TYPE.get(kind, RAW))
    if option.get("choices"):
        out.append("not-a-choice")
    if kind == "list" and option.get("elements") in BY_TYPE:
        out += [[v] for v in BY_TYPE[option["elements"]][:8]]
    if kind == "dict" and option.get("options"):
        for sub, sub_option in option["options"].items():
            out += [{sub: v} for v in values_for(sub_option)[:6]]
    return out


def _child(module, params, out_path, tmp):
    """In a forked child: drop to ``nobody``, run the module's main() on ``params`` as Ansible would, exit."""
    from ansible.module_utils import basic
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    code = 1
    try:
        os.chdir(tmp)
        os.environ.update(HOME=tmp, TMPDIR=tmp, K8S_AUTH_HOST=CLOSED, KUBECONFIG=os.path.join(tmp, "none"))
        tempfile.tempdir = None
        if os.geteuid() == 0:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
        basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": params}).encode("utf-8")
        if hasattr(basic, "_ANSIBLE_PROFILE"):  # ansible-core 2.19+: how the arguments are encoded
            basic._ANSIBLE_PROFILE = "legacy"
        module.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # pylint: disable=broad-except  # exactly what the pass looks for: printed, counted
        import traceback
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def verdict_of(text):
    answer, rest = None, text
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                answer = json.loads(line)
                rest = text.replace(line, "")
                break
            except ValueError:
                pass
    # a traceback printed beside the answer is what a user meets; one in the answer's ``exception`` field is
    # shown at -vvv only, under the message (kubernetes.core's fail_from_exception adds one): the message counts
    if "Traceback" in rest:
        return "traceback", rest[-800:]
    if answer is None:
        return "no-json", text[-800:]
    msg = str(answer.get("msg", ""))
    if answer.get("failed") and BARE.search(msg):
        return "bare", msg[:400]
    return ("failed" if answer.get("failed") else "ok"), msg[:200]


def run_module_cases(name, module, cases, tmp, jobs):
    """Every case of one module, each in a child forked from this process once the module is imported (the
    kubernetes client's import is paid once, not per case), ``jobs`` at a time."""
    results, running, queue = [], {}, list(enumerate(cases))
    while queue or running:
        while queue and len(running) < jobs:
            index, (option, value, check, args) = queue.pop(0)
            params = dict(args, _ansible_check_mode=check, _ansible_tmpdir=tmp, _ansible_remote_tmp=tmp, _ansible_keep_remote_files=False)
            out_path = os.path.join(tmp, "case-%d.out" % index)
            pid = os.fork()
            if pid == 0:
                _child(module, params, out_path, tmp)
            running[pid] = (option, value, check, out_path, time.monotonic())
        pid, dummy = os.waitpid(-1, 0)
        option, value, check, out_path, started = running.pop(pid)
        with open(out_path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        verdict, detail = verdict_of(text)
        if verdict == "traceback" and "in set_fallbacks" in text:
            # ansible-core's own argument check: an option with suboptions given a scalar fails in its fallback
            # handling before the module runs (every core from 2.16 to 2.21; ansible/ansible#81631, open)
            verdict = "ansible-core#81631"
        os.unlink(out_path)
        results.append({"module": name, "option": option, "value": repr(value)[:80], "check": check, "verdict": verdict,
                        "detail": detail, "seconds": round(time.monotonic() - started, 2)})
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("modules", nargs="*")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--json")
    opts = parser.parse_args()
    names = opts.modules or sorted(f[:-3] for f in os.listdir(MODULES) if f.endswith(".py") and not f.startswith("_"))
    tmp = tempfile.mkdtemp(prefix="gpuops-adversarial-")
    os.chmod(tmp, 0o1777)
    # kubernetes.core's connection options: its surface, not ours (its own sanity tests cover them)
    from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
    results = []
    for name in names:
        cases = []
        module = load(name)
        spec = spec_of(module)
        if not spec:
            print("%s: no argument spec found" % name, file=sys.stderr)
            continue
        base = BASELINE.get(name, {})
        missing = sorted(o for o, m in spec.items() if m.get("required") and o not in base)
        if missing:
            print("%s: required %s has no baseline: every case would stop there" % (name, missing), file=sys.stderr)
            return 2
        k8s = "kubeconfig" in spec
        for option, meta in sorted(spec.items()):
            if k8s and option in AUTH_ARG_SPEC:
                continue
            for value in values_for(meta):
                # a cluster module's real run meets the same closed port as its check run: once is enough
                for check in ((True,) if k8s else (True, False)):
                    cases.append((option, value, check, dict(base, **{option: value})))
        results += run_module_cases(name, module, cases, tmp, opts.jobs)
    bad = [r for r in results if r["verdict"] not in ("ok", "failed", "ansible-core#81631")]
    counts = {}
    for r in results:
        counts.setdefault(r["module"], {}).setdefault(r["verdict"], 0)
        counts[r["module"]][r["verdict"]] += 1
    for name in sorted(counts):
        print("%-26s %s" % (name, " ".join("%s=%d" % kv for kv in sorted(counts[name].items()))))
    print("cases: %d, modules: %d, tracebacks or bare errors: %d" % (len(results), len(counts), len(bad)))
    for r in sorted(bad, key=lambda r: (r["module"], r["option"])):
        print("BAD %(module)s %(option)s=%(value)s check=%(check)s %(verdict)s: %(detail)s" % r)
    if opts.json:
        with open(opts.json, "w") as handle:
            json.dump(results, handle, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
