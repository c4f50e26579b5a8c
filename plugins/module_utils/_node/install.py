# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: install the boot guard on a node in one step.

What the ``gpuops.fleet.checkpoint_guard`` role used to do in about fifteen tasks (one round
trip each), done by one call on the node (``gpuops.fleet.guard_install``):

0. the filesystems: a directory on a read-only mount is refused before anything changes, and
   with ``require_persistent`` one on tmpfs too (lost at reboot: COS's ``/etc``), naming the
   directory's setting (``name``) and what to do;
1. the directories: a missing one is created with its mode; an existing one keeps its mode unless
   the guard created it (the manifest says so) or it is empty and not sticky (made for the guard:
   the DaemonSet form's mounts): ``/var/tmp`` or ``/var/lib`` named as a guard directory keep theirs;
2. the command's code, one file (``gpuops.pyz``, built on the controller): compared by SHA-256;
   when it differs and the bytes were not sent, nothing is done and ``code_needed`` is returned,
   so the controller sends the file only to the nodes that need it (a second run sends nothing);
3. what an older layout or a switched-off feature left (``absent``): a unit among them is
   disabled first; an entry with ``only`` (a directory) or ``contains`` (a file) is removed only
   when it holds nothing but the guard's own older files, else it is left alone and named in
   ``left_alone`` (a library directory shared with the system keeps its ``ansible_collections``);
4. the text files (the wrapper, the configuration, the units), each written atomically
   (``nodefile.write_file``) only when its bytes or mode differ; then ``links``, symlinks (a
   unit's ``.wants/`` links where systemd is not reachable, as in the DaemonSet form), each
   made atomically (``nodefile.write_link``) only when it points elsewhere;
5. the self-test: the installed command's ``report`` with its configuration (read-only), when
   a file changed, ``selftest.always``, or the manifest does not say it passed (a failed or
   interrupted install stays failed until the self-test passes);
6. the ``/dev/char`` links of the NVIDIA device nodes, before any daemon-reload
   (nvidia-container-toolkit#251: without them a reload makes running GPU containers lose
   their devices on systemd-cgroup nodes);
7. systemd: one daemon-reload when a unit file changed, then each unit enabled or disabled.

The manifest (``gpuops-install.json`` beside the code) is the guard's record of its own install:
the directories it created and whether the installed files passed the self-test. It is marked
``pending`` before the first file is changed and ``passed`` after the self-test, each write atomic.

Check mode changes nothing and says what would change. ``run`` is ``run(argv, env) ->
(rc, stdout, stderr)``: the module passes ``AnsibleModule.run_command``, tests a fake.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import shutil
import stat

from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import ENV_NAME, SHA256
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError, NodeFileError, ParameterError, ResultError
from ansible_collections.gpuops.fleet.plugins.module_utils._node import devchar, hostroot, mounts, nodefile

# A self-test exit code the guard's ``report`` may end with on a working install: 0 up to
# date, 3 inventory unknown, 4 corrupt, 5 would act. 1 and 2 mean a broken install.
SELFTEST_OK = (0, 3, 4, 5)
MODE = re.compile(r"\A0?[0-7]{3,4}\Z")
ENTRIES = ("directories", "files", "absent", "links")
DIFF_MAX_BYTES = 65536
MANIFEST = "gpuops-install.json"
# what may stand beside the guard's files in a directory of its older layout (Python's own byproducts)
_BYPRODUCTS = ("__pycache__", "__init__.py")


class InstallError(ResultError):
    """A step of the install failed; ``result`` holds what was done up to then."""


# gpuops.fleet.guard_install's options (the module's argument spec): kubelet_checkpoint's guard option checks its value with
# the same table, so the plan's read of the install and the install itself take one input.
ARGUMENT_SPEC = dict(
    directories=dict(type="list", elements="dict", default=[], options=dict(
        path=dict(type="path", required=True), mode=dict(type="str", required=True), name=dict(type="str"))),
    require_persistent=dict(type="bool", default=False),
    code=dict(type="dict", required=True, options=dict(
        path=dict(type="path", required=True), mode=dict(type="str", default="0644"),
        sha256=dict(type="str"), data=dict(type="str", no_log=True))),
    files=dict(type="list", elements="dict", default=[], options=dict(
        path=dict(type="path", required=True), content=dict(type="str", required=True),
        mode=dict(type="str", required=True), unit=dict(type="bool", default=False))),
    absent=dict(type="list", elements="dict", default=[], options=dict(
        path=dict(type="path", required=True), unit=dict(type="str"), only=dict(type="str"), contains=dict(type="str"))),
    links=dict(type="list", elements="dict", default=[], options=dict(
        path=dict(type="path", required=True), target=dict(type="str", required=True))),
    selftest=dict(type="dict", options=dict(
        argv=dict(type="list", elements="str", required=True), environment=dict(type="dict", default={}),
        always=dict(type="bool", default=False))),
    systemd=dict(type="bool", default=False),
    dev_char_symlinks=dict(type="bool", default=False),
    units=dict(type="list", elements="dict", default=[], options=dict(
        name=dict(type="str", required=True), enabled=dict(type="bool", required=True))),
)


def check_entries(spec):
    """Every path of ``spec``'s lists (and its interpreter's) absolute, every mode octal; ParameterError names the entry."""
    interpreter = spec.get("interpreter")
    if interpreter is not None and not (isinstance(interpreter, dict) and isinstance(interpreter.get("path"), str)
                                        and os.path.isabs(interpreter["path"])):
        raise ParameterError("interpreter.path", "%r must be an absolute path" % (interpreter,))
    for option in ENTRIES:
        for index, entry in enumerate(spec.get(option) or ()):
            where = "%s[%d]" % (option, index)
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) or not os.path.isabs(entry["path"]):
                raise ParameterError(where + ".path", "%r must be an absolute path" % (entry.get("path") if isinstance(entry, dict) else entry,))
            if "mode" in entry and not (isinstance(entry["mode"], str) and MODE.match(entry["mode"])):
                raise ParameterError(where + ".mode", "%r must be an octal mode such as \"0644\"" % (entry["mode"],))
            if option == "links" and not (isinstance(entry.get("target"), str) and entry["target"] and "\0" not in entry["target"]):
                raise ParameterError(where + ".target", "%r must be the path the link points to" % (entry.get("target"),))


PERSISTENT_HINT = ("choose a directory on a persistent, writable filesystem (Container-Optimized OS: under /home/kubernetes/bin "
                   "or /var/lib; its /etc is tmpfs, so its units cannot persist and the boot guard cannot be installed there)")


def checked(params):
    """The module's options as install()'s spec; ParameterError names the option and the fix."""
    check_entries(params)
    code = dict(params["code"])
    if not os.path.isabs(code["path"]) or not MODE.match(code["mode"]):
        raise ParameterError("code", "path must be absolute and mode octal, got %r and %r" % (code["path"], code["mode"]))
    if not code.get("sha256") or not SHA256.match(code["sha256"]):
        raise ParameterError("code.sha256", "the action plugin sets it: run gpuops.fleet.guard_install as a task, not with -m or a raw module call")
    if code.get("data") is not None:
        try:
            code["data"] = base64.b64decode(code["data"], validate=True)
        except (binascii.Error, ValueError):
            raise ParameterError("code.data", "not base64 (the action plugin sets it)") from None
    selftest = params["selftest"]
    if selftest:
        bad = [k for k, v in (selftest["environment"] or {}).items() if not ENV_NAME.match(str(k)) or "\0" in str(v)]
        if bad:
            raise ParameterError("selftest.environment", "%r is not a valid variable name or its value holds a NUL byte" % (bad[0],))
        selftest = {"argv": selftest["argv"], "always": selftest["always"],
                    "environment": dict((str(k), str(v)) for k, v in selftest["environment"].items())}
    return dict(params, code=code, selftest=selftest)


def check_filesystems(entries, require_persistent, mountinfo=mounts.MOUNTINFO):
    """Refuse, before anything changes, a directory on a read-only mount, and with ``require_persistent``
    one on tmpfs/ramfs; returns ``[{path, filesystem}]`` for the result."""
    table = mounts.read(mountinfo)
    if not table:
        if require_persistent:
            raise InstallError("%s cannot be read, so whether the guard's directories persist is unknown: nothing was changed" % mountinfo)
        return []
    seen = []
    for entry in entries:
        mount = mounts.holding(entry["path"], table)
        if mount is None:
            continue
        field = "%s: " % entry["name"] if entry.get("name") else ""
        if mount.read_only:
            raise InstallError("%s%s is on a read-only filesystem, %s: nothing was changed; %s"
                               % (field, entry["path"], mount.describe(), PERSISTENT_HINT))
        if require_persistent and mount.volatile:
            raise InstallError("%s%s is on %s, which is empty again after a reboot, when the guard must run: nothing was changed; %s"
                               % (field, entry["path"], mount.describe(), PERSISTENT_HINT))
        seen.append({"path": entry["path"], "filesystem": mount.fstype, "mount": mount.point})
    return seen


class Manifest:
    """The guard's record of its own install (``gpuops-install.json`` beside the code), read once, written when it changes."""

    def __init__(self, path, check_mode):
        self.path = path
        self.check_mode = check_mode
        found = nodefile.read(path, 1 << 20)
        try:
            data = json.loads(found.data.decode("utf-8")) if found is not None else {}
        except ValueError:
            data = {}
        data = data if isinstance(data, dict) else {}
        dirs = data.get("directories")
        self.directories = sorted(set(d for d in dirs if isinstance(d, str))) if isinstance(dirs, list) else []
        self.selftest = data.get("selftest") if data.get("selftest") in ("passed", "pending") else None
        self.written = self._bytes()

    def _bytes(self):
        return (json.dumps({"directories": self.directories, "selftest": self.selftest}, indent=1, sort_keys=True) + "\n").encode("utf-8")

    def owns(self, path):
        return path in self.directories

    def created(self, path):
        if path not in self.directories:
            self.directories = sorted(self.directories + [path])

    def save(self):
        """Write the manifest when it differs from what is on the node (never in check mode)."""
        data = self._bytes()
        if not self.check_mode and data != self.written:
            nodefile.write_file(self.path, data, 0o644)
            self.written = data

    def pending(self):
        """Before the first change of an installed file: the self-test is owed again (a kill from here on leaves it owed)."""
        if self.selftest != "pending":
            self.selftest = "pending"
            self.save()


def _link(entry, check_mode, before_change):
    """Make ``path`` a symlink to ``target`` when it is not one already; the row, or None."""
    path, target = entry["path"], entry["target"]
    st = nodefile.lstat_or_none(path)
    if st is not None:
        if not stat.S_ISLNK(st.st_mode):
            raise InstallError("%s exists and is not a symlink: move it away (the install makes it a link to %s)" % (path, target))
        if os.readlink(path) == target:
            return None
    if not check_mode:
        before_change()
        nodefile.write_link(path, target)
    return {"path": path, "target": target, "action": "created" if st is None else "updated"}


def _directory(entry, check_mode, manifest):
    """Create a missing directory with its mode; fix the mode only of one the guard created (the manifest's), or of an
    empty one that is not sticky; any other existing directory (``/var/lib``, ``/var/tmp``) keeps its mode."""
    path, mode = entry["path"], int(entry["mode"], 8)
    st = nodefile.lstat_or_none(path)
    if st is None:
        if not check_mode:
            try:
                os.makedirs(path, mode)
                os.chmod(path, mode)
            except OSError as exc2:
                raise NodeFileError("creating directory", path, exc2) from exc2
        manifest.created(path)
        return {"path": path, "action": "created"}
    if not stat.S_ISDIR(st.st_mode):
        raise InstallError("%s exists and is not a directory: move it away or change the role's path" % path)
    if not manifest.owns(path) and not st.st_mode & stat.S_ISVTX and not os.listdir(path):
        # empty, and not a shared sticky directory: made for the guard (the DaemonSet form's hostPath mounts are created
        # by kubelet, DirectoryOrCreate, before the install sees them), so the guard's from now on
        manifest.created(path)
    if stat.S_IMODE(st.st_mode) != mode and manifest.owns(path):
        if not check_mode:
            try:
                os.chmod(path, mode)
            except OSError as exc:
                raise NodeFileError("changing the mode of", path, exc) from exc
        return {"path": path, "action": "mode"}
    return None


def _file(path, data, mode, check_mode, diff, before_change, binary=False, sha256=None):
    """Write one file when its bytes or mode differ (``before_change()`` first, as for links and removals); returns
    (row or None, diff or None).

    ``data`` may be None where only its ``sha256`` is known (the code file before its bytes are
    sent): then nothing is written (check mode, or the caller asks for the bytes)."""
    found = nodefile.read(path)  # no symlink followed, the mode from the same descriptor
    before = found.data if found is not None else None
    sha = hashlib.sha256(data).hexdigest() if data is not None else sha256
    same = before is not None and hashlib.sha256(before).hexdigest() == sha
    if same and stat.S_IMODE(found.st.st_mode) == mode:
        return None, None
    action = "created" if before is None else ("mode" if same else "updated")
    if not check_mode and data is not None:
        before_change()
        nodefile.write_file(path, data, mode)
    row = {"path": path, "action": action, "sha256": sha}
    change = None
    if diff:
        if binary:
            change = {"before_header": path, "after_header": path,
                      "before": "" if before is None else "(binary, sha256 %s)\n" % hashlib.sha256(before).hexdigest(),
                      "after": "(binary, sha256 %s)\n" % sha}
        elif len(data) <= DIFF_MAX_BYTES and (before is None or len(before) <= DIFF_MAX_BYTES):
            change = {"before_header": path, "after_header": path,
                      "before": (before or b"").decode("utf-8", "replace"), "after": data.decode("utf-8", "replace")}
    return row, change


def _foreign(entry):
    """Why ``entry`` of ``absent`` is not the guard's to remove (a string naming what else it holds), or None where it is.

    ``only``: the directory must hold nothing but that subtree (``gpuops/fleet``: the older layout's copy of the
    collection) and Python's byproducts beside it; ``contains``: the file must hold that text (the older entry point)."""
    path = entry["path"]
    if entry.get("only"):
        if os.path.islink(path) or not os.path.isdir(path):
            return "it is not a directory the guard made"
        parts = entry["only"].strip("/").split("/")
        here = path
        for part in parts:
            others = sorted(name for name in os.listdir(here) if name != part and name not in _BYPRODUCTS)
            if others:
                return "it holds %s besides the guard's %s" % (", ".join(os.path.join(here, n) for n in others[:5]), entry["only"])
            here = os.path.join(here, part)
            if os.path.islink(here) or not os.path.isdir(here):
                return "%s is not the guard's directory" % here
    if entry.get("contains"):
        found = nodefile.read(path, 1 << 20) if not os.path.islink(path) else None
        if found is None or entry["contains"].encode("utf-8") not in found.data:
            return "it is not the guard's older file (it does not name %s)" % entry["contains"]
    return None


def _absent(entry, check_mode, systemd, run, before_change):
    path = entry["path"]
    if not os.path.lexists(path):
        return None
    reason = _foreign(entry)
    if reason:
        return {"path": path, "action": "left_alone", "reason": "%s: %s; remove the guard's old copy by hand if one is there" % (path, reason)}
    unit = entry.get("unit")
    disabled = False
    if unit and systemd:
        disabled = _enable(unit, False, check_mode, run) is not None
    if not check_mode:
        before_change()
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except OSError as exc:
            raise NodeFileError("removing", path, exc) from exc
    return {"path": path, "action": "removed", "unit_disabled": unit if disabled else None}


def _enabled(unit, run):
    rc, out, dummy = run(["systemctl", "is-enabled", unit], None)
    word = out.strip().splitlines()[0].strip() if out.strip() else ""
    return rc == 0 and word in ("enabled", "enabled-runtime", "alias", "static", "indirect", "generated")


def _enable(unit, enabled, check_mode, run):
    """Enable or disable one unit when it is not so already; the row, or None."""
    now = _enabled(unit, run)
    if now == enabled:
        return None
    if not check_mode:
        rc, dummy, err = run(["systemctl", "enable" if enabled else "disable", unit], None)
        if rc != 0:
            raise InstallError("systemctl %s %s failed (rc %d): %s" % ("enable" if enabled else "disable", unit, rc, err.strip()))
    return {"unit": unit, "enabled": enabled}


def check_interpreter(entry):
    """Refuse, before anything changes, a node without the Python the guard's wrapper runs at boot.

    ``entry``: ``{"path": where it is seen from here, "shown": its path on the node, "name": the role variable}``.
    A link counts as there: its target may be outside what this process sees (the DaemonSet form mounts
    the interpreter's directory only), and the SSH install's self-test runs it anyway."""
    if not entry:
        return
    path, shown, name = entry["path"], entry.get("shown") or entry["path"], entry.get("name") or "interpreter"
    if os.path.islink(path):
        return
    if not os.path.exists(path):
        raise InstallError("%s: %s is not on this node: nothing was changed. The guard is a Python program that systemd starts "
                           "with this interpreter before kubelet; set %s to the node's python3, or use the API path's live repair "
                           "where the node has none (Container-Optimized OS, Flatcar, Bottlerocket and Talos ship no python3)"
                           % (name, shown, name))
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise InstallError("%s: %s is not an executable file: nothing was changed; set %s to the node's python3" % (name, shown, name))


def install(spec, run, check_mode=False, diff=False, dev_root="/dev", mountinfo=mounts.MOUNTINFO):
    """Apply ``spec`` (see the module's options); returns the result (``changed``, what was done)."""
    result = {"changed": False, "code_needed": False, "filesystems": [], "directories": [], "files": [], "links": [],
              "removed": [], "left_alone": [], "selftest": None, "selftest_owed": False, "dev_char_symlinks": None, "daemon_reload": False, "units": [],
              "manifest": None}
    diffs = []
    if hostroot.root() is not None:
        raise InstallError(
            "this node's host has no python3, so the node pod runs the modules beside it (gpuops.fleet.k8s_node, "
            "gpuops_node_exec_on): the boot guard runs on the host at boot with the host's Python (checkpoint_guard_python), so it "
            "cannot run there; nothing was changed. Set checkpoint_guard_install: false for this node (the plan, the repair and the "
            "report work without the guard); where the host has a Python but its paths do not persist, the role's DaemonSet form "
            "(tasks_from: daemonset) installs the guard",
            result)
    try:
        result["filesystems"] = check_filesystems(spec.get("directories") or (), bool(spec.get("require_persistent")), mountinfo)
        check_interpreter(spec.get("interpreter"))
        manifest = Manifest(os.path.join(os.path.dirname(spec["code"]["path"]), MANIFEST), check_mode)
        result["manifest"] = manifest.path
        selftest = spec.get("selftest")
        # before the first change of an installed file: the self-test is owed until it passes (a kill leaves it owed)
        before_change = manifest.pending if selftest else (lambda: None)
        for entry in spec.get("directories") or ():
            row = _directory(entry, check_mode, manifest)
            if row:
                result["directories"].append(row)

        code = spec["code"]
        data = code.get("data")
        if data is not None and hashlib.sha256(data).hexdigest() != code["sha256"]:
            raise InstallError("code: the bytes sent do not have the SHA-256 the controller announced (a truncated transfer?): run again")
        row, change = _file(code["path"], data, int(code["mode"], 8), check_mode, diff, before_change, binary=True,
                            sha256=code["sha256"])
        if row and data is None and not check_mode:
            # nothing done yet but the directories: the controller sends the bytes and calls again
            manifest.save()
            result["code_needed"] = True
            result["changed"] = bool(result["directories"])
            return result
        if row:
            result["files"].append(row)
        if change:
            diffs.append(change)

        systemd = bool(spec.get("systemd"))
        units_changed = False
        for entry in spec.get("absent") or ():
            row = _absent(entry, check_mode, systemd, run, before_change)
            if row and row["action"] == "left_alone":
                result["left_alone"].append(row)
            elif row:
                result["removed"].append(row)
                units_changed = units_changed or bool(entry.get("unit"))

        for entry in spec.get("files") or ():
            row, change = _file(entry["path"], entry["content"].encode("utf-8"), int(entry["mode"], 8), check_mode, diff, before_change)
            if row:
                result["files"].append(row)
                units_changed = units_changed or bool(entry.get("unit"))
            if change:
                diffs.append(change)

        for entry in spec.get("links") or ():
            row = _link(entry, check_mode, before_change)
            if row:
                result["links"].append(row)

        written = bool(result["files"] or result["removed"])
        # an install whose self-test failed, or that was killed before it, stays failed until the self-test passes
        owed = bool(selftest) and manifest.selftest != "passed"
        result["selftest_owed"] = owed
        if selftest and not check_mode and (written or owed or selftest.get("always")):
            manifest.pending()
            rc, out, err = run(list(selftest["argv"]), selftest.get("environment") or None)
            result["selftest"] = {"rc": rc, "cmd": list(selftest["argv"]), "stdout": out, "stderr": err}
            if rc not in SELFTEST_OK:
                raise InstallError("the installed guard does not run (%s ended with rc %d): %s"
                                   % (" ".join(selftest["argv"]), rc, (err.strip() or out.strip())[-2000:]))
            manifest.selftest = "passed"
            result["selftest_owed"] = False
        manifest.save()

        if systemd:
            if spec.get("dev_char_symlinks") and os.path.exists(os.path.join(dev_root, "nvidiactl")):
                try:
                    tool, links = devchar.ensure_links(lambda argv: run(argv, None), dev_root, dry_run=check_mode,
                                                       ctk=shutil.which("nvidia-ctk"))
                except devchar.DevCharError as exc:
                    raise InstallError("the /dev/char links were not made, so systemd was not reloaded: %s" % exc) from exc
                result["dev_char_symlinks"] = dict(links, tool=tool)
            if units_changed:
                result["daemon_reload"] = True
                if not check_mode:
                    rc, dummy, err = run(["systemctl", "daemon-reload"], None)
                    if rc != 0:
                        raise InstallError("systemctl daemon-reload failed (rc %d): %s" % (rc, err.strip()))
            for unit in spec.get("units") or ():
                row = _enable(unit["name"], unit["enabled"], check_mode, run)
                if row:
                    result["units"].append(row)
    except InstallError as exc:
        exc.result = _done(result, diffs)
        raise
    except GpuopsError as exc:
        raise InstallError(str(exc), _done(result, diffs)) from exc
    return _done(result, diffs)


def _done(result, diffs):
    links = result["dev_char_symlinks"]
    result["changed"] = bool(result["directories"] or result["files"] or result["links"] or result["removed"] or result["units"]
                             or result["daemon_reload"] or (links and links["created"]))
    if diffs:
        result["diff"] = diffs
    return result


def would_change(spec, run):
    """Read-only: what ``install(spec)`` would do, as its check-mode result (no diff), plus ``needed`` and ``error``.

    ``spec`` are guard_install's options after its argument spec (ARGUMENT_SPEC) was applied. ``needed``: a real run
    would change something or owes the self-test, or the install would fail (``error``, its message); the controller
    then calls ``gpuops.fleet.guard_install`` itself, which reports that failure as its own. Otherwise the install
    would change nothing, and the controller makes no second call (kubelet_checkpoint's ``guard`` option)."""
    try:
        result = install(checked(spec), run, check_mode=True)
    except GpuopsError as exc:
        return {"needed": True, "error": str(exc)}
    result.pop("diff", None)
    result.update(needed=bool(result["changed"] or result["selftest_owed"] or result["code_needed"]), error=None)
    return result
