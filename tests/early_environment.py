"""Loaded with `-p tests.early_environment` (see pyproject): before pytest-django imports the
settings, which conftest.py files are too late for.

The artifact test hooks (/api/v1/testing/*) let the conformance battery make fresh stores, move a
store's clock and corrupt bytes. Settings mount them only when FOOTPRINT_TEST_HOOKS=1.
"""

import os

os.environ.setdefault("FOOTPRINT_TEST_HOOKS", "1")
# The test client and live_server speak plain HTTP.
os.environ.setdefault("DJANGO_HTTPS", "0")
