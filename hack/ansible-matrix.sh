#!/usr/bin/env bash
# Run the lab (site.yml twice + the installed guard) and the module tests through ansible-playbook
# on each ansible-core line that meta/runtime.yml's requires_ansible claims besides the main
# .venv's (ansible 12 -> 2.19, where `make unit` and `make lab-test` run everything). One cached
# venv per PyPI `ansible` major (it pins one ansible-core and bundles kubernetes.core), each on a
# Python that ansible-core supports:
#   9 -> 2.16, 10 -> 2.17, 11 -> 2.18   on $PYTHON (3.11)
#   13 -> 2.20                          on pyenv's newest 3.12 (ansible-core 2.20 needs Python >= 3.12)
#   14 -> 2.21                          on pyenv's newest 3.13
# A line whose Python is missing fails the run with the fix; it is never skipped.
# Each venv has the kubernetes client too: the inventory plugin is tested on the oldest and the newest line
# against the real API server (tests/kube).
# Every line runs the module tests through ansible-playbook and the lab's story (repair in batches,
# a second run with changed=0, the installed guard). The oldest and the newest line (and 2.19, in
# `make lab-test`) also run the play-level lab tests: a failed batch stopping the run (serial,
# max_fail_percentage) and --check on a generated fleet; the lines between them are bracketed.
# MATRIX_JOBS (default 2) lines run at once: each is one ansible-playbook process at a time.
#   hack/ansible-matrix.sh [MAJOR ...]          (default: 9 10 11 13 14)
#   hack/ansible-matrix.sh --venv MAJOR         only make sure its venv exists; print its python
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}/venvs
JOBS=${MATRIX_JOBS:-2}
venv_only=
if [ "${1:-}" = "--venv" ]; then
  venv_only=1
  shift
fi
majors=("$@")
[ ${#majors[@]} -gt 0 ] || majors=(9 10 11 13 14)

pyenv_python() {  # the newest installed pyenv CPython of a minor version, e.g. 3.12
  local root
  root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
  find "$root/versions" -maxdepth 1 -name "$1.*" 2>/dev/null | sort -V | tail -n 1 | sed 's|$|/bin/python3|'
}

python_for() {
  case $1 in
    9|10|11|12) echo "$PYTHON" ;;
    13) pyenv_python 3.12 ;;
    14) pyenv_python 3.13 ;;
    *) echo "" ;;
  esac
}

# every interpreter first: a missing one stops the run before anything is installed
for major in "${majors[@]}"; do
  py=$(python_for "$major")
  if [ -z "$py" ] || ! "$py" -c 'import sys, venv' 2>/dev/null; then
    want=$([ "$major" = 14 ] && echo 3.13 || echo 3.12)
    echo "matrix: ansible $major needs a Python its ansible-core supports, and none was found (wanted pyenv's $want: \`pyenv versions\`)." >&2
    echo "matrix: fix: pyenv install $want, or run the other lines with: hack/ansible-matrix.sh 9 10 11" >&2
    exit 1
  fi
done

ensure_venv() {  # the major's venv, created or refreshed when its stamp is not what is wanted
  local major=$1 py venv spec stamp want
  py=$(python_for "$major")
  venv="$CACHE/ansible-$major"
  spec="ansible>=$major,<$((major + 1))"
  stamp="$venv/.gpuops-installed"
  want="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])') $spec nvidia-ml-py>=12 pytest>=8 kubernetes>=29"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "matrix: creating $venv ($spec, Python ${want%% *})" >&2
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --upgrade pip >&2
    # --no-compile: the ansible package is about 40,000 files, most of them collections no test imports; the rest is
    # compiled below, once, in parallel
    # shellcheck disable=SC2086
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-compile ${want#* } >&2
    echo "$want" > "$stamp"
    rm -f "$venv/.gpuops-compiled"
  fi
  # its bytecode, written once (where PYTHONDONTWRITEBYTECODE is set, as on this rig and in CI, nothing else would:
  # every run would compile ansible-core and the kubernetes client again); a venv cached before this is compiled now
  if [ ! -f "$venv/.gpuops-compiled" ]; then
    hack/compile-venv.sh "$venv/bin/python"
    touch "$venv/.gpuops-compiled"
  fi
  echo "$venv/bin/python"
}

if [ -n "$venv_only" ]; then
  for major in "${majors[@]}"; do ensure_venv "$major"; done
  exit 0
fi

one() {
  local major=$1 python core pyver start
  python=$(ensure_venv "$major")
  core=$("$python" -c 'from ansible.release import __version__; print(__version__)')
  pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  echo "matrix: ansible $major (ansible-core $core, Python $pyver): module tests through ansible-playbook, the trust rule (facts a node returns), then the lab"
  start=$SECONDS
  # each line its own pytest temp dir and no shared cache: the lines run side by side
  local select=()
  if [ "$major" != "${majors[0]}" ] && [ "$major" != "${majors[${#majors[@]} - 1]}" ]; then
    select=(--deselect tests/lab/test_lab.py::test_a_failed_batch_stops_the_run_before_the_next_batch --deselect tests/lab/test_fleet_lab.py)
  fi
  if "$python" -m pytest -p no:randomly -p no:cacheprovider -q --basetemp="$tmp/ansible-$major" "${select[@]}" tests/unit/plugins/modules tests/unit/plugins/connection/test_k8s_node_argv.py \
      tests/unit/plugins/plugin_utils/test_node_trust.py tests/lab; then
    echo "ansible-core $core (Python $pyver): passed ($((SECONDS - start)) s)" > "$tmp/result-$major"
  else
    echo "ansible-core $core (Python $pyver): FAILED ($((SECONDS - start)) s)" > "$tmp/result-$major"
    return 1
  fi
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpuops-matrix.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0
pids=()
for major in "${majors[@]}"; do
  # a line's output is printed whole when it ends, not interleaved with another's
  ( one "$major" > "$tmp/log-$major" 2>&1 ) &
  pids+=("$!:$major")
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
done
for entry in "${pids[@]}"; do
  pid=${entry%%:*}
  major=${entry#*:}
  # the verdict is each line's result file, not wait's status: bash may already have reaped a
  # line that ended while the loop above polled `jobs`, and wait then answers 127 for a line that
  # passed (seen once: five lines passed, the stage failed)
  wait "$pid" 2>/dev/null || true
  cat "$tmp/log-$major"
done
for major in "${majors[@]}"; do
  result=$(cat "$tmp/result-$major" 2>/dev/null || echo "ansible $major: FAILED before its tests (see above)")
  echo "matrix: $result"
  case "$result" in *": passed ("*) ;; *) status=1 ;; esac
done
exit $status
