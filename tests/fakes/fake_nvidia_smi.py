# Test stand-in for nvidia-smi: reads the same fake-node file as fake_nvml.c
# (GPUOPS_FAKE_NVML_CONFIG) and prints what the real CLI prints for the
# invocations gpuops.fleet uses, including its failure messages and exit codes.
import os
import sys

DRIVER_MSG = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
MISMATCH_MSG = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 535.129\n"


def load():
    node = {"driver": "535.104.05", "init_error": 0, "gpus": [], "migs": []}
    path = os.environ.get("GPUOPS_FAKE_NVML_CONFIG")
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
