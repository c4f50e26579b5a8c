"""Which ansible-test sanity tests can give another answer on an older ansible-core than on the newest.

`make sanity` runs every test on the newest core (its rules are the newest, and that is where a
collection meets its users' lint) and, on the older core, only the tests printed here: those whose
own code or pinned tool versions differ between the two ansible-test installations, plus those
that run the core or the Python themselves (their answer depends on both whatever their own code
says). A test identical in both is not run twice.

    python3 hack/sanity-tests.py OLD_PYTHON NEW_PYTHON      -> the test names, one per line
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

# run ansible-core's own code (doc parsing, the module loader, the runtime schema) or the
# interpreter (compile, import, pylint's inference): they can differ whatever their files say
USE_THE_CORE = ("ansible-doc", "compile", "import", "validate-modules", "pylint", "runtime-metadata", "action-plugin-docs")


def root(python):
    out = subprocess.run([python, "-c", "import ansible_test, os; print(os.path.dirname(ansible_test.__file__))"],
                         capture_output=True, text=True, check=True).stdout
    return out.strip()


def tests(base):
    names = set()
    commands = os.path.join(base, "_internal", "commands", "sanity")
    names.update(n[:-3].replace("_", "-") for n in os.listdir(commands) if n.endswith(".py") and n != "__init__.py")
    smell = os.path.join(base, "_util", "controller", "sanity", "code-smell")
    names.update(n[:-3] for n in os.listdir(smell) if n.endswith(".py"))
    return names


def digest(base, name):
    """The test's own code and pinned requirements, whatever of them exists."""
    paths = [
        os.path.join(base, "_internal", "commands", "sanity", name.replace("-", "_") + ".py"),
        os.path.join(base, "_util", "controller", "sanity", "code-smell", name + ".py"),
        os.path.join(base, "_util", "controller", "sanity", "code-smell", name + ".json"),
        os.path.join(base, "_data", "requirements", "sanity.%s.txt" % name),
        os.path.join(base, "_data", "requirements", "sanity.%s.in" % name),
    ]
    tree = os.path.join(base, "_util", "controller", "sanity", name)
    for top, dirs, files in os.walk(tree):
        dirs.sort()
        paths.extend(os.path.join(top, f) for f in sorted(files) if not f.endswith(".pyc"))
    h = hashlib.sha256()
    for path in paths:
        if os.path.isfile(path):
            h.update(os.path.relpath(path, base).encode())
            with open(path, "rb") as handle:
                h.update(handle.read())
    return h.hexdigest()


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    old, new = root(argv[1]), root(argv[2])
    names = sorted(tests(old))
    differ = [n for n in names if n in USE_THE_CORE or n not in tests(new) or digest(old, n) != digest(new, n)]
    same = [n for n in names if n not in differ]
    sys.stderr.write("sanity on the older core: %d of %d tests can differ (%s); the same in both, run once on the newest: %s\n"
                     % (len(differ), len(names), ", ".join(differ), json.dumps(same)))
    for name in differ:
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
