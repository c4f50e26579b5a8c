"""Write a one-layer image tarball in `docker save` format, which `ctr images import` reads (no registry here).

    mkimage.py OUT.tar REF [--file SRC:DST[:MODE]]... [--symlink TARGET:LINK]... [--dir DIR]...
               [--entrypoint JSON] [--cmd JSON]

Deterministic: every mtime is 0, so the same inputs give the same image ID.
"""
import argparse
import hashlib
import io
import json
import os
import tarfile


def layer_tar(files, symlinks, dirs):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        seen = set()

        def add_dir(path):
            parts = path.strip("/").split("/")
            for n in range(1, len(parts) + 1):
                name = "/".join(parts[:n])
                if name and name not in seen:
                    seen.add(name)
                    info = tarfile.TarInfo(name)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                    tar.addfile(info)

        for path in dirs:
            add_dir(path)
        for spec in files:
            src, dst, *mode = spec.split(":")
            if "/" in dst.strip("/"):
                add_dir(dst.strip("/").rsplit("/", 1)[0])
            with open(src, "rb") as handle:
                data = handle.read()
            info = tarfile.TarInfo(dst.strip("/"))
            info.size, info.mode, info.mtime = len(data), int(mode[0], 8) if mode else 0o755, 0
            tar.addfile(info, io.BytesIO(data))
        for spec in symlinks:
            target, link = spec.split(":")
            if "/" in link.strip("/"):
                add_dir(link.strip("/").rsplit("/", 1)[0])
            info = tarfile.TarInfo(link.strip("/"))
            info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, 0
            tar.addfile(info)
    return out.getvalue()


def write_image(out, ref, layer, entrypoint=None, cmd=None):
    """``out``: a `docker save` tarball of one layer (bytes of a tar) named ``ref``."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {"architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
              "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
              "rootfs": {"type": "layers", "diff_ids": [diff_id]},
              "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "hack/knode/mkimage.py"}]}
    if entrypoint:
        config["config"]["Entrypoint"] = entrypoint
    if cmd:
        config["config"]["Cmd"] = cmd
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id[len("sha256:"):] + "/layer.tar"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [ref], "Layers": [layer_name]}]).encode()
    with open(out + ".tmp", "wb") as handle, tarfile.open(fileobj=handle, mode="w") as tar:
        for name, data in ((config_name, config_bytes), (layer_name, layer), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    os.replace(out + ".tmp", out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("ref")
    parser.add_argument("--file", action="append", default=[])
    parser.add_argument("--symlink", action="append", default=[])
    parser.add_argument("--dir", action="append", default=[])
    parser.add_argument("--entrypoint")
    parser.add_argument("--cmd")
    args = parser.parse_args()
    write_image(args.out, args.ref, layer_tar(args.file, args.symlink, args.dir),
                json.loads(args.entrypoint) if args.entrypoint else None, json.loads(args.cmd) if args.cmd else None)


if __name__ == "__main__":
    main()
