"""A web thread's PostgreSQL connection killed in the middle of a chain write.

Ingestion and the decision's ledger event write through psycopg's own cursor (server-side binding,
binary COPY). Killed there, the request must still answer like any other database outage: 503 with
Retry-After and nothing stored, so the agent retries; never a 500, which it cannot tell from a bug.

The kill is real: the test holds the run's row lock, so the request's backend waits on it inside
the chain write, and then terminates that backend with pg_terminate_backend.
"""

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction

from ledger.audits.integrity_selectors import run_chain_verify
from ledger.models import Ask, Run, RunEvent
from tenancy.services import agent_key_create
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

RUN_ID = "run-connection-lost"


def _event(seq: int) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": "agentfootprint.agent.iteration_start",
        "payload": {"iteration": seq},
        "meta": {"runId": RUN_ID, "wallClockMs": 1796040000000 + seq},
    }


def _backend_waiting_on_the_run_lock(deadline_s: float = 20) -> int:
    deadline = time.monotonic() + deadline_s
    with connection.cursor() as cur:
        while time.monotonic() < deadline:
            cur.execute("SELECT pg_stat_clear_snapshot()")  # else a transaction sees the view as it first read it
            cur.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO ledger_run %'"
            )
            row = cur.fetchone()
            if row:
                return row[0]
            time.sleep(0.02)
    raise AssertionError("no request ever waited on the run's row lock")


def _killed_mid_write(send: Callable[[], Any]) -> Any:
    """Run `send` in a thread while this test holds the run's row lock; kill its backend once it waits."""
    answer: dict[str, Any] = {}

    def request() -> None:
        try:
            answer["response"] = send()
        except BaseException as exc:  # the test client re-raises what the server did not handle
            answer["raised"] = exc
        finally:
            connection.close()

    with transaction.atomic():
        Run.objects.select_for_update().get(run_id=RUN_ID)
        thread = threading.Thread(target=request)
        thread.start()
        pid = _backend_waiting_on_the_run_lock()
        with connection.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s)", [pid])
    thread.join(timeout=30)
    assert "raised" not in answer, f"the server did not answer: {answer.get('raised')!r}"
    return answer["response"]


def _assert_database_unavailable(response: Any) -> None:
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "2"
    assert response.json()["code"] == "ERR_DATABASE_UNAVAILABLE"


def test_ingestion_killed_mid_write_answers_503_and_stores_nothing(project):
    secret = agent_key_create(project=project, scopes=["ingest"])[1]
    agent = ApiClient(secret)
    assert agent.ingest([_event(0)]).status_code == 200

    _assert_database_unavailable(_killed_mid_write(lambda: ApiClient(secret).ingest([_event(1), _event(2)])))

    assert list(RunEvent.objects.filter(run__run_id=RUN_ID).values_list("seq", flat=True)) == [0]
    retried = agent.ingest([_event(1), _event(2)])  # the agent's retry is stored, once
    assert retried.status_code == 200, retried.content
    assert retried.json()["runs"][0]["accepted"] == 2
    assert run_chain_verify(run=Run.objects.get(run_id=RUN_ID)).valid


def test_decision_killed_mid_write_answers_503_and_leaves_the_ask_open(project):
    secret = agent_key_create(project=project, scopes=["ingest", "asks"])[1]
    agent = ApiClient(secret)
    assert agent.ingest([_event(0)]).status_code == 200
    body = {"runId": RUN_ID, "pauseData": {"toolCallId": "q1", "toolName": "ask_user", "question": "Region?"}}
    opened = agent.post_json("/api/v1/asks", body)
    assert opened.status_code == 201, opened.content
    ask_id = opened.json()["ask"]["id"]
    decision = {"by": "slack:omar", "value": "eu-west"}  # a question is answered
    integration = agent_key_create(project=project, scopes=["decide"])[1]

    response = _killed_mid_write(lambda: ApiClient(integration).post_json(f"/api/v1/asks/{ask_id}/decision", decision))
    _assert_database_unavailable(response)

    assert Ask.objects.get(pk=ask_id).status == Ask.Status.OPEN  # rolled back with the ledger event
    retried = ApiClient(integration).post_json(f"/api/v1/asks/{ask_id}/decision", decision)
    assert retried.status_code == 200, retried.content
    assert Ask.objects.get(pk=ask_id).status == Ask.Status.DECIDED
    assert run_chain_verify(run=Run.objects.get(run_id=RUN_ID)).valid
