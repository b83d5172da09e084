"""Asks take the project's sessions lock before any ask row, and after the run locks: requests
that open, supersede or close asks of the same sessions at once queue behind each other instead
of deadlocking (a deadlock would roll one back: 503 ERR_TRANSACTION_CONFLICT to an agent that
did nothing wrong). Each test holds ask rows locked to make one interleaving certain."""

import threading
import time
from typing import Any

import pytest
from django.db import connection, connections, transaction

from ledger.models import Ask, Project
from ledger.services import agent_key_create
from ledger.services import ask_open as service_ask_open
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

SESSION = "support-chat-41"
OTHER_SESSION = "support-chat-42"
WALL = 1796040000000


def _event(run_id: str, seq: int, type_: str, payload: dict[str, Any], session: str | None, wall: int) -> dict:
    meta: dict[str, Any] = {"runId": run_id, "wallClockMs": wall}
    if session is not None:
        meta["sessionId"] = session
    return {"seq": seq, "type": "agentfootprint." + type_, "payload": payload, "meta": meta}


def _pause(run_id: str, tool_call_id: str, session: str, wall: int, seq: int = 0) -> dict[str, Any]:
    question = {"toolCallId": tool_call_id, "toolName": "ask_user", "question": "Region?"}
    return _event(run_id, seq, "pause.request", {"reason": "askHuman", "questionPayload": question}, session, wall)


def _waiting_on_locks(count: int, wait_event: str | None = None, deadline_s: float = 20) -> None:
    """Until `count` other backends wait on a heavyweight lock (of `wait_event` when given)."""
    deadline = time.monotonic() + deadline_s
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        " AND wait_event_type = 'Lock' AND (%s::text IS NULL OR wait_event = %s::text)"
    )
    with connection.cursor() as cur:
        while time.monotonic() < deadline:
            cur.execute("SELECT pg_stat_clear_snapshot()")
            cur.execute(query, [wait_event, wait_event])
            (waiting,) = cur.fetchone()
            if waiting >= count:
                return
            time.sleep(0.01)
    raise AssertionError(f"never saw {count} backend(s) waiting on a lock ({wait_event or 'any'})")


def _in_thread(answers: dict[str, Any], name: str, call: Any) -> threading.Thread:
    def run() -> None:
        try:
            answers[name] = call()
        except BaseException as exc:
            answers[name] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def _status(response: Any) -> tuple[int, Any]:
    if isinstance(response, BaseException):
        return 0, repr(response)
    return response.status_code, response.content[:200]


def test_two_batches_pausing_two_sessions_in_opposite_orders_are_both_stored(project: Project) -> None:
    # Batch a pauses S1 then S2, batch b S2 then S1, on runs of their own: one lock for all of
    # the project's sessions, so one waits for the other (with a lock per session, taken event by
    # event, each held its first session's and waited for the other's).
    secret = agent_key_create(project=project, scopes=["ingest"])[1]
    earlier = [_pause("run-e1", "q0", SESSION, WALL), _pause("run-e2", "q0", OTHER_SESSION, WALL)]
    assert ApiClient(secret).ingest(earlier).status_code == 200
    batch_a = [_pause("run-a1", "q1", SESSION, WALL + 10), _pause("run-a2", "q2", OTHER_SESSION, WALL + 10)]
    batch_b = [_pause("run-b1", "q3", OTHER_SESSION, WALL + 20), _pause("run-b2", "q4", SESSION, WALL + 20)]
    answers: dict[str, Any] = {}

    with transaction.atomic():
        list(Ask.objects.select_for_update().filter(run_id__in=["run-e1", "run-e2"]))
        a = _in_thread(answers, "a", lambda: ApiClient(secret).ingest(batch_a))
        _waiting_on_locks(1)  # a holds the sessions' lock, waiting to supersede an earlier ask
        b = _in_thread(answers, "b", lambda: ApiClient(secret).ingest(batch_b))
        _waiting_on_locks(2)
    a.join(30)
    b.join(30)

    assert (_status(answers["a"])[0], _status(answers["b"])[0]) == (200, 200), (answers["a"], answers["b"])
    open_asks = dict(Ask.objects.filter(status=Ask.Status.OPEN).values_list("session_id", "run_id"))
    assert open_asks == {SESSION: "run-b2", OTHER_SESSION: "run-b1"}


def test_an_agents_post_and_its_runs_events_for_the_same_pause_are_both_answered(project: Project) -> None:
    # The resumed run's batch reports the earlier ask decided, then pauses again; the agent POSTs
    # that new ask meanwhile. The POST takes the sessions' lock before its insert, so it waits for
    # the batch (had it inserted first, the batch's insert would wait on it, and it on the lock).
    secret = agent_key_create(project=project, scopes=["ingest", "asks"])[1]
    first, _ = service_ask_open(
        project=project, key=None, run_id="run-a", session_id=SESSION,
        pause_data={"toolCallId": "c0", "toolName": "ask_user", "question": "Region?"},
        checkpoint=None, deadline=None, on_timeout="decline",
    )  # fmt: skip
    reported = {"toolName": "ask_user", "toolCallId": "c0", "iteration": 1, "approved": True, "by": "alice@host"}
    resumed = [_event("run-b", 0, "checkin.decision", reported, None, WALL), _pause("run-b", "c1", SESSION, WALL, 1)]
    post = {"runId": "run-b", "sessionId": SESSION, "pauseData": {"toolCallId": "c1", "toolName": "ask_user"}}
    answers: dict[str, Any] = {}

    with transaction.atomic():
        Ask.objects.select_for_update().get(pk=first.pk)
        ingest = _in_thread(answers, "ingest", lambda: ApiClient(secret).ingest(resumed))
        _waiting_on_locks(1)  # holds the sessions' lock, waits on the first ask's row
        posted = _in_thread(answers, "post", lambda: ApiClient(secret).post_json("/api/v1/asks", post))
        _waiting_on_locks(1, "advisory")  # the POST waits for the sessions' lock, before its insert
    ingest.join(30)
    posted.join(30)

    assert _status(answers["ingest"])[0] == 200, answers["ingest"]
    assert _status(answers["post"])[0] in (200, 201), answers["post"]
    assert dict(Ask.objects.values_list("tool_call_id", "status")) == {"c0": "decided", "c1": "open"}
