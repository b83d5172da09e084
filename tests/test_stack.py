"""`make run` as a user runs it: the whole stack against a database of its own, a worker that
dies is started again, and Ctrl-C stops everything it started."""

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
from django.db import connection

from tests.servers import database_url_for_subprocesses, free_port

pytestmark = pytest.mark.celery
PROJECT_ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_SECONDS = 120


@pytest.fixture
def database_url(django_db_blocker: Any) -> Iterator[str]:
    """A database of the stack's own beside the test database (the stack migrates and seeds it)."""
    db = connection.settings_dict
    name = f"footprint_stack_{uuid.uuid4().hex[:8]}"
    server = {"host": db["HOST"] or "localhost", "port": db["PORT"] or 5432, "user": db["USER"]}
    with psycopg.connect(**server, dbname="postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield database_url_for_subprocesses(name)
    with psycopg.connect(**server, dbname="postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _wait_for(output: Path, text: str, stack: subprocess.Popen[bytes], after: int = 0) -> None:
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if text in output.read_text(errors="replace")[after:]:
            return
        if stack.poll() is not None:
            pytest.fail(f"make run exited with {stack.returncode} before {text!r}:\n{output.read_text()[-3000:]}")
        time.sleep(0.3)
    pytest.fail(f"no {text!r} from make run within {TIMEOUT_SECONDS}s:\n{output.read_text()[-3000:]}")


def _celery_worker(stack_pid: int, other_than: int | None = None) -> psutil.Process:
    """The stack's one Celery worker; waits for it, since the stack logs a restart before starting it."""
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        children = psutil.Process(stack_pid).children(recursive=False)
        workers = [p for p in children if p.pid != other_than and "worker" in p.cmdline()]
        if len(workers) == 1:
            return workers[0]
        time.sleep(0.1)
    pytest.fail(f"the stack has no single Celery worker after {TIMEOUT_SECONDS}s")


def _stack_env(database_url: str, tmp_path: Path, port: int | str) -> dict[str, str]:
    env = {**os.environ, "DATABASE_URL": database_url, "PORT": str(port), "FOOTPRINT_DATA_DIR": str(tmp_path / "data")}
    env.pop("DJANGO_SECRET_KEY", None)  # the stack makes and keeps its own, as on a fresh machine
    return env


def _start_stack(env: dict[str, str], output: Path) -> subprocess.Popen[bytes]:
    with output.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "footprint_site.stack"], cwd=PROJECT_ROOT, env=env, stdout=out, stderr=out
        )


def _kill_leftovers(stack: subprocess.Popen[bytes], started: list[psutil.Process]) -> None:
    """After a failed test: nothing it started may outlive it."""
    if stack.poll() is None:
        stack.kill()
        stack.wait()
    for process in started:
        if process.is_running():
            process.kill()


def test_make_run_restarts_a_dead_worker_and_stops_everything_on_ctrl_c(database_url: str, tmp_path: Path) -> None:
    output = tmp_path / "stack.log"
    env = _stack_env(database_url, tmp_path, free_port())
    stack = _start_stack(env, output)
    started: list[psutil.Process] = []
    try:
        _wait_for(output, "is running at", stack)
        # The banner comes once the server answers: its URL works as soon as it is printed.
        probe = http.client.HTTPConnection("127.0.0.1", int(env["PORT"]), timeout=5)
        probe.request("GET", "/healthz")
        assert probe.getresponse().status == 200
        probe.close()
        started = psutil.Process(stack.pid).children(recursive=True)
        worker = _celery_worker(stack.pid)
        seen = len(output.read_text(errors="replace"))
        os.killpg(worker.pid, signal.SIGKILL)

        _wait_for(output, "worker exited with -9; starting it again.", stack, after=seen)
        replacement = _celery_worker(stack.pid, other_than=worker.pid)
        assert replacement.is_running()
        started += psutil.Process(stack.pid).children(recursive=True)

        stack.send_signal(signal.SIGINT)
        assert stack.wait(timeout=60) == 0
        assert "Stopped." in output.read_text()
        assert not [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    finally:
        _kill_leftovers(stack, started)


def test_make_run_stops_everything_when_its_terminal_goes_away(database_url: str, tmp_path: Path) -> None:
    """SIGHUP (the terminal closed, ssh dropped) stops the services as Ctrl-C does: each runs in a
    session of its own, so nothing else would stop them."""
    output = tmp_path / "stack.log"
    stack = _start_stack(_stack_env(database_url, tmp_path, free_port()), output)
    started: list[psutil.Process] = []
    try:
        _wait_for(output, "is running at", stack)
        started = psutil.Process(stack.pid).children(recursive=True)

        stack.send_signal(signal.SIGHUP)

        assert stack.wait(timeout=60) == 0
        assert not [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    finally:
        _kill_leftovers(stack, started)


@pytest.mark.parametrize(
    ("port", "says"),
    [("taken", "is taken"), ("87x5", "PORT='87x5'"), ("70000", "PORT='70000'")],
)
def test_make_run_refuses_a_port_it_cannot_serve_before_starting_anything(tmp_path: Path, port: str, says: str) -> None:
    """A taken port once announced whatever answered there (with the demo login and key) and left
    the worker and beat running when gunicorn failed to bind; a bad PORT crashed them loose."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        if port == "taken":
            port = str(holder.getsockname()[1])
        result = subprocess.run(
            [sys.executable, "-m", "footprint_site.stack"],
            cwd=PROJECT_ROOT,
            env=_stack_env("postgres://nobody@127.0.0.1:1/none", tmp_path, port),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert says in result.stderr, result.stderr
    assert "is running at" not in result.stdout
    assert "Preparing" not in result.stdout  # nothing was started
