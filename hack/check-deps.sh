#!/usr/bin/env bash
# What `make test` needs besides Python, checked in its first second; names the Debian
# packages that are missing. `.ci/run` (and `make deps` as root) installs them.
#   hack/check-deps.sh [--install]
set -euo pipefail
# command -> Debian package
declare -A need=(
  [gcc]=gcc [make]=make [git]=git [shellcheck]=shellcheck
  [podman]=podman [runc]=runc [debootstrap]=debootstrap [systemd-analyze]=systemd
  [go]=golang-go [mount]=mount [promtool]=prometheus [prometheus-node-exporter]=prometheus-node-exporter
  # the alerts path's test (tests/prometheus): Prometheus -> Alertmanager -> the rulebook's alertmanager source
  [prometheus-alertmanager]=prometheus-alertmanager
  # the real kubelet node (hack/kube-node.sh): Debian's containerd and CNI plugins, a static busybox
  # for its image, iproute2 for the bridge, curl for kubelet's healthz
  [containerd]=containerd [busybox]=busybox-static [ip]=iproute2 [curl]=curl [findmnt]=util-linux
  # ansible-rulebook (the rulebook tests) runs its rules engine (Drools) on Java 17
  [java]=openjdk-17-jre-headless
  # the fleet page's browser test (tests/lab/test_fleet_page_browser.py): Debian's chromium, driven by its own chromium-driver
  [chromium]=chromium [chromedriver]=chromium-driver
)
missing=()
for tool in "${!need[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${need[$tool]}")
done
# the Go oracle of the codec tests builds against Debian's go-spew source
[ -d /usr/share/gocode/src/github.com/davecgh/go-spew/spew ] || missing+=(golang-github-davecgh-go-spew-dev)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
# the real kubelet node's Python image is this host's Debian Python (hack/knode/python_image.py)
[ -x /usr/bin/python3.11 ] || missing+=(python3.11)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "${1:-}" = "--install" ] && [ "$(id -u)" = 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  exit 0
fi
echo "make test needs these Debian packages: ${missing[*]}" >&2
echo "install them with: sudo apt-get update && sudo apt-get install -y ${missing[*]}   (or: sudo make deps)" >&2
exit 1
