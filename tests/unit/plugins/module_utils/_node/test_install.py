# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The guard's one-step install (_node/install.py) on a temp directory, systemctl scripted."""

from __future__ import annotations

import hashlib
import json
import os
import stat

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._node import install as inst

CODE = b"PK\x05\x06" + b"\x00" * 18  # an empty zip: bytes, not text


class Systemctl:
    """Scripted systemctl: unit enablement in a dict, every call recorded in order."""

    def __init__(self, enabled=None, fail=()):
        self.enabled = dict(enabled or {})
        self.calls = []
        self.fail = fail

    def __call__(self, argv, env):
        self.calls.append(list(argv))
        if argv[0] != "systemctl":
            return self.selftest(argv, env)
        verb = argv[1]
        if verb in self.fail:
            return 1, "", "Failed to %s: Access denied" % verb
        if verb == "is-enabled":
            on = self.enabled.get(argv[2])
            return (0, "enabled\n", "") if on else (1, "disabled\n" if on is False else "", "")
        if verb in ("enable", "disable"):
            self.enabled[argv[2]] = verb == "enable"
        return 0, "", ""

    def selftest(self, argv, env):
        return 0, '{"event": "finished"}\n', ""

    def verbs(self):
        return [" ".join(c[1:]) for c in self.calls if c[0] == "systemctl" and c[1] != "is-enabled"]


def spec(root, **extra):
    found = {
        "directories": [{"path": str(root / "lib"), "mode": "0755"}, {"path": str(root / "backups"), "mode": "0700"},
                        {"path": str(root / "units"), "mode": "0755"}],
        "code": {"path": str(root / "lib" / "gpuops.pyz"), "mode": "0644", "sha256": hashlib.sha256(CODE).hexdigest(), "data": CODE},
        "files": [{"path": str(root / "lib" / "gpuops"), "content": "#!/usr/bin/python3\n", "mode": "0755", "unit": False},
                  {"path": str(root / "units" / "gpuops.service"), "content": "[Unit]\nDescription=x\n", "mode": "0644", "unit": True}],
        "absent": [{"path": str(root / "lib" / "ansible_collections"), "unit": None},
                   {"path": str(root / "units" / "gpuops-late.service"), "unit": "gpuops-late.service"}],
        "selftest": {"argv": [str(root / "lib" / "gpuops"), "report"], "environment": {"A": "1"}, "always": False},
        "systemd": True,
        "dev_char_symlinks": True,
        "units": [{"name": "gpuops.service", "enabled": True}],
    }
    found.update(extra)
    return found


def test_a_first_install_writes_everything_then_reloads_once_and_a_second_changes_nothing(tmp_path):
    systemctl = Systemctl()
    first = inst.install(spec(tmp_path), systemctl, dev_root=str(tmp_path / "nodev"))
    assert first["changed"] and first["daemon_reload"]
    assert [f["action"] for f in first["files"]] == ["created", "created", "created"]
    assert (tmp_path / "lib" / "gpuops.pyz").read_bytes() == CODE
    assert stat.S_IMODE(os.stat(str(tmp_path / "lib" / "gpuops")).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(str(tmp_path / "backups")).st_mode) == 0o700
    assert first["selftest"]["rc"] == 0
    # the reload comes after the files and before the enable
    assert systemctl.verbs() == ["daemon-reload", "enable gpuops.service"]
    # nothing left beside the files
    assert sorted(os.listdir(str(tmp_path / "lib"))) == ["gpuops", "gpuops-install.json", "gpuops.pyz"]
    assert json.loads((tmp_path / "lib" / "gpuops-install.json").read_text()) == {
        "directories": sorted(str(tmp_path / d) for d in ("lib", "backups", "units")), "selftest": "passed"}

    again = Systemctl(enabled={"gpuops.service": True})
    second = inst.install(spec(tmp_path), again, dev_root=str(tmp_path / "nodev"))
    assert not second["changed"]
    assert (second["files"], second["directories"], second["removed"], second["units"]) == ([], [], [], [])
    # an unchanged install was self-tested when written: no process, no reload, no enable
    assert second["selftest"] is None and again.verbs() == []
    assert [c[0] for c in again.calls] == ["systemctl"]  # is-enabled only


def test_check_mode_changes_nothing_and_says_what_would_change_with_a_diff(tmp_path):
    systemctl = Systemctl()
    s = spec(tmp_path)
    s["code"] = dict(s["code"], data=None)  # check mode needs no bytes
    result = inst.install(s, systemctl, check_mode=True, diff=True, dev_root=str(tmp_path / "nodev"))
    assert result["changed"] and result["daemon_reload"] and result["units"] == [{"unit": "gpuops.service", "enabled": True}]
    assert os.listdir(str(tmp_path)) == []
    assert systemctl.verbs() == [] and result["selftest"] is None
    assert [d["after_header"] for d in result["diff"]] == [s["code"]["path"], s["files"][0]["path"], s["files"][1]["path"]]
    assert result["diff"][0]["after"] == "(binary, sha256 %s)\n" % s["code"]["sha256"]
    assert result["diff"][2]["after"] == "[Unit]\nDescription=x\n"


def test_a_changed_file_is_rewritten_atomically_with_a_diff_and_a_wrong_mode_is_fixed(tmp_path):
    inst.install(spec(tmp_path), Systemctl(), dev_root=str(tmp_path / "nodev"))
    unit = tmp_path / "units" / "gpuops.service"
    unit.write_text("[Unit]\nDescription=old\n")
    os.chmod(str(tmp_path / "lib" / "gpuops"), 0o700)
    # a temp file a killed run left beside the unit goes too
    leftover = tmp_path / "units" / ".gpuops.service.gpuops-file-123-0badcafe.tmp"
    leftover.write_text("half")
    systemctl = Systemctl(enabled={"gpuops.service": True})
    result = inst.install(spec(tmp_path), systemctl, diff=True, dev_root=str(tmp_path / "nodev"))
    assert {f["path"]: f["action"] for f in result["files"]} == {str(tmp_path / "lib" / "gpuops"): "mode", str(unit): "updated"}
    assert unit.read_text() == "[Unit]\nDescription=x\n" and not leftover.exists()
    assert [d["before"] for d in result["diff"] if d["after_header"] == str(unit)] == ["[Unit]\nDescription=old\n"]
    assert systemctl.verbs() == ["daemon-reload"]
    assert result["selftest"]["rc"] == 0


def test_without_the_bytes_a_differing_code_file_asks_for_them_and_changes_nothing_else(tmp_path):
    s = spec(tmp_path)
    s["code"] = dict(s["code"], data=None)
    systemctl = Systemctl()
    result = inst.install(s, systemctl, dev_root=str(tmp_path / "nodev"))
    assert result["code_needed"] and result["files"] == [] and systemctl.calls == []
    assert not (tmp_path / "lib" / "gpuops").exists()


def test_bytes_that_do_not_match_the_announced_sha256_are_refused(tmp_path):
    s = spec(tmp_path)
    s["code"] = dict(s["code"], data=CODE[:-1])
    with pytest.raises(inst.InstallError, match="do not have the SHA-256"):
        inst.install(s, Systemctl(), dev_root=str(tmp_path / "nodev"))
    assert not (tmp_path / "lib" / "gpuops.pyz").exists()


def test_an_older_layout_and_a_switched_off_late_unit_are_removed_the_unit_disabled_first(tmp_path):
    old = tmp_path / "lib" / "ansible_collections" / "gpuops"
    old.mkdir(parents=True)
    (old / "x.py").write_text("X = 1\n")
    (tmp_path / "units").mkdir()
    (tmp_path / "units" / "gpuops-late.service").write_text("[Unit]\n")
    systemctl = Systemctl(enabled={"gpuops-late.service": True})
    result = inst.install(spec(tmp_path), systemctl, dev_root=str(tmp_path / "nodev"))
    assert [r["path"] for r in result["removed"]] == [str(tmp_path / "lib" / "ansible_collections"), str(tmp_path / "units" / "gpuops-late.service")]
    assert result["removed"][1]["unit_disabled"] == "gpuops-late.service"
    assert not (tmp_path / "lib" / "ansible_collections").exists()
    assert systemctl.verbs() == ["disable gpuops-late.service", "daemon-reload", "enable gpuops.service"]


def test_a_self_test_that_fails_fails_the_install_with_its_output_and_what_was_done(tmp_path):
    class Broken(Systemctl):
        def selftest(self, argv, env):
            assert env == {"A": "1"}
            return 2, "", "ModuleNotFoundError: No module named 'gpuops_main'"

    systemctl = Broken()
    with pytest.raises(inst.InstallError, match="does not run.*rc 2.*gpuops_main") as caught:
        inst.install(spec(tmp_path), systemctl, dev_root=str(tmp_path / "nodev"))
    assert caught.value.result["changed"] and len(caught.value.result["files"]) == 3
    # a broken guard is not enabled, and systemd is not reloaded for it
    assert systemctl.verbs() == []


def test_dev_char_links_are_made_before_the_reload(tmp_path, monkeypatch):
    dev = tmp_path / "dev"
    dev.mkdir()
    made = []
    monkeypatch.setattr(inst.devchar, "dev_char_symlinks",
                        lambda root, dry_run=False: made.append(("links", dry_run)) or {"created": ["c"], "present": [], "conflicts": []})
    (dev / "nvidiactl").write_text("")
    systemctl = Systemctl()
    real_call = systemctl.__call__

    def recording(argv, env):
        made.append(tuple(argv[:2]))
        return real_call(argv, env)

    result = inst.install(spec(tmp_path), recording, dev_root=str(dev))
    assert result["dev_char_symlinks"]["created"] == ["c"]
    assert made.index(("links", True)) < made.index(("systemctl", "daemon-reload"))


def test_a_failed_systemctl_names_the_verb_and_the_unit(tmp_path):
    with pytest.raises(inst.InstallError, match="systemctl enable gpuops.service failed .rc 1.: Failed to enable: Access denied"):
        inst.install(spec(tmp_path), Systemctl(fail=("enable",)), dev_root=str(tmp_path / "nodev"))


def test_a_path_that_is_a_directory_or_a_symlink_is_refused(tmp_path):
    (tmp_path / "lib" / "gpuops").mkdir(parents=True)
    with pytest.raises(inst.InstallError, match="not a regular file"):
        inst.install(spec(tmp_path), Systemctl(), dev_root=str(tmp_path / "nodev"))
    other = tmp_path / "other"
    other.mkdir()
    (other / "lib").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(inst.InstallError, match="is not a directory"):
        inst.install(spec(other), Systemctl(), dev_root=str(tmp_path / "nodev"))


def test_without_systemd_nothing_calls_systemctl(tmp_path):
    systemctl = Systemctl()
    result = inst.install(spec(tmp_path, systemd=False), systemctl, dev_root=str(tmp_path / "nodev"))
    assert result["changed"] and not result["daemon_reload"] and result["units"] == []
    assert [c[0] for c in systemctl.calls] == [str(tmp_path / "lib" / "gpuops")]  # the self-test only


def test_check_mode_on_an_installed_node_says_which_code_it_replaces_and_writes_nothing(tmp_path):
    inst.install(spec(tmp_path), Systemctl(), dev_root=str(tmp_path / "nodev"))
    newer = CODE + b"\x00"
    s = spec(tmp_path)
    s["code"] = dict(s["code"], sha256=hashlib.sha256(newer).hexdigest(), data=None)
    result = inst.install(s, Systemctl(enabled={"gpuops.service": True}), check_mode=True, diff=True, dev_root=str(tmp_path / "nodev"))
    assert [(f["action"], f["sha256"]) for f in result["files"]] == [("updated", s["code"]["sha256"])]
    assert result["diff"] == [{"before_header": s["code"]["path"], "after_header": s["code"]["path"],
                               "before": "(binary, sha256 %s)\n" % hashlib.sha256(CODE).hexdigest(),
                               "after": "(binary, sha256 %s)\n" % s["code"]["sha256"]}]
    assert (tmp_path / "lib" / "gpuops.pyz").read_bytes() == CODE


def _mountinfo(tmp_path, fstype="ext4", options="rw"):
    """A mountinfo whose only mount is tmp_path itself, of ``fstype`` with ``options``."""
    path = tmp_path / "mountinfo"
    path.write_text("30 1 8:1 / %s %s - %s /dev/sda1 rw\n" % (os.path.realpath(str(tmp_path)), options, fstype))
    return str(path)


def test_a_directory_on_a_read_only_mount_is_refused_before_anything_changes_naming_its_setting(tmp_path):
    s = spec(tmp_path)
    s["directories"][2]["name"] = "checkpoint_guard_unit_dir"
    info = _mountinfo(tmp_path, options="ro,relatime")
    with pytest.raises(inst.InstallError, match=r"checkpoint_guard_lib_dir|read-only") as err:
        inst.install(dict(s, directories=[dict(d, name="checkpoint_guard_lib_dir") for d in s["directories"]]), Systemctl(),
                     dev_root=str(tmp_path / "nodev"), mountinfo=info)
    assert "checkpoint_guard_lib_dir: %s is on a read-only filesystem" % (tmp_path / "lib") in str(err.value)
    assert "nothing was changed" in str(err.value) and sorted(os.listdir(str(tmp_path))) == ["mountinfo"]


def test_tmpfs_is_refused_only_where_the_guard_must_persist(tmp_path):
    info = _mountinfo(tmp_path, fstype="tmpfs")
    s = spec(tmp_path, require_persistent=True)
    s["directories"][2]["name"] = "checkpoint_guard_unit_dir"
    with pytest.raises(inst.InstallError) as err:
        inst.install(s, Systemctl(), dev_root=str(tmp_path / "nodev"), mountinfo=info)
    # the first directory is refused; none was created
    assert "%s is on /dev/sda1 (tmpfs, mounted at %s), which is empty again after a reboot" % (tmp_path / "lib", os.path.realpath(str(tmp_path))) \
        in str(err.value)
    assert "Container-Optimized OS" in str(err.value) and sorted(os.listdir(str(tmp_path))) == ["mountinfo"]
    # a sysroot (the lab) may be on tmpfs: without require_persistent it installs, and says what it found
    done = inst.install(spec(tmp_path), Systemctl(), dev_root=str(tmp_path / "nodev"), mountinfo=info)
    assert done["changed"] and [f["filesystem"] for f in done["filesystems"]] == ["tmpfs"] * 3
    # a table that cannot be read: unknown persistence refuses where it matters, and is not guessed
    with pytest.raises(inst.InstallError, match="cannot be read"):
        inst.install(spec(tmp_path, require_persistent=True), Systemctl(), mountinfo=str(tmp_path / "none"))


def test_links_are_made_atomically_only_where_they_differ_and_a_file_in_their_place_is_refused(tmp_path):
    target = "/etc/systemd/system/gpuops.service"
    wants = tmp_path / "units" / "multi-user.target.wants"
    links = [{"path": str(wants / "gpuops.service"), "target": target}]
    dirs = spec(tmp_path)["directories"] + [{"path": str(wants), "mode": "0755"}]
    check = inst.install(spec(tmp_path, systemd=False, links=links, directories=dirs), Systemctl(), check_mode=True,
                         dev_root=str(tmp_path / "nodev"))
    assert check["links"] == [{"path": links[0]["path"], "target": target, "action": "created"}] and not os.path.exists(str(tmp_path / "units"))
    first = inst.install(spec(tmp_path, systemd=False, links=links, directories=dirs), Systemctl(), dev_root=str(tmp_path / "nodev"))
    assert first["links"][0]["action"] == "created" and os.readlink(links[0]["path"]) == target
    assert sorted(os.listdir(str(wants))) == ["gpuops.service"]  # no temp link left
    second = inst.install(spec(tmp_path, systemd=False, links=links, directories=dirs), Systemctl(), dev_root=str(tmp_path / "nodev"))
    assert not second["changed"] and second["links"] == []
    # pointing elsewhere: replaced by rename (never a moment without the link); a temp link a killed run left goes
    os.unlink(links[0]["path"])
    os.symlink("/elsewhere", links[0]["path"])
    os.symlink(target, str(wants / ".gpuops.service.gpuops-link-123-deadbeef.tmp"))
    third = inst.install(spec(tmp_path, systemd=False, links=links, directories=dirs), Systemctl(), dev_root=str(tmp_path / "nodev"))
    assert third["links"][0]["action"] == "updated" and os.readlink(links[0]["path"]) == target
    assert sorted(os.listdir(str(wants))) == ["gpuops.service"]
    os.unlink(links[0]["path"])
    (wants / "gpuops.service").write_text("not a link")
    with pytest.raises(inst.InstallError, match="exists and is not a symlink"):
        inst.install(spec(tmp_path, systemd=False, links=links, directories=dirs), Systemctl(), dev_root=str(tmp_path / "nodev"))


@pytest.mark.parametrize("bad, field", [
    ({"links": [{"path": "relative/link", "target": "/x"}]}, "links[0].path"),
    ({"links": [{"path": "/abs/link", "target": ""}]}, "links[0].target"),
    ({"directories": [{"path": "/abs", "mode": "rwx"}]}, "directories[0].mode"),
    ({"interpreter": {"path": "usr/bin/python3"}}, "interpreter.path"),
    ({"interpreter": "/usr/bin/python3"}, "interpreter.path"),
])
def test_check_entries_names_the_bad_entry(bad, field):
    with pytest.raises(inst.ParameterError, match=r"^%s: " % field.replace("[", r"\[").replace("]", r"\]")):
        inst.check_entries(bad)


def test_a_node_without_the_guard_s_interpreter_is_refused_before_anything_changes(tmp_path):
    """The DaemonSet form sees the host's python3 through a read-only mount of its directory: missing, nothing is written."""
    host = tmp_path / "host"
    (host / "usr" / "bin").mkdir(parents=True)
    entry = {"path": str(host / "usr" / "bin" / "python3"), "shown": "/usr/bin/python3", "name": "checkpoint_guard_python"}
    with pytest.raises(inst.InstallError) as err:
        inst.install(spec(tmp_path, interpreter=entry, systemd=False), Systemctl(), dev_root=str(tmp_path / "nodev"))
    assert str(err.value).startswith("checkpoint_guard_python: /usr/bin/python3 is not on this node: nothing was changed."), str(err.value)
    assert sorted(os.listdir(str(tmp_path))) == ["host"], "no directory was made"
    # a file that cannot run is refused too; a link counts as there (its target may lie outside the mount)
    (host / "usr" / "bin" / "python3").write_text("")
    with pytest.raises(inst.InstallError, match="checkpoint_guard_python: /usr/bin/python3 is not an executable file"):
        inst.install(spec(tmp_path, interpreter=entry, systemd=False), Systemctl(), dev_root=str(tmp_path / "nodev"))
    (host / "usr" / "bin" / "python3").unlink()
    os.symlink("/etc/alternatives/python3", str(host / "usr" / "bin" / "python3"))
    result = inst.install(spec(tmp_path, interpreter=entry, systemd=False, selftest=None), Systemctl(), dev_root=str(tmp_path / "nodev"))
    assert result["changed"] and os.path.exists(str(tmp_path / "lib" / "gpuops.pyz"))


def test_beside_a_host_without_python_the_guard_install_is_refused_and_nothing_changes(tmp_path, monkeypatch):
    """The node pod runs the modules beside a host without python3 (GPUOPS_HOST_ROOT): the guard could never run there."""
    (tmp_path / "host").mkdir()
    monkeypatch.setenv("GPUOPS_HOST_ROOT", str(tmp_path / "host"))
    systemctl = Systemctl()
    with pytest.raises(inst.InstallError, match="this node's host has no python3.*nothing was changed. Set checkpoint_guard_install: false"):
        inst.install(spec(tmp_path), systemctl, dev_root=str(tmp_path / "nodev"))
    assert sorted(os.listdir(str(tmp_path))) == ["host"] and systemctl.calls == []


def test_a_failed_self_test_is_not_forgotten_by_the_next_run(tmp_path):
    """Issue 32 item 7: run 1's self-test failed (rc 1); run 2 found no file to change, skipped the self-test, reported
    success and enabled gpuops.service. The install stays failed, and nothing is enabled, until the self-test passes."""
    class Broken(Systemctl):
        def selftest(self, argv, env):
            return 1, "", "Traceback: broken"

    with pytest.raises(inst.InstallError, match="rc 1"):
        inst.install(spec(tmp_path), Broken(), dev_root=str(tmp_path / "nodev"))
    second = Broken()
    with pytest.raises(inst.InstallError, match="does not run.*rc 1") as caught:
        inst.install(spec(tmp_path), second, dev_root=str(tmp_path / "nodev"))
    assert caught.value.result["files"] == [] and second.verbs() == [], "nothing to write, still failed, nothing enabled"
    planned = inst.install(spec(tmp_path), Broken(), check_mode=True, dev_root=str(tmp_path / "nodev"))
    assert planned["selftest_owed"] is True
    fixed = Systemctl()
    third = inst.install(spec(tmp_path), fixed, dev_root=str(tmp_path / "nodev"))
    assert third["selftest"]["rc"] == 0 and third["selftest_owed"] is False and fixed.verbs() == ["enable gpuops.service"]
    fourth = Systemctl(enabled={"gpuops.service": True})
    assert inst.install(spec(tmp_path), fourth, dev_root=str(tmp_path / "nodev"))["selftest"] is None, "passed: not run again"


def test_a_run_killed_after_changing_a_file_owes_the_self_test(tmp_path, monkeypatch):
    """Killed between writing the files and the self-test: the manifest already says pending, so the next run tests."""
    inst.install(spec(tmp_path), Systemctl(), dev_root=str(tmp_path / "nodev"))
    changed = spec(tmp_path)
    changed["files"][0] = dict(changed["files"][0], content="#!/usr/bin/python3\n# new\n")

    class Killed(Exception):
        pass

    class Dies(Systemctl):
        def selftest(self, argv, env):
            raise Killed()

    with pytest.raises(Killed):
        inst.install(changed, Dies(), dev_root=str(tmp_path / "nodev"))
    assert json.loads((tmp_path / "lib" / "gpuops-install.json").read_text())["selftest"] == "pending"
    again = Systemctl(enabled={"gpuops.service": True})
    assert inst.install(changed, again, dev_root=str(tmp_path / "nodev"))["selftest"]["rc"] == 0


@pytest.mark.parametrize("mode, content", [(0o1777, None), (0o1777, "x"), (0o755, "x")], ids=["var-tmp-empty", "var-tmp", "var-lib"])
def test_an_existing_directory_the_guard_did_not_create_keeps_its_mode(tmp_path, mode, content):
    """Issue 32 item 9: the install turned /var/tmp from 1777 to 0755 and /var/lib from 0755 to 0700."""
    shared = tmp_path / "backups"
    shared.mkdir()
    if content:
        (shared / "someone-else").write_text(content)
    os.chmod(str(shared), mode)
    result = inst.install(spec(tmp_path), Systemctl(), dev_root=str(tmp_path / "nodev"))
    assert stat.S_IMODE(os.stat(str(shared)).st_mode) == mode
    assert str(shared) not in [d["path"] for d in result["directories"]]
    # one the guard created is its own: a wrong mode there is put back
    os.chmod(str(tmp_path / "units"), 0o777)
    again = inst.install(spec(tmp_path), Systemctl(enabled={"gpuops.service": True}), dev_root=str(tmp_path / "nodev"))
    assert again["directories"] == [{"path": str(tmp_path / "units"), "action": "mode"}]
    assert stat.S_IMODE(os.stat(str(tmp_path / "units")).st_mode) == 0o755


def test_an_older_layout_s_directory_holding_anything_else_is_left_alone_and_named(tmp_path):
    """Issue 32 item 6: with checkpoint_guard_lib_dir=/usr/lib/python3/dist-packages the clean-up ran rmtree on that
    directory's ansible_collections (the system's collections). Only the guard's own older files are removed."""
    lib = tmp_path / "lib"
    system = lib / "ansible_collections" / "community" / "general"
    system.mkdir(parents=True)
    (system / "x.py").write_text("X = 1\n")
    (lib / "ansible_collections" / "gpuops" / "fleet").mkdir(parents=True)
    (lib / "gpuops_main.py").write_text("# somebody else's gpuops_main\n")
    s = spec(tmp_path, absent=[{"path": str(lib / "ansible_collections"), "only": "gpuops/fleet"},
                               {"path": str(lib / "gpuops_main.py"), "contains": "ansible_collections.gpuops.fleet.plugins.module_utils._node.guard"}])
    result = inst.install(s, Systemctl(), dev_root=str(tmp_path / "nodev"))
    assert (system / "x.py").exists() and (lib / "gpuops_main.py").exists() and result["removed"] == []
    reasons = dict((r["path"], r["reason"]) for r in result["left_alone"])
    assert "holds %s besides the guard's gpuops/fleet" % (lib / "ansible_collections" / "community") in reasons[str(lib / "ansible_collections")]
    assert "not the guard's older file" in reasons[str(lib / "gpuops_main.py")]
    # the guard's own older layout alone is removed
    import shutil
    shutil.rmtree(str(lib / "ansible_collections" / "community"))
    (lib / "ansible_collections" / "gpuops" / "fleet" / "plugins").mkdir()
    (lib / "ansible_collections" / "gpuops" / "__init__.py").write_text("")
    (lib / "gpuops_main.py").write_text("from ansible_collections.gpuops.fleet.plugins.module_utils._node.guard.main import main\n")
    result = inst.install(s, Systemctl(enabled={"gpuops.service": True}), dev_root=str(tmp_path / "nodev"))
    assert sorted(r["path"] for r in result["removed"]) == [str(lib / "ansible_collections"), str(lib / "gpuops_main.py")]
    assert result["left_alone"] == [] and not (lib / "ansible_collections").exists()


def test_an_empty_directory_made_for_the_guard_gets_its_mode(tmp_path):
    """The DaemonSet form: kubelet creates the hostPath mounts (DirectoryOrCreate, 0755) before the install sees them."""
    (tmp_path / "backups").mkdir(mode=0o755)
    os.chmod(str(tmp_path / "backups"), 0o755)
    result = inst.install(spec(tmp_path), Systemctl(), dev_root=str(tmp_path / "nodev"))
    assert {"path": str(tmp_path / "backups"), "action": "mode"} in result["directories"]
    assert stat.S_IMODE(os.stat(str(tmp_path / "backups")).st_mode) == 0o700


def test_would_change_reads_the_install_without_writing_and_says_when_it_is_needed(tmp_path):
    """Issue 36: the plan's round trip reads the install (kubelet_checkpoint's guard option). ``needed`` is false only
    where a real install would change nothing and owes no self-test; an install that would fail is needed (it then
    runs and fails with its own message)."""
    options = spec(tmp_path)
    options["code"] = dict((k, v) for k, v in options["code"].items() if k != "data")  # the plan sends the SHA-256 alone
    fresh = Systemctl()
    planned = inst.would_change(options, fresh)
    assert planned["needed"] is True and planned["error"] is None and "diff" not in planned
    assert [os.path.basename(f["path"]) for f in planned["files"]] == ["gpuops.pyz", "gpuops", "gpuops.service"]
    assert sorted(os.listdir(str(tmp_path))) == [] and fresh.verbs() == [], "nothing written, nothing enabled"

    inst.install(spec(tmp_path), Systemctl(), dev_root=str(tmp_path / "nodev"))
    done = inst.would_change(options, Systemctl(enabled={"gpuops.service": True}))
    assert done["needed"] is False and done["changed"] is False and done["files"] == [] and done["selftest"] is None
    # a unit someone disabled, a file someone edited: needed, and named
    assert inst.would_change(options, Systemctl(enabled={"gpuops.service": False}))["units"] == [{"unit": "gpuops.service", "enabled": True}]
    (tmp_path / "lib" / "gpuops").write_text("#!/bin/sh\n")
    edited = inst.would_change(options, Systemctl(enabled={"gpuops.service": True}))
    assert edited["needed"] is True and [f["action"] for f in edited["files"]] == ["updated"]
    assert (tmp_path / "lib" / "gpuops").read_text() == "#!/bin/sh\n"

    refused = inst.would_change(dict(options, code=dict(options["code"], path="gpuops.pyz")), Systemctl())
    assert refused["needed"] is True and "code" in refused["error"] and set(refused) == {"needed", "error"}
