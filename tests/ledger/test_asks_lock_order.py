"""Asks take the project's sessions lock before any ask row, and after the run locks (a
`consumer-scope` pause's traced run among them): requests that open, supersede or close asks of
the same sessions at once queue behind each other instead of deadlocking (a deadlock would roll
one back: 503 ERR_TRANSACTION_CONFLICT to an agent that did nothing wrong). Each test holds rows
locked to make one interleaving certain."""

import time
from typing import Any

import pytest
from django.db import connection, transaction

from ledger.asks.services import ask_open as service_ask_open
from ledger.models import Ask, Run
from tenancy.models import Project
from tenancy.services import agent_key_create
from tests.conftest import ApiClient
from tests.ledger.ask_helpers import in_thread, secret_of, waiting_on_locks

pytestmark = pytest.mark.django_db(transaction=True)

SESSION = "support-chat-41"
OTHER_SESSION = "support-chat-42"
WALL = 1796040000000
CONSUMER = "consumer-scope"


def _event(
    run_id: str, seq: int, type_: str, payload: dict[str, Any], session: str | None = None, wall: int | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"runId": run_id}
    if session is not None:
        meta["sessionId"] = session
    if wall is not None:
        meta["wallClockMs"] = wall
    return {"seq": seq, "type": "agentfootprint." + type_, "payload": payload, "meta": meta}


def _pause(run_id: str, tool_call_id: str, session: str | None, wall: int | None, seq: int = 0) -> dict[str, Any]:
    question = {"toolCallId": tool_call_id, "toolName": "refund", "question": "Refund 40 EUR?"}
    return _event(run_id, seq, "pause.request", {"reason": "askHuman", "questionPayload": question}, session, wall)


def _plain(run_id: str, seq: int, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"seq": seq, "type": "agentfootprint." + type_, "payload": payload, "meta": {"runId": run_id}}


def _hold_the_next_event_of(run_pk: int) -> None:
    """Insert, uncommitted, the run's event at position 1: a batch writing it waits on this one."""
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO ledger_runevent (run_id, period, seq, position, type, body, doc, prev_hash, hash)"
            " SELECT id, period, 1, 1, 'blocker', '{}', '{}', %s, %s FROM ledger_run WHERE id = %s",
            [bytes(32), bytes(32), run_pk],
        )


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
        a = in_thread(lambda: ApiClient(secret).ingest(batch_a), answers, "a")
        waiting_on_locks(1)  # a holds the sessions' lock, waiting to supersede an earlier ask
        b = in_thread(lambda: ApiClient(secret).ingest(batch_b), answers, "b")
        waiting_on_locks(2)
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
        pause_data={"toolCallId": "c0", "toolName": "refund", "checkIn": {"evidence": {"willDo": "Refund?"}}},
        checkpoint=None, deadline=None, on_timeout="decline",
    )  # fmt: skip
    reported = {"toolName": "refund", "toolCallId": "c0", "iteration": 1, "approved": True, "by": "alice@host"}
    resumed = [_event("run-b", 0, "checkin.decision", reported, None, WALL), _pause("run-b", "c1", SESSION, WALL, 1)]
    post = {"runId": "run-b", "sessionId": SESSION, "pauseData": {"toolCallId": "c1", "toolName": "ask_user"}}
    answers: dict[str, Any] = {}

    with transaction.atomic():
        Ask.objects.select_for_update().get(pk=first.pk)
        ingest = in_thread(lambda: ApiClient(secret).ingest(resumed), answers, "ingest")
        waiting_on_locks(1)  # holds the sessions' lock, waits on the first ask's row
        posted = in_thread(lambda: ApiClient(secret).post_json("/api/v1/asks", post), answers, "post")
        waiting_on_locks(1, "advisory")  # the POST waits for the sessions' lock, before its insert
    ingest.join(30)
    posted.join(30)

    assert _status(answers["ingest"])[0] == 200, answers["ingest"]
    assert _status(answers["post"])[0] in (200, 201), answers["post"]
    assert dict(Ask.objects.values_list("tool_call_id", "status")) == {"c0": "decided", "c1": "open"}


@pytest.mark.django_db(transaction=True)
def test_a_consumer_scope_pause_locks_the_run_it_pauses_in_order_with_the_batchs_own(
    agent_client: ApiClient,
) -> None:
    # Ingestion locks a batch's runs in sorted order. A 9.62.0 pause under runId 'consumer-scope'
    # pauses the run it traces to: that run is locked with the batch's own, in the same order
    # (locked last, batch a ('consumer-scope', run-z) held run-z and waited for run-p while batch b
    # (run-p, run-z) held run-p and waited for run-z: a deadlock).
    call = {"toolCallId": "c1", "toolName": "refund"}
    first = [_plain("run-p", 0, "agent.turn_start", {}), _plain("run-p", 1, "stream.tool_start", call)]
    assert agent_client.ingest(first).status_code == 200
    second = [
        _plain(CONSUMER, 0, "composition.enter", {"kind": "Sequence"}),
        _plain("run-z", 0, "agent.turn_start", {}),
    ]
    assert agent_client.ingest(second).status_code == 200
    question = {"toolCallId": "c1", "toolName": "refund", "question": "Refund 40 EUR?"}
    batch_a = [_plain(CONSUMER, 1, "pause.request", {"reason": "askHuman", "questionPayload": question}),
               _plain("run-z", 1, "agent.turn_end", {"turnIndex": 0, "iterationCount": 1})]  # fmt: skip
    batch_b = [_plain("run-p", 2, "agent.iteration_start", {"iterIndex": 1}),
               _plain("run-z", 2, "agent.turn_start", {})]  # fmt: skip
    secret = secret_of(agent_client)
    answers: dict[str, Any] = {}

    consumer_pk = Run.objects.get(run_id=CONSUMER).pk
    with transaction.atomic():
        _hold_the_next_event_of(consumer_pk)  # batch a waits on it, after its run locks
        a = in_thread(lambda: ApiClient(secret).ingest(batch_a), answers, "a")
        waiting_on_locks(1)  # a holds consumer-scope's and run-z's locks
        b = in_thread(lambda: ApiClient(secret).ingest(batch_b), answers, "b")
        waiting_on_locks(2)  # b holds run-p's and waits for run-z's
        transaction.set_rollback(True)
    a.join(30)
    b.join(30)

    statuses = {name: getattr(answer, "status_code", repr(answer)) for name, answer in answers.items()}
    assert statuses == {"a": 200, "b": 200}, {n: getattr(r, "content", r) for n, r in answers.items()}
    assert Run.objects.get(run_id="run-p").status == Run.Status.PAUSED


@pytest.mark.django_db(transaction=True)
def test_a_consumer_scope_pause_traced_to_a_call_committed_meanwhile_deadlocks_nothing(project: Project) -> None:
    # events_ingest traces a consumer-scope pause to its run (runs_traced_from_consumer_scope)
    # before it takes any lock, and asks_from_events traces it again, after the locks, and
    # writes that run. Batch a (consumer-scope's pause of c1, run-zz) traces to nothing: no
    # unfinished c1 yet, so it locks consumer-scope and run-zz. While it waits, run-q's tool_start
    # of c1 commits, and batch b (run-q, run-zz) locks run-q and waits for run-zz. Batch a then
    # traces c1 to run-q: waiting for run-q, held by b, which waits for run-zz, held by a, would be
    # a deadlock; run-q, locked elsewhere, is left to its own events (SKIP LOCKED).
    secret = agent_key_create(project=project, scopes=["ingest"])[1]
    setup = [
        _plain(CONSUMER, 0, "composition.enter", {"kind": "Sequence"}),
        _plain("run-zz", 0, "agent.turn_start", {}),
    ]
    assert ApiClient(secret).ingest(setup).status_code == 200
    question = {"toolCallId": "c1", "toolName": "refund", "question": "Refund 40 EUR?"}
    batch_a = [
        _plain(CONSUMER, 1, "pause.request", {"reason": "askHuman", "questionPayload": question}),
        _plain("run-zz", 1, "agent.iteration_start", {"iterIndex": 0}),
    ]
    run_q = [
        _plain("run-q", 0, "agent.turn_start", {}),
        _plain("run-q", 1, "stream.tool_start", {"toolCallId": "c1", "toolName": "refund"}),
    ]
    batch_b = [_plain("run-q", 2, "agent.iteration_start", {"iterIndex": 1}), _plain("run-zz", 2, "agent.turn_end", {})]
    answers: dict[str, Any] = {}

    consumer_pk = Run.objects.get(run_id=CONSUMER).pk
    with transaction.atomic():
        _hold_the_next_event_of(consumer_pk)  # batch a waits on it, after its run locks
        a = in_thread(lambda: ApiClient(secret).ingest(batch_a), answers, "a")
        waiting_on_locks(1)  # a holds consumer-scope's and run-zz's locks
        q = in_thread(lambda: ApiClient(secret).ingest(run_q), answers, "q")
        q.join(30)
        b = in_thread(lambda: ApiClient(secret).ingest(batch_b), answers, "b")
        waiting_on_locks(2)  # b holds run-q's and waits for run-zz's
        transaction.set_rollback(True)
    a.join(30)
    b.join(30)

    statuses = {name: getattr(answer, "status_code", repr(answer)) for name, answer in answers.items()}
    assert statuses == {"a": 200, "q": 200, "b": 200}, {n: getattr(r, "content", r) for n, r in answers.items()}


@pytest.mark.django_db(transaction=True)
def test_an_agents_post_without_a_session_and_a_batch_superseding_its_ask_are_both_answered(project: Project) -> None:
    # A 9.62.0 pause: run-x's events carry no sessionId, its pause comes under 'consumer-scope'
    # naming the session. The ask (run-x, x1) is in SESSION; run-x has no session. The agent then
    # POSTs that ask (no sessionId). ask_open takes the sessions lock before any ask row even so:
    # it used to skip it without a known session, lock the ask's row, and only then ask for the
    # sessions lock, while a batch holding that lock waited on the row (a deadlock: a 503).
    secret = agent_key_create(project=project, scopes=["ingest", "asks"])[1]
    client = ApiClient(secret)
    wall = int(time.time() * 1000) - 60_000
    call = {"toolCallId": "x1", "toolName": "refund"}
    run_x = [_event("run-x", 0, "agent.turn_start", {}), _event("run-x", 1, "stream.tool_start", call)]
    assert client.ingest(run_x).status_code == 200
    assert client.ingest([_pause(CONSUMER, "x1", SESSION, wall)]).status_code == 200
    x = Ask.objects.get(tool_call_id="x1")
    assert (x.run_id, x.session_id, x.status) == ("run-x", SESSION, Ask.Status.OPEN)
    assert Run.objects.get(run_id="run-x").session_id is None
    assert client.ingest([_pause("run-a1", "z1", OTHER_SESSION, wall)]).status_code == 200
    z = Ask.objects.get(run_id="run-a1")

    # The batch's pauses are handled by run (sorted): run-a2's first, whose supersede of Z waits.
    batch = [_pause("run-a2", "z2", OTHER_SESSION, wall + 10_000), _pause("run-y", "y1", SESSION, wall + 20_000)]
    post = {"runId": "run-x", "pauseData": {**call, "question": "Refund 40 EUR?"}, "pausedAtMs": wall}
    answers: dict[str, Any] = {}
    with transaction.atomic():
        Ask.objects.select_for_update().get(pk=z.pk)  # holds the batch after it took the sessions lock
        batch_thread = in_thread(lambda: ApiClient(secret).ingest(batch), answers, "batch")
        waiting_on_locks(1)
        post_thread = in_thread(lambda: ApiClient(secret).post_json("/api/v1/asks", post), answers, "post")
        waiting_on_locks(1, "advisory")  # the POST waits for the sessions lock, holding x's row
    batch_thread.join(30)
    post_thread.join(30)

    statuses = {n: getattr(a, "status_code", repr(a)) for n, a in answers.items()}
    assert statuses == {"batch": 200, "post": 200}, {n: getattr(a, "content", a) for n, a in answers.items()}
