"""`make run`: the whole product on one machine, stopped together by Ctrl-C.

Starts (or reuses) the embedded PostgreSQL when DATABASE_URL is unset, migrates, seeds the demo,
then runs gunicorn, a Celery worker and Celery beat, and prints where to go once the web server
answers. The worker and beat log warnings and errors only (CELERY_LOG_LEVEL=INFO shows every task):
at INFO, the schedule's routine tasks print about two lines a second and push the login and key
off the screen.
"""

import contextlib
import http.client
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from footprint_site.embedded_postgres import postmaster_running
from footprint_site.embedded_postgres import stop as stop_postgres

BASE_DIR = Path(__file__).resolve().parent.parent
MAX_RESTARTS_PER_MINUTE = 5
PYTHON = sys.executable


# An embedded server this run did not start (an earlier run's, the tests', manage.py's) is left
# running at the end, since something else may use it: the user is told how to stop it.
_LEFT_RUNNING = (
    "The embedded PostgreSQL under {pgdata} was already running and keeps running after this stops: "
    "`make stop` stops it."
)


class NotStarted(Exception):
    """Why the stack cannot start, in a sentence; nothing was started."""


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    data_dir = Path(env.setdefault("FOOTPRINT_DATA_DIR", str(BASE_DIR / ".data")))
    data_dir.mkdir(parents=True, exist_ok=True)
    secret_file = data_dir / "secret-key"
    if "DJANGO_SECRET_KEY" not in env:
        if not secret_file.exists():
            secret_file.write_text(secrets.token_urlsafe(50))
            secret_file.chmod(0o600)
        env["DJANGO_SECRET_KEY"] = secret_file.read_text().strip()
    # Served over plain HTTP on this machine: Secure cookies would never come back, https redirects fail.
    env.setdefault("DJANGO_HTTPS", "0")
    env.setdefault("PORT", "8000")
    if not env["PORT"].isdigit() or not 0 < int(env["PORT"]) < 65536:
        raise NotStarted(f"PORT={env['PORT']!r}: give a TCP port number from 1 to 65535.")
    return env


def _refuse_a_taken_port(host: str, port: int) -> None:
    """Before anything starts: gunicorn would fail to bind only after the worker, beat and the
    embedded PostgreSQL were up, and the announcement would name whatever answers there."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        # As gunicorn binds: connections of a server stopped a moment ago (TIME_WAIT) take no port.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise NotStarted(f"{host}:{port} is taken ({exc.strerror}): stop what serves there, or set PORT.") from None


def _manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [PYTHON, "manage.py", *args], cwd=BASE_DIR, env=env, check=True, stdout=subprocess.PIPE, text=True
    )
    return result.stdout


def _answers(host: str, port: int) -> bool:
    """Whether the web server answers HTTP yet (any status: /healthz itself reports the database and broker)."""
    conn = http.client.HTTPConnection("127.0.0.1" if host == "0.0.0.0" else host, port, timeout=1)  # noqa: S104
    try:
        conn.request("GET", "/healthz")
        conn.getresponse()
        return True
    except OSError:
        return False
    finally:
        conn.close()


def main() -> int:
    try:
        env = _environment()
        host, port = env.get("HOST", "127.0.0.1"), int(env["PORT"])
        _refuse_a_taken_port(host, port)
    except NotStarted as exc:
        print(f"make run: {exc}", file=sys.stderr, flush=True)
        return 1
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    # From the start, and the terminal closing (SIGHUP) too: every service runs in a session of its
    # own, so whatever this process does not stop outlives it.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    pgdata = Path(env["FOOTPRINT_DATA_DIR"]) / "postgres"
    # Stopped at the end only if this run started it: another `make run` of this checkout may use it.
    embedded = not env.get("DATABASE_URL") and not postmaster_running(pgdata)
    left_running = not env.get("DATABASE_URL") and not embedded
    if left_running:
        print(f"make run: {_LEFT_RUNNING.format(pgdata=pgdata)}", flush=True)
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        return _serve(env, host, port, processes, lambda: stopping)
    except subprocess.CalledProcessError as exc:
        if stopping:  # Ctrl-C while preparing: the command it interrupted says so
            return 130
        print(f"make run: `{' '.join(map(str, exc.cmd[1:]))}` failed ({exc.returncode}); see above.", flush=True)
        return 1
    finally:
        _stop_services(processes)
        if embedded:
            stop_postgres(pgdata)
        with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
            print("Stopped." + (f" {_LEFT_RUNNING.format(pgdata=pgdata)}" if left_running else ""), flush=True)


def _serve(
    env: dict[str, str],
    host: str,
    port: int,
    processes: dict[str, subprocess.Popen[bytes]],
    stopping: Callable[[], bool],
) -> int:
    print(
        "Preparing the database"
        + (" (embedded PostgreSQL under .data/postgres)" if not env.get("DATABASE_URL") else "")
        + "…",
        flush=True,
    )
    _manage(env, "migrate", "--no-input")
    _manage(env, "collectstatic", "--no-input")
    demo = _manage(env, "seed_demo")

    celery = [PYTHON, "-m", "celery", "--quiet", "-A", "footprint_site"]  # --quiet: no start-up banner
    log_level = f"--loglevel={env.get('CELERY_LOG_LEVEL', 'WARNING')}"
    commands = {
        "web": [PYTHON, "-m", "gunicorn", "footprint_site.wsgi", "-c", "gunicorn.conf.py"],
        "worker": [*celery, "worker", log_level, "--concurrency=2"],
        "beat": [*celery, "beat", log_level],
    }

    def start(name: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(commands[name], cwd=BASE_DIR, env=env, start_new_session=True)

    for name in commands:
        if not stopping():
            processes[name] = start(name)
    restarts: list[float] = []
    announced = False  # the URL, login and key are printed once the web server answers
    while not stopping():
        if not announced and _answers(host, port):
            print(
                f"\nFootprint ledger is running at http://{host}:{port}/\n{demo}Press Ctrl-C to stop it.\n",
                flush=True,
            )
            announced = True
        for name, process in list(processes.items()):
            if process.poll() is None:
                continue
            # The worker and beat only do background work whose state is in the database (an
            # outbox, sweeps, deadlines): restarting them loses nothing. The web server is the
            # product; without it everything stops. So does a crash loop.
            restarts[:] = [t for t in restarts if time.monotonic() - t < 60] + [time.monotonic()]
            if name == "web" or len(restarts) > MAX_RESTARTS_PER_MINUTE:
                print(f"{name} exited with {process.returncode}; stopping everything.", flush=True)
                return 1
            print(f"{name} exited with {process.returncode}; starting it again.", flush=True)
            processes[name] = start(name)
        time.sleep(0.5)
    return 0


def _stop_services(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    # SIGTERM to each service's main process, which stops its own workers: signalling the whole
    # group would kill Celery's pool under it, which it logs as errors. Then whatever is left of
    # the group (a service that did not stop in time, a worker that outlived its parent) is killed.
    for process in processes.values():
        if process.poll() is None:
            process.terminate()
    for process in processes.values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=15)
        with contextlib.suppress(ProcessLookupError):  # nothing left: the usual case
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


if __name__ == "__main__":
    sys.exit(main())
