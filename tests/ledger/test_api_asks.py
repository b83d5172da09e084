"""The agent-facing asks API: open (idempotent), read, long-poll the decision, decide once."""

import copy
import http.client
import json
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.test import Client
from django.utils import timezone

from ledger.asks.services import ask_open, asks_apply_deadlines
from ledger.models import Ask, RunEvent
from tenancy.models import AGENT_SCOPES, AgentKey, Membership, Project
from tenancy.services import agent_key_create, membership_grant
from tests.conftest import ApiClient, load_fixture, numbered_per_run
from tests.ledger.ask_helpers import (
    ASKS,
    B_CHECKPOINT,
    B_RUN,
    b_body,
    decide,
    open_ask,
    plain_body,
    refused,
    secret_of,
    sibling,
)

pytestmark = pytest.mark.django_db

MARKER = "CHECKPOINT-ONLY-7f3a9c2e-d41b"  # appears nowhere but inside the posted checkpoint


def _marked_checkpoint() -> dict[str, Any]:
    checkpoint = copy.deepcopy(B_CHECKPOINT)
    checkpoint["sharedState"]["userMessage"] += f" {MARKER}"
    checkpoint["sharedState"]["history"].append({"role": "user", "content": f"private {MARKER}"})
    checkpoint["privateNote"] = MARKER
    return checkpoint


# Opening


def test_open_ask_first_post_is_201_with_the_ask(agent_client: ApiClient) -> None:
    response = agent_client.post_json(ASKS, b_body(sessionId="fixture-session-b-declined"))

    assert response.status_code == 201, response.content
    ask = response.json()["ask"]
    assert isinstance(ask["id"], int)
    assert ask["runId"] == B_RUN
    assert ask["sessionId"] == "fixture-session-b-declined"
    assert ask["toolCallId"] == "t3"
    assert ask["toolName"] == "transfer_funds"
    assert ask["kind"] == "ask"
    assert ask["status"] == "open"
    assert ask["question"] == "Approve a transfer of 2500 EUR to ACC-900?"
    assert ask["middleware"] == "four-eyes"
    assert ask["onTimeout"] == "decline"
    assert datetime.fromisoformat(ask["createdAt"]).tzinfo is not None
    assert "decision" not in ask
    assert "deadline" not in ask
    assert "checkpoint" not in ask


def test_open_ask_repost_is_200_with_the_same_ask(agent_client: ApiClient) -> None:
    first = open_ask(agent_client)

    again = agent_client.post_json(ASKS, b_body())

    assert again.status_code == 200, again.content
    assert again.json()["ask"]["id"] == first["id"]
    assert Ask.objects.count() == 1


def test_open_ask_repost_by_another_key_is_the_same_ask(agent_client: ApiClient, project: Project) -> None:
    first = open_ask(agent_client)

    assert open_ask(sibling(project), status=200)["id"] == first["id"]


@pytest.mark.django_db(transaction=True)
def test_open_ask_ten_at_once_is_one_ask(agent_client: ApiClient) -> None:
    secret = secret_of(agent_client)
    barrier = threading.Barrier(10)
    answers: list[tuple[int, int]] = []
    lock = threading.Lock()

    def post() -> None:
        try:
            client = ApiClient(secret)
            barrier.wait(timeout=30)
            response = client.post_json(ASKS, b_body())
            with lock:
                answers.append((response.status_code, response.json()["ask"]["id"]))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert sorted(status for status, _ in answers) == [200] * 9 + [201]
    assert len({ask_id for _, ask_id in answers}) == 1
    assert Ask.objects.count() == 1


def test_open_ask_with_deadline_and_on_timeout(agent_client: ApiClient) -> None:
    ask = open_ask(agent_client, b_body(deadline="2026-12-01T09:00:00+01:00", onTimeout="approve"))

    assert datetime.fromisoformat(ask["deadline"]) == datetime.fromisoformat("2026-12-01T08:00:00+00:00")
    assert ask["onTimeout"] == "approve"
    stored = Ask.objects.get(pk=ask["id"])
    assert stored.deadline == datetime.fromisoformat("2026-12-01T08:00:00+00:00")


def test_open_ask_check_in_pause(agent_client: ApiClient) -> None:
    outcome = load_fixture("c-checkin/checkin-pause.json")["pauseOutcome"]
    body = {**outcome, "checkpoint": load_fixture("c-checkin/checkin-checkpoint.json"), "runId": "run-c"}

    ask = open_ask(agent_client, body)

    assert ask["kind"] == "checkIn"
    assert ask["toolCallId"] == "c3"
    assert ask["question"] == outcome["checkIn"]["evidence"]["willDo"]


def test_open_ask_plain_pause(agent_client: ApiClient) -> None:
    ask = open_ask(agent_client, plain_body())

    assert (ask["kind"], ask["question"], ask["toolName"]) == ("plain", "Region?", "ask_user")


@pytest.mark.parametrize(
    "body",
    [
        {"pauseData": {"toolCallId": "t3"}},
        {"runId": "", "pauseData": {"toolCallId": "t3"}},
        {"runId": 42, "pauseData": {"toolCallId": "t3"}},
        {"runId": "r"},
        {"runId": "r", "pauseData": "t3"},
        {"runId": "r", "pauseData": {"toolName": "transfer_funds"}},
        {"runId": "r", "pauseData": {"toolCallId": "t3"}, "surprise": 1},
        {"runId": "r", "pauseData": {"toolCallId": "t3"}, "deadline": "2026-12-01T09:00:00"},
        {"runId": "r", "pauseData": {"toolCallId": "t3"}, "deadline": "next tuesday"},
        {"runId": "r", "pauseData": {"toolCallId": "t3"}, "deadline": 1796040000000},
        {"runId": "r", "pauseData": {"toolCallId": "t3"}, "onTimeout": "escalate"},
        ["not", "an", "object"],
    ],
)
def test_open_ask_invalid_body_is_422(agent_client: ApiClient, body: Any) -> None:
    refused(agent_client.post_json(ASKS, body), 422, "ERR_INVALID_ASK")
    assert not Ask.objects.exists()


def test_open_ask_malformed_json_is_400(agent_client: ApiClient) -> None:
    refused(agent_client.post_json(ASKS, b'{"runId": '), 400, "ERR_MALFORMED_JSON")


# Reading, and who sees the checkpoint


def test_get_ask_returns_it(agent_client: ApiClient) -> None:
    opened = open_ask(agent_client)

    response = agent_client.get(f"{ASKS}/{opened['id']}")

    assert response.status_code == 200
    ask = response.json()["ask"]
    assert {k: v for k, v in ask.items() if k != "checkpoint"} == opened


def test_get_ask_checkpoint_only_for_the_posting_key(agent_client: ApiClient, project: Project) -> None:
    checkpoint = _marked_checkpoint()
    ask_id = open_ask(agent_client, b_body(checkpoint=checkpoint))["id"]
    other_key = sibling(project)

    mine = agent_client.get(f"{ASKS}/{ask_id}")
    theirs = other_key.get(f"{ASKS}/{ask_id}")

    assert mine.json()["ask"]["checkpoint"] == checkpoint
    assert theirs.status_code == 200
    assert "checkpoint" not in theirs.json()["ask"]
    assert MARKER not in theirs.content.decode()


def test_get_ask_checkpoint_of_an_event_ask_goes_to_the_key_that_added_it(
    agent_client: ApiClient, project: Project
) -> None:
    events = numbered_per_run(load_fixture("b-middleware/events-declined.json")["events"])[:72]
    assert agent_client.ingest(events).status_code == 200
    from_events = Ask.objects.get()
    poster = sibling(project, ["asks"])

    ask = open_ask(poster, b_body(checkpoint=_marked_checkpoint()), status=200)

    assert ask["id"] == from_events.pk
    assert poster.get(f"{ASKS}/{ask['id']}").json()["ask"]["checkpoint"]["privateNote"] == MARKER
    assert MARKER not in agent_client.get(f"{ASKS}/{ask['id']}").content.decode()


def test_checkpoint_never_appears_in_any_page(
    agent_client: ApiClient, project: Project, auditor_client: Client, django_user_model: Any
) -> None:
    events = numbered_per_run(load_fixture("b-middleware/events-declined.json")["events"])[:72]
    assert agent_client.ingest(events).status_code == 200
    ask_id = open_ask(agent_client, b_body(checkpoint=_marked_checkpoint()), status=200)["id"]
    assert MARKER in agent_client.get(f"{ASKS}/{ask_id}").content.decode()  # the marker is really stored
    approver = django_user_model.objects.create_user(username="bob", password="pw-bob")
    membership_grant(user=approver, project=project, role=Membership.Role.APPROVER)
    admin = django_user_model.objects.create_superuser(username="root", password="pw-root")
    people = {"approver": Client(), "auditor": auditor_client, "superuser": Client()}
    people["approver"].force_login(approver)
    people["superuser"].force_login(admin)
    pages = [
        "/",
        "/inbox/",
        f"/asks/{ask_id}/",
        f"/projects/acme/runs/{B_RUN}/",
        f"/projects/acme/runs/{B_RUN}/events/",
        f"/projects/acme/runs/{B_RUN}/events/?after_seq=40",
    ]

    def every_page_is_clean() -> None:
        for who, client in people.items():
            for path in pages:
                for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
                    response = client.get(path, **headers)
                    assert response.status_code == 200, (who, path, response.status_code)
                    assert MARKER not in response.content.decode(), (who, path, headers)

    every_page_is_clean()
    decided = people["approver"].post(
        f"/asks/{ask_id}/decide/", {"decision": "decline", "note": "no PO"}, HTTP_HX_REQUEST="true"
    )
    assert decided.status_code == 200
    assert MARKER not in decided.content.decode()
    assert Ask.objects.get(pk=ask_id).status == Ask.Status.DECIDED
    every_page_is_clean()
    for path in (f"{ASKS}/{ask_id}/decision", f"/api/v1/runs/{B_RUN}/events?limit=1000"):
        assert MARKER not in agent_client.get(path).content.decode()


# Authentication, scope, tenancy


def _operations(ask_id: int) -> list[tuple[str, str, Any]]:
    return [
        ("post", ASKS, b_body()),
        ("get", f"{ASKS}/{ask_id}", None),
        ("get", f"{ASKS}/{ask_id}/decision", None),
        ("post", f"{ASKS}/{ask_id}/decision", {"approved": True, "by": "x"}),
    ]


def _call(client: ApiClient, method: str, path: str, body: Any) -> Any:
    return client.post_json(path, body) if method == "post" else client.get(path)


def test_asks_without_key_are_401(agent_client: ApiClient, anonymous_api_client: ApiClient) -> None:
    ask_id = open_ask(agent_client, plain_body())["id"]
    wrong_key = ApiClient("afk_nothing_like_a_real_key")

    for client in (anonymous_api_client, wrong_key):
        for method, path, body in _operations(ask_id):
            response = _call(client, method, path, body)
            refused(response, 401, "ERR_UNAUTHENTICATED")
            assert response["WWW-Authenticate"].startswith("Bearer")
    assert Ask.objects.get().status == Ask.Status.OPEN


def test_asks_without_asks_scope_are_403(agent_client: ApiClient, ingest_only_client: ApiClient) -> None:
    ask_id = open_ask(agent_client, plain_body())["id"]

    for method, path, body in _operations(ask_id):
        body_out = refused(_call(ingest_only_client, method, path, body), 403, "ERR_SCOPE")
        assert ("'decide'" if (method, path) == ("post", f"{ASKS}/{ask_id}/decision") else "'asks'") in body_out[
            "error"
        ]
    assert Ask.objects.count() == 1
    assert Ask.objects.get().status == Ask.Status.OPEN


def test_asks_of_another_project_are_404(
    agent_client: ApiClient, other_agent_client: ApiClient, other_project: Project
) -> None:
    ask_id = open_ask(agent_client)["id"]

    refused(other_agent_client.get(f"{ASKS}/{ask_id}"), 404, "ERR_ASK_NOT_FOUND")
    refused(other_agent_client.get(f"{ASKS}/{ask_id}/decision"), 404, "ERR_ASK_NOT_FOUND")
    other_integration = sibling(other_project, [AgentKey.Scope.DECIDE])
    refused(decide(other_integration, ask_id, approved=True, by="intruder"), 404, "ERR_ASK_NOT_FOUND")
    assert Ask.objects.get(pk=ask_id).status == Ask.Status.OPEN
    # the same run and tool call in the other project is that project's own ask
    theirs = open_ask(other_agent_client)
    assert theirs["id"] != ask_id


def test_asks_unknown_id_is_404(integration_client: ApiClient, agent_client: ApiClient) -> None:
    refused(agent_client.get(f"{ASKS}/999999"), 404, "ERR_ASK_NOT_FOUND")
    refused(agent_client.get(f"{ASKS}/999999/decision?wait=5"), 404, "ERR_ASK_NOT_FOUND")
    refused(decide(integration_client, 999999, approved=True, by="x"), 404, "ERR_ASK_NOT_FOUND")


# Deciding


def test_an_agent_key_cannot_decide_an_ask(agent_client: ApiClient) -> None:
    """Deciding is scope `decide`, which agent keys do not get: a run must not approve its own tool call."""
    ask_id = open_ask(agent_client)["id"]

    body = refused(decide(agent_client, ask_id, approved=True, by="me"), 403, "ERR_SCOPE")

    assert "'decide'" in body["error"]
    assert "/inbox/" in body["error"]
    assert "--scopes decide" in body["error"]
    assert Ask.objects.get(pk=ask_id).status == Ask.Status.OPEN


def test_the_key_that_opened_an_ask_cannot_decide_it_even_with_scope_decide(project: Project) -> None:
    both = sibling(project, [AgentKey.Scope.ASKS, AgentKey.Scope.DECIDE])
    ask_id = open_ask(both)["id"]
    events_before = RunEvent.objects.count()

    body = refused(decide(both, ask_id, approved=True, by="me"), 403, "ERR_OWN_ASK")

    assert "opened the ask" in body["error"]
    assert Ask.objects.get(pk=ask_id).status == Ask.Status.OPEN
    assert RunEvent.objects.count() == events_before
    # another key of the project, an integration's, may
    assert decide(sibling(project, [AgentKey.Scope.DECIDE]), ask_id, approved=True, by="bot").status_code == 200


def _ingest_pause(client: ApiClient, run_id: str, tool_call_id: str) -> Ask:
    """An ask opened the other way: from an ingested pause.request event."""
    pause = {"reason": "ask", "questionPayload": {"toolCallId": tool_call_id, "toolName": "refund", "question": "OK?"}}
    event = {"seq": 0, "type": "agentfootprint.pause.request", "payload": pause, "meta": {"runId": run_id}}
    assert client.ingest([event]).status_code == 200
    return Ask.objects.get(run_id=run_id, tool_call_id=tool_call_id)


def test_the_key_whose_events_opened_an_ask_cannot_decide_it(project: Project) -> None:
    both = sibling(project, [AgentKey.Scope.INGEST, AgentKey.Scope.DECIDE])
    ask = _ingest_pause(both, "run-ev", "call-7")

    refused(decide(both, ask.pk, by="me", value="yes"), 403, "ERR_OWN_ASK")

    assert Ask.objects.get(pk=ask.pk).status == Ask.Status.OPEN
    assert decide(sibling(project, [AgentKey.Scope.DECIDE]), ask.pk, by="bot", value="yes").status_code == 200


def test_the_key_that_opened_an_ask_without_a_checkpoint_cannot_decide_it(project: Project) -> None:
    both = sibling(project, [AgentKey.Scope.ASKS, AgentKey.Scope.DECIDE])
    ask_id = open_ask(both, plain_body())["id"]

    refused(decide(both, ask_id, approved=True, by="me"), 403, "ERR_OWN_ASK")

    assert Ask.objects.get(pk=ask_id).status == Ask.Status.OPEN


def test_the_key_that_posted_an_asks_checkpoint_cannot_decide_it(project: Project, agent_client: ApiClient) -> None:
    """Another key's events opened the ask; this key's re-post bound the checkpoint to itself."""
    ask = _ingest_pause(agent_client, "run-cp", "call-8")
    both = sibling(project, [AgentKey.Scope.ASKS, AgentKey.Scope.DECIDE])
    open_ask(both, {**plain_body(tool_call_id="call-8", run_id="run-cp"), "checkpoint": B_CHECKPOINT}, status=200)

    refused(decide(both, ask.pk, approved=True, by="me"), 403, "ERR_OWN_ASK")

    assert Ask.objects.get(pk=ask.pk).status == Ask.Status.OPEN


def test_decide_answers_200_with_the_decision(integration_client: ApiClient, agent_client: ApiClient) -> None:
    ask_id = open_ask(agent_client)["id"]

    response = decide(integration_client, ask_id, approved=False, by="slack:omar", note="no PO on file")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "decided"
    decision = body["decision"]
    assert (decision["approved"], decision["by"], decision["note"]) == (False, "slack:omar", "no PO on file")
    stored = Ask.objects.get(pk=ask_id)
    assert stored.decided_via == Ask.Via.API
    assert stored.decided_by is None
    assert agent_client.get(f"{ASKS}/{ask_id}").json()["ask"]["decision"] == decision
    assert agent_client.get(f"{ASKS}/{ask_id}/decision").json() == {"status": "decided", "decision": decision}


def test_decide_shape_is_a_framework_check_in_decision(integration_client: ApiClient, agent_client: ApiClient) -> None:
    # what the framework itself resumed the b run with (pause.resume's resumeInput)
    resume = load_fixture("b-middleware/resume-declined.json")
    (framework,) = [e["payload"]["resumeInput"] for e in resume["pauseEvents"] if e["type"].endswith("pause.resume")]
    ask_id = open_ask(agent_client)["id"]
    before_ms = time.time() * 1000

    decide(integration_client, ask_id, approved=False, by="omar@treasury", note="no PO on file")
    decision = agent_client.get(f"{ASKS}/{ask_id}/decision").json()["decision"]

    # isCheckInDecision(x): boolean approved and string by
    assert isinstance(decision["approved"], bool)
    assert isinstance(decision["by"], str)
    assert isinstance(decision["at"], int)
    assert not isinstance(decision["at"], bool)
    assert before_ms - 60_000 <= decision["at"] <= time.time() * 1000 + 60_000  # unix ms
    assert decision.keys() == framework.keys()
    assert {k: type(v) for k, v in decision.items()} == {k: type(v) for k, v in framework.items()}


def test_decide_with_a_value(integration_client: ApiClient, agent_client: ApiClient) -> None:
    ask_id = open_ask(agent_client)["id"]
    value = {"kind": "payee", "value": "ACC-900"}

    decision = decide(integration_client, ask_id, approved=True, by="bot", value=value).json()["decision"]

    assert decision["value"] == value
    assert "answer" not in decision
    assert "note" not in decision


def test_decide_plain_ask_answer(integration_client: ApiClient, agent_client: ApiClient) -> None:
    ask_id = open_ask(agent_client, plain_body())["id"]

    response = decide(integration_client, ask_id, by="bot", value={"region": "eu-west-1"})

    assert response.status_code == 200, response.content
    decision = response.json()["decision"]
    assert decision["approved"] is True
    assert decision["answer"] == {"region": "eu-west-1"}
    assert "value" not in decision


def test_decide_plain_ask_with_json_null_answers_null(integration_client: ApiClient, agent_client: ApiClient) -> None:
    """Any value is a question's answer (spec §2.1), null too: it is kept apart from no value."""
    ask_id = open_ask(agent_client, plain_body())["id"]

    decision = decide(integration_client, ask_id, by="bot", value=None).json()["decision"]

    assert decision["answer"] is None
    assert agent_client.get(f"{ASKS}/{ask_id}/decision").json()["decision"]["answer"] is None


def test_decide_plain_ask_without_a_value_is_refused(integration_client: ApiClient, agent_client: ApiClient) -> None:
    ask_id = open_ask(agent_client, plain_body())["id"]

    refused(decide(integration_client, ask_id, by="bot"), 422, "ERR_INVALID_ASK")


def test_a_plain_ask_closed_by_its_deadline_gives_no_answer_to_resume_with(agent_client: ApiClient) -> None:
    """Resumed without an answer, the framework refuses (ERR_PAUSE_ANSWER_REQUIRED, spec §2.4) and
    the checkpoint stays good; `answer: null` would have run the tool as if a person said null."""
    body = {**plain_body(), "deadline": (timezone.now() - timedelta(seconds=1)).isoformat()}
    ask_id = open_ask(agent_client, body)["id"]
    assert asks_apply_deadlines() == 1

    decision = agent_client.get(f"{ASKS}/{ask_id}/decision").json()["decision"]

    assert decision["by"] == "deadline"
    assert "answer" not in decision


@pytest.mark.parametrize(
    "body",
    [
        {"approved": True},
        {"approved": True, "by": "   "},
        {"approved": True, "by": 7},
        {"by": "bot"},
        {"approved": "yes", "by": "bot"},
        {"approved": True, "by": "bot", "note": 5},
    ],
)
def test_decide_invalid_body_is_422(
    integration_client: ApiClient, agent_client: ApiClient, body: dict[str, Any]
) -> None:
    ask_id = open_ask(agent_client)["id"]

    refused(integration_client.post_json(f"{ASKS}/{ask_id}/decision", body), 422, "ERR_INVALID_ASK")
    assert Ask.objects.get(pk=ask_id).status == Ask.Status.OPEN


def test_decide_second_time_is_409_naming_who_and_when(
    integration_client: ApiClient, agent_client: ApiClient, project: Project
) -> None:
    ask_id = open_ask(agent_client)["id"]
    first = decide(integration_client, ask_id, approved=True, by="dana@treasury", note="SC-88").json()["decision"]

    second = decide(sibling(project), ask_id, approved=False, by="mallory")

    body = refused(second, 409, "ERR_ALREADY_DECIDED")
    assert "dana@treasury" in body["error"]
    assert "approved" in body["error"]
    stored = Ask.objects.get(pk=ask_id)
    assert stored.decided_at.isoformat() in body["error"]
    assert body["decision"] == first
    assert stored.decided_by_label == "dana@treasury"
    assert RunEvent.objects.filter(type="ledger.human_decision").count() == 1


def test_decide_records_the_decision_in_the_run_chain(integration_client: ApiClient, agent_client: ApiClient) -> None:
    events = numbered_per_run(load_fixture("b-middleware/events-declined.json")["events"])[:72]
    assert agent_client.ingest(events).status_code == 200
    ask_id = open_ask(agent_client, status=200)["id"]

    decide(integration_client, ask_id, approved=True, by="dana@treasury")

    verdict = agent_client.get(f"/api/v1/runs/{B_RUN}/verify").json()
    assert verdict["valid"] is True
    assert verdict["recordsChecked"] == 71 + 1  # the run's own events plus the server's decision


# Waiting for the decision


def test_decision_of_an_open_ask_without_wait_is_open(agent_client: ApiClient) -> None:
    ask_id = open_ask(agent_client)["id"]

    assert agent_client.get(f"{ASKS}/{ask_id}/decision").json() == {"status": "open"}
    assert agent_client.get(f"{ASKS}/{ask_id}/decision?wait=-3").json() == {"status": "open"}


def test_decision_wait_on_a_decided_ask_answers_at_once(integration_client: ApiClient, agent_client: ApiClient) -> None:
    ask_id = open_ask(agent_client)["id"]
    decision = decide(integration_client, ask_id, approved=True, by="dana").json()["decision"]

    started = time.monotonic()
    response = agent_client.get(f"{ASKS}/{ask_id}/decision?wait=30")

    assert time.monotonic() - started < 5
    assert response.json() == {"status": "decided", "decision": decision}


@pytest.mark.django_db(transaction=True)
def test_decision_wait_on_an_open_ask_answers_open_after_the_wait(agent_client: ApiClient) -> None:
    ask_id = open_ask(agent_client)["id"]

    started = time.monotonic()
    response = agent_client.get(f"{ASKS}/{ask_id}/decision?wait=1")
    elapsed = time.monotonic() - started

    assert response.status_code == 200, response.content
    assert response.json() == {"status": "open"}
    assert elapsed >= 0.9


@pytest.mark.django_db(transaction=True)
def test_decision_long_poll_returns_as_soon_as_decided(integration_client: ApiClient, agent_client: ApiClient) -> None:
    ask_id = open_ask(agent_client)["id"]
    waiter = ApiClient(secret_of(agent_client))
    outcome: dict[str, Any] = {}

    def wait() -> None:
        try:
            started = time.monotonic()
            response = waiter.get(f"{ASKS}/{ask_id}/decision?wait=10")
            outcome["elapsed"] = time.monotonic() - started
            outcome["status"] = response.status_code
            outcome["body"] = response.json()
        finally:
            connections.close_all()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.5)
    decided = decide(integration_client, ask_id, approved=False, by="slack:omar", note="no PO on file")
    thread.join(20)

    assert not thread.is_alive()
    assert decided.status_code == 200
    assert outcome["status"] == 200
    assert outcome["body"] == {"status": "decided", "decision": decided.json()["decision"]}
    assert outcome["elapsed"] < 9.5  # woken by the decision, not by the end of the wait


@pytest.mark.django_db(transaction=True)
def test_decision_long_poll_wakes_every_waiter(integration_client: ApiClient, agent_client: ApiClient) -> None:
    ask_id = open_ask(agent_client)["id"]
    bodies: list[Any] = []

    def wait() -> None:
        try:
            bodies.append(ApiClient(secret_of(agent_client)).get(f"{ASKS}/{ask_id}/decision?wait=10").json())
        finally:
            connections.close_all()

    threads = [threading.Thread(target=wait) for _ in range(5)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    decision = decide(integration_client, ask_id, approved=True, by="dana").json()["decision"]
    for thread in threads:
        thread.join(20)

    assert not any(t.is_alive() for t in threads)
    assert bodies == [{"status": "decided", "decision": decision}] * 5


@pytest.mark.django_db(transaction=True)
def test_a_wait_beyond_the_processs_wait_slots_answers_open_at_once_with_when_to_ask_again(
    integration_client: ApiClient, agent_client: ApiClient, settings: Any
) -> None:
    """Each wait holds a web thread: past FOOTPRINT_ASK_WAITS_PER_PROCESS the wait is not held, so
    a thread stays free for the decision that ends the others."""
    settings.FOOTPRINT_ASK_WAITS_PER_PROCESS = 1
    first, second = open_ask(agent_client)["id"], open_ask(agent_client, plain_body())["id"]
    outcome: dict[str, Any] = {}

    def wait() -> None:
        try:
            outcome["body"] = ApiClient(secret_of(agent_client)).get(f"{ASKS}/{first}/decision?wait=20").json()
        finally:
            connections.close_all()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.5)
    started = time.monotonic()
    turned_away = agent_client.get(f"{ASKS}/{second}/decision?wait=20")
    elapsed = time.monotonic() - started
    decided = decide(integration_client, first, approved=True, by="dana")
    thread.join(20)

    assert turned_away.json() == {"status": "open", "retryAfterMs": 2000}
    assert turned_away["Retry-After"] == "2"
    assert elapsed < 5
    assert outcome["body"] == {"status": "decided", "decision": decided.json()["decision"]}


@pytest.mark.django_db(transaction=True)
def test_waiting_agents_never_keep_a_decision_from_being_made_under_gunicorn(tmp_path: Path, project: Any) -> None:
    """Twice as many agents wait as the server has threads (4 workers x 4): the waits they found
    no slot for answer open with a time to ask again, and an integration's decision, the request
    that releases a wait, is answered at once instead of queueing behind them."""
    from tests.servers import Gunicorn

    agent_secret = agent_key_create(project=project, scopes=AGENT_SCOPES)[1]
    decider_secret = agent_key_create(project=project, scopes=[AgentKey.Scope.DECIDE])[1]
    workers, threads = 4, 4
    ask_ids = [
        ask_open(
            project=project,
            key=None,
            run_id=f"run-wait-{n}",
            session_id=None,
            pause_data={"toolCallId": "t3", "toolName": "pay", "ask": {"question": f"Pay {n}?"}},
            checkpoint=None,
            deadline=None,
            on_timeout="decline",
        )[0].pk
        for n in range(2 * workers * threads)
    ]
    server = Gunicorn(tmp_path / "gunicorn.log", workers=workers, env={"WEB_THREADS": str(threads)})
    waiting: list[http.client.HTTPConnection] = []
    try:
        server.start()
        for ask_id in ask_ids:
            agent = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            agent.request(
                "GET", f"/api/v1/asks/{ask_id}/decision?wait=30", headers={"Authorization": f"Bearer {agent_secret}"}
            )
            waiting.append(agent)
        time.sleep(2)  # every wait is held or answered
        decider = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        started = time.monotonic()
        decider.request(
            "POST",
            f"/api/v1/asks/{ask_ids[0]}/decision",
            body=json.dumps({"approved": True, "by": "ops-bot"}),
            headers={"Authorization": f"Bearer {decider_secret}", "Content-Type": "application/json"},
        )
        answer = decider.getresponse()
        answer.read()
        elapsed = time.monotonic() - started
    finally:
        for agent in waiting:
            agent.close()
        server.stop()

    assert answer.status == 200
    assert elapsed < 5


# Exactly once under contention


@pytest.mark.django_db(transaction=True)
def test_decide_fifty_at_once_exactly_one_wins(agent_client: ApiClient, integration_client: ApiClient) -> None:
    ask_id = open_ask(agent_client)["id"]
    secret = secret_of(integration_client)
    contenders = 50
    barrier = threading.Barrier(contenders)
    results: list[tuple[int, dict[str, Any]]] = []
    lock = threading.Lock()

    def contend(n: int) -> None:
        try:
            client = ApiClient(secret)
            barrier.wait(timeout=30)
            response = decide(client, ask_id, approved=n % 2 == 0, by=f"bot-{n}")
            with lock:
                results.append((response.status_code, response.json()))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert not any(t.is_alive() for t in threads)
    assert sorted(status for status, _ in results) == [200] + [409] * (contenders - 1)
    (winner,) = [body["decision"] for status, body in results if status == 200]
    for status, body in results:
        if status == 409:
            assert body["code"] == "ERR_ALREADY_DECIDED"
            assert f"by {winner['by']} at" in body["error"]
            assert body["decision"] == winner
    stored = Ask.objects.get(pk=ask_id)
    assert stored.decided_by_label == winner["by"]
    assert stored.approved is winner["approved"]
    assert RunEvent.objects.filter(type="ledger.human_decision").count() == 1
