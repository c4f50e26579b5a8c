# -*- coding: utf-8 -*-
# the tests of module_utils/_cluster/events: a package, so that their names (test_options.py) may be those of _node's
