"""A request PostgreSQL rolls back to break a deadlock answers 503 with Retry-After, stores
nothing, and succeeds when retried: never a 500, which an agent cannot tell from a bug.

The deadlock is real. Ingesting a run's `checkin.decision` locks the run, then the project's
sessions (`_lock_sessions`, before it touches an ask). The test holds that lock, waits for the
request to queue behind it, and then asks for the run's row: each waits on the other, and
PostgreSQL's deadlock check (deadlock_timeout after the request began to wait) rolls back the
request.
"""

import threading
from typing import Any

import pytest
from django.db import connection, transaction

from ledger.models import Ask, Run, RunEvent
from tenancy.services import agent_key_create
from tests.conftest import ApiClient
from tests.ledger.ask_helpers import b_body, open_ask, waiting_on_locks

pytestmark = pytest.mark.django_db(transaction=True)

SESSION = "support-chat-41"
RESUMED_RUN = "run-resumed"


def _event(seq: int, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": "agentfootprint." + type_,
        "payload": payload,
        "meta": {"runId": RESUMED_RUN, "wallClockMs": 1796040000000 + seq},
    }


def test_a_request_rolled_back_to_break_a_deadlock_answers_503_and_its_retry_is_stored(project) -> None:
    agent = ApiClient(agent_key_create(project=project, scopes=["ingest", "asks"])[1])
    ask = open_ask(agent, {**b_body("run-1796043009968-3"), "sessionId": SESSION})  # tool call t3
    assert agent.ingest([_event(0, "agent.turn_start", {"turnIndex": 0})]).status_code == 200
    decision = {"toolName": "transfer_funds", "toolCallId": "t3", "iteration": 1, "approved": True, "by": "alice@ops"}
    answer: dict[str, Any] = {}

    def report_the_decision() -> None:
        try:
            answer["response"] = agent.ingest([_event(1, "checkin.decision", decision)])
        finally:
            connection.close()

    with transaction.atomic():
        with connection.cursor() as cur:
            sessions_lock = f"ask-sessions:{project.pk}"
            cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [sessions_lock])
        thread = threading.Thread(target=report_the_decision)
        thread.start()
        waiting_on_locks(1, "advisory")
        Run.objects.select_for_update().get(run_id=RESUMED_RUN)  # waits until PostgreSQL rolls the request back
    thread.join(30)

    response = answer["response"]
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "2"
    assert response.json()["code"] == "ERR_TRANSACTION_CONFLICT"
    assert list(RunEvent.objects.filter(run__run_id=RESUMED_RUN).values_list("seq", flat=True)) == [0]
    assert Ask.objects.get(pk=ask["id"]).status == Ask.Status.OPEN

    retried = agent.ingest([_event(1, "checkin.decision", decision)])
    assert retried.status_code == 200, retried.content
    assert Ask.objects.get(pk=ask["id"]).status == Ask.Status.DECIDED
