"""Loaded with `-p tests.early_environment` (see pyproject): before pytest-django imports the
settings, which conftest.py files are too late for.

The artifact test hooks (/api/v1/testing/*) let the conformance battery make fresh stores, move a
store's clock and corrupt bytes. Settings mount them only when FOOTPRINT_TEST_HOOKS=1.
"""

import os
from pathlib import Path

import pytest

from footprint_site.embedded_postgres import postmaster_running
from footprint_site.embedded_postgres import stop as stop_embedded_postgres

os.environ.setdefault("FOOTPRINT_TEST_HOOKS", "1")
# The test client and live_server speak plain HTTP.
os.environ.setdefault("DJANGO_HTTPS", "0")

# The embedded PostgreSQL outlives the process that starts it (`make run` and manage.py share one),
# so the suite stops the one it started itself; one already running belongs to someone else.
_EMBEDDED_PGDATA = (
    None
    if os.environ.get("DATABASE_URL")
    else Path(os.environ.get("FOOTPRINT_DATA_DIR") or Path(__file__).resolve().parent.parent / ".data") / "postgres"
)
_EMBEDDED_WAS_RUNNING = _EMBEDDED_PGDATA is not None and postmaster_running(_EMBEDDED_PGDATA)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Last of all, after pytest-django dropped the test database; on failures and Ctrl-C too."""
    if _EMBEDDED_PGDATA is not None and not _EMBEDDED_WAS_RUNNING and postmaster_running(_EMBEDDED_PGDATA):
        stop_embedded_postgres(_EMBEDDED_PGDATA)
