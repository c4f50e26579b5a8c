#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for the integration tests (no kubelet, no
# container runtime): Debian's etcd, and kube-apiserver, kube-controller-manager and
# kube-scheduler built once from Debian bookworm's `kubernetes` source package
# (1.20.5+really1.20.2), cached under ~/.cache/gpuops/kube-<version>/.
#
#   hack/kube-cluster.sh build        build (or reuse) the binaries (and kubelet, kubectl)
#   hack/kube-cluster.sh start DIR [--rbac]
#                                     start etcd + control plane; writes DIR/kubeconfig, DIR/env
#   hack/kube-cluster.sh node-kubeconfig DIR NODE OUT
#                                     a kubeconfig of NODE's own kubelet identity (a client certificate, CN
#                                     system:node:NODE, O system:nodes, signed by DIR's client CA) written to OUT
#   hack/kube-cluster.sh stop DIR     stop what `start DIR` started
#
# The API server runs as production clusters run it: --authorization-mode=Node,RBAC and the NodeRestriction admission
# plugin. A node's writes go through its own identity (node-kubeconfig), so the Node authorizer and NodeRestriction limit
# it as they limit a real kubelet (its own Node, status and annotations, spec.unschedulable; never its taints, another
# Node or a node-restriction.kubernetes.io/ label). The harness (admin), the controllers and the simulated kubelet's
# cluster-wide reads are in system:masters; the API user gpuops (role.kubeconfig) too, unless --rbac: then it holds only
# what RBAC objects grant it (the tests apply the collection's docs/rbac manifests).
#
# Nodes and their status come from tests/kube/simkubelet.py (the simulated kubelet), or from a
# real kubelet + containerd node joined to this control plane: hack/kube-node.sh.
set -euo pipefail
KUBE_VERSION=v1.20.2
CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}
BINDIR=$CACHE/kube-$KUBE_VERSION
# kubelet and kubectl serve the real node (hack/kube-node.sh) and the tests' own use; all five come
# from one `make WHAT=...` call, so the code generators run once
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

log() { echo "kube-cluster: $*" >&2; }
# shellcheck source=hack/lib.sh
. "$(dirname "$0")/lib.sh"

apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

missing_binaries() {
  local c
  for c in "${COMPONENTS[@]}"; do [ -x "$BINDIR/$c" ] || echo "$c"; done
}

# deb-src for the mirror apt already uses, in a sources file of our own (removed afterwards)
with_deb_src() {
  local list=/etc/apt/sources.list.d/gpuops-deb-src.sources mirror rc=0
  mirror=$(grep -hs -m1 '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' || true)
  [ -n "$mirror" ] || mirror=$(grep -hs -m1 -E '^deb (http|https)://' /etc/apt/sources.list | awk '{print $2}' || true)
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
  printf 'Types: deb-src\nURIs: %s\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$mirror" >"$list"
  apt-get update -qq || rc=$?
  [ $rc -ne 0 ] || "$@" || rc=$?
  rm -f "$list"
  apt-get update -qq || true
  return $rc
}

build() {
  local missing
  missing=$(missing_binaries)
  if [ -z "$missing" ]; then
    log "reusing ${COMPONENTS[*]} from $BINDIR"
    return 0
  fi
  # reflect2 1.0.1 (vendored) crashes on Go >= 1.18 ("nil pointer" in json-iterator map
  # decoding, any object with labels); Debian's reflect2 1.0.2 / json-iterator 1.1.12 fix it
  apt_install golang-go rsync dpkg-dev etcd-server openssl \
    golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev
  local src
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpuops-kube-src.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
  local work=$WORK
  log "fetching Debian's kubernetes source package into $work"
  (cd "$work" && with_deb_src apt-get source --download-only -qq kubernetes >/dev/null)
  (cd "$work" && dpkg-source --no-check -x ./*.dsc src >/dev/null)
  src=$work/src
  local gocode=/usr/share/gocode/src/github.com
  rm -rf "$src/vendor/github.com/modern-go/reflect2" "$src/vendor/github.com/json-iterator/go"
  cp -r "$gocode/modern-go/reflect2" "$src/vendor/github.com/modern-go/reflect2"
  cp -r "$gocode/json-iterator/go" "$src/vendor/github.com/json-iterator/go"
  mkdir -p "$src/.go/src/k8s.io"
  ln -s "$src" "$src/.go/src/k8s.io/kubernetes"
  local start=$SECONDS what=() c
  for c in $missing; do what+=("cmd/$c"); done
  log "building ${what[*]} (GOPATH mode, Go $(go env GOVERSION); 304 s for all five from cold on 2 cores)"
  (cd "$src/.go/src/k8s.io/kubernetes" &&
    GO111MODULE=off GOPROXY=off GOFLAGS=-mod=vendor CGO_ENABLED=0 GOPATH=$src/.go \
      KUBE_GIT_VERSION=$KUBE_VERSION KUBE_GIT_TREE_STATE=clean \
      make WHAT="${what[*]}" >"$work/build.log" 2>&1) || { tail -40 "$work/build.log" >&2; exit 1; }
  # only the missing ones were built; each lands whole (copy, then rename) beside those already cached
  mkdir -p "$BINDIR"
  for c in $missing; do
    cp "$src/_output/local/bin/linux/amd64/$c" "$BINDIR/.$c.tmp" 2>/dev/null ||
      cp "$src/_output/bin/$c" "$BINDIR/.$c.tmp"
    mv "$BINDIR/.$c.tmp" "$BINDIR/$c"
  done
  log "built in $((SECONDS - start)) s into $BINDIR"
}

start() {
  local dir=$1 role_group=system:masters
  # --rbac: the API user gpuops (role.kubeconfig) gets only what RBAC objects grant it (the tests apply
  # the collection's docs/rbac manifests); every other identity stays in system:masters
  if [ "${2:-}" = --rbac ]; then role_group=gpuops:fleet; fi
  build
  apt_install etcd-server curl openssl
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/pids" ]; then log "$dir already has a running cluster (stop it first)"; return 1; fi
  local etcd_port etcd_peer api_port token
  etcd_port=$(free_port); etcd_peer=$(free_port); api_port=$(free_port)
  token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  # a self-signed serving certificate for 127.0.0.1, and the service-account signing key
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=kube-apiserver \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
    -keyout "$dir/apiserver.key" -out "$dir/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
  # the client CA the nodes' kubelet identities are signed by (node-kubeconfig)
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=gpuops-test-client-ca \
    -keyout "$dir/client-ca.key" -out "$dir/client-ca.crt" 2>/dev/null
  # one identity per client, so the audit log tells the role's calls (gpuops, role.kubeconfig)
  # from the test harness's (admin), the controllers' and the simulated kubelet's
  cat >"$dir/tokens.csv" <<TOKENS
$token,admin,1,"system:masters"
$token-ctrl,system:kube-controller-manager,2,"system:masters"
$token-sim,simkubelet,3,"system:masters"
$token-role,gpuops,4,"$role_group"
TOKENS
  cat >"$dir/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
POLICY
  kubeconfig "$dir/kubeconfig" "$api_port" "$token"
  kubeconfig "$dir/controller.kubeconfig" "$api_port" "$token-ctrl"
  kubeconfig "$dir/simkubelet.kubeconfig" "$api_port" "$token-sim"
  kubeconfig "$dir/role.kubeconfig" "$api_port" "$token-role"

  : >"$dir/pids"
  etcd --name gpuops-test --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "gpuops-test=http://127.0.0.1:$etcd_peer" \
    --unsafe-no-fsync >"$dir/etcd.log" 2>&1 &
  echo $! >>"$dir/pids"
  "$BINDIR/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$etcd_port" --bind-address=127.0.0.1 --secure-port="$api_port" \
    --insecure-port=0 --tls-cert-file="$dir/apiserver.crt" --tls-private-key-file="$dir/apiserver.key" \
    --token-auth-file="$dir/tokens.csv" --client-ca-file="$dir/client-ca.crt" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --service-account-key-file="$dir/sa.key" --service-account-signing-key-file="$dir/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range=10.96.0.0/24 --endpoint-reconciler-type=none \
    --audit-policy-file="$dir/audit-policy.yaml" --audit-log-path="$dir/audit.log" --audit-log-format=json \
    --kubelet-preferred-address-types=InternalIP --allow-privileged=true \
    >"$dir/kube-apiserver.log" 2>&1 &
  echo $! >>"$dir/pids"
  wait_for 60 kube-apiserver curl -fsk -H "Authorization: Bearer $token" "https://127.0.0.1:$api_port/readyz" || { stop "$dir"; return 1; }
  "$BINDIR/kube-controller-manager" --kubeconfig="$dir/controller.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=0 --port=0 --leader-elect=false \
    --controllers=daemonset,replicaset,job,serviceaccount,serviceaccount-token,garbagecollector,namespace,disruption \
    --service-account-private-key-file="$dir/sa.key" --root-ca-file="$dir/apiserver.crt" \
    --use-service-account-credentials=false >"$dir/kube-controller-manager.log" 2>&1 &
  echo $! >>"$dir/pids"
  "$BINDIR/kube-scheduler" --kubeconfig="$dir/controller.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=0 --port=0 --leader-elect=false \
    >"$dir/kube-scheduler.log" 2>&1 &
  echo $! >>"$dir/pids"
  # the service-account controllers create "default" in kube-system; pods need it
  wait_for 60 "the default service account" curl -fsk -H "Authorization: Bearer $token" \
    "https://127.0.0.1:$api_port/api/v1/namespaces/kube-system/serviceaccounts/default" || { stop "$dir"; return 1; }
  cat >"$dir/env" <<ENV
export K8S_AUTH_KUBECONFIG=$dir/kubeconfig
export KUBECONFIG=$dir/kubeconfig
export GPUOPS_TEST_CLUSTER=$dir
ENV
  log "cluster up: https://127.0.0.1:$api_port (source $dir/env)"
}

kubeconfig() { # kubeconfig FILE PORT TOKEN
  local file=$1 ca user
  ca=$(dirname "$file")/apiserver.crt
  user=$(basename "$file" .kubeconfig)
  cat >"$file" <<KCFG
apiVersion: v1
kind: Config
clusters:
  - name: gpuops-test
    cluster:
      server: https://127.0.0.1:$2
      certificate-authority: $ca
users:
  - name: $user
    user:
      token: $3
contexts:
  - name: gpuops-test
    context: {cluster: gpuops-test, user: $user}
current-context: gpuops-test
KCFG
  chmod 600 "$file"
}

node_kubeconfig() { # node_kubeconfig DIR NODE OUT: NODE's kubelet identity, as a real kubelet's (a client certificate)
  local dir=$1 node=$2 out=$3 port
  [ -f "$dir/client-ca.key" ] || { log "$dir: no control plane with a client CA there"; return 1; }
  case "$node" in *[!a-z0-9.-]*|"") log "node-kubeconfig: $node is not a Node name (DNS-1123)"; return 1 ;; esac
  port=$(sed -n 's#.*server: https://127.0.0.1:\([0-9]*\)$#\1#p' "$dir/kubeconfig")
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/O=system:nodes/CN=system:node:$node" \
    -keyout "$out.key" -out "$out.csr" 2>/dev/null
  # a random serial of its own (no serial file: identities are minted concurrently)
  openssl x509 -req -in "$out.csr" -CA "$dir/client-ca.crt" -CAkey "$dir/client-ca.key" \
    -set_serial "0x$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" -days 2 -out "$out.crt" 2>/dev/null
  rm -f "$out.csr"
  chmod 600 "$out.key"
  cat >"$out" <<KCFG
apiVersion: v1
kind: Config
clusters:
  - name: gpuops-test
    cluster:
      server: https://127.0.0.1:$port
      certificate-authority: $dir/apiserver.crt
users:
  - name: system:node:$node
    user:
      client-certificate: $out.crt
      client-key: $out.key
contexts:
  - name: gpuops-test
    context: {cluster: gpuops-test, user: "system:node:$node"}
current-context: gpuops-test
KCFG
  chmod 600 "$out"
}

stop() {
  local dir=$1 pid
  [ -f "$dir/pids" ] || return 0
  for pid in $(tac "$dir/pids"); do kill "$pid" 2>/dev/null || true; done
  for pid in $(tac "$dir/pids"); do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -f "$dir/pids"
}

case "${1:-}" in
  # one build at a time: make test's lanes may both ask for it (a second waits, then reuses the first's)
  build) mkdir -p "$(dirname "$BINDIR")"; exec 9>"$BINDIR.lock"; flock 9; build ;;
  start) [ $# -eq 2 ] || { [ $# -eq 3 ] && [ "$3" = --rbac ]; } || { echo "usage: $0 start DIR [--rbac]" >&2; exit 2; }; start "$2" "${3:-}" ;;
  stop) [ $# -eq 2 ] || { echo "usage: $0 stop DIR" >&2; exit 2; }; stop "$2" ;;
  node-kubeconfig) [ $# -eq 4 ] || { echo "usage: $0 node-kubeconfig DIR NODE OUT" >&2; exit 2; }; node_kubeconfig "$2" "$3" "$4" ;;
  *) echo "usage: $0 build | start DIR [--rbac] | node-kubeconfig DIR NODE OUT | stop DIR" >&2; exit 2 ;;
esac
