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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from django.conf import settings

from artifacts.models import Artifact, Tombstone
from artifacts.scopes import Scope
from artifacts.services import PutInput, artifact_put, store_for_project
from artifacts.tasks import artifacts_sweep
from footprint_site.celery import app
from ledger.models import ChainAnchor, IntegrityCheck, Run
from ledger.tasks import chain_anchors_write, integrity_check
from tests.conftest import fixture_events
from tests.servers import database_url_for_subprocesses

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


@dataclass
class Worker:
    queue: str
    log: Path
    process: subprocess.Popen[bytes]

    def run(self, task: Any, *args: Any) -> None:
        """Send `task` to this worker alone and wait for its "succeeded" line."""
        result = task.apply_async(args=args, queue=self.queue)
        line = f"Task {task.name}[{result.id}]"
        _wait_for(self.log, f"{line} succeeded", self.process, failure=f"{line} raised")


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Worker]:
    queue = f"smoke-{uuid.uuid4().hex}"  # our own queue: no other worker can take the task
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
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
            env={**os.environ, "DATABASE_URL": database_url_for_subprocesses()},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for(log, "ready.", process)
        assert app.conf.task_ignore_result
        yield Worker(queue, log, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_the_worker_runs_below_the_web_servers_cpu_priority(worker: Worker) -> None:
    """On a machine running both, the kernel serves ingestion first (FOOTPRINT_WORKER_NICENESS)."""
    started_at = os.nice(0)  # this process's, which the worker started with

    assert settings.FOOTPRINT_WORKER_NICENESS > 0
    assert psutil.Process(worker.process.pid).nice() == min(19, started_at + settings.FOOTPRINT_WORKER_NICENESS)


def test_celery_worker_sweeps_an_expired_artifact(worker: Worker, project) -> None:
    store = store_for_project(project=project)
    meta, _ = artifact_put(
        store=store,
        scope=Scope(None, None, "smoke"),
        spec=PutInput(kind="note", media_type="text/plain", payload={"shape": "text", "value": "bye"}),
    )
    store.clock_offset_ms = 0
    Artifact.objects.filter(ref=meta["ref"]).update(expires_at=1)  # long expired
    worker.run(artifacts_sweep)
    assert not Artifact.objects.filter(ref=meta["ref"]).exists()
    assert Tombstone.objects.filter(ref=meta["ref"], reason="ttl").count() == 1


def test_celery_worker_walks_a_queued_chain_check(worker: Worker, agent_client, project) -> None:
    events = fixture_events("d-artifacts/events.json")
    assert agent_client.ingest(events).status_code == 200
    run = Run.objects.get(project=project)
    check = IntegrityCheck.objects.create(run=run, records_total=run.chain_length)
    worker.run(integrity_check, check.pk)
    check.refresh_from_db()
    assert (check.status, check.valid, check.records_checked) == ("done", True, 451)


def test_celery_worker_anchors_chain_heads(worker: Worker, agent_client, project) -> None:
    assert agent_client.ingest(fixture_events("a-run-recording/events.json")).status_code == 200
    worker.run(chain_anchors_write)
    anchor = ChainAnchor.objects.get(project=project)
    assert anchor.number == 1
    assert anchor.run_count == 1
