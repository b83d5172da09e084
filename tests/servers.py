"""The production web server, started by tests that need it as users run it."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from django.db import connection

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def database_url_for_subprocesses(name: str | None = None) -> str:
    """pytest's test database (or database `name` on the same server), as a URL for the servers and
    workers a test starts."""
    db = connection.settings_dict
    name = name or db["NAME"]
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db["HOST"] or "localhost"
    if host.startswith("/"):  # the embedded PostgreSQL listens on a socket directory
        return f"postgres://{db['USER']}{password}@/{name}?host={host}"
    return f"postgres://{db['USER']}{password}@{host}:{db['PORT'] or 5432}/{name}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Gunicorn:
    """The production web server (gunicorn.conf.py) on pytest's test database."""

    def __init__(self, log: Path, workers: int = 1, env: dict[str, str] | None = None) -> None:
        self.workers = workers
        self.env = env or {}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "DATABASE_URL": database_url_for_subprocesses(),
            "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or "test-only",
            "DJANGO_HTTPS": "0",
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "WEB_CONCURRENCY": str(self.workers),
            **self.env,
        }
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "footprint_site.wsgi", "-c", "gunicorn.conf.py"],
                cwd=PROJECT_ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the workers go down with it
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"gunicorn exited with {self.process.returncode}:\n{self.log.read_text(errors='replace')}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=5) as answer:  # noqa: S310
                    # The first worker answers while the others may still be forking (seen under load).
                    if answer.status == 200 and len(psutil.Process(self.process.pid).children()) >= self.workers:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        pytest.fail(f"gunicorn did not answer /healthz within 60 s:\n{self.log.read_text(errors='replace')}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, sig)
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        except ProcessLookupError:
            self.process.wait()
