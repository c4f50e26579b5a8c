#!/usr/bin/env bash
# Build (once) the Debian bookworm + systemd image the Molecule scenarios boot, and load it
# into podman as localhost/debian-systemd:bookworm. No registry is needed: debootstrap
# from the Debian mirror this machine already uses. The rootfs tarball is cached under
# ~/.cache/gpuops, so later runs only `podman import` it (or do nothing when loaded).
set -euo pipefail
IMAGE=localhost/debian-systemd:bookworm
CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}
TARBALL=$CACHE/debian-systemd-bookworm.tar
PACKAGES=systemd,systemd-sysv,python3,dbus,iproute2

if podman image exists "$IMAGE"; then
  exit 0
fi
if [ ! -s "$TARBALL" ]; then
  mirror=${DEBIAN_MIRROR:-}
  if [ -z "$mirror" ]; then
    # the mirror apt already uses (deb822 "URIs:" or one-line "deb URL suite ...")
    mirror=$(grep -hs -m1 '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' || true)
    [ -n "$mirror" ] || mirror=$(grep -hs -m1 -E '^deb (http|https)://' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}' || true)
    [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
  fi
  rootfs=$(mktemp -d "${TMPDIR:-/tmp}/gpuops-rootfs.XXXXXX")
  trap 'rm -rf "$rootfs"' EXIT
  echo "building $IMAGE from $mirror (debootstrap, about a minute)" >&2
  debootstrap --variant=minbase --include="$PACKAGES" bookworm "$rootfs" "$mirror" >/dev/null
  mkdir -p "$CACHE"
  tar -C "$rootfs" -cf "$TARBALL.tmp" .
  mv "$TARBALL.tmp" "$TARBALL"
fi
podman import --change 'CMD ["/sbin/init"]' "$TARBALL" "$IMAGE" >/dev/null
echo "loaded $IMAGE from $TARBALL" >&2
