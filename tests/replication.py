"""A private PostgreSQL primary and its streaming standby, from the machine's own binaries, on free
loopback ports: what a test of several machines needs, without containers.

As root the servers run as the `postgres` user (PostgreSQL refuses to run as root), in a directory
that user owns.
"""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from tests.servers import free_port

DATABASE = "footprint"


def _bindir() -> Path:
    for candidate in (shutil.which("pg_config"), "/usr/bin/pg_config"):
        if candidate and os.access(candidate, os.X_OK):
            return Path(subprocess.check_output([candidate, "--bindir"], text=True).strip())
    pytest.fail("pg_config is missing: the replication tests need the machine's PostgreSQL server binaries")


class PostgresServer:
    def __init__(self, root: Path, name: str) -> None:
        self.data = root / name
        self.port = free_port()
        self.log = root / f"{name}.log"
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def start(self) -> None:
        _run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start",
            "-o", f"-p {self.port} -k {self.data.parent} -c listen_addresses=127.0.0.1",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        if (self.data / "postmaster.pid").exists():
            _run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def execute(self, sql: str, dbname: str = DATABASE) -> list[tuple[object, ...]]:
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=dbname, autocommit=True) as db:
            cursor = db.execute(sql)
            return cursor.fetchall() if cursor.description else []


class StreamingPair:
    """A primary with `wal_level=replica` and a hot standby following it over streaming replication."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="footprint-replication-"))
        _give_to_postgres(self.root)
        self.primary = PostgresServer(self.root, "primary")
        self.standby = PostgresServer(self.root, "standby")

    def start(self) -> None:
        _run("initdb", "-D", str(self.primary.data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
        with (self.primary.data / "postgresql.conf").open("a") as conf:
            conf.write("wal_level = replica\nmax_wal_senders = 4\nhot_standby = on\nfsync = off\n")
        self.primary.start()
        self.primary.execute(f"CREATE DATABASE {DATABASE}", dbname="postgres")
        _run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary.port), "-U", "postgres",
            "-D", str(self.standby.data), "-R", "-X", "stream", "--no-sync",
        )  # fmt: skip
        self.standby.start()

    def wait_caught_up(self, timeout: float = 30) -> None:
        (position,) = self.primary.execute("SELECT pg_current_wal_lsn()::text")[0]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            (done,) = self.standby.execute(f"SELECT pg_last_wal_replay_lsn() >= '{position}'::pg_lsn")[0]
            if done:
                return
            time.sleep(0.05)
        pytest.fail(f"the standby did not replay up to {position} within {timeout} s")

    def stop(self) -> None:
        self.standby.stop("immediate")
        self.primary.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def _run(program: str, *args: str, check: bool = True) -> None:
    command = [str(_bindir() / program), *args]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if check and result.returncode != 0:
        pytest.fail(f"{program} failed ({result.returncode}): {result.stderr or result.stdout}")


def _give_to_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")
