"""At most one open ask per session (spec §9.3, as the host's ERR_AWAITING_DECISION): a session
that pauses again supersedes its earlier open ask, which nobody can decide any more and which no
agent waits on for ever."""

import threading
import time
from typing import Any

import pytest
from django.db import connections
from django.test import Client

from ledger.models import Ask, Run, RunEvent
from tests.conftest import ApiClient
from tests.ledger.ask_helpers import ASKS, b_body, decide, open_ask, plain_body, refused, secret_of

pytestmark = pytest.mark.django_db

SESSION = "support-chat-41"
DECISION_EVENT = "ledger.human_decision"


def _in_session(run_id: str, session: str | None = SESSION, **extra: Any) -> dict[str, Any]:
    body = b_body(run_id, **extra)
    if session is not None:
        body["sessionId"] = session
    return body


def _pause_event(run_id: str, tool_call_id: str, session: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"runId": run_id, "runtimeStageId": "sf-tools/execute-tool-calls#paused"}
    if session is not None:
        meta["sessionId"] = session
    question = {"toolCallId": tool_call_id, "toolName": "refund", "question": "Refund 40 EUR?"}
    payload = {"reason": "askHuman", "questionPayload": question}
    return {"seq": 0, "type": "agentfootprint.pause.request", "payload": payload, "meta": meta}


def test_a_second_ask_in_the_session_supersedes_the_first(agent_client: ApiClient) -> None:
    first = open_ask(agent_client, _in_session("run-1796043009968-3"))
    second = open_ask(agent_client, _in_session("run-1796043011000-4"))

    assert second["status"] == "open"
    shown = agent_client.get(f"{ASKS}/{first['id']}").json()["ask"]
    assert shown["status"] == "superseded"
    assert shown["supersededBy"] == second["id"]
    assert "decision" not in shown
    assert "supersededBy" not in agent_client.get(f"{ASKS}/{second['id']}").json()["ask"]


def test_a_superseded_ask_cannot_be_decided_and_nothing_is_written(
    agent_client: ApiClient, integration_client: ApiClient
) -> None:
    first = open_ask(agent_client, _in_session("run-1796043009968-3"))
    second = open_ask(agent_client, _in_session("run-1796043011000-4"))

    body = refused(decide(integration_client, first["id"], approved=True, by="slack:omar"), 409, "ERR_ASK_SUPERSEDED")

    assert body["supersededBy"] == second["id"]
    assert f"ask {second['id']}" in body["error"]
    assert SESSION in body["error"]
    ask = Ask.objects.get(pk=first["id"])
    assert (ask.status, ask.approved, ask.decided_at) == (Ask.Status.SUPERSEDED, None, None)
    assert not RunEvent.objects.filter(type=DECISION_EVENT).exists()
    # The later ask is the one to decide, and deciding it works.
    assert decide(integration_client, second["id"], approved=True, by="slack:omar").status_code == 200


def test_the_decision_of_a_superseded_ask_answers_409_instead_of_open(agent_client: ApiClient) -> None:
    # "open" would send a waiting agent back to wait for a decision that can never come.
    first = open_ask(agent_client, _in_session("run-1796043009968-3"))
    second = open_ask(agent_client, _in_session("run-1796043011000-4"))

    for wait in ("0", "5"):
        body = refused(agent_client.get(f"{ASKS}/{first['id']}/decision?wait={wait}"), 409, "ERR_ASK_SUPERSEDED")
        assert body["supersededBy"] == second["id"]


@pytest.mark.django_db(transaction=True)
def test_a_long_poll_on_the_earlier_ask_wakes_when_the_session_pauses_again(agent_client: ApiClient) -> None:
    first = open_ask(agent_client, _in_session("run-1796043009968-3"))
    waiter = ApiClient(secret_of(agent_client))
    outcome: dict[str, Any] = {}

    def wait() -> None:
        try:
            started = time.monotonic()
            response = waiter.get(f"{ASKS}/{first['id']}/decision?wait=10")
            outcome["elapsed"] = time.monotonic() - started
            outcome["status"], outcome["body"] = response.status_code, response.json()
        finally:
            connections.close_all()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.5)
    second = open_ask(agent_client, _in_session("run-1796043011000-4"))
    thread.join(20)

    assert not thread.is_alive()
    assert outcome["status"] == 409, outcome
    assert outcome["body"]["code"] == "ERR_ASK_SUPERSEDED"
    assert outcome["body"]["supersededBy"] == second["id"]
    assert outcome["elapsed"] < 9.5  # woken by the later ask, not by the end of the wait


def test_asks_of_other_sessions_without_one_or_of_other_projects_stay_open(
    agent_client: ApiClient, other_agent_client: ApiClient
) -> None:
    no_session = open_ask(agent_client, _in_session("run-1796043009968-3", session=None))
    other_session = open_ask(agent_client, _in_session("run-1796043009968-5", session="support-chat-42"))
    other_project = open_ask(other_agent_client, _in_session("run-1796043009968-6"))
    open_ask(agent_client, _in_session("run-1796043011000-4"))
    open_ask(agent_client, _in_session("run-1796043011000-7", session=None))

    assert set(Ask.objects.filter(pk__in=[no_session["id"], other_session["id"], other_project["id"]]).values_list(
        "status", flat=True
    )) == {Ask.Status.OPEN}  # fmt: skip


def test_a_decided_ask_stays_decided_when_its_session_pauses_again(
    agent_client: ApiClient, integration_client: ApiClient
) -> None:
    first = open_ask(agent_client, _in_session("run-1796043009968-3"))
    decided = decide(integration_client, first["id"], approved=True, by="dana").json()["decision"]
    open_ask(agent_client, _in_session("run-1796043011000-4"))

    assert agent_client.get(f"{ASKS}/{first['id']}/decision").json() == {"status": "decided", "decision": decided}


def test_re_posting_a_superseded_ask_neither_reopens_it_nor_supersedes_the_later_one(agent_client: ApiClient) -> None:
    first_body = _in_session("run-1796043009968-3")
    first = open_ask(agent_client, first_body)
    second = open_ask(agent_client, _in_session("run-1796043011000-4"))

    again = open_ask(agent_client, first_body, status=200)

    assert (again["id"], again["status"], again["supersededBy"]) == (first["id"], "superseded", second["id"])
    assert Ask.objects.get(pk=second["id"]).status == Ask.Status.OPEN


def test_asks_opened_from_pause_events_follow_the_same_rule(agent_client: ApiClient) -> None:
    assert agent_client.ingest([_pause_event("run-a", "q1", SESSION)]).status_code == 200
    assert agent_client.ingest([_pause_event("run-b", "q1", SESSION)]).status_code == 200

    statuses = dict(Ask.objects.values_list("run_id", "status"))
    assert statuses == {"run-a": Ask.Status.SUPERSEDED, "run-b": Ask.Status.OPEN}
    assert Ask.objects.get(run_id="run-a").superseded_by == Ask.objects.get(run_id="run-b")


def test_an_ask_that_learns_its_session_from_its_events_supersedes_the_sessions_earlier_ask(
    agent_client: ApiClient,
) -> None:
    # The agent posts the later pause without a session; its pause event, ingested after, names it.
    earlier = open_ask(agent_client, _in_session("run-1796043009968-3"))
    later = open_ask(agent_client, plain_body(tool_call_id="q1", run_id="run-b"))
    assert Ask.objects.get(pk=earlier["id"]).status == Ask.Status.OPEN

    assert agent_client.ingest([_pause_event("run-b", "q1", SESSION)]).status_code == 200

    assert Ask.objects.get(pk=earlier["id"]).status == Ask.Status.SUPERSEDED
    assert Ask.objects.get(pk=later["id"]).status == Ask.Status.OPEN


def test_the_page_of_a_superseded_ask_links_the_later_one_and_offers_no_decision(
    agent_client: ApiClient, approver_client: Client
) -> None:
    first = open_ask(agent_client, _in_session("run-1796043009968-3"))
    second = open_ask(agent_client, _in_session("run-1796043011000-4"))

    page = approver_client.get(f"/asks/{first['id']}/")
    html = page.content.decode()
    assert page.status_code == 200
    assert f'href="/asks/{second["id"]}/"' in html
    assert "Superseded" in html
    assert 'name="decision"' not in html

    late = approver_client.post(f"/asks/{first['id']}/decide/", {"decision": "approve"})
    assert late.status_code == 409
    assert "Superseded" in late.content.decode()
    assert Ask.objects.get(pk=first["id"]).status == Ask.Status.SUPERSEDED

    inbox = approver_client.get("/inbox/").content.decode()
    assert f'href="/asks/{second["id"]}/"' in inbox
    assert f'href="/asks/{first["id"]}/"' not in inbox


def test_a_refused_decision_on_a_superseded_ask_creates_no_run(
    agent_client: ApiClient, integration_client: ApiClient
) -> None:
    # The run's lock (INSERT … ON CONFLICT) would leave an empty "running" run behind the 409 for a
    # run that never sent an event: the superseded ask is refused before it.
    first = open_ask(agent_client, _in_session("run-1796043009968-3"))
    open_ask(agent_client, _in_session("run-1796043011000-4"))
    assert not Run.objects.filter(run_id=first["runId"]).exists()

    refused(decide(integration_client, first["id"], approved=True, by="slack:omar"), 409, "ERR_ASK_SUPERSEDED")

    assert not Run.objects.filter(run_id=first["runId"]).exists(), list(
        Run.objects.filter(run_id=first["runId"]).values("status", "event_count")
    )
