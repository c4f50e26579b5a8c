# shellcheck shell=bash
# Shell helpers of hack/kube-cluster.sh and hack/kube-node.sh (sourced; each defines its own log()).

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...: run COMMAND until it succeeds, at most SECONDS
  local seconds=$1 deadline=$((SECONDS + $1)) desc=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then log "timed out after $seconds s waiting for $desc"; return 1; fi
    sleep 0.3
  done
}
