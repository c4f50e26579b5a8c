#!/usr/bin/env bash
# A REAL node for the tests: kubelet v1.20.2 (built by hack/kube-cluster.sh build from Debian's
# source, with the control plane) on Debian's containerd + runc + CNI bridge, joined to a
# control plane of hack/kube-cluster.sh start, with locally built images (no registry) and a fake
# NVIDIA device plugin (tests/fakes/fake_device_plugin.py) registered with kubelet's real device
# manager. The recipe, the errors it hit and their fixes: ../shared/recipes/real-kubelet-node.md.
#
#   hack/kube-node.sh check                   can this machine run the node? (exit 1 + the reason)
#   hack/kube-node.sh up DIR CLUSTER_DIR      containerd + kubelet; waits for the node to be Ready
#   hack/kube-node.sh kubelet-start DIR [--no-wait] | kubelet-stop DIR | kubelet-status DIR
#   hack/kube-node.sh plugin-start DIR NVML_CONFIG | plugin-stop DIR
#                                             after a kubelet restart the plugin registers again
#                                             GPUOPS_PLUGIN_REREGISTER_DELAY s later (default 2: kubelet
#                                             admits its pods first, as in field report 000)
#                                             (GPUOPS_PLUGIN_NVML_LIB=DIR: with the plugin's health loop on NVML's XIDs)
#   hack/kube-node.sh down [DIR]              stop everything by PID, leave no mount, cgroup, link
#
# One node per machine: kubelet 1.20 hard-codes /var/lib/kubelet/device-plugins, and /var/log/pods,
# /run/containerd/s and the /kubepods cgroups are global too. `up` takes the machine (the run
# directory is recorded in $STATE) and first cleans up after a run that was killed; `down` with no
# DIR cleans up after the recorded one. Everything else lives under DIR: containerd's socket,
# root, state, runc root, netns mounts, CNI config and IPAM, kubelet's root dir and the logs.
#
# The node is named 127.0.0.1: kubelet refuses a loopback --node-ip ("nodeIP can't be loopback
# address") but takes an IP given as --hostname-override, so `kubectl logs/exec` reach it.
# kube-cluster.sh runs no node-lifecycle controller, so `up` removes the not-ready taint kubelet
# registers with. Nothing touches iptables (kubelet: --make-iptables-util-chains=false; CNI:
# ipMasq false, no portmap).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
KUBE_VERSION=v1.20.2
CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}
BIN=$CACHE/kube-$KUBE_VERSION
PYTHON=${KNODE_PYTHON:-$ROOT/.venv/bin/python}
NODE_NAME=127.0.0.1
DP_DIR=/var/lib/kubelet/device-plugins # hard-coded in kubelet 1.20's device manager
STATE=/run/gpuops-kube-node.dir
BRIDGE=gpuopsnode0
SUBNET=10.244.77.0/24
IMAGE_PAUSE=registry.local/pause:3.2
IMAGE_BUSYBOX=registry.local/busybox:1.35
# this host's Debian python3.11, its standard library, nvidia-ml-py and busybox (hack/knode/python_image.py), for pods that run the
# collection's code; also named by its digest (registry.local/python@sha256:...), written to $DIR/python-image
IMAGE_PYTHON=registry.local/python:3.11

log() { echo "kube-node: $(date +%T) $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=hack/lib.sh
. "$HERE/lib.sh"
CTR() { ctr --address "$R/containerd.sock" -n k8s.io "$@"; }
# the harness's side of the node (the node lifecycle controller's: lifting the not-ready taint; deleting the Node at the
# end): the control plane's admin. kubelet itself runs as the node's own identity (kubelet.kubeconfig: system:node:<name>),
# which the Node authorizer and NodeRestriction limit as on a production cluster.
KUBECTL() { "$BIN/kubectl" --kubeconfig="$R/admin.kubeconfig" "$@"; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
node_ready() { KUBECTL get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True; }

# Why this machine cannot run the node, or nothing. The node needs real root (mounts, netns, veth,
# bridge, overlayfs) and cgroup v1 controllers (kubelet 1.20 with the cgroupfs driver; a cgroup-v2-only
# host is untested), Debian's containerd and CNI plugins, and the binaries of kube-cluster.sh build.
unsupported() {
  [ "$(id -u)" = 0 ] || { echo "needs root (mounts, network namespaces, cgroups)"; return; }
  if [ ! -d /sys/fs/cgroup/memory ] || [ ! -d /sys/fs/cgroup/cpu ]; then
    echo "needs cgroup v1 memory and cpu controllers under /sys/fs/cgroup (kubelet 1.20 on a cgroup-v2-only host is untested)"
    return
  fi
  grep -qw overlay /proc/filesystems || { echo "needs overlayfs"; return; }
  local tool
  for tool in containerd ctr runc busybox ip findmnt gcc ldd; do
    command -v "$tool" >/dev/null || { echo "needs $tool (Debian: containerd runc busybox-static iproute2 util-linux gcc libc-bin; hack/check-deps.sh --install)"; return; }
  done
  [ -x /usr/bin/python3.11 ] || { echo "needs Debian's /usr/bin/python3.11 (the pods' Python image is built from it: python3.11)"; return; }
  [ -x /usr/lib/cni/bridge ] || { echo "needs the CNI plugins in /usr/lib/cni (Debian: containernetworking-plugins)"; return; }
  if [ ! -x "$BIN/kubelet" ] || [ ! -x "$BIN/kubectl" ]; then
    echo "needs kubelet and kubectl in $BIN (hack/kube-cluster.sh build)"
    return
  fi
  "$PYTHON" -c 'import grpc, grpc_tools' 2>/dev/null || { echo "needs grpcio and grpcio-tools in $PYTHON (requirements-dev.txt)"; return; }
}

# The pause and busybox images, built once per content (cached under $CACHE): a static pause binary
# from hack/knode/pause.c, and busybox-static with a link per applet.
IMAGES=
images() {
  local key
  local pynvml
  pynvml=$("$PYTHON" -c 'import pynvml; print(pynvml.__file__)')
  key=$( { cat "$HERE/knode/pause.c" "$HERE/knode/mkimage.py" "$HERE/knode/python_image.py" "$pynvml";
          dpkg-query -W -f='${Version}' busybox-static libpython3.11-stdlib python3.11-minimal; } | sha256sum | cut -c1-12)
  IMAGES=$CACHE/kube-node-images-$key
  [ -f "$IMAGES/python.tar" ] && return 0
  local tmp
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpuops-knode-images.XXXXXX")
  gcc -static -Os -s -o "$tmp/pause" "$HERE/knode/pause.c"
  python3 "$HERE/knode/mkimage.py" "$tmp/pause.tar" "$IMAGE_PAUSE" --file "$tmp/pause:/pause" --entrypoint '["/pause"]'
  local links=() applet
  for applet in $(busybox --list); do [ "$applet" = busybox ] || links+=("--symlink=/bin/busybox:/bin/$applet"); done
  python3 "$HERE/knode/mkimage.py" "$tmp/busybox.tar" "$IMAGE_BUSYBOX" --file /bin/busybox:/bin/busybox \
    "${links[@]}" --dir /tmp --dir /etc --cmd '["/bin/sh"]'
  python3 "$HERE/knode/python_image.py" "$tmp/python.tar" "$IMAGE_PYTHON" "$pynvml"
  mkdir -p "$IMAGES"
  mv "$tmp/pause.tar" "$IMAGES/pause.tar" && mv "$tmp/busybox.tar" "$IMAGES/busybox.tar" && mv "$tmp/python.tar" "$IMAGES/python.tar"
  rm -rf "$tmp"
  log "images built into $IMAGES"
}

runtime_start() {
  mkdir -p "$R/cni" "$R/containerd" "$R/log"
  # containerd's CRI config: everything under $R. restrict_oom_score_adj: where root lacks
  # CAP_SYS_RESOURCE (this project's machines) runc cannot lower a sandbox's oom_score_adj
  # ("nsexec: failed to update /proc/self/oom_score_adj: Permission denied"); harmless elsewhere.
  cat >"$R/containerd.toml" <<TOML
version = 2
root = "$R/containerd/root"
state = "$R/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$R/containerd.sock"
[ttrpc]
  address = "$R/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$IMAGE_PAUSE"
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
        Root = "$R/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$R/cni"
[plugins."io.containerd.internal.v1.opt"]
  path = "$R/containerd/opt"
TOML
  cat >"$R/cni/10-gpuops-node.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "gpuops-node", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$SUBNET"}]], "dataDir": "$R/cni-ipam"}},
  {"type": "loopback"}]}
JSON
  setsid containerd --config "$R/containerd.toml" </dev/null >>"$R/log/containerd.log" 2>&1 &
  echo $! >"$R/containerd.pid"
  wait_for 30 containerd CTR version || die "containerd did not start: $(tail -5 "$R/log/containerd.log")"
  CTR images import "$IMAGES/pause.tar" >/dev/null
  CTR images import "$IMAGES/busybox.tar" >/dev/null
  CTR images import "$IMAGES/python.tar" >/dev/null
  # a node pod names its image by digest, as the collection asks of a user's: kubelet resolves that name locally
  local digest image file
  for image in "$IMAGE_PYTHON:python-image" "$IMAGE_BUSYBOX:busybox-image"; do
    file=${image##*:}
    image=${image%:*}
    digest=$(CTR images ls "name==$image" | awk 'NR == 2 { print $3 }')
    CTR images tag "$image" "${image%:*}@$digest" >/dev/null
    echo "${image%:*}@$digest" >"$R/$file"
  done
  log "containerd up (pid $(cat "$R/containerd.pid")), images $IMAGE_PAUSE, $(cat "$R/busybox-image") and $(cat "$R/python-image") imported"
}

kubelet_start() { # kubelet_start [--no-wait]
  if alive "$R/kubelet.pid"; then log "kubelet already runs (pid $(cat "$R/kubelet.pid"))"; return 0; fi
  [ -f "$R/kubelet.ports" ] || echo "$(free_port) $(free_port)" >"$R/kubelet.ports"
  local port hport
  read -r port hport <"$R/kubelet.ports"
  mkdir -p "$R/kubelet" "$R/log" "$DP_DIR"
  # setsid and no inherited descriptor: kubelet outlives whoever started it (a module's
  # run_command reads its pipes to EOF), as a systemd service does
  setsid "$BIN/kubelet" \
    --kubeconfig="$R/kubelet.kubeconfig" --register-node=true --hostname-override="$NODE_NAME" \
    --root-dir="$R/kubelet" --cert-dir="$R/kubelet/pki" --volume-plugin-dir="$R/kubelet/volume-plugins" \
    --container-runtime=remote --container-runtime-endpoint="unix://$R/containerd.sock" \
    --runtime-request-timeout=2m --cgroup-driver=cgroupfs --fail-swap-on=false \
    --address=127.0.0.1 --port="$port" --read-only-port=0 \
    --healthz-bind-address=127.0.0.1 --healthz-port="$hport" \
    --anonymous-auth=true --authorization-mode=AlwaysAllow \
    --make-iptables-util-chains=false \
    --image-gc-high-threshold=100 --image-gc-low-threshold=99 \
    --eviction-hard='memory.available<50Mi,nodefs.available<1%,imagefs.available<1%' \
    --node-status-update-frequency=4s --sync-frequency=10s \
    --v=2 </dev/null >>"$R/log/kubelet.log" 2>&1 &
  echo $! >"$R/kubelet.pid"
  [ "${1:-}" = --no-wait ] && return 0
  wait_for 60 "kubelet healthz" curl -fs "http://127.0.0.1:$hport/healthz" ||
    die "kubelet did not become healthy: $(tail -5 "$R/log/kubelet.log")"
  log "kubelet up (pid $(cat "$R/kubelet.pid"), port $port)"
}

stop_pid() { # stop_pid PIDFILE: TERM, up to 10 s, then KILL
  [ -f "$1" ] || return 0
  local pid
  pid=$(cat "$1")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$1"
}

plugin_start() { # plugin_start NVML_CONFIG
  alive "$R/plugin.pid" && die "the device plugin already runs (pid $(cat "$R/plugin.pid"))"
  mkdir -p "$R/log" "$DP_DIR"
  # GPUOPS_PLUGIN_NVML_LIB=<dir of the fake libnvidia-ml.so.1>: the plugin runs the real plugin's health loop on it
  local health=() env=()
  if [ -n "${GPUOPS_PLUGIN_NVML_LIB:-}" ]; then
    health=(--health)
    env=("LD_LIBRARY_PATH=$GPUOPS_PLUGIN_NVML_LIB" "GPUOPS_FAKE_NVML_CONFIG=$1")
  fi
  env "${env[@]}" setsid "$PYTHON" "$ROOT/tests/fakes/fake_device_plugin.py" --config "$1" --devdir "$R/dev" --dp-dir "$DP_DIR" \
    --reregister-delay "${GPUOPS_PLUGIN_REREGISTER_DELAY:-2}" "${health[@]}" \
    </dev/null >>"$R/log/plugin.log" 2>&1 &
  echo $! >"$R/plugin.pid"
  log "fake device plugin started (pid $(cat "$R/plugin.pid")), GPUs of $1"
}

up() { # up CLUSTER_DIR
  local cp=$1 start=$SECONDS why
  why=$(unsupported) && [ -n "$why" ] && die "this machine cannot run the node: $why"
  [ -f "$cp/kubeconfig" ] || die "$cp/kubeconfig: no control plane there (hack/kube-cluster.sh start $cp)"
  # kubelet's pod-resources socket is the deepest unix socket under DIR; sun_path holds 107 bytes
  local sock="$R/kubelet/pod-resources/kubelet.sock"
  [ ${#sock} -le 107 ] || die "DIR is too long for kubelet's unix sockets ($sock: ${#sock} bytes, at most 107): use a shorter DIR, e.g. under /tmp"
  if [ -f "$STATE" ]; then
    log "cleaning up after the node of $(cat "$STATE") (a run that did not stop it)"
    "$0" down
  fi
  [ -e /var/lib/kubelet ] && die "/var/lib/kubelet exists: another kubelet owns this machine (remove it only if none runs)"
  images
  mkdir -p "$R"
  echo "$R" >"$STATE"
  cp "$cp/kubeconfig" "$R/admin.kubeconfig"
  "$HERE/kube-cluster.sh" node-kubeconfig "$cp" "$NODE_NAME" "$R/kubelet.kubeconfig"
  runtime_start
  kubelet_start
  wait_for 120 "node $NODE_NAME Ready" node_ready || die "node $NODE_NAME not Ready"
  KUBECTL taint node "$NODE_NAME" node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
  log "node $NODE_NAME Ready after $((SECONDS - start)) s"
}

down() {
  log "down: $R"
  stop_pid "$R/kubelet.pid"
  stop_pid "$R/plugin.pid"
  if [ -f "$R/admin.kubeconfig" ]; then KUBECTL delete node "$NODE_NAME" --wait=false >/dev/null 2>&1 || true; fi
  if [ -S "$R/containerd.sock" ] || [ -f "$R/containerd.pid" ]; then
    # the shims (containerd-shim-runc-v2 ... -address $R/containerd.sock) outlive containerd by design:
    # found by their exact command line, never by name
    local shims="" f id pid
    for f in /proc/[0-9]*/cmdline; do
      tr '\0' ' ' <"$f" 2>/dev/null | grep -q -- "containerd-shim-runc-v2 .*-address $R/containerd.sock" &&
        shims="$shims $(basename "$(dirname "$f")")"
    done
    if alive "$R/containerd.pid"; then
      for id in $(CTR tasks ls -q 2>/dev/null); do CTR tasks kill -s SIGKILL "$id" 2>/dev/null || true; done
      sleep 1
      for id in $(CTR tasks ls -q 2>/dev/null); do CTR tasks delete -f "$id" >/dev/null 2>&1 || true; done
      for id in $(CTR containers ls -q 2>/dev/null); do CTR containers rm "$id" >/dev/null 2>&1 || true; done
    fi
    stop_pid "$R/containerd.pid"
    for pid in $shims; do
      if kill -9 "$pid" 2>/dev/null; then log "killed a leftover shim ($pid)"; fi
    done
  fi
  # what a container's processes left (killed with their shims above); mounts deepest first
  local m
  for m in $(findmnt -rn -o TARGET | grep -E "^($R|/var/lib/kubelet|/run/containerd)/" | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  local c
  for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/k8s.io; do
    [ -d "$c" ] && { find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true; }
  done
  rm -rf /var/lib/kubelet /var/log/pods /var/log/containers /run/containerd
  # the run directory keeps its logs (the tests' evidence); only what would be stale is removed
  rm -rf "${R:?}/containerd" "$R/kubelet" "$R/runc" "$R/cni-ipam" "${R:?}/dev" "$R/containerd.sock" "$R/containerd.sock.ttrpc"
  if [ "$(cat "$STATE" 2>/dev/null)" = "$R" ]; then rm -f "$STATE"; fi
  log "down: done"
}

absdir() { mkdir -p "$1" && (cd "$1" && pwd); }

cmd=${1:-}
case $cmd in
  check) why=$(unsupported); [ -z "$why" ] || { echo "$why"; exit 1; } ;;
  up) [ $# -eq 3 ] || die "usage: $0 up DIR CLUSTER_DIR"; R=$(absdir "$2"); up "$(cd "$3" && pwd)" ;;
  kubelet-start) R=$(absdir "$2"); kubelet_start "${3:-}" ;;
  kubelet-stop) R=$(absdir "$2"); stop_pid "$R/kubelet.pid"; log "kubelet stopped" ;;
  kubelet-status) R=$(absdir "$2"); alive "$R/kubelet.pid" ;;
  plugin-start) [ $# -eq 3 ] || die "usage: $0 plugin-start DIR NVML_CONFIG"; R=$(absdir "$2"); plugin_start "$3" ;;
  plugin-stop) R=$(absdir "$2"); stop_pid "$R/plugin.pid"; log "device plugin stopped" ;;
  down)
    if [ $# -ge 2 ]; then R=$(absdir "$2"); elif [ -f "$STATE" ]; then R=$(cat "$STATE"); else exit 0; fi
    down ;;
  *) echo "usage: $0 check | up DIR CLUSTER_DIR | kubelet-start DIR [--no-wait] | kubelet-stop DIR | kubelet-status DIR | plugin-start DIR NVML_CONFIG | plugin-stop DIR | down [DIR]" >&2; exit 2 ;;
esac
