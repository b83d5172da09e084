"""Several machines work as one: two Celery workers and two beats (the second started by mistake)
against one PostgreSQL and one Redis do each piece of background work exactly once, and an agent
whose web node is killed while it waits hears the decision from another node.
"""

import http.client
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from artifacts.models import Artifact, Tombstone
from artifacts.scopes import Scope
from artifacts.services import PutInput, artifact_put, store_for_project
from ledger.asks.services import ask_open
from ledger.asks.webhooks import webhook_endpoint_set
from ledger.models import Ask, ChainAnchor, WebhookDelivery
from tenancy.models import AGENT_SCOPES, AgentKey
from tenancy.services import agent_key_create
from tests.conftest import fixture_events, pay_ask_open
from tests.http_receiver import url_of, webhook_receiver
from tests.servers import PROJECT_ROOT, Gunicorn, database_url_for_subprocesses

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

OVERDUE_ASKS = 12
EXPIRED_ARTIFACTS = 30


def _celery(role: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_subprocesses(),
        # Every periodic pass due every second: many chances for two of them to meet.
        "FOOTPRINT_SWEEP_EVERY_SECONDS": "1",
        "FOOTPRINT_ANCHOR_EVERY_SECONDS": "1",
        "FOOTPRINT_SEARCH_INDEX_EVERY_SECONDS": "1",
    }
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "footprint_site", role, "--loglevel=INFO", *args],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    processes = [
        _celery("worker", tmp_path / f"worker-{n}.log", "--concurrency=2", f"--hostname=node{n}@%h") for n in (1, 2)
    ] + [_celery("beat", tmp_path / f"beat-{n}.log", f"--schedule={tmp_path / f'beat-{n}'}") for n in (1, 2)]
    try:
        yield processes
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _until(predicate: Any, timeout: float = 90) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return bool(predicate())


def test_two_workers_and_two_beats_do_each_piece_of_work_once(
    project: Any, agent_client: Any, cluster: list[subprocess.Popen[bytes]]
) -> None:
    assert agent_client.ingest(fixture_events("a-run-recording/events.json")).status_code == 200
    store = store_for_project(project=project)
    refs = [
        artifact_put(
            store=store,
            scope=Scope(None, None, "several-nodes"),
            spec=PutInput(kind="note", media_type="text/plain", payload={"shape": "text", "value": f"n{n}"}),
        )[0]["ref"]
        for n in range(EXPIRED_ARTIFACTS)
    ]
    Artifact.objects.filter(ref__in=refs).update(expires_at=1)  # long expired
    with webhook_receiver() as receiver:
        webhook_endpoint_set(project=project, url=url_of(receiver))
        asks = [
            ask_open(
                project=project,
                key=None,
                run_id=f"run-overdue-{n}",
                session_id=None,
                pause_data={"toolCallId": "t1", "toolName": "pay", "ask": {"question": f"Pay {n}?"}},
                checkpoint=None,
                deadline=timezone.now() - timedelta(seconds=1),
                on_timeout="decline",
            )[0].pk
            for n in range(OVERDUE_ASKS)
        ]

        assert _until(lambda: not Ask.objects.filter(pk__in=asks, status=Ask.Status.OPEN).exists())
        assert _until(lambda: not Artifact.objects.filter(ref__in=refs).exists())
        assert _until(lambda: len(receiver.received) >= OVERDUE_ASKS)
        assert _until(lambda: ChainAnchor.objects.filter(project=project).count() >= 2)
        time.sleep(3)  # more passes of every kind meet what is already done
        delivered_asks = [json.loads(body)["askId"] for _, _, body in receiver.received]

    assert sorted(delivered_asks) == sorted(asks)  # each decision's webhook exactly once
    assert WebhookDelivery.objects.filter(ask__in=asks, status=WebhookDelivery.Status.DELIVERED).count() == OVERDUE_ASKS
    assert [process.poll() for process in cluster] == [None] * 4
    for ref in refs:
        assert Tombstone.objects.filter(ref=ref).count() == 1
    digests = list(ChainAnchor.objects.filter(project=project).order_by("number").values_list("digest", flat=True))
    # An anchor is written only when a head changed: the same heads are never signed twice in a row.
    assert all(bytes(a) != bytes(b) for a, b in itertools.pairwise(digests))


def test_an_agent_whose_web_node_is_killed_hears_the_decision_from_another(tmp_path: Path, project: Any) -> None:
    agent_secret = agent_key_create(project=project, scopes=AGENT_SCOPES)[1]
    decider_secret = agent_key_create(project=project, scopes=[AgentKey.Scope.DECIDE])[1]
    ask = pay_ask_open(project, run_id="run-node-killed")
    doomed, survivor = (Gunicorn(tmp_path / f"node-{n}.log") for n in "ab")
    outcome: dict[str, Any] = {}

    def wait(port: int) -> tuple[int, Any]:
        client = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        client.request(
            "GET", f"/api/v1/asks/{ask.pk}/decision?wait=30", headers={"Authorization": f"Bearer {agent_secret}"}
        )
        answer = client.getresponse()
        return answer.status, json.loads(answer.read())

    def agent() -> None:
        """As the framework's client does: a wait that breaks is asked again of another node."""
        try:
            outcome["first"] = wait(doomed.port)
        except (OSError, http.client.HTTPException) as broken:
            outcome["first"] = type(broken).__name__
            outcome["second"] = wait(survivor.port)

    try:
        doomed.start()
        survivor.start()
        waiting = threading.Thread(target=agent)
        waiting.start()
        time.sleep(1)  # the wait is held by the doomed node
        doomed.stop(signal.SIGKILL)
        time.sleep(0.5)  # the agent is waiting on the survivor now
        client = http.client.HTTPConnection("127.0.0.1", survivor.port, timeout=30)
        client.request(
            "POST",
            f"/api/v1/asks/{ask.pk}/decision",
            body=json.dumps({"approved": True, "by": "ops"}),
            headers={"Authorization": f"Bearer {decider_secret}", "Content-Type": "application/json"},
        )
        decided = client.getresponse()
        decision = json.loads(decided.read())
        waiting.join(timeout=60)
    finally:
        doomed.stop(signal.SIGKILL)
        survivor.stop()

    assert decided.status == 200, decision
    assert isinstance(outcome["first"], str), "the killed node answered"
    assert outcome["second"] == (200, {"status": "decided", "decision": decision["decision"]})
