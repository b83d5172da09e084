"""Known defects of "at most one open ask per session" (spec §9.3), found by review in session 14
and not fixed yet: each test states the behaviour wanted and fails today. Strict: the day a fix
makes one pass, it fails here, and moves to test_asks_one_open_per_session.py."""

import threading
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.db.migrations.executor import MigrationExecutor

from ledger.models import Ask, Project, Run
from ledger.services import ask_open as service_ask_open
from tests.conftest import ApiClient
from tests.ledger.ask_helpers import ASKS, b_body, open_ask, plain_body

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.xfail(strict=True, reason="known defect, see the issue #2 note of session 14"),
]

SESSION = "support-chat-41"


def _in_session(run_id: str, session: str | None = SESSION) -> dict[str, Any]:
    body = b_body(run_id)
    if session is not None:
        body["sessionId"] = session
    return body


def _event(run_id: str, seq: int, type_: str, payload: dict[str, Any], session: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"runId": run_id, "wallClockMs": 1796040000000 + seq}
    if session is not None:
        meta["sessionId"] = session
    return {"seq": seq, "type": "agentfootprint." + type_, "payload": payload, "meta": meta}


def _pause_event(run_id: str, tool_call_id: str, session: str | None, seq: int = 0) -> dict[str, Any]:
    question = {"toolCallId": tool_call_id, "toolName": "ask_user", "question": "Region?"}
    return _event(run_id, seq, "pause.request", {"reason": "askHuman", "questionPayload": question}, session)


def _open_in(session: str) -> list[int]:
    return list(Ask.objects.filter(session_id=session, status=Ask.Status.OPEN).values_list("pk", flat=True))


def test_an_older_ask_that_learns_its_session_after_a_later_ask_opened_leaves_two_open(
    agent_client: ApiClient,
) -> None:
    # run-a's ask is posted without a session; run-b's ask opens in the session; then run-a's pause
    # event names the same session. `_supersede_earlier_in_session(existing)` only looks at pk < its
    # own, so neither closes the other.
    older = open_ask(agent_client, plain_body(tool_call_id="q1", run_id="run-a"))
    later = open_ask(agent_client, _in_session("run-1796043011000-4"))

    assert agent_client.ingest([_pause_event("run-a", "q1", SESSION)]).status_code == 200

    assert Ask.objects.get(pk=older["id"]).session_id == SESSION
    assert len(_open_in(SESSION)) == 1, (older["id"], later["id"], _open_in(SESSION))


@pytest.mark.django_db(transaction=True)
def test_two_asks_opened_at_once_in_one_session_both_stay_open(project: Project) -> None:
    # Each opener's SELECT … FOR UPDATE sees only committed asks: an ask inserted by a transaction
    # that has not committed yet is missed, and it in turn finds no earlier ask. No session-level
    # lock serialises them.
    inserted, release, done = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with transaction.atomic():
                service_ask_open(
                    project=Project.objects.get(pk=project.pk), key=None, run_id="run-a", session_id=SESSION,
                    pause_data={"toolCallId": "q1", "toolName": "ask_user", "question": "Region?"},
                    checkpoint=None, deadline=None, on_timeout="decline",
                )  # fmt: skip
                inserted.set()
                release.wait(10)
        except BaseException as exc:
            errors.append(exc)
        finally:
            inserted.set()
            connections.close_all()
            done.set()

    thread = threading.Thread(target=first)
    thread.start()
    assert inserted.wait(10)
    service_ask_open(
        project=project, key=None, run_id="run-b", session_id=SESSION,
        pause_data={"toolCallId": "q2", "toolName": "ask_user", "question": "City?"},
        checkpoint=None, deadline=None, on_timeout="decline",
    )  # fmt: skip
    release.set()
    thread.join(20)

    assert not errors, errors
    assert Ask.objects.filter(session_id=SESSION).count() == 2
    assert len(_open_in(SESSION)) == 1, _open_in(SESSION)


def test_reposting_an_ask_with_its_session_does_not_record_it_nor_supersede(agent_client: ApiClient) -> None:
    # The observer's pause event (no sessionId, a run without one) opens run-b's ask first; the
    # agent's own POST then names the session. ask_open's re-post path never sets session_id.
    earlier = open_ask(agent_client, _in_session("run-1796043009968-3"))
    assert agent_client.ingest([_pause_event("run-b", "q1", None)]).status_code == 200

    again = open_ask(agent_client, {**plain_body(tool_call_id="q1", run_id="run-b"), "sessionId": SESSION}, status=200)

    assert again.get("sessionId") == SESSION, again
    assert Ask.objects.get(pk=earlier["id"]).status == Ask.Status.SUPERSEDED


def test_an_ask_posted_without_a_session_is_not_given_its_runs_session(agent_client: ApiClient) -> None:
    # README: the new ask's session is "by sessionId, from the post, its events or its run";
    # ask_open never looks at the run, so a run known to be in the session opens a second open ask.
    earlier = open_ask(agent_client, _in_session("run-1796043009968-3"))
    assert agent_client.ingest([_event("run-b", 0, "agent.turn_start", {"turnIndex": 0}, SESSION)]).status_code == 200
    assert Run.objects.get(run_id="run-b").session_id == SESSION

    later = open_ask(agent_client, plain_body(tool_call_id="q1", run_id="run-b"))

    assert later.get("sessionId") == SESSION, later
    assert Ask.objects.get(pk=earlier["id"]).status == Ask.Status.SUPERSEDED


def test_a_decision_the_resumed_run_reports_is_lost_once_the_ask_was_superseded(agent_client: ApiClient) -> None:
    # The earlier pause was answered elsewhere (the supersede docstring's own case); the resumed
    # run pauses again and the agent posts that ask at once, before its buffered events
    # (checkin.decision among them) are flushed. _close_reported only closes OPEN asks, so the
    # decision of record is dropped: the ledger says nobody decided and no run waited.
    earlier = open_ask(agent_client, _in_session("run-1796043009968-3"))  # tool call t3
    open_ask(agent_client, {**plain_body(tool_call_id="q9", run_id="run-z"), "sessionId": SESSION})
    reported = {"toolName": "transfer_funds", "toolCallId": "t3", "iteration": 1, "approved": True, "by": "alice@ops"}

    assert agent_client.ingest([_event("run-z", 0, "checkin.decision", reported)]).status_code == 200

    ask = Ask.objects.get(pk=earlier["id"])
    assert (ask.status, ask.decided_via, ask.approved) == (Ask.Status.DECIDED, Ask.Via.RUN, True)
    answer = agent_client.get(f"{ASKS}/{earlier['id']}/decision")
    assert answer.status_code == 200, answer.content


def _migrate(target: tuple[str, str] | None = None) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([target] if target else executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_the_migration_leaves_open_an_ask_whose_session_paused_again_since(project: Project) -> None:
    # s1: r1 open, then r2 (a later pause of the session, since decided). On arrival r2 would have
    # superseded r1 ("as they would have been on arrival"), but FORWARD picks the newest *open*
    # ask only, so r1 stays open in the inbox for ever.
    rows = [("r1", "s1", "open"), ("r2", "s1", "decided")]
    try:
        _migrate(("ledger", "0015_run_has_recording"))
        with connection.cursor() as cursor:
            for run_id, session, status in rows:
                cursor.execute(
                    "INSERT INTO ledger_ask (project_id, run_id, session_id, tool_call_id, kind, pause_data, status,"
                    " on_timeout, decided_at) VALUES (%s, %s, %s, 't1', 'ask', '{}', %s, 'decline',"
                    " CASE WHEN %s = 'decided' THEN now() END)",
                    [project.pk, run_id, session, status, status],
                )
    finally:
        _migrate()
    asks = {ask.run_id: ask for ask in Ask.objects.all()}
    assert asks["r1"].status == Ask.Status.SUPERSEDED, asks["r1"].status
    assert asks["r1"].superseded_by_id == asks["r2"].pk
