# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in for ansible-test's pip bootstrap script (get-pip.py).

ansible-test --venv downloads get-pip from ci-files.testing.ansible.com, which this
workplace cannot reach. hack/ansible-test-bootstrap.sh installs this file in
ansible-test's cache with the path of pip's own wheel (from PyPI) filled in.
Like get-pip.py it runs pip from the wheel to install the packages it is given.
"""
import sys

WHEEL = "@WHEEL@"
sys.path.insert(0, WHEEL)

from pip._internal.cli.main import main  # noqa: E402  pylint: disable=wrong-import-position

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(main(["install", "--upgrade", "--force-reinstall"] + args))
