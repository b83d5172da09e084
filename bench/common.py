"""What a benchmark needs around the app: a clean database, gunicorn served as `make run` does,
and measurements of the processes (memory, CPU) taken from outside them."""

import contextlib
import http.client
import os
import runpy
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import psutil
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PORT = int(os.environ.get("BENCH_PORT", "8765"))
DATABASE_URL = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/footprint_bench"


def reset_database() -> dict[str, str]:
    """Drop and recreate the bench database, migrate it; return the server's environment."""
    name = conninfo_to_dict(DATABASE_URL)["dbname"]
    if "bench" not in name:  # it is dropped below: never a database that may hold real runs
        sys.exit(f"DATABASE_URL names database '{name}'; the benchmark drops and recreates it, so "
                 "point DATABASE_URL at a database whose name contains 'bench'.")  # fmt: skip
    with psycopg.connect(make_conninfo(DATABASE_URL, dbname="postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    # Production settings, as `make run` serves them over plain HTTP.
    env = dict(os.environ, DATABASE_URL=DATABASE_URL, HOST="127.0.0.1", PORT=str(PORT))
    env |= {"DJANGO_DEBUG": "0", "DJANGO_HTTPS": "0"}
    env.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    print(f"Migrating database '{name}'…", flush=True)
    manage(env, "migrate", "--no-input")
    return env


def manage(env: dict[str, str], *args: str) -> str:
    # stderr captured too: create_agent_key's "store it now" notice is noise here.
    cmd = [sys.executable, "manage.py", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout


def start_gunicorn(env: dict[str, str]) -> subprocess.Popen:
    """gunicorn with gunicorn.conf.py on env's PORT, answering /healthz with all its workers forked;
    its output goes to bench/results/gunicorn.log (gunicorn-<port>.log on another port).

    All of them: the master forks its workers one after another and the first answers /healthz
    alone, so a benchmark that warmed up "each worker" then warmed one or two (seen: 1 of 4) and
    its first measured requests opened database connections (the ingestion p99 was those)."""
    workers, port = configured_workers(env), int(env["PORT"])
    with socket.socket() as probe:  # fail with a sentence, not a gunicorn traceback
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            sys.exit(f"Port {port} is in use; set BENCH_PORT to a free port.")
    # SIGTERM, like Ctrl-C, must unwind through the caller's finally: gunicorn runs in its own session.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cmd = [sys.executable, "-m", "gunicorn", "footprint_site.wsgi", "-c", "gunicorn.conf.py"]
    # Own session, so stopping it is one killpg that reaches the master and every worker.
    log_path = RESULTS / ("gunicorn.log" if port == PORT else f"gunicorn-{port}.log")
    with open(log_path, "wb") as log:
        server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {server.returncode}; see {log_path}")
            with contextlib.suppress(OSError):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200 and len(psutil.Process(server.pid).children()) >= workers:
                    return server
            time.sleep(0.25)
        raise RuntimeError(f"/healthz did not answer 200 with {workers} workers up within 60 s")
    except BaseException:
        stop(server)
        raise


def configured_workers(env: dict[str, str]) -> int:
    """The number of web workers gunicorn.conf.py gives the server started with `env` (it reads
    os.environ)."""
    with mock.patch.dict(os.environ, env):
        return int(runpy.run_path(str(ROOT / "gunicorn.conf.py"))["workers"])


def stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def checkpoint() -> None:
    # Neither phase should pay for flushing the other's dirty buffers (needs superuser; optional).
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn, contextlib.suppress(psycopg.Error):
        conn.execute("CHECKPOINT")


def database_backends() -> list[int]:
    """Backends connected to the bench database (the web workers keep theirs: CONN_MAX_AGE)."""
    with psycopg.connect(DATABASE_URL) as conn:
        query = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        return [pid for (pid,) in conn.execute(query)]


class RssSampler(threading.Thread):
    """Peak RSS of the gunicorn workers, sampled every 100 ms. Workers fork from a preloaded master
    and share pages, so the summed RSS overstates memory; the largest worker is the figure to watch."""

    def __init__(self, master_pid: int) -> None:
        super().__init__(daemon=True)
        self.master, self.done = psutil.Process(master_pid), threading.Event()
        self.peak_total = self.peak_worker = self.workers = 0

    def run(self) -> None:
        while not self.done.wait(0.1):
            rss = []
            for child in self.master.children():
                with contextlib.suppress(psutil.Error):
                    rss.append(child.memory_info().rss)
            self.workers = max(self.workers, len(rss))
            self.peak_total = max(self.peak_total, sum(rss))
            self.peak_worker = max(self.peak_worker, *rss, 0)


class CpuMeter:
    """CPU seconds spent inside the block by named groups of processes, by this client process, and
    by everything else on the machine ("other": PostgreSQL's background writers, other jobs).
    CPU per event is steadier than events/s on a shared machine; a large "other" flags noise.

    A group is a list of pids or a function listing them: listed again at the end, so processes
    born inside the block (a web thread's first database connection) count from zero."""

    def __init__(self, **groups: list[int] | Callable[[], list[int]]) -> None:
        self.groups, self.seconds = groups, {}

    def _pids(self, name: str) -> list[int]:
        group = self.groups[name]
        return group() if callable(group) else group

    def _read(self) -> dict[str, Any]:
        times = psutil.cpu_times()
        busy = times.user + times.nice + times.system + getattr(times, "irq", 0) + getattr(times, "softirq", 0)
        return {
            **{name: _cpu_by_pid(self._pids(name)) for name in self.groups},
            "client": time.process_time(),
            "all": busy,
        }

    def __enter__(self) -> "CpuMeter":
        self.start = self._read()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._read()
        spent = {name: end[name] - self.start[name] for name in ("client", "all")}
        for name in self.groups:
            before = self.start[name]
            spent[name] = sum(cpu - before.get(pid, 0.0) for pid, cpu in end[name].items())
        spent["other"] = spent.pop("all") - sum(spent.values())
        self.seconds = spent


def _cpu_by_pid(pids: list[int]) -> dict[int, float]:
    cpu = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):  # a process that is gone counts as nothing
            times = psutil.Process(pid).cpu_times()
            cpu[pid] = times.user + times.system
    return cpu


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    models = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")]
    with psycopg.connect(DATABASE_URL) as conn:
        pg = conn.execute("SELECT current_setting('server_version'), current_setting('synchronous_commit')")
        version, sync = pg.fetchone()
    return (f"{os.cpu_count()} CPUs, {models[0] if models else 'unknown CPU'}, "
            f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM; PostgreSQL {version} "
            f"(synchronous_commit={sync})")  # fmt: skip
