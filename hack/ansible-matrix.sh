#!/usr/bin/env bash
# Run the lab (site.yml twice + the installed guard) and the module tests through
# ansible-playbook on each older ansible-core that meta/runtime.yml's requires_ansible
# claims. One cached venv per PyPI `ansible` major (it pins one ansible-core and bundles
# kubernetes.core): 9 -> 2.16, 10 -> 2.17, 11 -> 2.18. The newest (12 -> 2.19) is the
# main .venv, where `make unit` and `make lab` run everything.
#   hack/ansible-matrix.sh [MAJOR ...]          (default: 9 10 11)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}/venvs
majors=("$@")
[ ${#majors[@]} -gt 0 ] || majors=(9 10 11)
summary=()
status=0
for major in "${majors[@]}"; do
  venv="$CACHE/ansible-$major"
  spec="ansible>=$major,<$((major + 1))"
  stamp="$venv/.gpuops-installed"
  want="$spec nvidia-ml-py>=12 pytest>=8"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "matrix: creating $venv ($spec)"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --upgrade pip
    # shellcheck disable=SC2086
    "$venv/bin/pip" install --quiet --disable-pip-version-check $want
    echo "$want" > "$stamp"
  fi
  core=$("$venv/bin/python" -c 'from ansible.release import __version__; print(__version__)')
  echo "matrix: ansible $major (ansible-core $core): module tests through ansible-playbook, then the lab"
  start=$SECONDS
  if "$venv/bin/python" -m pytest -p no:randomly -p no:cacheprovider -q tests/unit/plugins/modules tests/lab; then
    summary+=("ansible-core $core: passed ($((SECONDS - start)) s)")
  else
    summary+=("ansible-core $core: FAILED ($((SECONDS - start)) s)")
    status=1
  fi
done
printf 'matrix: %s\n' "${summary[@]}"
exit $status
