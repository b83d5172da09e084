"""The lock files: requirements.lock meets every requirement the project reaches, extras included,
and requirements-runtime.lock (all the image installs) is its part the server runs on."""

import runpy
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCKS = runpy.run_path(str(ROOT / ".ci" / "runtime_lock.py"))


def test_every_pinned_version_meets_what_its_dependents_ask_extras_included() -> None:
    # pip check reads requirements without extras: it passed while the lock pinned redis 8.1.0
    # and kombu[redis] (through celery[redis]) asks for redis < 6.5.
    unmet = [
        f"{needed_by} needs {requirement}, the lock has {version(requirement.name)}"
        for needed_by, requirement in LOCKS["requirements_reached"](frozenset({"dev"}))
        if not requirement.specifier.contains(version(requirement.name), prereleases=True)
    ]
    assert unmet == []


def test_the_runtime_lock_is_the_part_of_the_lock_the_server_runs_on() -> None:
    written = (ROOT / "requirements-runtime.lock").read_text()
    assert written == LOCKS["runtime_lock"](), "run `make lock` (or .ci/runtime_lock.py) to write it again"
    names = {line.split("==")[0].lower() for line in written.splitlines() if not line.startswith("#")}
    assert {"django", "celery", "redis", "psycopg", "gunicorn"} <= names
    assert not names & {"pytest", "playwright", "mypy", "ruff", "schemathesis"}
