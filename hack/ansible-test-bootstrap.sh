#!/usr/bin/env bash
# Make `ansible-test --venv` work without ci-files.testing.ansible.com: fetch the pip
# wheel ansible-test pins from PyPI (cached under ~/.cache/gpuops) and install a
# get-pip stand-in in ansible-test's cache. Usage: hack/ansible-test-bootstrap.sh <venv python>
set -euo pipefail
py=$1
here=$(cd "$(dirname "$0")" && pwd)
ver=$("$py" - <<'PY'
import re, pathlib, ansible_test
src = pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
print(re.search(r"pip='([0-9.]+)'", src.read_text()).group(1))
PY
)
cache=~/.ansible/test/cache/get_pip_${ver//./_}.py
wheels=~/.cache/gpuops/wheels
mkdir -p "$wheels" "$(dirname "$cache")"
find_wheel() { find "$wheels" -maxdepth 1 -name "pip-$ver-*.whl" -print -quit; }
whl=$(find_wheel)
# the stand-in names its wheel's path: kept only while that wheel is there (~/.cache/gpuops cleared under a kept
# ~/.ansible/test failed every sanity run with "pip is unavailable")
[ -n "$whl" ] && [ -f "$cache" ] && grep -q 'Stand-in for ansible-test' "$cache" && grep -qF "$whl" "$cache" && exit 0
if [ -z "$whl" ]; then
  "$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$wheels" "pip==$ver"
  whl=$(find_wheel)
fi
sed "s|@WHEEL@|$whl|" "$here/ansible_test_get_pip.py" > "$cache"
echo "ansible-test pip $ver bootstrap: $cache (wheel $whl)"
