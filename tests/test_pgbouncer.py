"""Behind a transaction-pooling PgBouncer (DATABASE_URL) with PostgreSQL itself as DATABASE_DIRECT_URL:
two web nodes ingest and decide, an agent waiting on one node hears a decision made on the other,
and the passes that hold session advisory locks leave none behind on a pooled server session.

PgBouncer is Debian's (`.ci/run` installs it); it runs as the `postgres` user when the tests run as
root, since it refuses root.
"""

import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection

from tenancy.models import AGENT_SCOPES, AgentKey
from tenancy.services import agent_key_create
from tests.conftest import fixture_events, pay_ask_open
from tests.servers import PROJECT_ROOT, Gunicorn, database_url_for_subprocesses, free_port

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"

PASSES = """
from artifacts.services import artifacts_sweep
from ledger.asks.services import asks_apply_deadlines
from ledger.explorer.search import search_index_pending
search_index_pending(budget_seconds=1)
asks_apply_deadlines()
artifacts_sweep(time_budget_s=1)
"""


class PgBouncer:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="footprint-pgbouncer-"))
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if not os.access(PGBOUNCER, os.X_OK):
            pytest.fail(f"{PGBOUNCER} is missing: install Debian's pgbouncer package to run these tests")
        db = connection.settings_dict
        (self.root / "users.txt").write_text('"postgres" ""\n')
        (self.root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={db['HOST'] or '127.0.0.1'} port={db['PORT'] or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.root / 'users.txt'}\n"
            # Round robin over the idle server sessions: a statement rarely reaches the session the
            # one before it ran on, as under load, which shows what a session lock would leave.
            "pool_mode = transaction\ndefault_pool_size = 4\nmax_client_conn = 200\nserver_round_robin = 1\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {self.root / 'pgbouncer.log'}\npidfile = {self.root / 'pgbouncer.pid'}\n"
        )
        command = [PGBOUNCER, str(self.root / "pgbouncer.ini")]
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            for child in self.root.iterdir():
                shutil.chown(child, "postgres", "postgres")
            command = ["runuser", "-u", "postgres", "--", *command]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                psycopg.connect(self.url(db["NAME"]), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                time.sleep(0.1)
        pytest.fail(f"pgbouncer did not accept connections: {(self.root / 'pgbouncer.log').read_text()}")

    def open_server_sessions(self, database: str, count: int) -> None:
        """Make the pool hold `count` server sessions (it opens them only as clients need them)."""
        clients = [psycopg.connect(self.url(database)) for _ in range(count)]
        for client in clients:
            client.execute("SELECT 1")  # each inside its own transaction: each holds a session
        for client in clients:
            client.commit()  # a session left inside a transaction would be closed, not pooled
            client.close()

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=20)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def pgbouncer() -> Iterator[PgBouncer]:
    bouncer = PgBouncer()
    bouncer.start()
    try:
        yield bouncer
    finally:
        bouncer.stop()


def _pooled_env(pgbouncer: PgBouncer) -> dict[str, str]:
    return {
        "DATABASE_URL": pgbouncer.url(connection.settings_dict["NAME"]),
        "DATABASE_DIRECT_URL": database_url_for_subprocesses(),
    }


def _advisory_locks() -> int:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        return int(cur.fetchone()[0])


def _request(port: int, method: str, path: str, secret: str, body: Any = None, timeout: float = 60) -> Any:
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    client.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    answer = client.getresponse()
    payload = json.loads(answer.read() or b"null")
    client.close()
    return answer.status, payload


@pytest.mark.django_db(transaction=True)
def test_two_web_nodes_behind_pgbouncer_ingest_decide_and_wake_each_other(
    tmp_path: Path, project: Any, pgbouncer: PgBouncer
) -> None:
    agent_secret = agent_key_create(project=project, scopes=AGENT_SCOPES)[1]
    decider_secret = agent_key_create(project=project, scopes=[AgentKey.Scope.DECIDE])[1]
    ask = pay_ask_open(project, run_id="run-pooled-wait")
    nodes = [Gunicorn(tmp_path / f"node-{n}.log", env=_pooled_env(pgbouncer)) for n in "ab"]
    waited: dict[str, Any] = {}
    try:
        for node in nodes:
            node.start()
        events = {"events": fixture_events("a-run-recording/events.json")}
        status, receipt = _request(nodes[0].port, "POST", "/api/v1/events", agent_secret, events)
        assert status == 200, receipt

        def wait_on_the_second_node() -> None:
            waited["answer"] = _request(nodes[1].port, "GET", f"/api/v1/asks/{ask.pk}/decision?wait=30", agent_secret)

        waiter = threading.Thread(target=wait_on_the_second_node)
        waiter.start()
        time.sleep(1)  # the wait is held by the second node
        status, decided = _request(
            nodes[0].port, "POST", f"/api/v1/asks/{ask.pk}/decision", decider_secret, {"approved": True, "by": "ops"}
        )
        waiter.join(timeout=60)
    finally:
        for node in nodes:
            node.stop()

    assert status == 200, decided
    assert waited["answer"] == (200, {"status": "decided", "decision": decided["decision"]})
    with connection.cursor() as cur:
        cur.execute("SELECT chain_length FROM ledger_run WHERE run_id = %s", ["run-1796043007829-1"])
        assert cur.fetchone() == (76,)


@pytest.mark.django_db(transaction=True)
def test_passes_holding_session_locks_release_them_behind_pgbouncer(pgbouncer: PgBouncer) -> None:
    env = {**os.environ, "DJANGO_SECRET_KEY": "test-only", **_pooled_env(pgbouncer)}
    pgbouncer.open_server_sessions(connection.settings_dict["NAME"], 4)
    for _ in range(2):  # a lock left on a pooled session would make the second round skip its work
        result = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", PASSES],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert _advisory_locks() == 0
