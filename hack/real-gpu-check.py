# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks on a machine with a REAL NVIDIA GPU (not run in CI: CI has none). Prints one JSON object.

Needs python3, the NVIDIA driver and pynvml (nvidia-ml-py); torch (or nothing: step 5 is then
skipped) to put a process on the GPU; ansible-core on PATH for step 7 (skipped without it). Run
from the repository root; ``$OUT`` (if set) receives report.json and the playbook's log:

    python3 hack/real-gpu-check.py

1. gpu_uuid_facts' two backends on the real driver: NVML (pynvml) and nvidia-smi's real output
   must agree on every GPU's index, UUID, name, PCI bus ID, memory and minor number; each
   backend's cost is timed over 5 fresh processes (what one node pays per read);
2. NVML from a driver root (the GPU Operator's layout): the real libnvidia-ml.so.1 copied under a
   temp root, loaded by path first (a fresh process, the search path pointed elsewhere);
3. the node command as shipped (the gpuops.pyz the role copies, built here from the tree) on a temp
   sysroot: a kubelet checkpoint with one pod on the real GPU and one on a GPU that is not there;
   ``report`` must say it would prune (exit 5), ``check`` keep the real GPU's pod and drop the
   other, a second ``check`` be up to date; with NVML unreadable (a driver root with no library)
   ``check`` must refuse (exit 3) and leave the file byte for byte;
4. ``gpuops dev-char-symlinks --dry-run`` on the real /dev (what the device-plugin fix would link);
5. ``gpuops metrics`` with a real CUDA process holding GPU memory: the process is put in a cgroup
   named as kubelet names a containerd container's (cgroup v2), its bundle's config.json under a
   temp root; the pod's series must carry the bytes nvidia-smi reports for that process;
6. the same process outside any pod: its bytes are reported unattributed;
7. the modules through Ansible (hack/real-gpu/modules.yml): gpu_uuid_facts, kubelet_checkpoint in
   check mode, for real, and again (changed=0).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, "build", "collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "fleet")
if not os.path.exists(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink(ROOT, LINK)
sys.path.insert(0, COLLECTIONS)

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec  # noqa: E402
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _guard_code  # noqa: E402

STALE = "GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb"
FIELDS = ("index", "uuid", "name", "pci_bus_id", "memory_total_mib", "minor_number")
OUT = os.environ.get("OUT")


def pick(facts):
    return [dict((k, g.get(k)) for k in FIELDS) for g in facts["gpus"]]


def run_gather(backend, driver_root=None):
    code = (
        "import json, sys; sys.path.insert(0, %r)\n"
        "import subprocess\n"
        "from ansible_collections.gpuops.fleet.plugins.module_utils._node import gpu_inventory as inv\n"
        "def run(argv):\n"
        "    p = subprocess.run(argv, capture_output=True, text=True)\n"
        "    return p.returncode, p.stdout, p.stderr\n"
        "print(json.dumps(inv.gather(run, %r, inv.find_nvidia_smi(), driver_root=%r)))\n"
    ) % (COLLECTIONS, backend, driver_root)
    env = dict(os.environ)
    if driver_root:
        env["LD_LIBRARY_PATH"] = "/nonexistent"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError("gather %s: rc %d: %s" % (backend, proc.returncode, proc.stderr[-2000:]))
    return json.loads(proc.stdout), round((time.monotonic() - started) * 1000, 1)


def host_nvml():
    """The real libnvidia-ml.so.1 as the dynamic linker finds it (ldconfig -p), e.g. /usr/local/nvidia/lib64 on GKE."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=False).stdout if os.path.exists(ldconfig) else ""
    for line in out.splitlines():
        if line.strip().startswith("libnvidia-ml.so.1 ") and "=>" in line:
            return os.path.realpath(line.split("=>", 1)[1].strip())
    for directory in os.environ.get("LD_LIBRARY_PATH", "").split(":") + ["/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu"]:
        candidate = os.path.join(directory, "libnvidia-ml.so.1")
        if directory and os.path.exists(candidate):
            return os.path.realpath(candidate)
    return None


def step(report, name, func, *args):
    started = time.monotonic()
    try:
        report[name] = func(*args)
    except Exception as exc:  # pylint: disable=broad-except  # a report, not a program: record and go on
        report[name] = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}
    report[name]["seconds"] = round(time.monotonic() - started, 2)


def backends():
    nvml_ms, smi_ms = [], []
    for dummy in range(5):
        nvml, ms = run_gather("nvml")
        nvml_ms.append(ms)
        smi, ms = run_gather("nvidia-smi")
        smi_ms.append(ms)
    agree = nvml["available"] and smi["available"] and pick(nvml) == pick(smi)
    result = {"ok": bool(agree), "nvml": {"available": nvml["available"], "reason": nvml["reason"], "driver": nvml["driver_version"],
                                          "cuda": nvml["cuda_driver_version"], "gpus": nvml["gpus"], "ms": nvml_ms},
              "nvidia_smi": {"available": smi["available"], "reason": smi["reason"], "gpus": pick(smi), "ms": smi_ms}}
    if not agree:
        result["disagreement"] = {"nvml": pick(nvml), "nvidia_smi": pick(smi)}
    return result


def driver_root(tmp, uuids):
    lib = host_nvml()
    if not lib:
        return {"ok": False, "error": "no libnvidia-ml.so.1 found (ldconfig -p, LD_LIBRARY_PATH)"}
    libdir = os.path.join(tmp, "driver", "usr/lib/x86_64-linux-gnu")
    os.makedirs(libdir)
    # a copy, as the driver container holds it: a link to the host's file would be an absolute link, which the
    # loader resolves inside the driver root (that root's own file), so it would name a file that is not there
    shutil.copy2(lib, os.path.join(libdir, "libnvidia-ml.so.1"))
    rooted, ms = run_gather("nvml", driver_root=os.path.join(tmp, "driver"))
    same = [g["uuid"] for g in rooted["gpus"]] == uuids
    return {"ok": rooted["available"] and same, "library": lib, "available": rooted["available"], "reason": rooted["reason"],
            "same_uuids": same, "ms": ms}


def pyz(tmp):
    data, dummy = _guard_code.build(ROOT)
    path = os.path.join(tmp, "gpuops.pyz")
    with open(path, "wb") as handle:
        handle.write(data)
    return path, _guard_code.digest(data)


def run_pyz(path, args, env=None):
    proc = subprocess.run([sys.executable, path] + args, capture_output=True, text=True, check=False, env=env)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {"rc": proc.returncode, "events": [r.get("event") for r in records],
            "last": records[-1] if records else (proc.stderr or proc.stdout)[-1500:]}


def write_checkpoint(path, real):
    cp = codec.Checkpoint(
        "v2",
        [codec.PodDevicesEntry("pod-on-real-gpu", "train", "nvidia.com/gpu", {0: [real]}, None),
         codec.PodDevicesEntry("pod-on-gone-gpu", "train", "nvidia.com/gpu", {0: [STALE]}, None)],
        {"nvidia.com/gpu": [real, STALE]},
    )
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(codec.encode(cp)[0])


def guard_story(tmp, command, real):
    path = os.path.join(tmp, "sysroot/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")
    write_checkpoint(path, real)
    settings = {"checkpoint_path": path, "backup_dir": os.path.join(tmp, "backups"), "lock_dir": os.path.join(tmp, "run"),
                "kubelet_unit": "gpuops-real-gpu-check-no-such.service"}
    configs = {}
    for name, extra in (("real", {}), ("unreadable", {"backend": "nvml", "driver_root": os.path.join(tmp, "empty-driver-root")})):
        configs[name] = os.path.join(tmp, "gpuops-%s.json" % name)
        with open(configs[name], "w") as handle:
            json.dump(dict(settings, **extra), handle)
    os.makedirs(os.path.join(tmp, "empty-driver-root"))
    runs = {}
    with open(path, "rb") as handle:
        before = handle.read()
    runs["unreadable"] = run_pyz(command, ["check", "--config", configs["unreadable"]])
    with open(path, "rb") as handle:
        untouched = handle.read() == before
    for name, args in (("report", ["report"]), ("check", ["check"]), ("again", ["check"])):
        runs[name] = run_pyz(command, args + ["--config", configs["real"]])
    with open(path, "rb") as handle:
        after = codec.decode(handle.read())
    kept = [e.pod_uid for e in after.checkpoint.entries] if after.valid else None
    registered = after.checkpoint.registered if after.valid else None
    last = runs["again"]["last"]
    ok = (runs["unreadable"]["rc"] == 3 and untouched and runs["report"]["rc"] == 5 and runs["check"]["rc"] == 0
          and runs["again"]["rc"] == 0 and kept == ["pod-on-real-gpu"] and isinstance(last, dict) and last.get("status") == "up_to_date")
    return {"ok": ok, "runs": runs, "unreadable_left_file_as_was": untouched, "kept_pods": kept, "registered_after": registered,
            "backups": sorted(os.listdir(os.path.join(tmp, "backups"))) if os.path.isdir(os.path.join(tmp, "backups")) else []}


def dev_char(command):
    run = run_pyz(command, ["dev-char-symlinks", "--dry-run"])
    nodes = sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))
    existing = sorted(os.listdir("/dev/char")) if os.path.isdir("/dev/char") else None
    return {"ok": run["rc"] == 0, "run": run, "dev_nvidia": nodes, "dev_char_entries": len(existing) if existing is not None else None}


HOLDER = (
    "import sys, time, torch\n"
    "x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device='cuda'); x.fill_(1); torch.cuda.synchronize()\n"
    "print('ready', flush=True); time.sleep(120)\n"
)


def gpu_holder(size):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(size)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise RuntimeError("CUDA holder did not start: %s" % proc.stderr.read()[-1500:])
    return proc


def smi_apps():
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=False)
    apps = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit():
            apps.append({"pid": int(parts[0]), "uuid": parts[1], "mib": int(parts[2]) if parts[2].isdigit() else parts[2]})
    return {"rc": out.returncode, "apps": apps, "stderr": out.stderr[-500:]}


def parse_prom(path):
    series = []
    with open(path) as handle:
        for line in handle:
            if line.startswith("#") or not line.strip():
                continue
            name_labels, value = line.rsplit(" ", 1)
            series.append([name_labels, float(value)])
    return series


def metrics(tmp, command):
    try:
        import torch  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel
    except ImportError:
        return {"ok": True, "skipped": "torch not importable here: no CUDA process to measure"}
    result = {}
    holder = gpu_holder(1 << 30)
    try:
        time.sleep(1)
        result["holder_pid"] = holder.pid
        result["nvidia_smi_apps"] = smi_apps()
        mine = [a for a in result["nvidia_smi_apps"]["apps"] if a["pid"] == holder.pid]
        result["nvidia_smi_bytes"] = mine[0]["mib"] * 1024 * 1024 if mine and isinstance(mine[0]["mib"], int) else None
        # outside any pod: unattributed
        textfile = os.path.join(tmp, "host.prom")
        result["host_run"] = run_pyz(command, ["metrics", "--textfile", textfile, "--node", "real-gpu"])
        result["host_series"] = parse_prom(textfile)
        result["unattributed_bytes"] = sum(v for n, v in result["host_series"] if n.startswith("gpuops_gpu_process_memory_unattributed_bytes"))
        result["pod"] = in_pod_cgroup(tmp, command, holder.pid, result["nvidia_smi_bytes"])
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    result["ok"] = result["host_run"]["rc"] == 0 and result["unattributed_bytes"] > 0 and result["pod"]["ok"]
    return result


def in_pod_cgroup(tmp, command, pid, expected, base="/sys/fs/cgroup"):
    """The CUDA process moved into a cgroup named as kubelet (systemd driver) names a containerd
    container's; its bundle's config.json under a temp root whose proc is the real /proc."""
    kind = subprocess.run(["stat", "-f", "-c", "%T", base], capture_output=True, text=True, check=False).stdout.strip()
    if kind != "cgroup2fs":
        return {"ok": True, "skipped": "%s is %s, not cgroup v2: no kubelet-named cgroup made" % (base, kind)}
    if os.path.exists(os.path.join(base, "kubepods.slice")):
        return {"ok": True, "skipped": "this machine has a kubepods.slice already: not ours to add to"}
    pod_uid = str(uuidlib.uuid4())
    cid = uuidlib.uuid4().hex * 2
    made = [os.path.join(base, "kubepods.slice")]
    made.append(os.path.join(made[-1], "kubepods-besteffort.slice"))
    made.append(os.path.join(made[-1], "kubepods-besteffort-pod%s.slice" % pod_uid.replace("-", "_")))
    made.append(os.path.join(made[-1], "cri-containerd-%s.scope" % cid))
    result = {}
    try:
        for path in made:
            os.mkdir(path)
        with open(os.path.join(made[-1], "cgroup.procs"), "w") as handle:
            handle.write(str(pid))
        with open("/proc/%d/cgroup" % pid) as handle:
            result["holder_cgroup"] = handle.read().strip()
        root = os.path.join(tmp, "root")
        bundle = os.path.join(root, "run/containerd/io.containerd.runtime.v2.task/k8s.io", cid)
        os.makedirs(bundle)
        os.symlink("/proc", os.path.join(root, "proc"))
        with open(os.path.join(bundle, "config.json"), "w") as handle:
            json.dump({"annotations": {"io.kubernetes.cri.container-name": "trainer"}}, handle)
        textfile = os.path.join(tmp, "pod.prom")
        result["run"] = run_pyz(command, ["metrics", "--textfile", textfile, "--node", "real-gpu", "--root", root])
        result["series"] = [s for s in parse_prom(textfile) if s[0].startswith("gpuops_pod_gpu_memory_used_bytes")]
        result["pod_bytes"] = [v for n, v in result["series"] if pod_uid in n and 'container="trainer"' in n]
        result["ok"] = bool(result["pod_bytes"]) and expected is not None and result["pod_bytes"][0] == expected
    finally:
        # the process goes back to the root cgroup, then the empty cgroups are removed, innermost first
        try:
            with open(os.path.join(base, "cgroup.procs"), "w") as handle:
                handle.write(str(pid))
        except OSError as exc:
            result["move_back_error"] = str(exc)
        for path in reversed(made):
            try:
                os.rmdir(path)
            except OSError as exc:
                result.setdefault("cleanup_errors", []).append("%s: %s" % (path, exc))
    return result


def playbook(tmp, real):
    ansible = shutil.which("ansible-playbook")
    if not ansible:
        return {"ok": True, "skipped": "ansible-playbook not on PATH"}
    path = os.path.join(tmp, "ansible-sysroot/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")
    write_checkpoint(path, real)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_LOCAL_TEMP=os.path.join(tmp, "ansible-tmp"),
               ANSIBLE_REMOTE_TEMP=os.path.join(tmp, "ansible-tmp"), ANSIBLE_NOCOLOR="1")
    started = time.monotonic()
    proc = subprocess.run([ansible, "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable,
                           "-e", json.dumps({"checkpoint": path, "work": tmp, "real_uuid": real}),
                           os.path.join(ROOT, "hack/real-gpu/modules.yml")], capture_output=True, text=True, env=env, check=False)
    seconds = round(time.monotonic() - started, 1)
    if OUT:
        with open(os.path.join(OUT, "modules.log"), "w") as handle:
            handle.write(proc.stdout + proc.stderr)
    recap = [line for line in proc.stdout.splitlines() if line.startswith("localhost ")]
    found = {}
    if os.path.exists(os.path.join(tmp, "modules.json")):
        with open(os.path.join(tmp, "modules.json")) as handle:
            found = json.load(handle)
    version = subprocess.run([ansible, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[:1]
    return {"ok": proc.returncode == 0, "rc": proc.returncode, "ansible": version, "recap": recap, "playbook_seconds": seconds,
            "results": found, "tail": (proc.stdout + proc.stderr)[-3000:] if proc.returncode else ""}


def main():
    report = {"machine": os.uname().nodename, "kernel": os.uname().release, "python": sys.version.split()[0]}
    try:
        from importlib import metadata  # pylint: disable=import-outside-toplevel
        report["nvidia_ml_py"] = metadata.version("nvidia-ml-py")
    except Exception:  # pylint: disable=broad-except
        report["nvidia_ml_py"] = None
    step(report, "backends", backends)
    gpus = report["backends"].get("nvml", {}).get("gpus") or []
    uuids = [g["uuid"] for g in gpus]
    real = uuids[0] if uuids else None
    with tempfile.TemporaryDirectory() as tmp:
        command, sha = pyz(tmp)
        report["pyz_sha256"] = sha
        step(report, "driver_root", driver_root, tmp, uuids)
        if real:
            step(report, "guard", guard_story, tmp, command, real)
            step(report, "dev_char", dev_char, command)
            step(report, "metrics", metrics, tmp, command)
            step(report, "modules", playbook, tmp, real)
        else:
            report["guard"] = {"ok": False, "error": "no GPU read: the later steps need one"}
    report["ok"] = all(report.get(k, {}).get("ok") for k in ("backends", "driver_root", "guard", "dev_char", "metrics", "modules"))
    text = json.dumps(report, indent=2, default=str)
    if OUT:
        with open(os.path.join(OUT, "report.json"), "w") as handle:
            handle.write(text)
    print(text)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
