# Test stand-in for nvidia-smi: reads the same fake-node file as fake_nvml.c
# (GPUOPS_FAKE_NVML_CONFIG) and prints what the real CLI prints for the
# invocations gpuops.fleet uses, including its failure messages and exit codes.
#
# -pm 0|1 -i <ids> and -r -i <ids> change the node: the file is rewritten (atomically) as the driver would leave
# the GPU. A reset is refused, as the real one is, while anything holds the GPU: persistence mode on (NVSentinel#1690:
# "In use by another client", exit 255), a compute process (proc lines), or a live process that has the fake NVML
# library initialised (fake_nvml.c registers each in <config>.clients/<pid> until nvmlShutdown: a metrics exporter,
# the device plugin's health loop); before Ampere (arch < 7), an NVLink peer left out of the command. A reset clears
# what a reset clears: the recovery action, reset-required, volatile ECC counts, a pending row remap or page retirement.
import os
import sys

DRIVER_MSG = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
MISMATCH_MSG = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 535.129\n"


def config_path():
    """The fake node file. A node pod beside the host (k8s_node, exec_on pod) names it under /host for the NVML it loads,
    and runs nvidia-smi chrooted into the host, where the same file has its host path: one driver, one state."""
    path = os.environ.get("GPUOPS_FAKE_NVML_CONFIG")
    if path and not os.path.exists(path) and path.startswith("/host/") and os.path.exists(path[len("/host"):]):
        return path[len("/host"):]
    return path


def load():
    node = {"driver": "535.104.05", "init_error": 0, "gpus": [], "migs": []}
    path = config_path()
    if not path or not os.path.exists(path):
        node["init_error"] = 9
        return node
    with open(path) as handle:
        for line in handle:
            cols = line.rstrip("\r\n").split("|")
            if cols[0] == "driver":
                node["driver"] = cols[1]
            elif cols[0] == "init_error":
                node["init_error"] = int(cols[1])
            elif cols[0] == "gpu":
                node["gpus"].append(cols[1:])
            elif cols[0] == "mig":
                node["migs"].append(cols[1:])
    return node


IN_USE = ("The following GPUs could not be reset:\n  GPU %s: In use by another client\n\n"
          "1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA application, graphics "
          "application such as an X server, or a monitoring application such as another instance of nvidia-smi). Please first "
          "kill all processes using this device and all compute applications running in the system.\n")


def _records(path):
    with open(path) as handle:
        return [line.rstrip("\r\n").split("|") for line in handle if line.strip()]


def _write(path, records):
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "w") as handle:
        handle.write("".join("|".join(r) + "\n" for r in records))
    os.replace(tmp, path)


def _targets(node, ids):
    out = []
    for ident in ids.split(","):
        found = [i for i, g in enumerate(node["gpus"]) if ident in (g[0], str(i))]
        if not found:
            return None, ident
        out.append(found[0])
    return out, None


def _clients(path):
    """PIDs alive that hold the fake NVML initialised (not this process)."""
    alive = []
    folder = path + ".clients"
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        if name.isdigit() and int(name) != os.getpid():
            try:
                os.kill(int(name), 0)
                alive.append(int(name))
            except OSError:
                continue
    return alive


def _health(records, kind, index):
    return [r for r in records if r[0] == kind and r[1] == str(index)]


def persistence(node, path, value, ids):
    targets, bad = _targets(node, ids)
    if targets is None:
        sys.stdout.write("No devices were found matching %s\n" % bad)
        return 6
    records = [r for r in _records(path) if not (r[0] == "persistence" and int(r[1]) in targets)]
    records += [["persistence", str(i), value] for i in targets]
    _write(path, records)
    for i in targets:
        sys.stdout.write("%s persistence mode for GPU %s.\n" % ("Enabled" if value == "1" else "Disabled", node["gpus"][i][2]))
    sys.stdout.write("All done.\n")
    return 0


def cleared(records, targets, drop=("recovery", "reset_required")):
    """``records`` as the driver leaves GPUs ``targets`` after a reset: ``drop``'s lines gone, volatile ECC counts zero,
    a pending row remap or page retirement applied."""
    kept = []
    for r in records:
        if r[0] in drop and int(r[1]) in targets:
            continue
        if r[0] == "ecc" and int(r[1]) in targets:
            r = [r[0], r[1], "0", "0", r[4], r[5]]
        elif r[0] == "remap" and int(r[1]) in targets:
            r = [r[0], r[1], r[2], r[3], "0", r[5]]
        elif r[0] == "retired" and int(r[1]) in targets:
            r = [r[0], r[1], r[2], r[3], "0"]
        kept.append(r)
    return kept


def power_cycle(path):
    """The fake node's driver after a reboot (the SIMULATED kubelet's, tests/kube/simkubelet.py): every process that held
    NVML or ran on a GPU is gone (killed), and every GPU is as a reset leaves it, its XIDs (the kernel log) gone too.
    Returns the PIDs killed."""
    killed = _clients(path)
    for pid in killed:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    records = _records(path)
    gpus = set(int(r[1]) for r in records if r[0] != "gpu" and len(r) > 1 and r[1].isdigit())
    _write(path, cleared(records, gpus, drop=("recovery", "reset_required", "xid", "proc")))
    return killed


def reset(node, path, ids):
    targets, bad = _targets(node, ids)
    if targets is None:
        sys.stdout.write("No devices were found matching %s\n" % bad)
        return 6
    records = _records(path)
    clients = _clients(path)
    for i in targets:
        bus = node["gpus"][i][2]
        on = [r for r in _health(records, "persistence", i) if r[2] == "1"]
        if on or _health(records, "proc", i) or clients:
            sys.stdout.write(IN_USE % bus)
            return 255
        arch = [int(r[2]) for r in _health(records, "arch", i)] or [7]
        peers = sorted(set(int(r[4]) for r in _health(records, "nvlink", i) if int(r[4]) not in targets))
        if arch[-1] < 7 and peers:
            sys.stdout.write("GPU %s: the following GPUs are connected by NVLink and must be reset in the same command: %s\n"
                             % (bus, ", ".join(node["gpus"][p][2] for p in peers)))
            return 255
    _write(path, cleared(records, targets))
    for i in targets:
        sys.stdout.write("GPU %s was successfully reset.\n" % node["gpus"][i][2])
    return 0


RECOVERY = {"0": "None", "1": "Reset", "2": "Reboot", "3": "Drain P2P", "4": "Drain and Reset"}


def _row(indent, key, value=None):
    """One line of nvidia-smi -q: the key padded to column 42 from the line's start, then ': value' (a section has none)."""
    text = "    " * indent + key
    return text + "\n" if value is None else "%s: %s\n" % (text.ljust(42), value)


def query_all(node, records):
    """``nvidia-smi -q``: its layout (the NVSMI LOG banner, the attached GPUs, one section per GPU keyed by its bus ID, 4
    spaces an indent, values at column 44), with the lines an RMA ticket reads: product name, serial number, UUID, board
    part number, the recovery action, ECC errors and remapped rows. The GPU's other sections are left out here."""
    per = {}
    for rec in records:
        if rec[0] in ("board", "recovery", "ecc", "remap") and len(rec) > 1:
            per.setdefault((rec[0], rec[1]), rec[2:])
    out = ["\n==============NVSMI LOG==============\n\n", _row(0, "Timestamp", "Tue Dec  1 12:00:00 2026"),
           _row(0, "Driver Version", node["driver"]), _row(0, "CUDA Version", "12.2"), "\n",
           _row(0, "Attached GPUs", len(node["gpus"]))]
    for i, gpu in enumerate(node["gpus"]):
        key = str(i)
        board = per.get(("board", key))
        ecc = per.get(("ecc", key)) or ["0", "0", "0", "0"]
        remap = per.get(("remap", key))
        out.append("GPU %s\n" % gpu[2])
        out.append(_row(1, "Product Name", gpu[1]))
        out.append(_row(1, "Serial Number", board[0] if board else "N/A"))
        out.append(_row(1, "GPU UUID", gpu[0]))
        out.append(_row(1, "Minor Number", gpu[4] if len(gpu) > 4 else i))
        out.append(_row(1, "Board Part Number", board[1] if board and len(board) > 1 else "N/A"))
        out.append(_row(1, "GPU Recovery Action", RECOVERY.get((per.get(("recovery", key)) or ["0"])[0], "Unknown")))
        out.append(_row(1, "ECC Errors"))
        out.append(_row(2, "Volatile"))
        out.append(_row(3, "SRAM Correctable", ecc[0]))
        out.append(_row(3, "SRAM Uncorrectable", ecc[1]))
        out.append(_row(2, "Aggregate"))
        out.append(_row(3, "SRAM Correctable", ecc[2]))
        out.append(_row(3, "SRAM Uncorrectable", ecc[3]))
        out.append(_row(1, "Remapped Rows"))
        if remap:
            for name, value in zip(("Correctable Error", "Uncorrectable Error", "Pending", "Remapping Failure Occurred"), remap):
                out.append(_row(2, name, value if name.startswith(("Corr", "Uncorr")) else ("Yes" if value == "1" else "No")))
        else:
            out.append(_row(2, "Correctable Error", "N/A"))
        out.append("\n")
    sys.stdout.write("".join(out))
    return 0


def mode(value):
    return {"-1": "[N/A]", "0": "Disabled", "1": "Enabled"}[value]


def main(argv):
    node = load()
    if node["init_error"] == 9:
        sys.stdout.write(DRIVER_MSG)
        return 9
    if node["init_error"] == 18:
        sys.stdout.write(MISMATCH_MSG)
        return 18
    if not node["gpus"]:
        sys.stdout.write("No devices were found\n")
        return 6
    if argv == ["-L"]:
        for i, g in enumerate(node["gpus"]):
            sys.stdout.write("GPU %d: %s (UUID: %s)\n" % (i, g[1], g[0]))
            for m in sorted((m for m in node["migs"] if int(m[0]) == i), key=lambda m: int(m[1])):
                sys.stdout.write("  MIG %-11s Device %2d: (UUID: %s)\n" % (m[3], int(m[1]), m[2]))
        return 0
    if argv == ["-q"]:
        return query_all(node, _records(config_path()))
    ids = argv[argv.index("-i") + 1] if "-i" in argv and argv.index("-i") + 1 < len(argv) else None
    if argv[:1] == ["-pm"] and len(argv) == 4 and argv[1] in ("0", "1") and ids:
        return persistence(node, config_path(), argv[1], ids)
    if argv[:1] in (["-r"], ["--gpu-reset"]) and len(argv) == 3 and ids:
        return reset(node, config_path(), ids)
    query = [a for a in argv if a.startswith("--query-gpu=")]
    fmt = [a for a in argv if a.startswith("--format=")]
    if query and fmt:
        opts = fmt[0].split("=", 1)[1].split(",")
        nounits = "nounits" in opts
        fields = query[0].split("=", 1)[1].split(",")
        rows = []
        for i, g in enumerate(node["gpus"]):
            uuid, name, bus, mem, _minor, cur, pend = g
            values = {
                "index": str(i),
                "uuid": uuid,
                "name": name,
                "pci.bus_id": bus,
                "memory.total": mem if nounits else mem + " MiB",
                "driver_version": node["driver"],
                "mig.mode.current": mode(cur),
                "mig.mode.pending": mode(pend),
            }
            for f in fields:
                if f not in values:
                    sys.stdout.write('Field "%s" is not a valid field to query.\n\n' % f)
                    return 2
            rows.append(", ".join(values[f] for f in fields))
        if "noheader" not in opts:
            sys.stdout.write(", ".join(fields) + "\n")
        sys.stdout.write("".join(r + "\n" for r in rows))
        return 0
    sys.stdout.write("fake nvidia-smi: unsupported arguments %r\n" % (argv,))
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
