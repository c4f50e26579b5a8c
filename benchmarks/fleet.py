# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What gpuops.fleet costs on a fleet-sized inventory (prints figures; not a test).

For each N (default 50, 100, 200), on the same N lab hosts with SIMULATED GPUs (lab/fleet.py:
80% healthy, 10% replaced GPU, 4% gpushare, 4% corrupt, 2% no driver), in one run:

1. the lab's set-up (lab/fleet.py);
2. ``ansible -m ping`` over the N hosts;
3. the check stage of site.yml: ``--tags facts,checkpoint --check`` (read the GPUs and plan);
4. the full repair: ``site.yml`` (plan, guard install, repair in restart batches, summary);
5. a second full run: nothing left to repair, the guard already installed (every node unchanged).

It also prints what the guard puts on a node: files and lines of code in its one file (and that
no controller code, ``module_utils/_cluster``, is among them).

Each line gives wall time, the ratio to ping, the controller's peak RSS (the largest process
of ansible's process tree, from wait4) and seconds per host. The lab's "nodes" run their modules on this machine's
cores, beside the controller, so each stage's CPU is also split: the modules' (every module's Python, through an
interpreter wrapper that records its CPU: the node side of a real fleet, spent there in parallel) and the rest (the
controller's own: ansible's processes, its workers, the connections). "ctl x ping" is the controller's CPU against
ping's: what a fleet-sized run costs the controller, where its CPU is the limit.

    .venv/bin/python benchmarks/fleet.py [--nodes 50 100 200] [--forks 10] [--pipelining] [--repair-max N] [--health] [--ssh] [--slices N]
                                         [--ping-each] [--profile DIR]

With --slices N, also the check stage as an AWX sliced job (issue 60): N ``site.yml --check`` runs started together, each on
the share of the inventory AWX gives its slice (hosts by name, every N-th), each with the same forks: on one machine of
2 cores this shows the slices' overhead and correctness, not a speed-up (AWX runs each slice on its own execution node).

With --ssh, every stage (ping included) reaches the nodes over SSH, as a fleet is reached, instead of local connections:
the bench starts a throwaway sshd of its own (OpenSSH's ``/usr/sbin/sshd``, Debian's openssh-server: ``apt-get install
openssh-server``) on 127.0.0.1 and a free port, root by a key made for the run, and gives each node its own SSH control
master (``ansible_control_path``), so each node pays its own SSH handshake, as on a fleet. sshd, its sessions and the
ssh clients run on this machine too: their CPU is in the CPU column (sshd's sessions are not children of ansible: the
bench adds sshd's own CPU, read from /proc when it stops).

With --profile DIR, after the stages of the last N, one more no-change run (the second full run again), profiled (issue 62):
ansible.posix's profile_tasks callback (each task's wall time, ``DIR/tasks.txt``) and py-spy (``pip install py-spy``) on the
controller and every worker it forks, sampling CPU only (``DIR/pyspy.txt``, collapsed stacks): ``DIR/summary.txt`` splits
the samples by where they are (this collection's plugins, ansible-core's templating, its connection, its workers' start
and result handling) and lists the functions that take most, by own and total samples.

With --ping-each (issue 62), ``ansible -m ping`` again right after each stage, and each stage measured against the mean of
the pings just before and just after it (a ping row's own ratio: against the run's first ping, which shows the drift). On
this 2-core machine ping of the same 200 SSH nodes took 144 to 192 s within one hour: a stage divided by a ping taken
minutes earlier measures the machine's drift as much as the stage.

With --health, also the GPU health read alone (benchmarks/health_read.yml: gpu_health_info, one module call per
node) and playbooks/gpu_health.yml (the read, the checkpoint's pods, the report; no cluster, so no plan).

Goals (issue 62, which tightened issue 36's 1.3x, 3x and 1.5x): at 200 and 1,000 hosts over SSH the check stage within 1.1x
of ping over the same hosts, the first full run within 2x, a no-change (second) run within 1.05x, cost linear in N, the
controller's peak RSS within 300 MiB at 1,000. Local connections:
the "nodes" share this machine's cores with the controller, and their modules' CPU is in the CPU column.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import io
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, ".venv", "bin")


def run(argv, env):
    """(wall seconds, peak RSS MiB, rc, output tail, CPU seconds) of one command, its tree's peak RSS and CPU from wait4."""
    with tempfile.TemporaryFile() as out:
        start = time.monotonic()
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        dummy, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        tail = out.read().decode(errors="replace")[-3000:]
    # Linux: ru_maxrss of a reaped child is the largest of it and its reaped descendants, in KiB
    return wall, usage.ru_maxrss / 1024.0, proc.returncode, tail, usage.ru_utime + usage.ru_stime


def run_many(argvs, env):
    """``run``'s figures for commands started together (AWX's slices of one job): the wall until the last ends, the largest
    peak RSS of one, the first failure's rc and tail (else the last's), and the CPU of them all."""
    with contextlib.ExitStack() as files:
        outs = [files.enter_context(tempfile.TemporaryFile()) for dummy in argvs]
        start = time.monotonic()
        procs = [subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT) for argv, out in zip(argvs, outs)]
        rss = cpu = 0.0
        codes = []
        for proc in procs:
            dummy, status, usage = os.wait4(proc.pid, 0)
            codes.append(os.waitstatus_to_exitcode(status))
            rss, cpu = max(rss, usage.ru_maxrss / 1024.0), cpu + usage.ru_utime + usage.ru_stime
        wall = time.monotonic() - start
        bad = next((i for i, rc in enumerate(codes) if rc != 0), len(codes) - 1)
        outs[bad].seek(0)
        tail = outs[bad].read().decode(errors="replace")[-3000:]
    return wall, rss, codes[bad], tail, cpu


def awx_slices(inventory, count, out):
    """The inventory files AWX gives the ``count`` slices of a job: the hosts by name, slice k every ``count``-th from the
    k-th (awx/main/models/inventory.py, ``get_sliced_hosts``); the variables as they are."""
    import yaml  # pylint: disable=import-outside-toplevel

    with open(inventory, encoding="utf-8") as handle:
        doc = yaml.safe_load(handle)
    hosts = sorted(doc["gpu_nodes"]["hosts"])
    paths = []
    for number in range(1, count + 1):
        part = dict(doc, gpu_nodes=dict(doc["gpu_nodes"], hosts=dict((h, doc["gpu_nodes"]["hosts"][h]) for h in hosts[number - 1::count])))
        paths.append(os.path.join(out, "slice-%d-of-%d.yml" % (number, count)))
        with open(paths[-1], "w", encoding="utf-8") as handle:
            yaml.safe_dump(part, handle)
    return paths


def environment(forks, pipelining):
    env = dict(os.environ)
    env.update(
        ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"),
        ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
        ANSIBLE_FORKS=str(forks),
        ANSIBLE_PIPELINING="True" if pipelining else "False",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOST_KEY_CHECKING="False",
    )
    return env


SSHD_CONFIG = """Port {port}
ListenAddress 127.0.0.1
HostKey {work}/host_key
PidFile {work}/sshd.pid
AuthorizedKeysFile {work}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxStartups 200
MaxSessions 200
Subsystem sftp internal-sftp
"""


class LocalSshd:
    """A throwaway sshd on 127.0.0.1 for one bench run (``--ssh``): its own host key and a client key made for it."""

    def __init__(self, work):
        self.work = os.path.join(work, "sshd")
        os.makedirs(self.work)
        self.proc = None
        self.key = os.path.join(self.work, "client_key")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]

    def __enter__(self):
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        if not os.path.exists(sshd):
            raise SystemExit("--ssh needs OpenSSH's sshd (Debian: apt-get install openssh-server)")
        for key in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(self.work, key)], check=True)
        shutil.copy(self.key + ".pub", os.path.join(self.work, "authorized_keys"))
        config = os.path.join(self.work, "sshd_config")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write(SSHD_CONFIG.format(port=self.port, work=self.work))
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
        # PR_SET_CHILD_SUBREAPER: the control masters ssh leaves in the background become this process's children, so
        # their CPU is counted (reap)
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
        self.proc = subprocess.Popen([sshd, "-D", "-e", "-f", config], stderr=open(os.path.join(self.work, "sshd.log"), "wb"))
        for dummy in range(100):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise SystemExit("the bench's sshd did not start: see %s" % os.path.join(self.work, "sshd.log"))

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait()

    def reap(self):
        """CPU seconds of the orphans reaped since the last call: the control masters (ssh forks them into the
        background, so they are not ansible's children; the bench is their subreaper, see __enter__)."""
        total = 0.0
        while True:
            try:
                pid, dummy, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return total
            if pid == 0:
                return total
            total += usage.ru_utime + usage.ru_stime

    def cpu(self):
        """CPU seconds of sshd and its reaped sessions so far (/proc: utime, stime, cutime, cstime)."""
        with open("/proc/%d/stat" % self.proc.pid, encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    def args(self, work):
        """``-e`` arguments that reach every node over this sshd, each node with its own control master."""
        return ["-e", "ansible_connection=ssh", "-e", "ansible_host=127.0.0.1", "-e", "ansible_port=%d" % self.port,
                "-e", "ansible_user=root", "-e", "ansible_ssh_private_key_file=" + self.key,
                "-e", "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR'",
                # one control master per node (the default path hashes host, port and user: all the nodes would share one)
                "-e", "ansible_control_path=%s/{{ inventory_hostname }}" % os.path.join(work, "cp")]


WRAPPER = """#!/bin/bash
# the modules' interpreter for one stage of benchmarks/fleet.py: runs Python, then writes the CPU (user, system) of
# what it ran to a file of its own (bash's times, in this shell: a subshell's would not count its parent's children),
# named by the shell's PID and the time in microseconds: a 1,000-node run over SSH wraps the PIDs (pid_max 32768)
%s "$@"
rc=$?
times > %s/$$.${EPOCHREALTIME/[.,]/}.cpu
exit $rc
"""


def module_python(work, stage):
    """(``-e`` arguments that run every module of a stage through a wrapper that records its CPU, the CPU files' dir)."""
    logs = os.path.join(work, "module-cpu-%s" % stage)
    os.makedirs(logs)
    path = os.path.join(work, "module-python-%s" % stage)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(WRAPPER % (shlex.quote(os.path.join(BIN, "python")), shlex.quote(logs)))
    os.chmod(path, 0o755)
    return ["-e", "ansible_python_interpreter=" + path], logs


def module_cpu(logs):
    """(CPU seconds, calls) of the modules a stage ran, from its wrapper's files: bash ``times`` prints the shell's own
    user and system time, then its children's (``0m0.150s 0m0.020s``): the second line, with the shell's own."""
    total = calls = 0
    for name in os.listdir(logs):
        with open(os.path.join(logs, name), encoding="utf-8") as handle:
            for line in handle:
                for word in line.split():
                    minutes, seconds = word.rstrip("s").split("m")
                    total += 60 * int(minutes) + float(seconds)
        calls += 1
    return total, calls


def stop_masters(work):
    """Stop the SSH control masters a stage left under ``work``/cp (they outlive it: ControlPersist)."""
    for name in os.listdir(os.path.join(work, "cp")):
        subprocess.run(["ssh", "-o", "ControlPath=" + os.path.join(work, "cp", name), "-O", "exit", "x"], capture_output=True, check=False)


def timed(argv, env, work, stage, sshd=None):
    """``run``'s figures for one stage, then the CPU and the calls of the modules it ran (through ``module_python``).
    With ``sshd`` (a LocalSshd), over SSH: its CPU during the stage (its sessions, which are not the command's children)
    is added to the command's."""
    extra, logs = module_python(work, stage)
    if sshd is None:
        return run(argv + extra, env) + module_cpu(logs)
    os.makedirs(os.path.join(work, "cp"), exist_ok=True)
    before = sshd.cpu()
    wall, rss, rc, tail, cpu = run(argv + extra + sshd.args(work), env)
    # the control masters outlive the stage (ControlPersist): stop them, so the next stage pays its own handshakes
    stop_masters(work)
    time.sleep(0.5)
    return (wall, rss, rc, tail, cpu + sshd.cpu() - before + sshd.reap()) + module_cpu(logs)


def timed_many(argvs, env, work, stage, sshd=None):
    """``timed`` for commands started together (the slices of one job)."""
    extra, logs = module_python(work, stage)
    if sshd is None:
        return run_many([a + extra for a in argvs], env) + module_cpu(logs)
    os.makedirs(os.path.join(work, "cp"), exist_ok=True)
    before = sshd.cpu()
    wall, rss, rc, tail, cpu = run_many([a + extra + sshd.args(work) for a in argvs], env)
    stop_masters(work)
    time.sleep(0.5)
    return (wall, rss, rc, tail, cpu + sshd.cpu() - before + sshd.reap()) + module_cpu(logs)


# the label of a ping taken right after a stage (--ping-each)
PING_AFTER = "ping (after it)"


def ping_references(rows):
    """``{row index: (ping's wall, ping's controller CPU)}`` that each row is measured against: the run's first ping, or where
    pings were taken after each stage (--ping-each) the mean of the pings on both sides of the row (a ping row: the first).
    On a shared machine ping itself moves by a quarter within an hour; a stage against the pings of its own minutes shows
    the stage, not the machine's drift."""
    ping_rows = [index for index, (name, dummy) in enumerate(rows) if name in ("ansible -m ping", PING_AFTER)]
    if not ping_rows:
        return {}

    def figures(indexes):
        walls = [rows[i][1][0] for i in indexes]
        ctls = [rows[i][1][4] - rows[i][1][5] for i in indexes]
        return sum(walls) / len(walls), sum(ctls) / len(ctls)

    found = {}
    for index, (name, dummy) in enumerate(rows):
        if name == "lab set-up":
            continue
        if index in ping_rows or len(ping_rows) == 1:
            found[index] = figures(ping_rows[:1])
            continue
        found[index] = figures([max(i for i in ping_rows if i < index)] + [i for i in ping_rows if i > index][:1])
    return found


def measure(nodes, env, work, repair=True, health=False, sshd=None, slices=0, ping_each=False):
    out = os.path.join(work, "fleet-%d" % nodes)
    inventory = os.path.join(out, "inventory.yml")
    report = os.path.join(out, "report")
    lab = [os.path.join(BIN, "python"), os.path.join(ROOT, "lab", "fleet.py"), "--nodes", str(nodes), "--out", out]
    rows = []
    setup = run(lab, env)
    rows.append(("lab set-up", setup + (0.0, 0)))
    ping = [os.path.join(BIN, "ansible"), "-i", inventory, "gpu_nodes", "-m", "ping"]

    def stage(label, name, argv, many=False):
        rows.append((label, (timed_many if many else timed)(argv, env, out, "%s-%d" % (name, len(rows)), sshd)))
        if ping_each:  # ping again right after the stage: the stage is measured against the pings on both sides of it
            rows.append((PING_AFTER, timed(ping, env, out, "ping-%d" % len(rows), sshd)))

    rows.append(("ansible -m ping", timed(ping, env, out, "ping-%d" % len(rows), sshd)))
    site = [os.path.join(BIN, "ansible-playbook"), "-i", inventory, os.path.join(ROOT, "playbooks", "site.yml"), "-e", "gpuops_report_dir=" + report]
    stage("check stage", "check", site + ["--tags", "facts,checkpoint", "--check"])
    if slices > 1:  # the same check stage as an AWX sliced job: its slices started together, each on its share
        argvs = [[os.path.join(BIN, "ansible-playbook"), "-i", part, os.path.join(ROOT, "playbooks", "site.yml"), "-e",
                  "gpuops_report_dir=%s-%d" % (report, number), "--tags", "facts,checkpoint", "--check"]
                 for number, part in enumerate(awx_slices(inventory, slices, out), 1)]
        stage("check, %d slices" % slices, "check-slices", argvs, many=True)
    if repair:
        stage("full repair", "first", site)
        stage("second full run", "second", site)
    if health:
        stage("health read", "health", [os.path.join(BIN, "ansible-playbook"), "-i", inventory, os.path.join(ROOT, "benchmarks", "health_read.yml")])
        stage("gpu_health.yml", "gpu-health", [os.path.join(BIN, "ansible-playbook"), "-i", inventory, os.path.join(ROOT, "playbooks", "gpu_health.yml"),
                                               "-e", "gpuops_report_dir=" + report, "-e", "gpuops_gpu_health_kernel_log=none"])
    for name, (_wall, _rss, rc, tail, _cpu, _mcpu, _calls) in rows:
        if rc != 0:
            raise SystemExit("%s on %d nodes failed (rc %d):\n%s" % (name, nodes, rc, tail))
    return rows


PROFILE_PLACES = (
    # (label, a path fragment of the frame's file): a stack counts for the first label any of its frames has, innermost
    # first; py-spy names a collection's file by its name alone (``kubelet_checkpoint.py``): ours are matched by
    # collection_files()
    ("templating (ansible/_internal/_templating, jinja2)", "_templating/"),
    ("templating (ansible/_internal/_templating, jinja2)", "jinja2/"),
    ("variables (ansible/vars)", "ansible/vars/"),
    ("the SSH connection (ansible/plugins/connection)", "plugins/connection/"),
    ("actions and modules' packaging (ansible/plugins/action, executor/module_common)", "plugins/action/"),
    ("actions and modules' packaging (ansible/plugins/action, executor/module_common)", "executor/module_common"),
    ("callbacks (ansible/plugins/callback)", "plugins/callback/"),
    ("workers and results (ansible/executor)", "ansible/executor/"),
    ("strategy (ansible/plugins/strategy)", "plugins/strategy/"),
    ("playbook objects (ansible/playbook)", "ansible/playbook/"),
    ("inventory (ansible/inventory)", "ansible/inventory/"),
)
OURS = "gpuops.fleet's plugins"


def collection_files():
    """The names of this collection's plugin files, as py-spy shows them (the file's name alone)."""
    names = set()
    for dummy, dummy2, filenames in os.walk(os.path.join(ROOT, "plugins")):
        names.update(name for name in filenames if name.endswith(".py") and name != "__init__.py")
    return names


def frame_file(frame):
    """The file of a py-spy frame ``function (path:line)``, without the line."""
    return frame.rsplit("(", 1)[-1].rsplit(":", 1)[0]


def profile_summary(raw, tasks_text, out):
    """DIR/summary.txt from py-spy's collapsed stacks (``raw``) and profile_tasks' output: where the samples are, in the
    main process and in the workers (a stack under ``WorkerProcess.run``)."""
    ours = collection_files()
    places, own, whole, sides = {}, {}, {}, {"main process": 0, "workers": 0}
    total = 0
    with open(raw, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            stack, dummy, count = line.rstrip("\n").rpartition(" ")
            if not stack or not count.isdigit():
                continue
            count = int(count)
            total += count
            frames = [f for f in stack.split(";") if not f.startswith("process ")]  # py-spy's process frames
            if not frames:
                continue
            sides["workers" if any(f.startswith("WorkerProcess.run ") for f in frames) else "main process"] += count
            label = "other (Python's start, imports, the rest)"
            for frame in reversed(frames):
                path = frame_file(frame)
                found = OURS if path in ours else next((name for name, part in PROFILE_PLACES if part in path), None)
                if found:
                    label = found
                    break
            places[label] = places.get(label, 0) + count
            own[frames[-1]] = own.get(frames[-1], 0) + count
            for frame in set(frames):
                if frame_file(frame) in ours:
                    whole[frame] = whole.get(frame, 0) + count
    total = total or 1
    lines = ["py-spy samples: %d (the controller's main process and its workers; a sample blocks the process, so the run is slower)"
             % total, ""]
    lines += ["%6.1f %%  %s" % (100.0 * n / total, name) for name, n in sides.items()]
    lines += ["", "where (the innermost frame that says):"]
    lines += ["%6.1f %%  %s" % (100.0 * n / total, name) for name, n in sorted(places.items(), key=lambda kv: -kv[1])]
    lines += ["", "functions by own samples:"]
    lines += ["%6.1f %%  %s" % (100.0 * n / total, name) for name, n in sorted(own.items(), key=lambda kv: -kv[1])[:40]]
    lines += ["", "this collection's functions by total samples:"]
    lines += ["%6.1f %%  %s" % (100.0 * n / total, name) for name, n in sorted(whole.items(), key=lambda kv: -kv[1])[:30]]
    lines += ["", "tasks (profile_tasks, wall seconds):", tasks_text]
    with open(os.path.join(out, "summary.txt"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return "\n".join(lines[:22])


def profile(nodes, env, work, sshd, out):
    """One more no-change run of site.yml on the last lab, under profile_tasks and py-spy (--profile); its summary's head."""
    lab = os.path.join(work, "fleet-%d" % nodes)
    os.makedirs(out, exist_ok=True)
    spy = shutil.which("py-spy") or os.path.join(BIN, "py-spy")
    if not os.path.exists(spy):
        raise SystemExit("--profile needs py-spy (pip install py-spy)")
    argv = [os.path.join(BIN, "ansible-playbook"), "-i", os.path.join(lab, "inventory.yml"), os.path.join(ROOT, "playbooks", "site.yml"),
            "-e", "gpuops_report_dir=" + os.path.join(lab, "report")]
    if sshd is not None:
        argv += sshd.args(lab)
    prof_env = dict(env, ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", PROFILE_TASKS_TASK_OUTPUT_LIMIT="all",
                    PROFILE_TASKS_SORT_ORDER="descending")
    raw = os.path.join(out, "pyspy.txt")
    done = subprocess.run([spy, "record", "--subprocesses", "--rate", "250", "--format", "raw", "--output", raw, "--"] + argv,
                          cwd=ROOT, env=prof_env, capture_output=True, text=True, check=False)
    with open(os.path.join(out, "run.log"), "w", encoding="utf-8") as handle:
        handle.write(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit("the profiled run failed (rc %d): %s" % (done.returncode, (done.stdout + done.stderr)[-2000:]))
    tasks = "\n".join(line for line in done.stdout.splitlines() if line.rstrip().endswith("s") and " --- " in line)
    with open(os.path.join(out, "tasks.txt"), "w", encoding="utf-8") as handle:
        handle.write(tasks + "\n")
    if sshd is not None:
        stop_masters(lab)
    return profile_summary(raw, tasks, out)


def guard_contents():
    """(files, lines of code, controller files) of the guard's one file, as the role installs it."""
    sys.path.insert(0, os.path.join(ROOT, "build", "collections"))
    # pylint: disable-next=import-outside-toplevel
    from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_code as guard_code
    data, names = guard_code.build()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        code = [n for n in names if n.endswith(".py") and archive.read(n).strip()]
        lines = sum(len(archive.read(n).splitlines()) for n in code)
    return len(code), lines, [n for n in names if "/_cluster/" in n], len(data)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[50, 100, 200])
    parser.add_argument("--forks", type=int, default=10)
    parser.add_argument("--pipelining", action="store_true")
    parser.add_argument("--health", action="store_true", help="also the GPU health read alone and playbooks/gpu_health.yml")
    parser.add_argument("--repair-max", type=int, default=None,
                        help="time the full repair only up to this many nodes (it installs the guard on every node: minutes)")
    parser.add_argument("--ssh", action="store_true",
                        help="reach the nodes over SSH (a throwaway local sshd; one control master per node), not local connections")
    parser.add_argument("--profile", metavar="DIR",
                        help="after the last N's stages, one more no-change run under profile_tasks and py-spy; its figures in DIR")
    parser.add_argument("--ping-each", action="store_true",
                        help="ping again after each stage; each stage is measured against the pings just before and after it")
    parser.add_argument("--slices", type=int, default=0,
                        help="also the check stage as an AWX sliced job: N site.yml runs started together, each on its share")
    args = parser.parse_args(argv)
    env = environment(args.forks, args.pipelining)
    print("settings: forks=%d pipelining=%s gather_facts=false strategy=linear, %s, %d cores"
          % (args.forks, args.pipelining, "SSH to a local sshd" if args.ssh else "local connections", os.cpu_count()))
    files, lines, cluster, size = guard_contents()
    print("the guard on each node: one file of %d bytes, %d code files, %d lines; controller code in it: %s"
          % (size, files, lines, ", ".join(cluster) or "none"))
    # CPU: the command's whole process tree, so with local connections also the modules the "nodes" ran
    print("%-6s %-16s %9s %8s %10s %10s %12s %13s %11s %10s %8s" % (
        "nodes", "stage", "wall s", "x ping", "peak MiB", "s/host", "CPU s/host", "module s/host", "modules", "ctl s/host", "ctl x ping"))
    summary, per_host = [], []
    with tempfile.TemporaryDirectory(prefix="gpuops-fleet-bench-") as work, \
            (LocalSshd(work) if args.ssh else contextlib.nullcontext()) as sshd:
        for nodes in args.nodes:
            rows = measure(nodes, env, work, repair=args.repair_max is None or nodes <= args.repair_max, health=args.health, sshd=sshd,
                           slices=args.slices, ping_each=args.ping_each)
            pings = ping_references(rows)
            for index, (name, (wall, rss, dummy, dummy2, cpu, mcpu, calls)) in enumerate(rows):
                ping, ping_ctl = pings.get(index, (None, None))
                ctl = cpu - mcpu
                print("%-6d %-16s %9.1f %8s %10.0f %10.3f %12.3f %13.3f %11d %10.3f %8s" % (
                    nodes, name, wall, "%.2f" % (wall / ping) if ping else "-", rss, wall / nodes, cpu / nodes, mcpu / nodes, calls,
                    ctl / nodes, "%.2f" % (ctl / ping_ctl) if ping else "-"))
            # each stage against its ping (the run's first, or with --ping-each those on both sides of it)
            ratios = dict((name, rows[index][1][0] / pings[index][0]) for index, (name, dummy) in enumerate(rows) if index in pings)
            summary.append((nodes, ratios["check stage"], ratios.get("full repair"), ratios.get("second full run")))
            per_host.append((nodes, dict(rows)["check stage"][0] / nodes))
            if "health read" in ratios:
                print("goal at %d nodes: the health read within 1.3x of ping: %.2fx -> %s" % (
                    nodes, ratios["health read"], "met" if ratios["health read"] <= 1.3 else "NOT met"))
            sys.stdout.flush()
        if args.profile:
            print(profile(args.nodes[-1], env, work, sshd, os.path.abspath(args.profile)))
    if len(per_host) > 1:
        print("check stage per host: %.3f s at %d nodes, %.3f s at %d nodes (linear when these agree)"
              % (per_host[0][1], per_host[0][0], per_host[-1][1], per_host[-1][0]))
    for nodes, check, first, second in summary:
        print("goal at %d nodes (issue 62): check stage within 1.1x of ping: %.2fx -> %s" % (nodes, check, "met" if check <= 1.1 else "NOT met"))
        if first is not None:
            print("goal at %d nodes (issue 62): first full run within 2x ping: %.2fx -> %s; a no-change run within 1.05x: %.2fx -> %s" % (
                nodes, first, "met" if first <= 2 else "NOT met", second, "met" if second <= 1.05 else "NOT met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
