"""The two pause kinds agentfootprint added after 9.62: a person takeover (a tool hands its browser
to a person with `handControlTo('person')` and pauses) and an authorization consent (a tool's
declared credential answers `authorization-required`; once a person consents, the resumed step is
`issued` the credential). Each is an ask of its own kind, worded for what approving does, decided
once and handed to the waiting agent like any ask, and closed by what its resumed run reports."""

import json
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test import Client

from ledger.models import Ask, Run, RunEvent
from tenancy.models import Project
from tests.conftest import ApiClient
from tests.ledger.ask_helpers import ASKS, decide, open_ask, refused
from tests.ledger.pause_fixtures import (
    ask_body,
    pause_events,
    paused_run,
    resume_events,
    resumed_run,
    scenario,
    session_of,
)

pytestmark = pytest.mark.django_db

CONSENT_URL = "https://idp.example/consent?state=s1"  # the fixture provider's bearer capability
GRANTS = "grant the authorization the step asks for"
HANDS_BACK = "hand control back to the agent"


def _opened_from_events(client: ApiClient, name: str) -> Ask:
    assert client.ingest(pause_events(name)).status_code == 200
    return Ask.objects.get(run_id=paused_run(name))


def _page(client: Client, ask: Ask) -> str:
    response = client.get(f"/asks/{ask.pk}/")
    assert response.status_code == 200
    return response.content.decode()


# --- an authorization consent -------------------------------------------------------------------


def test_a_consent_pause_reaches_the_inbox_as_an_authorization_consent(
    agent_client: ApiClient, approver_client: Client
) -> None:
    ask = _opened_from_events(agent_client, "consent-a")

    assert ask.kind == Ask.Kind.CREDENTIAL
    assert ask.tool_call_id == "op-5"
    assert ask.question == "Authorize access to 'billing' so 'pay_invoice' can run."
    assert ask.session_id == session_of("consent-a")  # traced from the consumer-scope pause to its run
    assert Run.objects.get(run_id=paused_run("consent-a")).status == Run.Status.PAUSED
    inbox = approver_client.get("/inbox/").content.decode()
    assert "authorization consent" in inbox
    assert f"approve to {GRANTS}" in inbox
    page = _page(approver_client, ask)
    assert f"Approving will {GRANTS}; then" in page
    assert f"Approve: {GRANTS}</button>" in page
    assert "billing" in page


def test_the_consent_url_the_agent_posts_is_never_shown_or_answered(
    agent_client: ApiClient, integration_client: ApiClient, approver_client: Client
) -> None:
    """The URL is a bearer capability: the agent has it on its outcome (and in the checkpoint only
    it is handed back), nobody else gets it here."""
    created = open_ask(agent_client, ask_body("consent-a"))
    assert created["kind"] == "credential"

    for body in (
        json.dumps(created),
        integration_client.get(f"{ASKS}/{created['id']}").content.decode(),
        integration_client.get(f"{ASKS}?status=open").content.decode(),
        _page(approver_client, Ask.objects.get(pk=created["id"])),
        approver_client.get("/inbox/").content.decode(),
    ):
        assert CONSENT_URL not in body
        assert "idp.example" not in body


@pytest.mark.django_db(transaction=True)
def test_a_consent_is_decided_once_chained_and_wakes_the_waiting_agent(
    agent_client: ApiClient, integration_client: ApiClient, project: Project
) -> None:
    created = open_ask(agent_client, ask_body("consent-a"))
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)

    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute('LISTEN "ask_decided"')
        response = decide(integration_client, created["id"], approved=True, by="dana@billing", note="consented")
        notices = list(listener.notifies(timeout=5, stop_after=1))

    assert response.status_code == 200, response.content
    assert [(n.channel, n.payload) for n in notices] == [("ask_decided", str(created["id"]))]
    # What the agent's long-poll hands it: the decision it resumes the run with.
    waiting = agent_client.get(f"{ASKS}/{created['id']}/decision?wait=1").json()
    assert waiting["status"] == "decided"
    assert waiting["decision"] | {"at": 0} == {"approved": True, "by": "dana@billing", "note": "consented", "at": 0}
    chained = RunEvent.objects.get(run__run_id=paused_run("consent-a"), type="ledger.human_decision")
    assert chained.doc["payload"]["kind"] == "credential"
    assert chained.doc["payload"]["toolCallId"] == "op-5"
    refused(decide(integration_client, created["id"], approved=False, by="mallory"), 409, "ERR_ALREADY_DECIDED")


def test_the_resumed_run_issued_the_credential_closes_the_consent_approved(agent_client: ApiClient) -> None:
    ask = _opened_from_events(agent_client, "consent-a")

    assert agent_client.ingest(resume_events("consent-a")).status_code == 200

    ask.refresh_from_db()
    assert (ask.status, ask.approved, ask.decided_via) == (Ask.Status.DECIDED, True, Ask.Via.RUN)
    assert ask.decided_by_label == f"resumed run {resumed_run('consent-a')}"
    assert ask.note == "the resumed run was issued the credential"


def test_a_resumed_run_still_unauthorized_closes_the_consent_declined(agent_client: ApiClient) -> None:
    """The framework then hands the model a URL-free refusal and may pause afresh (spec §2.4)."""
    ask = _opened_from_events(agent_client, "consent-a")
    events = resume_events("consent-a")
    for event in events:
        if event["type"] == "agentfootprint.credential.acquired":
            event["type"] = "agentfootprint.credential.authorization_required"
            event["payload"] = {"service": "billing", "sessionId": "idp-session-2"}

    assert agent_client.ingest(events).status_code == 200

    ask.refresh_from_db()
    assert (ask.status, ask.approved, ask.decided_via) == (Ask.Status.DECIDED, False, Ask.Via.RUN)
    assert ask.note == "the resumed run still lacked the authorization"


def test_the_paused_runs_own_authorization_required_closes_nothing(agent_client: ApiClient) -> None:
    """The run that paused reported `credential.authorization_required` before its pause: that is
    why it asks, not an answer."""
    ask = _opened_from_events(agent_client, "consent-a")
    assert ask.status == Ask.Status.OPEN


# --- a person takeover --------------------------------------------------------------------------


def test_a_takeover_pause_reaches_the_inbox_as_a_person_takeover(
    agent_client: ApiClient, approver_client: Client
) -> None:
    ask = _opened_from_events(agent_client, "takeover-a")

    assert ask.kind == Ask.Kind.TAKEOVER
    assert ask.tool_call_id == "t3"
    assert ask.question == "Finish the login on portal.example, then hand control back to the agent."
    assert ask.detail == {
        "handControlTo": "person",
        "browserSessionId": "browser-session-1",
        "liveViewEndpoint": "wss://live.example/view",
    }
    inbox = approver_client.get("/inbox/").content.decode()
    assert "person takeover" in inbox
    assert f"approve to {HANDS_BACK}" in inbox
    page = _page(approver_client, ask)
    assert f"Approving will {HANDS_BACK}; then" in page
    assert f"Approve: {HANDS_BACK}</button>" in page
    assert "wss://live.example/view" in page  # where the person takes over


def test_a_takeover_decided_on_the_page_is_what_the_agent_resumes_with(
    agent_client: ApiClient, approver_client: Client, approver: Any
) -> None:
    created = open_ask(agent_client, ask_body("takeover-a"))
    assert created["kind"] == "takeover"

    response = approver_client.post(f"/asks/{created['id']}/decide/", {"decision": "approve", "note": "logged in"})

    assert response.status_code == 302
    answer = agent_client.get(f"{ASKS}/{created['id']}/decision").json()
    assert answer["status"] == "decided"
    assert answer["decision"] | {"at": 0} == {"approved": True, "by": approver.username, "note": "logged in", "at": 0}
    assert RunEvent.objects.filter(run__run_id=paused_run("takeover-a"), type="ledger.human_decision").count() == 1
    again = approver_client.post(f"/asks/{created['id']}/decide/", {"decision": "decline"})
    assert again.status_code == 409


@pytest.mark.parametrize("value", [None, "done", {"handControlTo": "agent"}])
def test_a_takeover_decided_by_an_integration_takes_any_value_or_none(
    agent_client: ApiClient, integration_client: ApiClient, value: Any
) -> None:
    """A takeover is an askHuman pause: what it resumes with is the tool's result, any value."""
    created = open_ask(agent_client, ask_body("takeover-a"))
    body: dict[str, Any] = {"approved": True, "by": "sam@ops"}
    if value is not None:
        body["value"] = value

    response = decide(integration_client, created["id"], **body)

    assert response.status_code == 200, response.content
    decision = response.json()["decision"]
    assert decision.get("value") == value


def test_a_takeover_decision_without_approved_is_refused(
    agent_client: ApiClient, integration_client: ApiClient
) -> None:
    created = open_ask(agent_client, ask_body("takeover-a"))
    body = refused(decide(integration_client, created["id"], by="sam@ops"), 422, "ERR_INVALID_ASK")
    assert "approved" in body["error"]
    assert Ask.objects.get(pk=created["id"]).status == Ask.Status.OPEN


def test_the_resumed_run_carrying_on_closes_the_takeover(agent_client: ApiClient) -> None:
    ask = _opened_from_events(agent_client, "takeover-a")

    assert agent_client.ingest(resume_events("takeover-a")).status_code == 200

    ask.refresh_from_db()
    assert (ask.status, ask.approved, ask.decided_via) == (Ask.Status.DECIDED, True, Ask.Via.RUN)
    assert ask.note == "the resumed run took the controls back and carried on"


@pytest.mark.parametrize("name", ["takeover-a", "consent-a"])
def test_a_resumed_run_whose_events_come_first_closes_the_ask_once_it_opens(agent_client: ApiClient, name: str) -> None:
    """The resumed run's batch flushed before the paused run's: the ask opens already answered."""
    assert agent_client.ingest(resume_events(name, with_consumer_scope=False)).status_code == 200

    ask = _opened_from_events(agent_client, name)

    assert (ask.status, ask.decided_via) == (Ask.Status.DECIDED, Ask.Via.RUN)


@pytest.mark.parametrize("name", ["takeover-a", "consent-a"])
def test_a_key_that_may_not_handle_asks_closes_nothing_with_its_run(
    agent_client: ApiClient, ingest_only_client: ApiClient, name: str
) -> None:
    ask = _opened_from_events(agent_client, name)

    assert ingest_only_client.ingest(resume_events(name, with_consumer_scope=False)).status_code == 200

    ask.refresh_from_db()
    assert ask.status == Ask.Status.OPEN


def test_the_fixtures_are_the_frameworks_two_sessions_on_one_call_id() -> None:
    """What the session tests rely on: each scenario paused twice, in two sessions, on one id."""
    for kind, call_id in (("consent", "op-5"), ("takeover", "t3")):
        a, b = scenario(f"{kind}-a"), scenario(f"{kind}-b")
        assert a["pauseOutcome"]["pauseData"]["toolCallId"] == b["pauseOutcome"]["pauseData"]["toolCallId"] == call_id
        assert session_of(f"{kind}-a") != session_of(f"{kind}-b")
        assert {e["meta"].get("sessionId") for e in resume_events(f"{kind}-a", with_consumer_scope=False)} == {
            session_of(f"{kind}-a")
        }
