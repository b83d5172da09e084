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
import subprocess
import sys
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
MAX_RESTARTS_PER_MINUTE = 5
PYTHON = sys.executable


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
    return env


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
    env = _environment()
    embedded = not env.get("DATABASE_URL")
    print(
        "Preparing the database" + (" (embedded PostgreSQL under .data/postgres)" if embedded else "") + "…",
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

    processes = {name: start(name) for name in commands}
    restarts: list[float] = []
    host = env.get("HOST", "127.0.0.1")
    announced = False  # the URL, login and key are printed once the web server answers
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    exit_code = 0
    while not stopping:
        if not announced and _answers(host, int(env["PORT"])):
            print(
                f"\nFootprint ledger is running at http://{host}:{env['PORT']}/\n{demo}Press Ctrl-C to stop it.\n",
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
                stopping, exit_code = True, 1
                break
            print(f"{name} exited with {process.returncode}; starting it again.", flush=True)
            processes[name] = start(name)
        time.sleep(0.5)

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
    if embedded:
        from footprint_site.embedded_postgres import stop as stop_postgres

        stop_postgres(Path(env["FOOTPRINT_DATA_DIR"]) / "postgres")
    print("Stopped.", flush=True)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
