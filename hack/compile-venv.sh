#!/usr/bin/env bash
# Compile a venv's site-packages to bytecode once, as pip does without --no-compile, in parallel.
#   hack/compile-venv.sh VENV_PYTHON
# Where PYTHONDONTWRITEBYTECODE is set (this rig's shells and CI set it), Python never caches what it compiles, so every
# process compiled every module it imported, every time: the kubernetes client alone (core_v1_api.py, 63,000 lines) cost
# 1.4 s of CPU in each module run, and a kube test twice the CPU it needs. Python still reads the .pyc files written here.
# The collections the ansible package carries (tens of thousands of files, which no test imports) are left out, all but
# kubernetes.core. A file that does not compile (test data of another Python) is one no run imports: not an error here.
set -uo pipefail
python=$1
site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || exit 1
"$python" -m compileall -q -j 0 -x '/ansible_collections/(?!kubernetes/)' "$site" > /dev/null 2>&1
exit 0
