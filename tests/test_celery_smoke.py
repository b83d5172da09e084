"""A real Celery worker sweeps an expired artifact, taking the task from the configured broker
(Redis in CI, else the file system) and writing to pytest's own test database.

Results are ignored (no result backend), so the proofs are the worker's "succeeded" log line for
our task id and the tombstone it wrote.
"""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.db import connection

from artifacts.models import Artifact, Tombstone
from artifacts.scopes import Scope
from artifacts.services import PutInput, artifact_put, store_for_project
from artifacts.tasks import artifacts_sweep
from footprint_site.celery import app

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

PROJECT_ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_SECONDS = 60


def _wait_for(log: Path, text: str, worker: subprocess.Popen[bytes], failure: str | None = None) -> str:
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        output = log.read_text(errors="replace")
        if text in output:
            return output
        if failure and failure in output:
            pytest.fail(f"the worker reported {failure!r}:\n{output}")
        if worker.poll() is not None:
            pytest.fail(f"the worker exited with {worker.returncode} before {text!r}:\n{output}")
        time.sleep(0.2)
    pytest.fail(f"no {text!r} from the worker within {TIMEOUT_SECONDS}s:\n{log.read_text(errors='replace')}")


def _test_database_url() -> str:
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db["HOST"] or "localhost"
    if host.startswith("/"):  # the embedded PostgreSQL listens on a socket directory
        return f"postgres://{db['USER']}{password}@/{db['NAME']}?host={host}"
    return f"postgres://{db['USER']}{password}@{host}:{db['PORT'] or 5432}/{db['NAME']}"


def test_celery_worker_sweeps_an_expired_artifact(tmp_path: Path, project) -> None:
    store = store_for_project(project=project)
    meta, _ = artifact_put(
        store=store,
        scope=Scope(None, None, "smoke"),
        spec=PutInput(kind="note", media_type="text/plain", payload={"shape": "text", "value": "bye"}),
    )
    store.clock_offset_ms = 0
    Artifact.objects.filter(ref=meta["ref"]).update(expires_at=1)  # long expired
    queue = f"smoke-{uuid.uuid4().hex}"  # our own queue: no other worker can take the task
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "footprint_site",
                "worker",
                "--pool=solo",
                "--concurrency=1",
                "--loglevel=INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-Q",
                queue,
                "--hostname",
                f"{queue}@%h",
            ],
            cwd=PROJECT_ROOT,
            env={**os.environ, "DATABASE_URL": _test_database_url()},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for(log, "ready.", worker)
        assert app.conf.task_ignore_result
        result = artifacts_sweep.apply_async(queue=queue)
        task = f"Task artifacts.tasks.artifacts_sweep[{result.id}]"
        _wait_for(log, f"{task} succeeded", worker, failure=f"{task} raised")
        assert not Artifact.objects.filter(ref=meta["ref"]).exists()
        assert Tombstone.objects.filter(ref=meta["ref"], reason="ttl").count() == 1
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
