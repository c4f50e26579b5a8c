"""Write the knode's Python image: this host's Debian python3.11, its standard library and the shared libraries they link,
nvidia-ml-py (pynvml) and busybox-static's shell and tools, as the collection's EE image has Python, pynvml and a shell.

    python_image.py OUT.tar REF PYNVML_PY

For the pods that run the collection's own code on the node: the boot guard's DaemonSet form, and the node pod of
gpuops.fleet.k8s_node beside a host without python3 (gpuops_node_exec_on: pod). No test suites, Tk, IDLE or other
site-packages; deterministic, as mkimage.py is.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mkimage  # noqa: E402  pylint: disable=wrong-import-position

PYTHON = "/usr/bin/python3.11"
STDLIB = "/usr/lib/python3.11"
SKIP = {"test", "idlelib", "tkinter", "turtledemo", "lib2to3", "ensurepip", "pydoc_data", "__pycache__", "dist-packages",
        "site-packages", "config-3.11-x86_64-linux-gnu"}


def linked(path):
    """The shared libraries ``path`` loads (ldd), the loader included."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True, check=False).stdout
    return set(re.findall(r"(?:=>\s*)?(/\S+)\s+\(0x", out))


def main():
    out, ref, pynvml = sys.argv[1:4]
    files, libs = ["%s:%s" % (PYTHON, PYTHON)], linked(PYTHON)
    for dirpath, dirnames, filenames in os.walk(STDLIB):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP)
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not name.endswith((".pyc", ".exe")):
                files.append("%s:%s:%s" % (path, path, "755" if name.endswith(".so") else "644"))
                if name.endswith(".so"):
                    libs |= linked(path)
    files.extend("%s:%s" % (os.path.realpath(lib), lib) for lib in sorted(libs))
    files.append("%s:/usr/lib/python3/dist-packages/pynvml.py:644" % pynvml)
    files.append("/bin/busybox:/bin/busybox")
    applets = subprocess.run(["/bin/busybox", "--list"], capture_output=True, text=True, check=True).stdout.split()
    links = ["python3.11:/usr/bin/python3"] + ["/bin/busybox:/bin/%s" % a for a in sorted(applets) if a != "busybox"]
    layer = mkimage.layer_tar(files, links, ["/tmp", "/etc", "/root"])
    mkimage.write_image(out, ref, layer, cmd=["/usr/bin/python3"])


if __name__ == "__main__":
    main()
