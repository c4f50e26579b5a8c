#!/usr/bin/env bash
# ansible-test sanity on one ansible-core: the files git knows about (tracked, and untracked but
# not ignored) copied under build/sanity-<tag>/ansible_collections/gpuops/fleet, in a git repo of
# their own (inside this one, ansible-test would see build/ as ignored and test nothing), with
# kubernetes.core (a dependency: its client and doc fragment) beside it from the same venv.
# Tool venvs are cached under ~/.ansible/test.
#   hack/sanity.sh TAG PYTHON [ansible-test sanity options...]
#   hack/sanity.sh TAG PYTHON --differing-from NEWER_PYTHON
#       only the tests that can answer otherwise than on NEWER_PYTHON's ansible-core (hack/sanity-tests.py)
set -euo pipefail
cd "$(dirname "$0")/.."
tag=$1
python=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")  # absolute, not resolved: a venv's python is a link
shift 2
top=build/sanity-$tag
root=$top/ansible_collections/gpuops/fleet
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
rm -rf "$top"
mkdir -p "$root" "$top/ansible_collections/kubernetes"
git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$root"
cp -r "$("$python" -c 'import ansible_collections.kubernetes.core as c; print(list(c.__path__)[0])')" "$top/ansible_collections/kubernetes/core"
(cd "$root" && git init -q && git add -A)
hack/ansible-test-bootstrap.sh "$python"
core=$("$python" -c 'from ansible.release import __version__; print(__version__)')
echo "sanity: ansible-core $core on Python $pyver $*"
here=$PWD
cd "$root"
ansible_test="$(dirname "$python")/ansible-test"
if [ "${1:-}" = "--differing-from" ]; then
  # the ones this core runs for a collection (--list-tests) and that can differ from the newer one
  mapfile -t differing < <(python3 "$here/hack/sanity-tests.py" "$python" "$2")
  args=()
  while read -r name; do
    for wanted in "${differing[@]}"; do [ "$name" = "$wanted" ] && args+=(--test "$name"); done
  done < <("$ansible_test" sanity --list-tests)
  set -- "${args[@]}"
  echo "sanity: on ansible-core $core only: $*"
fi
"$ansible_test" sanity --venv --python "$pyver" --color no "$@"
