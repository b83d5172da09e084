"""Ask services: opening (idempotent, from the API or from ingested events), the one decision, the
chain event and NOTIFY it leaves behind, deadlines, and the signed webhook delivery."""

import hashlib
import hmac
import json
from datetime import timedelta
from typing import Any

import orjson
import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone

from ledger.asks.services import ask_decide, ask_open, asks_apply_deadlines
from ledger.asks.webhooks import NO_ANSWER, WebhookFailed, webhook_deliver, webhooks_send_due
from ledger.exceptions import AskAlreadyDecided, AskInvalid, AskNotFound
from ledger.models import Ask, Run, RunEvent, WebhookAttempt, WebhookDelivery, WebhookEndpoint
from tenancy.models import AgentKey, Project
from tenancy.services import agent_key_create
from tests.conftest import fixture_events, load_fixture, numbered_per_run
from tests.http_receiver import url_of, webhook_receiver
from tests.ledger.ask_helpers import b_body, open_ask, plain_body

pytestmark = pytest.mark.django_db

B_PAUSE = load_fixture("b-middleware/ask-pause.json")["pauseOutcome"]
B_CHECKPOINT = load_fixture("b-middleware/ask-checkpoint.json")
C_PAUSE = load_fixture("c-checkin/checkin-pause.json")["pauseOutcome"]
C_CHECKPOINT = load_fixture("c-checkin/checkin-checkpoint.json")
B_RUN = "run-1796043009968-3"  # the run whose tool call t3 paused (tests/data/b-middleware/events-declined.json)
C_RUN = "run-1796043011151-1"  # the run whose tool call c3 paused (tests/data/c-checkin/events-approved.json)
DECISION_EVENT = "ledger.human_decision"


def _capture(name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A fixture capture numbered per run, split where the resume starts (before, after)."""
    raw = load_fixture(name)
    events = numbered_per_run(raw["events"])
    cut = raw["resumeStartsAtSeq"]  # the capture's seq is the 0-based index of the event
    return events[:cut], events[cut:]


def _ingest(agent_client: Any, events: list[dict[str, Any]]) -> None:
    response = agent_client.ingest(events)
    assert response.status_code == 200, response.content


def _key(project: Project, scopes: list[str] | None = None) -> AgentKey:
    return agent_key_create(project=project, scopes=scopes or ["asks"])[0]


def _open(project: Project, pause_data: dict[str, Any], *, run_id: str = "run-1", **kwargs: Any) -> tuple[Ask, bool]:
    arguments: dict[str, Any] = {
        "key": None,
        "session_id": None,
        "checkpoint": None,
        "deadline": None,
        "on_timeout": "decline",
        **kwargs,
    }
    return ask_open(project=project, run_id=run_id, pause_data=pause_data, **arguments)


def _plain(tool_call_id: str = "q1", **data: Any) -> dict[str, Any]:
    return {"toolCallId": tool_call_id, "toolName": "ask_user", "question": "Which region?", **data}


def _chain_is_valid(agent_client: Any, run_id: str) -> dict[str, Any]:
    response = agent_client.get(f"/api/v1/runs/{run_id}/verify")
    assert response.status_code == 200, response.content
    return response.json()


# Opening: idempotency and the checkpoint's owner


def test_ask_open_same_run_and_tool_call_is_the_same_ask(project: Project) -> None:
    first, created = _open(project, B_PAUSE["pauseData"], run_id=B_RUN)
    again, created_again = _open(project, B_PAUSE["pauseData"], run_id=B_RUN)

    assert (created, created_again) == (True, False)
    assert again.pk == first.pk
    assert Ask.objects.count() == 1


def test_ask_open_same_tool_call_in_another_run_is_another_ask(project: Project) -> None:
    first, _ = _open(project, B_PAUSE["pauseData"], run_id="run-x")
    second, created = _open(project, B_PAUSE["pauseData"], run_id="run-y")

    assert created is True
    assert second.pk != first.pk


def test_ask_open_checkpoint_is_bound_to_the_posting_key(project: Project) -> None:
    key = _key(project)
    checkpoint = orjson.dumps(B_CHECKPOINT)

    ask, _ = _open(project, B_PAUSE["pauseData"], run_id=B_RUN, key=key, checkpoint=checkpoint)

    ask.refresh_from_db()
    assert ask.posted_by_key_id == key.pk
    assert orjson.loads(bytes(ask.checkpoint)) == B_CHECKPOINT


def test_ask_open_later_checkpoint_is_stored_and_bound_to_that_key(project: Project) -> None:
    first_key, second_key, third_key = _key(project), _key(project), _key(project)
    ask, _ = _open(project, B_PAUSE["pauseData"], run_id=B_RUN, key=first_key)
    ask.refresh_from_db()
    assert ask.checkpoint is None
    assert ask.posted_by_key_id is None  # no checkpoint, so nobody owns one

    again, created = _open(project, B_PAUSE["pauseData"], run_id=B_RUN, key=second_key, checkpoint=b'{"n":2}')
    late, _ = _open(project, B_PAUSE["pauseData"], run_id=B_RUN, key=third_key, checkpoint=b'{"n":3}')

    assert created is False
    assert again.pk == late.pk == ask.pk
    ask.refresh_from_db()
    assert bytes(ask.checkpoint) == b'{"n":2}'  # the first checkpoint stays; a later one cannot replace it
    assert ask.posted_by_key_id == second_key.pk


def test_ask_open_repost_with_checkpoint_adds_a_missing_deadline(project: Project) -> None:
    deadline = timezone.now() + timedelta(hours=1)
    _open(project, B_PAUSE["pauseData"], run_id=B_RUN)

    ask, _ = _open(
        project,
        B_PAUSE["pauseData"],
        run_id=B_RUN,
        key=_key(project),
        checkpoint=b"{}",
        deadline=deadline,
        on_timeout="approve",
    )

    ask.refresh_from_db()
    assert ask.deadline == deadline
    assert ask.on_timeout == Ask.OnTimeout.APPROVE


@pytest.mark.parametrize(
    ("pause_data", "on_timeout", "message"),
    [
        ({"toolName": "x"}, "decline", "toolCallId"),
        ({"toolCallId": "", "toolName": "x"}, "decline", "toolCallId"),
        ("t3", "decline", "pauseData"),
        (None, "decline", "pauseData"),
        ({"toolCallId": "t3"}, "later", "onTimeout"),
    ],
)
def test_ask_open_refuses_bad_input(project: Project, pause_data: Any, on_timeout: str, message: str) -> None:
    with pytest.raises(AskInvalid, match=message):
        _open(project, pause_data, on_timeout=on_timeout)
    assert not Ask.objects.exists()


# Kinds, read from pauseData the way the framework's pauseDemandsDecision does


def test_ask_open_middleware_ask_kind(project: Project) -> None:
    ask, _ = _open(project, B_PAUSE["pauseData"], run_id=B_RUN)

    ask.refresh_from_db()
    assert ask.kind == Ask.Kind.ASK
    assert ask.tool_call_id == "t3"
    assert ask.tool_name == "transfer_funds"
    assert ask.question == "Approve a transfer of 2500 EUR to ACC-900?"
    assert ask.middleware == "four-eyes"
    assert ask.detail == B_PAUSE["ask"]["detail"]
    assert ask.check_in is None
    assert ask.pause_data == B_PAUSE["pauseData"]


def test_ask_open_check_in_kind(project: Project) -> None:
    ask, _ = _open(project, C_PAUSE["pauseData"], run_id=C_RUN)

    ask.refresh_from_db()
    assert ask.kind == Ask.Kind.CHECK_IN
    assert ask.tool_call_id == "c3"
    assert ask.tool_name == "post_to_channel"
    assert ask.check_in == C_PAUSE["checkIn"]
    assert ask.question == C_PAUSE["checkIn"]["evidence"]["willDo"]
    assert ask.middleware is None


def test_ask_open_plain_kind_keeps_the_data_as_detail(project: Project) -> None:
    pause_data = _plain(options=["eu-west-1", "us-east-1"])

    ask, _ = _open(project, pause_data)

    ask.refresh_from_db()
    assert ask.kind == Ask.Kind.PLAIN
    assert ask.question == "Which region?"
    assert ask.detail == {"question": "Which region?", "options": ["eu-west-1", "us-east-1"]}


def test_ask_open_plain_kind_with_primitive_data(project: Project) -> None:
    # askHuman("free text") pauses with {toolCallId, toolName, data} (events-ledger spec §2.1)
    ask, _ = _open(project, {"toolCallId": "q2", "toolName": "ask_user", "data": "Shall I go on?"})

    ask.refresh_from_db()
    assert ask.kind == Ask.Kind.PLAIN
    assert ask.question is None
    assert ask.detail == {"data": "Shall I go on?"}


def test_ask_open_credential_kind(project: Project) -> None:
    pause_data = {
        "toolCallId": "k1",
        "toolName": "list_repos",
        "question": "Authorize access to 'github' so 'list_repos' can run.",
        "authorization": {
            "service": "github",
            "authorizationUrl": "[withheld: consent URL is caller-only]",
            "sessionId": "s-1",
        },
    }

    ask, _ = _open(project, pause_data)

    ask.refresh_from_db()
    assert ask.kind == Ask.Kind.CREDENTIAL
    assert ask.question == "Authorize access to 'github' so 'list_repos' can run."


def test_ask_open_check_in_wins_over_ask_and_odd_types_are_dropped(project: Project) -> None:
    pause_data = {
        "toolCallId": "z1",
        "toolName": 7,
        "ask": {"question": ["not", "text"], "middleware": {"not": "text"}, "component": "not-an-object"},
    }

    ask, _ = _open(project, pause_data)

    ask.refresh_from_db()
    assert ask.kind == Ask.Kind.ASK
    assert (ask.question, ask.middleware, ask.component, ask.tool_name) == (None, None, None, None)


# Asks opened from ingested events


@pytest.mark.parametrize("batches", ["whole", "pause-then-resume"])
def test_asks_from_events_consumer_scope_pause_is_attributed_to_the_paused_run(
    agent_client: Any, project: Project, batches: str
) -> None:
    before, after = _capture("b-middleware/events-declined.json")
    pause_request = next(e for e in before if e["type"] == "agentfootprint.pause.request")
    assert pause_request["meta"]["runId"] == "consumer-scope"  # 9.62.0 emits pauses under this runId

    if batches == "whole":
        _ingest(agent_client, before + after)
    else:
        _ingest(agent_client, before)
        _ingest(agent_client, after)

    ask = Ask.objects.get()
    assert ask.project == project
    assert ask.run_id == B_RUN
    assert ask.tool_call_id == "t3"
    assert ask.kind == Ask.Kind.ASK
    assert ask.question == "Approve a transfer of 2500 EUR to ACC-900?"
    assert ask.middleware == "four-eyes"
    assert ask.checkpoint is None
    assert not Ask.objects.filter(run_id="consumer-scope").exists()


def test_asks_from_events_agent_repost_adds_checkpoint_to_the_event_ask(agent_client: Any, project: Project) -> None:
    before, _ = _capture("b-middleware/events-declined.json")
    _ingest(agent_client, before)
    from_events = Ask.objects.get()
    key = _key(project)

    ask, created = _open(project, B_PAUSE["pauseData"], run_id=B_RUN, key=key, checkpoint=orjson.dumps(B_CHECKPOINT))

    assert created is False
    assert ask.pk == from_events.pk
    ask.refresh_from_db()
    assert ask.posted_by_key_id == key.pk
    assert orjson.loads(bytes(ask.checkpoint)) == B_CHECKPOINT


def test_asks_from_events_check_in_request_opens_a_check_in_ask(agent_client: Any) -> None:
    before, _ = _capture("c-checkin/events-approved.json")
    request = next(e for e in before if e["type"] == "agentfootprint.checkin.request")

    _ingest(agent_client, before)

    ask = Ask.objects.get()
    assert ask.run_id == C_RUN
    assert ask.tool_call_id == "c3"
    assert ask.tool_name == "post_to_channel"
    assert ask.kind == Ask.Kind.CHECK_IN
    assert ask.status == Ask.Status.OPEN
    assert ask.check_in == request["payload"]["request"]
    evidence = ask.check_in["evidence"]
    assert {"willDo", "read", "drivers", "trail"} <= evidence.keys()
    assert ask.question == evidence["willDo"]


def test_asks_from_events_check_in_ask_keeps_the_session_of_its_request(agent_client: Any) -> None:
    # The checkin.request names the session; the consumer-scope pause.request of the same batch does not.
    before, _ = _capture("c-checkin/events-approved.json")
    request = next(e for e in before if e["type"] == "agentfootprint.checkin.request")
    assert request["meta"]["sessionId"] == "fixture-session-c-approved"

    _ingest(agent_client, before)

    assert Ask.objects.get().session_id == "fixture-session-c-approved"


@pytest.mark.parametrize("batches", ["whole", "pause-then-resume"])
def test_asks_from_events_check_in_decision_closes_the_ask_as_decided_by_the_run(
    agent_client: Any, batches: str
) -> None:
    before, after = _capture("c-checkin/events-approved.json")
    if batches == "whole":
        _ingest(agent_client, before + after)
    else:
        _ingest(agent_client, before)
        assert Ask.objects.get().status == Ask.Status.OPEN
        _ingest(agent_client, after)

    ask = Ask.objects.get()
    assert ask.run_id == C_RUN
    assert ask.status == Ask.Status.DECIDED
    assert ask.decided_via == Ask.Via.RUN
    assert ask.approved is True
    assert ask.decided_by_label == "alice@ops"
    assert ask.decided_by is None
    assert ask.note == "looks right"
    assert ask.decided_at is not None


def test_asks_from_events_check_in_decision_never_decides_another_runs_ask(agent_client: Any) -> None:
    # Two sessions paused on the same scripted tool call id c3 (the approved and the declined capture).
    # The approved run's resume reports "approved by alice@ops" under a fresh runId and no session:
    # nothing ties it to the declined session's ask, so that ask must stay open for its own approver.
    approved, declined = load_fixture("c-checkin/events-approved.json"), load_fixture("c-checkin/events-declined.json")
    cut_a, cut_d = approved["resumeStartsAtSeq"], declined["resumeStartsAtSeq"]
    # One agent process serves both sessions, numbering each runId (consumer-scope too) as it goes.
    stream = numbered_per_run(approved["events"][:cut_a] + declined["events"][:cut_d] + approved["events"][cut_a:])
    approved_before, declined_before, approved_after = (
        stream[:cut_a],
        stream[cut_a : cut_a + cut_d],
        stream[cut_a + cut_d :],
    )
    _ingest(agent_client, approved_before)
    _ingest(agent_client, declined_before)
    declined_run = declined_before[0]["meta"]["runId"]
    assert Ask.objects.filter(tool_call_id="c3", status=Ask.Status.OPEN).count() == 2

    _ingest(agent_client, approved_after)

    other = Ask.objects.get(run_id=declined_run, tool_call_id="c3")
    assert other.status == Ask.Status.OPEN, f"{declined_run}'s ask was decided by {other.decided_by_label}"


def test_asks_from_events_reingest_creates_nothing_new(agent_client: Any) -> None:
    before, _ = _capture("c-checkin/events-approved.json")
    _ingest(agent_client, before)
    _ingest(agent_client, before)

    assert Ask.objects.count() == 1


def test_asks_from_events_stay_in_their_project(agent_client: Any, other_agent_client: Any, other_project: Any) -> None:
    before, _ = _capture("c-checkin/events-approved.json")
    _ingest(agent_client, before)
    _ingest(other_agent_client, before)

    assert Ask.objects.count() == 2
    assert Ask.objects.filter(project=other_project, run_id=C_RUN, tool_call_id="c3").count() == 1


# The one decision


def test_ask_decide_records_the_decision(project: Project, django_user_model: Any) -> None:
    person = django_user_model.objects.create_user(username="dana")
    ask, _ = _open(project, B_PAUSE["pauseData"], run_id=B_RUN)

    decided = ask_decide(
        ask_id=ask.pk, approved=True, via=Ask.Via.PAGE, by_label="dana", user=person, note="contract SC-88 verified"
    )

    decided.refresh_from_db()
    assert decided.status == Ask.Status.DECIDED
    assert decided.approved is True
    assert decided.decided_by_label == "dana"
    assert decided.decided_by == person
    assert decided.decided_via == Ask.Via.PAGE
    assert decided.decided_at is not None
    assert decided.decision() == {
        "approved": True,
        "by": "dana",
        "at": decided.at_ms,
        "note": "contract SC-88 verified",
    }


def test_ask_decide_twice_raises_naming_who_decided_first(project: Project) -> None:
    ask, _ = _open(project, B_PAUSE["pauseData"], run_id=B_RUN)
    ask_decide(ask_id=ask.pk, approved=False, via=Ask.Via.API, by_label="omar@treasury", note="no PO on file")

    with pytest.raises(AskAlreadyDecided) as raised:
        ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.API, by_label="mallory")

    assert "omar@treasury" in raised.value.message
    assert "declined" in raised.value.message
    assert raised.value.details["decision"]["by"] == "omar@treasury"
    assert raised.value.details["decision"]["approved"] is False
    ask.refresh_from_db()
    assert (ask.decided_by_label, ask.approved, ask.note) == ("omar@treasury", False, "no PO on file")
    assert RunEvent.objects.filter(type=DECISION_EVENT).count() == 1


def test_ask_decide_unknown_ask_raises_not_found(db: None) -> None:
    with pytest.raises(AskNotFound):
        ask_decide(ask_id=987654, approved=True, via=Ask.Via.API, by_label="x")


def test_ask_decide_plain_ask_answer_is_the_value(project: Project) -> None:
    ask, _ = _open(project, _plain())

    decided = ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.API, by_label="bot", value={"region": "eu-west-1"})

    decision = decided.decision()
    assert decision is not None
    assert decision["answer"] == {"region": "eu-west-1"}
    assert "value" not in decision


def test_ask_decide_appends_a_server_event_to_the_run_chain(agent_client: Any, project: Project) -> None:
    before, after = _capture("b-middleware/events-declined.json")
    _ingest(agent_client, before)
    ask = Ask.objects.get()
    run = Run.objects.get(project=project, run_id=B_RUN)
    length_before = run.chain_length

    ask_decide(ask_id=ask.pk, approved=False, via=Ask.Via.API, by_label="omar@treasury", note="no PO on file")

    event = RunEvent.objects.get(type=DECISION_EVENT)
    assert event.run_id == run.pk
    assert event.seq is None  # server-authored: never collides with the agent's numbers
    assert event.position == length_before
    assert event.tool_call_id == "t3"
    doc = json.loads(event.body)
    assert doc["type"] == DECISION_EVENT
    assert doc["meta"]["runId"] == B_RUN
    assert doc["payload"]["askId"] == ask.pk
    assert doc["payload"]["toolCallId"] == "t3"
    assert doc["payload"]["via"] == "api"
    ask.refresh_from_db()
    assert doc["payload"]["decision"] == ask.decision()
    run.refresh_from_db()
    assert run.chain_length == length_before + 1
    assert run.head_hash == event.hash
    assert _chain_is_valid(agent_client, B_RUN) == {"valid": True, "recordsChecked": length_before + 1}

    # the agent's later events chain after the server's one and the run still verifies
    _ingest(agent_client, after)
    assert _chain_is_valid(agent_client, B_RUN)["valid"] is True


def test_ask_decide_without_any_run_events_starts_the_run_chain(agent_client: Any, project: Project) -> None:
    ask, _ = _open(project, _plain(), run_id="run-never-reported")

    ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.API, by_label="bot", value="eu-west-1")

    run = Run.objects.get(project=project, run_id="run-never-reported")
    assert run.chain_length == 1
    assert _chain_is_valid(agent_client, "run-never-reported") == {"valid": True, "recordsChecked": 1}


@pytest.mark.django_db(transaction=True)
def test_ask_decide_notifies_listeners_on_commit(project: Project) -> None:
    ask, _ = _open(project, B_PAUSE["pauseData"], run_id=B_RUN)
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)

    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute('LISTEN "ask_decided"')
        with transaction.atomic():
            ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.API, by_label="dana")
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []  # not before the commit
        notices = list(listener.notifies(timeout=5, stop_after=1))

    assert [(n.channel, n.payload) for n in notices] == [("ask_decided", str(ask.pk))]


@pytest.mark.django_db(transaction=True)
def test_ask_decide_second_decision_sends_no_notify(project: Project) -> None:
    ask, _ = _open(project, B_PAUSE["pauseData"], run_id=B_RUN)
    ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.API, by_label="dana")
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)

    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute('LISTEN "ask_decided"')
        with pytest.raises(AskAlreadyDecided):
            ask_decide(ask_id=ask.pk, approved=False, via=Ask.Via.API, by_label="mallory")
        notices = list(listener.notifies(timeout=0.5, stop_after=1))

    assert notices == []


# Deadlines


def test_asks_apply_deadlines_applies_on_timeout(project: Project) -> None:
    past = timezone.now() - timedelta(minutes=5)
    declines, _ = _open(project, _plain("d1"), deadline=past, on_timeout="decline")
    approves, _ = _open(project, _plain("d2"), deadline=past, on_timeout="approve")
    future, _ = _open(project, _plain("d3"), deadline=timezone.now() + timedelta(hours=1), on_timeout="approve")
    endless, _ = _open(project, _plain("d4"))

    assert asks_apply_deadlines() == 2

    for ask in (declines, approves, future, endless):
        ask.refresh_from_db()
    assert (declines.status, declines.approved) == (Ask.Status.DECIDED, False)
    assert (approves.status, approves.approved) == (Ask.Status.DECIDED, True)
    for ask in (declines, approves):
        assert ask.decided_via == Ask.Via.DEADLINE
        assert ask.decided_by_label == "deadline"
        assert ask.decided_by is None
        assert ask.decision()["by"] == "deadline"
    assert future.status == endless.status == Ask.Status.OPEN
    assert RunEvent.objects.filter(type=DECISION_EVENT).count() == 2
    assert asks_apply_deadlines() == 0  # nothing left to apply


def test_asks_apply_deadlines_uses_the_given_now(project: Project) -> None:
    deadline = timezone.now() + timedelta(hours=1)
    ask, _ = _open(project, B_PAUSE["pauseData"], run_id=B_RUN, deadline=deadline, on_timeout="approve")

    assert asks_apply_deadlines(now=deadline - timedelta(seconds=1)) == 0
    assert asks_apply_deadlines(now=deadline) == 1

    ask.refresh_from_db()
    assert (ask.status, ask.approved, ask.decided_via) == (Ask.Status.DECIDED, True, Ask.Via.DEADLINE)


def test_asks_apply_deadlines_never_overrides_a_person(project: Project, django_user_model: Any) -> None:
    person = django_user_model.objects.create_user(username="dana")
    ask, _ = _open(
        project,
        B_PAUSE["pauseData"],
        run_id=B_RUN,
        deadline=timezone.now() + timedelta(seconds=30),
        on_timeout="approve",
    )
    ask_decide(ask_id=ask.pk, approved=False, via=Ask.Via.PAGE, by_label="dana", user=person, note="no")

    assert asks_apply_deadlines(now=timezone.now() + timedelta(hours=1)) == 0

    ask.refresh_from_db()
    assert (ask.approved, ask.decided_by_label, ask.decided_via, ask.note) == (False, "dana", Ask.Via.PAGE, "no")
    assert RunEvent.objects.filter(type=DECISION_EVENT).count() == 1


def test_asks_apply_deadlines_respects_the_limit(project: Project) -> None:
    past = timezone.now() - timedelta(minutes=1)
    for n in range(3):
        _open(project, _plain(f"l{n}"), deadline=past - timedelta(seconds=n))

    assert asks_apply_deadlines(limit=2) == 2
    assert Ask.objects.filter(status=Ask.Status.OPEN).count() == 1
    assert asks_apply_deadlines(limit=2) == 1


# Webhook delivery


SECRET = "whsec-test-0123456789"


def _decided_with_delivery(project: Project, url: str, captured: Any) -> tuple[Ask, WebhookDelivery]:
    WebhookEndpoint.objects.create(project=project, url=url, secret=SECRET)
    ask, _ = _open(project, B_PAUSE["pauseData"], run_id=B_RUN)
    with captured(execute=False) as callbacks:
        ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.API, by_label="dana@treasury", note="SC-88")
    assert len(callbacks) == 1  # the Celery task is enqueued only once the decision commits
    delivery = WebhookDelivery.objects.get(ask=ask)
    assert delivery.status == WebhookDelivery.Status.PENDING
    assert delivery.url == url
    ask.refresh_from_db()
    return ask, delivery


def test_webhook_deliver_posts_the_signed_decision(project: Project, django_capture_on_commit_callbacks: Any) -> None:
    with webhook_receiver(200) as server:
        ask, delivery = _decided_with_delivery(project, url_of(server), django_capture_on_commit_callbacks)

        webhook_deliver(delivery_id=delivery.pk)

        assert len(server.received) == 1
        path, headers, body = server.received[0]
    assert path == "/hooks/decisions"
    assert headers["Content-Type"] == "application/json"
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["X-Footprint-Signature"], expected)
    assert json.loads(body) == {
        "askId": ask.pk,
        "runId": B_RUN,
        "toolCallId": "t3",
        "kind": "ask",
        "decision": ask.decision(),
    }
    delivery.refresh_from_db()
    assert delivery.status == WebhookDelivery.Status.DELIVERED
    assert delivery.attempts == 1
    assert delivery.delivered_at is not None
    attempt = WebhookAttempt.objects.get(delivery=delivery)
    assert attempt.status_code == 200
    assert attempt.error == ""


def test_webhook_deliver_twice_after_success_does_nothing(
    project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    with webhook_receiver(204) as server:
        _, delivery = _decided_with_delivery(project, url_of(server), django_capture_on_commit_callbacks)
        webhook_deliver(delivery_id=delivery.pk)

        webhook_deliver(delivery_id=delivery.pk)

        assert len(server.received) == 1
    delivery.refresh_from_db()
    assert delivery.status == WebhookDelivery.Status.DELIVERED
    assert delivery.attempts == 1
    assert WebhookAttempt.objects.filter(delivery=delivery).count() == 1


def test_webhook_deliver_failure_is_logged_and_raised(
    project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    with webhook_receiver(500) as server:
        _, delivery = _decided_with_delivery(project, url_of(server), django_capture_on_commit_callbacks)

        with pytest.raises(WebhookFailed):
            webhook_deliver(delivery_id=delivery.pk)

        assert len(server.received) == 1
        delivery.refresh_from_db()
        assert delivery.status == WebhookDelivery.Status.FAILED
        assert delivery.attempts == 1
        assert delivery.delivered_at is None
        attempt = WebhookAttempt.objects.get(delivery=delivery)
        assert attempt.status_code == 500
        assert "500" in attempt.error

        # the endpoint recovers, but nothing is sent again before the backoff has passed
        server.status = 200
        webhook_deliver(delivery_id=delivery.pk)
        assert len(server.received) == 1
        assert delivery.next_attempt_at > timezone.now()

        # the retry, once it is due, delivers and logs a second attempt
        WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
        webhook_deliver(delivery_id=delivery.pk)

    delivery.refresh_from_db()
    assert delivery.status == WebhookDelivery.Status.DELIVERED
    assert delivery.attempts == 2
    attempts = WebhookAttempt.objects.filter(delivery=delivery).order_by("id")
    assert list(attempts.values_list("status_code", flat=True)) == [500, 200]


def test_webhook_deliver_unreachable_endpoint_is_logged_and_raised(
    project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    with webhook_receiver(200) as server:
        url = url_of(server)
    # the server is closed now: nothing listens on that port any more
    _, delivery = _decided_with_delivery(project, url, django_capture_on_commit_callbacks)

    with pytest.raises(WebhookFailed):
        webhook_deliver(delivery_id=delivery.pk)

    attempt = WebhookAttempt.objects.get(delivery=delivery)
    assert attempt.status_code is None
    assert attempt.error
    delivery.refresh_from_db()
    assert delivery.status == WebhookDelivery.Status.FAILED


def test_webhook_inactive_endpoint_gets_no_delivery(project: Project, django_capture_on_commit_callbacks: Any) -> None:
    WebhookEndpoint.objects.create(project=project, url="http://127.0.0.1:9/none", secret=SECRET, active=False)
    ask, _ = _open(project, B_PAUSE["pauseData"], run_id=B_RUN)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.API, by_label="dana")

    assert callbacks == []
    assert not WebhookDelivery.objects.exists()


def test_webhook_payload_carries_the_answer_of_a_plain_ask(
    project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    with webhook_receiver(200) as server:
        WebhookEndpoint.objects.create(project=project, url=url_of(server), secret=SECRET)
        ask, _ = _open(project, _plain())
        with django_capture_on_commit_callbacks(execute=False):
            ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.API, by_label="bot", value=["eu-west-1"])

        webhook_deliver(delivery_id=WebhookDelivery.objects.get(ask=ask).pk)

        (_, _, body) = server.received[0]
    assert json.loads(body)["decision"]["answer"] == ["eu-west-1"]
    assert json.loads(body)["kind"] == "plain"


def test_the_outbox_sweep_sends_a_delivery_whose_queue_message_was_lost(
    project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    """The decision committed but the task never ran (broker down, worker killed): the sweep sends it."""
    with webhook_receiver(200) as server:
        _, delivery = _decided_with_delivery(project, url_of(server), django_capture_on_commit_callbacks)

        assert webhooks_send_due() == 1

        ((_, headers, _),) = server.received
    assert headers["X-Footprint-Delivery"] == str(delivery.pk)
    delivery.refresh_from_db()
    assert delivery.status == WebhookDelivery.Status.DELIVERED
    assert webhooks_send_due() == 0  # nothing is due any more


def test_an_attempt_in_flight_is_left_alone_until_its_lease_runs_out(
    project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    with webhook_receiver(200) as server:
        _, delivery = _decided_with_delivery(project, url_of(server), django_capture_on_commit_callbacks)
        in_flight = timezone.now() + timedelta(seconds=30)
        WebhookDelivery.objects.filter(pk=delivery.pk).update(lease_until=in_flight, attempts=1)

        webhook_deliver(delivery_id=delivery.pk)
        assert webhooks_send_due() == 0
        assert server.received == []

        # The worker that held it died: once the lease is over, the delivery is sent again.
        WebhookDelivery.objects.filter(pk=delivery.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
        assert webhooks_send_due() == 1
        assert len(server.received) == 1
    delivery.refresh_from_db()
    assert delivery.attempts == 2


@pytest.mark.django_db(transaction=True)
def test_an_attempt_is_logged_before_the_request_is_sent(project: Project) -> None:
    """A worker killed mid-request leaves its attempt in the log, marked as cut short: the
    receiver, on its own connection, already sees the committed attempt while it is called."""
    with webhook_receiver(200) as server:
        ask, _ = _open(project, B_PAUSE["pauseData"], run_id=B_RUN)
        ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.API, by_label="dana@treasury")
        WebhookEndpoint.objects.create(project=project, url=url_of(server), secret=SECRET)
        delivery = WebhookDelivery.objects.create(ask=ask, url=url_of(server))
        logged_while_sending: list[str] = []

        def look_at_the_log() -> None:
            logged_while_sending.extend(
                WebhookAttempt.objects.filter(delivery=delivery).values_list("error", flat=True)
            )
            connection.close()  # this server thread's own connection

        server.on_request = look_at_the_log

        webhook_deliver(delivery_id=delivery.pk)

    assert logged_while_sending == [NO_ANSWER]
    assert WebhookAttempt.objects.get(delivery=delivery).error == ""


@pytest.mark.parametrize(
    ("fixture", "approved", "note"),
    [
        ("b-middleware/events-approved.json", True, "supplier contract SC-88 verified"),
        ("b-middleware/events-declined.json", False, "no PO on file"),
    ],
)
def test_a_middleware_ask_the_run_resumed_with_a_decision_made_elsewhere_is_closed_by_its_verdict_row(
    agent_client, approver_client, fixture, approved, note
):
    """Spec §1.7: the ask path files no checkin.decision; the resumed run's row for the call
    (`approved by <by>[: <note>]`) is the verdict. Left open, a person's contrary decision would
    have been accepted as a second one, chained and sent to the webhook."""
    events = fixture_events(fixture)
    assert agent_client.ingest(events).status_code == 200

    ask = Ask.objects.get()
    row = next(e["payload"] for e in events if e["payload"].get("why", "").startswith(("approved by", "declined by")))
    assert (ask.status, ask.decided_via, ask.approved) == (Ask.Status.DECIDED, Ask.Via.RUN, approved)
    assert ask.decided_by_label == row["why"].split(" by ", 1)[1].split(": ", 1)[0]
    assert ask.note == note
    response = approver_client.post(f"/asks/{ask.pk}/decide/", {"decision": "decline" if approved else "approve"})
    assert response.status_code == 409
    assert not RunEvent.objects.filter(type="ledger.human_decision").exists()


def test_a_middleware_ask_opened_after_its_resumed_runs_verdict_arrived_is_closed_by_it(agent_client):
    """The resumed run's batch can come first (an observer flushes each run on its own): the ask
    its pause opens later is closed by the verdict already stored, not left open to decide again."""
    events = fixture_events("b-middleware/events-approved.json")
    pause = next(e for e in events if e["type"] == "agentfootprint.pause.request")
    assert agent_client.ingest([e for e in events if e is not pause]).status_code == 200
    assert not Ask.objects.exists()

    assert agent_client.ingest([pause]).status_code == 200

    ask = Ask.objects.get()
    assert (ask.status, ask.decided_via, ask.approved, ask.decided_by_label) == (
        Ask.Status.DECIDED,
        Ask.Via.RUN,
        True,
        "dana@treasury",
    )


def test_an_ask_posted_after_its_resumed_runs_verdict_arrived_answers_decided(agent_client):
    events = fixture_events("b-middleware/events-approved.json")
    assert agent_client.ingest([e for e in events if e["type"] != "agentfootprint.pause.request"]).status_code == 200

    response = agent_client.post_json("/api/v1/asks", b_body())

    assert response.status_code == 201, response.content
    assert response.json()["ask"]["status"] == "decided"
    assert response.json()["ask"]["decision"]["by"] == "dana@treasury"


def test_a_verdict_row_naming_no_middleware_does_not_close_a_question(agent_client) -> None:
    """A verdict row is a middleware's: without `middleware` it closes nothing, least of all an
    askHuman question (which no middleware asked), as approved with no answer to resume with."""
    ask = open_ask(agent_client, plain_body("q1", run_id="run-q"))
    row = {
        "moment": "before-tool",
        "at": "tool",
        "toolName": "ask_user",
        "toolCallId": "q1",
        "iteration": 1,
        "outcome": "allow",
        "changed": False,
        "why": "approved by mallory",
    }
    event = {"seq": 0, "type": "agentfootprint.middleware.decision", "payload": row, "meta": {"runId": "run-q-2"}}
    assert agent_client.ingest([event]).status_code == 200

    assert Ask.objects.get(pk=ask["id"]).status == Ask.Status.OPEN
