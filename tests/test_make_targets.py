"""The Makefile's own promises: `make test` leaves no process it started behind, pass or fail, and
Ctrl-C on `make run` (SIGINT to its process group, as a terminal sends it) stops everything it
started, the embedded PostgreSQL included, and names `make stop` for one it found running.

Each make runs with a data directory of its own (so the embedded PostgreSQL listens on a socket
there, never on 127.0.0.1:5432) and a marker in its environment, which every process started under
it inherits: those are the processes looked for afterwards, and the only ones ever killed.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from footprint_site.embedded_postgres import postmaster_running
from tests.servers import free_port

PROJECT_ROOT = Path(__file__).resolve().parent.parent
MARKER = "FOOTPRINT_MAKE_TARGET_TEST"
TIMEOUT_SECONDS = 180


class Make:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.marker = uuid.uuid4().hex
        self.env = {**os.environ, "FOOTPRINT_DATA_DIR": str(data_dir), MARKER: self.marker}
        # The embedded PostgreSQL and the file-system broker, as on a fresh machine; and nothing
        # of an outer make (its jobserver) or pytest run.
        for name in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
            self.env.pop(name, None)
        for name in [name for name in self.env if name.startswith("PYTEST_")]:
            self.env.pop(name)

    def command(self, target: str, *variables: str) -> list[str]:
        # -o compile: the suite already runs in this venv; rebuilding it under a running suite is
        # not what is tested here.
        return ["make", "--no-print-directory", "-o", "compile", target, *variables]

    def started(self) -> list[psutil.Process]:
        """Live processes started under this make: its marker in their environment, or its data
        directory on their command line."""
        found = []
        for process in psutil.process_iter():
            try:
                if process.status() == psutil.STATUS_ZOMBIE:
                    continue
                if process.environ().get(MARKER) == self.marker or str(self.data_dir) in " ".join(process.cmdline()):
                    found.append(process)
            except psutil.Error:  # gone meanwhile, or not ours to read
                continue
        return found


@pytest.fixture
def make() -> Iterator[Make]:
    # Short, under /tmp: the embedded PostgreSQL's socket path must fit in 107 bytes.
    data_dir = Path(tempfile.mkdtemp(prefix="fp-make-"))
    runner = Make(data_dir)
    try:
        yield runner
    finally:
        for process in runner.started():  # after a failure: nothing may outlive the test
            process.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


def _wait_for(output: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if text in output.read_text(errors="replace"):
            return
        if process.poll() is not None:
            pytest.fail(f"make exited with {process.returncode} before {text!r}:\n{output.read_text()[-3000:]}")
        time.sleep(0.3)
    pytest.fail(f"no {text!r} from make within {TIMEOUT_SECONDS}s:\n{output.read_text()[-3000:]}")


@pytest.mark.parametrize(
    ("tests", "passes"),
    [("tests/test_health.py", True), ("tests/test_health.py::test_no_such_test", False)],
    ids=["passing", "failing"],
)
def test_make_test_leaves_no_process_it_started(make: Make, tests: str, passes: bool) -> None:
    result = subprocess.run(
        make.command("test", f"PYTEST_ARGS=-p no:cacheprovider {tests}", "SKIP_E2E=1"),
        cwd=PROJECT_ROOT,
        env=make.env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
    )

    assert (result.returncode == 0) is passes, result.stdout[-3000:] + result.stderr[-3000:]
    # The run did start the embedded PostgreSQL (settings do, even when no test is found).
    assert (make.data_dir / "postgres" / "PG_VERSION").exists()
    assert make.started() == []
    if passes:
        assert "Browser tests skipped by request (SKIP_E2E=1)" in result.stdout


def _start_make_run(make: Make, output: Path) -> subprocess.Popen[bytes]:
    env = {**make.env, "PORT": str(free_port())}
    env.pop("DJANGO_SECRET_KEY", None)  # the stack makes and keeps its own, as on a fresh machine
    with output.open("wb") as out:
        # A process group of its own, as a terminal gives the command it runs.
        return subprocess.Popen(
            make.command("run"), cwd=PROJECT_ROOT, env=env, stdout=out, stderr=out, start_new_session=True
        )


def _ctrl_c(run: subprocess.Popen[bytes]) -> None:
    os.killpg(run.pid, signal.SIGINT)
    run.wait(timeout=60)


def test_ctrl_c_on_make_run_stops_everything_it_started_the_embedded_postgresql_included(
    make: Make, tmp_path: Path
) -> None:
    output = tmp_path / "run.log"
    run = _start_make_run(make, output)
    _wait_for(output, "is running at", run)
    commands = " ".join(" ".join(process.cmdline()) for process in make.started())
    assert all(name in commands for name in ("bin/postgres", "gunicorn", "celery", " worker", " beat"))

    _ctrl_c(run)

    assert "Stopped." in output.read_text()
    assert "make stop" not in output.read_text()
    assert make.started() == []


def test_make_run_names_make_stop_for_an_embedded_postgresql_it_found_running(make: Make, tmp_path: Path) -> None:
    """Left by manage.py, the tests or an earlier run: Ctrl-C leaves it running (something else
    may use it), and both the start and the end say how to stop it."""
    checked = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=PROJECT_ROOT,
        env={"DJANGO_SECRET_KEY": "test-only", **make.env},
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    pgdata = make.data_dir / "postgres"
    assert postmaster_running(pgdata)
    output = tmp_path / "run.log"
    run = _start_make_run(make, output)
    _wait_for(output, "`make stop` stops it", run)

    _ctrl_c(run)

    said = output.read_text()
    assert f"make run: The embedded PostgreSQL under {pgdata} was already running" in said
    assert f"Stopped. The embedded PostgreSQL under {pgdata} was already running" in said, said[-2000:]
    assert postmaster_running(pgdata)
    stopped = subprocess.run(make.command("stop"), cwd=PROJECT_ROOT, env=make.env, capture_output=True, text=True)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert make.started() == []
