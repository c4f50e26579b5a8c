#!/usr/bin/env bash
# The execution environment (execution-environment.yml, ansible-builder v3):
#   hack/ee.sh context   the collection tarball and kubernetes.core (from the PyPI ansible package,
#                        since Galaxy is unreachable) under build/ee/collections, then
#                        `ansible-builder create` into build/ee/context
#   hack/ee.sh de-context  the same collections, then the decision environment's context (decision-environment.yml)
#                        into build/de/context
#   hack/ee.sh build     the above, a Debian bookworm base image with python3 and pip built locally
#                        (debootstrap, as the Molecule image; cached in ~/.cache/gpuops), then
#                        `ansible-builder build` with podman: localhost/gpuops-fleet-ee:latest
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
OUT=build/ee
BASE=localhost/gpuops-ee-base:bookworm
CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}

context() {
  rm -rf "$OUT" && mkdir -p "$OUT/collections"
  "$BIN/ansible-galaxy" collection build --force --output-path "$OUT/collections" . >/dev/null
  mv "$OUT"/collections/gpuops-fleet-*.tar.gz "$OUT/collections/gpuops-fleet.tar.gz"
  core=$("$BIN/python" -c 'import ansible_collections.kubernetes.core as c; print(list(c.__path__)[0])')
  # a collection tarball holds MANIFEST.json, FILES.json and exactly the files FILES.json lists
  # (ansible-galaxy checks each); the copy in the PyPI ansible package lacks a few listed files
  # (.github, tests), so they are dropped from FILES.json and MANIFEST.json gets its new checksum
  "$BIN/python" - "$core" "$OUT/collections/kubernetes-core.tar.gz" <<'PY'
import hashlib, io, json, os, sys, tarfile
root, out = sys.argv[1:]
with open(os.path.join(root, "FILES.json")) as handle:
    files = json.load(handle)
files["files"] = [f for f in files["files"] if f["name"] == "." or os.path.lexists(os.path.join(root, f["name"]))]
files_json = json.dumps(files, indent=4).encode()
with open(os.path.join(root, "MANIFEST.json")) as handle:
    manifest = json.load(handle)
manifest["file_manifest_file"]["chksum_sha256"] = hashlib.sha256(files_json).hexdigest()
with tarfile.open(out, "w:gz") as tar:
    for name, data in (("MANIFEST.json", json.dumps(manifest, indent=4).encode()), ("FILES.json", files_json)):
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    for entry in files["files"]:
        if entry["name"] != ".":
            tar.add(os.path.join(root, entry["name"]), arcname=entry["name"], recursive=False)
PY
  "$BIN/ansible-builder" create -f execution-environment.yml --context "$OUT/context" --output-filename Containerfile -v 1
  # additional_build_files are copied relative to the definition; the context holds them in _build
  ls "$OUT/context/_build/collections"
}

base_image() {
  podman image exists "$BASE" && return 0
  # (-v2: Debian's ensurepip made a no-op, see below)
  local tarball=$CACHE/gpuops-ee-base-bookworm-v2.tar
  if [ ! -s "$tarball" ]; then
    local mirror rootfs
    mirror=$(grep -hs -m1 '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' || true)
    [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
    rootfs=$(mktemp -d "${TMPDIR:-/tmp}/gpuops-ee-rootfs.XXXXXX")
    echo "building $BASE from $mirror (debootstrap)" >&2
    debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates,git,openssh-client \
      bookworm "$rootfs" "$mirror" >/dev/null
    # ansible-builder's pip_install runs `python3 -m ensurepip` (it assumes a RHEL base); Debian refuses
    # ensurepip for its system Python, whose pip comes from python3-pip: make it a no-op in this base
    for main in "$rootfs"/usr/lib/python3*/ensurepip/__main__.py; do
      printf '%s\n' 'import sys' 'sys.exit(0)  # gpuops EE base: pip is Debian'"'"'s python3-pip' > "$main"
    done
    mkdir -p "$CACHE"
    tar -C "$rootfs" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  # Debian marks its Python as externally managed (PEP 668): the image is the environment here
  podman import --change 'ENV PIP_BREAK_SYSTEM_PACKAGES=1' "$tarball" "$BASE" >/dev/null
}

de_context() {
  context >/dev/null
  rm -rf build/de && mkdir -p build/de
  "$BIN/ansible-builder" create -f decision-environment.yml --context build/de/context --output-filename Containerfile -v 1
  ls build/de/context/_build/collections
}

case "${1:-context}" in
  context) context ;;
  de-context) de_context ;;
  build)
    context
    base_image
    # the build's pip trusts this machine's CA bundle (where a site's TLS-inspecting proxy puts its CA)
    "$BIN/ansible-builder" build -f execution-environment.yml --context "$OUT/context" --container-runtime podman -v 2 \
      --extra-build-cli-args "--volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro"
    podman run --rm localhost/gpuops-fleet-ee:latest ansible-doc -l gpuops.fleet
    ;;
  de)
    de_context
    base_image
    "$BIN/ansible-builder" build -f decision-environment.yml --context build/de/context --container-runtime podman -v 2 \
      --extra-build-cli-args "--volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro"
    podman run --rm localhost/gpuops-fleet-de:latest ansible-rulebook --version
    ;;
  *) echo "usage: $0 [context|build|de-context|de]" >&2; exit 2 ;;
esac
