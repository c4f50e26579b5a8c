# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which filesystem holds a path, from a mountinfo text (proc(5)) and from this process's own."""

from __future__ import annotations

import os

from ansible_collections.gpuops.fleet.plugins.module_utils._node import mounts

# after a Container-Optimized OS node: / read-only (dm-verity), /etc tmpfs, /var and /home from the stateful partition;
# a path with a space (\040) and /mnt stacked twice
COS = """\
20 1 254:0 / / ro,relatime shared:1 - ext2 /dev/root ro
21 20 0:20 / /etc rw,nosuid,nodev shared:2 - tmpfs tmpfs rw,mode=755
22 20 8:1 /var /var rw,nosuid,nodev,noexec,relatime shared:3 - ext4 /dev/sda1 rw,commit=30
23 20 8:1 /home /home rw,nosuid,nodev,noexec,relatime shared:4 - ext4 /dev/sda1 rw
24 23 8:1 /home/kubernetes/bin /home/kubernetes/bin rw,nosuid,nodev,relatime shared:5 - ext4 /dev/sda1 rw
25 20 0:30 / /mnt/my\\040disk rw - ext4 /dev/sdb rw
26 20 0:31 / /mnt rw - tmpfs tmpfs rw
27 20 0:32 / /mnt rw - xfs /dev/sdc ro
a line that is not a mount line
"""


def test_a_mountinfo_text_is_read_with_its_escapes_and_read_only_from_either_option_field():
    table = mounts.parse(COS)
    assert [m.point for m in table] == ["/", "/etc", "/var", "/home", "/home/kubernetes/bin", "/mnt/my disk", "/mnt", "/mnt"]
    assert [m.read_only for m in table] == [True, False, False, False, False, False, False, True]  # the last: its superblock is ro
    assert [m.volatile for m in table] == [False, True, False, False, False, False, True, False]


def test_the_longest_mount_point_holds_a_path_and_a_missing_path_is_its_nearest_parents(tmp_path):
    table = mounts.parse(COS)
    # paths that do not exist here: each is judged by its nearest existing parent ("/"), then by its own prefix
    held = dict((path, mounts.holding(path, table)) for path in ("/usr/local/bin", "/etc/systemd/system"))
    assert held["/usr/local/bin"].point == "/" and held["/usr/local/bin"].read_only
    # the text's mounts are not this machine's, so a missing /etc/... falls back to the existing /etc: tmpfs
    assert held["/etc/systemd/system"].point == "/etc" and held["/etc/systemd/system"].volatile
    # of two mounts stacked on one point, the later one is what a path sees
    assert mounts.holding("/mnt", table).fstype == "xfs"
    assert mounts.holding("/etcetera", table).point == "/"  # a prefix of characters is not a parent


def test_this_process_sees_its_own_root_mount_and_an_unreadable_table_is_empty(tmp_path):
    found = mounts.holding(str(tmp_path / "missing" / "dir"), mounts.read())
    assert found is not None and os.path.realpath(str(tmp_path)).startswith(found.point.rstrip("/") + "/")
    assert mounts.read(str(tmp_path / "no-such-mountinfo")) == []


def test_a_mount_point_whose_name_is_not_utf8_is_read_not_refused(tmp_path):
    """Issue 32 item 13: a mount point named with a 0xff byte made guard_install fail ('utf-8' codec can't decode byte
    0xff) on every node that had one. Mount points are bytes: read as the OS reads paths."""
    table = tmp_path / "mountinfo"
    table.write_bytes(b"1 0 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
                      b"2 1 0:5 / /mnt/\xff\xfeweird rw - tmpfs tmpfs rw\n"
                      b"3 1 0:6 / /srv/caf\\303\\251\\040x ro - xfs /dev/sdb1 rw\n")
    found = mounts.read(str(table))
    assert [m.point for m in found] == ["/", os.fsdecode(b"/mnt/\xff\xfeweird"), "/srv/caf\u00e9 x"]
    assert found[2].read_only and found[1].volatile
