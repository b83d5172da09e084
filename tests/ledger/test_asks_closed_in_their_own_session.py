"""A resumed run's report closes the ask of its own session and agent. Scripted and mock providers
reuse tool call ids (`op-5`, `t3`, `c3`) across sessions, so two sessions of one project that
paused on the same id each close their own ask, whichever report arrives first, and whether the
reports come before the pauses or after. Only a true ambiguity (one session paused twice on one
call id) stays undecided, and the ask page says why."""

import copy
from typing import Any

import pytest
from django.test import Client

from ledger.asks.services import ask_open, asks_from_events
from ledger.ingest.envelopes import check_events
from ledger.models import Ask
from tenancy.models import Project
from tests.conftest import ApiClient, load_fixture, numbered_per_run
from tests.ledger.ask_helpers import ASKS, open_ask, sibling
from tests.ledger.pause_fixtures import CONSUMER_SCOPE, paused_run, resumed_run, scenario

pytestmark = pytest.mark.django_db

# The order one agent process sends the halves of two sessions in: (scenario, half).
ORDERS = {
    "b resumed first": [("a", "pause"), ("b", "pause"), ("b", "resume"), ("a", "resume")],
    "a resumed first": [("a", "pause"), ("b", "pause"), ("a", "resume"), ("b", "resume")],
    "reports before pauses": [("b", "resume"), ("a", "resume"), ("a", "pause"), ("b", "pause")],
}


def _halves(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    cut = doc["resumeStartsAtSeq"]
    return {"pause": doc["events"][:cut], "resume": doc["events"][cut:]}


def _with_resumed_session(doc: dict[str, Any]) -> dict[str, Any]:
    """The capture as `agent.resume(checkpoint, decision, { sessionId })` sends it: the resumed
    run's events carry the session (9.62.0 stamps it, as the consent and takeover captures show)."""
    doc = copy.deepcopy(doc)
    session = next(e["meta"]["sessionId"] for e in doc["events"] if e["meta"].get("sessionId"))
    for event in doc["events"][doc["resumeStartsAtSeq"] :]:
        if event["meta"]["runId"] != CONSUMER_SCOPE:
            event["meta"]["sessionId"] = session
    return doc


def _send(client: ApiClient, docs: dict[str, dict[str, Any]], order: list[tuple[str, str]]) -> None:
    """Ingest the halves in `order`, numbered per run as one agent numbers what it sends."""
    parts = [_halves(docs[name])[half] for name, half in order]
    numbered = numbered_per_run([event for part in parts for event in part])
    start = 0
    for part in parts:
        response = client.ingest(numbered[start : start + len(part)])
        assert response.status_code == 200, response.content
        start += len(part)


def _ask_of(run_id: str) -> Ask:
    return Ask.objects.get(run_id=run_id)


# --- takeovers and consents: the framework's own two sessions on one call id ---------------------


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", ["consent", "takeover"])
def test_two_sessions_paused_on_one_call_id_each_close_their_own(
    agent_client: ApiClient, kind: str, order: str
) -> None:
    docs = {"a": scenario(f"{kind}-a"), "b": scenario(f"{kind}-b")}

    _send(agent_client, docs, ORDERS[order])

    for name in ("a", "b"):
        ask = _ask_of(paused_run(f"{kind}-{name}"))
        assert (ask.status, ask.approved, ask.decided_via) == (Ask.Status.DECIDED, True, Ask.Via.RUN), name
        assert ask.decided_by_label == f"resumed run {resumed_run(f'{kind}-{name}')}", name


@pytest.mark.parametrize("kind", ["consent", "takeover"])
def test_one_sessions_resumed_run_leaves_the_other_sessions_ask_open(agent_client: ApiClient, kind: str) -> None:
    docs = {"a": scenario(f"{kind}-a"), "b": scenario(f"{kind}-b")}

    _send(agent_client, docs, [("a", "pause"), ("b", "pause"), ("b", "resume")])

    assert _ask_of(paused_run(f"{kind}-a")).status == Ask.Status.OPEN
    assert _ask_of(paused_run(f"{kind}-b")).status == Ask.Status.DECIDED
    waiting = agent_client.get(f"{ASKS}?status=open").json()
    assert [ask["runId"] for ask in waiting["asks"]] == [paused_run(f"{kind}-a")]


# --- check-ins and middleware asks: the same rule for the reports they file ----------------------


CHECK_INS = {
    "a": ("c-checkin/events-approved.json", True, "alice@ops"),
    "b": ("c-checkin/events-declined.json", False, "bob@ops"),
}
MIDDLEWARE = {
    "a": ("b-middleware/events-approved.json", True, "dana@treasury"),
    "b": ("b-middleware/events-declined.json", False, "omar@treasury"),
}


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("captures", [CHECK_INS, MIDDLEWARE], ids=["check-in", "middleware ask"])
def test_check_ins_and_middleware_asks_of_two_sessions_each_close_their_own(
    agent_client: ApiClient, captures: dict[str, tuple[str, bool, str]], order: str
) -> None:
    docs = {name: _with_resumed_session(load_fixture(path)) for name, (path, _, _) in captures.items()}

    _send(agent_client, docs, ORDERS[order])

    for name, (_, approved, by) in captures.items():
        ask = _ask_of(docs[name]["events"][0]["meta"]["runId"])
        assert (ask.status, ask.approved, ask.decided_via) == (Ask.Status.DECIDED, approved, Ask.Via.RUN), name
        assert ask.decided_by_label == by, name


def test_a_report_without_a_session_closes_only_its_own_agents_ask(agent_client: ApiClient, project: Project) -> None:
    """Two agents (keys) of one project paused on `c3`, no session named: a resumed run reported by
    one agent closes that agent's ask, never the other's."""
    other_agent = sibling(project)
    outcome = load_fixture("c-checkin/checkin-pause.json")["pauseOutcome"]
    mine = open_ask(agent_client, {**outcome, "runId": "run-mine"})
    theirs = open_ask(other_agent, {**outcome, "runId": "run-theirs"})
    report = {"toolName": "post_to_channel", "toolCallId": "c3", "iteration": 3, "approved": True, "by": "alice@ops"}

    event = {"seq": 0, "type": "agentfootprint.checkin.decision", "payload": report, "meta": {"runId": "run-resumed"}}
    assert agent_client.ingest([event]).status_code == 200

    assert Ask.objects.get(pk=mine["id"]).status == Ask.Status.DECIDED
    assert Ask.objects.get(pk=theirs["id"]).status == Ask.Status.OPEN


def test_a_report_naming_another_session_closes_no_ask_without_one_of_its_own(agent_client: ApiClient) -> None:
    doc = _with_resumed_session(load_fixture("c-checkin/events-approved.json"))
    for event in doc["events"][doc["resumeStartsAtSeq"] :]:
        if event["meta"]["runId"] != CONSUMER_SCOPE:
            event["meta"]["sessionId"] = "fixture-session-elsewhere"

    _send(agent_client, {"a": doc}, [("a", "pause"), ("a", "resume")])

    assert _ask_of(doc["events"][0]["meta"]["runId"]).status == Ask.Status.OPEN


# --- the one true ambiguity ---------------------------------------------------------------------


def _paused_twice_in_one_session() -> dict[str, dict[str, Any]]:
    """Session c-approved paused on `c3` in two runs, then one resumed run reports a decision."""
    first = _with_resumed_session(load_fixture("c-checkin/events-approved.json"))
    second = copy.deepcopy(first)
    paused = first["events"][0]["meta"]["runId"]
    for event in second["events"]:
        if event["meta"]["runId"] == paused:
            event["meta"]["runId"] = "run-paused-again"
    return {"first": first, "second": second}


def test_one_session_paused_twice_on_one_call_id_stays_undecided_and_the_page_says_why(
    agent_client: ApiClient, approver_client: Client
) -> None:
    docs = _paused_twice_in_one_session()

    _send(agent_client, docs, [("first", "pause"), ("second", "pause"), ("first", "resume")])

    first, second = _ask_of(docs["first"]["events"][0]["meta"]["runId"]), _ask_of("run-paused-again")
    assert {first.status, second.status} == {Ask.Status.OPEN, Ask.Status.SUPERSEDED}
    assert first.decided_at is None
    assert second.decided_at is None
    for ask in (first, second):
        page = approver_client.get(f"/asks/{ask.pk}/").content.decode()
        assert "2 asks of this session paused on that call id" in page, ask.run_id
        assert "cannot tell which one it answers" in page
    answer = agent_client.get(f"{ASKS}/{second.pk if second.status == 'open' else first.pk}").json()["ask"]
    assert answer["status"] == "open"


def test_an_ask_alone_in_its_session_says_nothing_of_ambiguity(
    agent_client: ApiClient, approver_client: Client
) -> None:
    docs = {"a": scenario("takeover-a"), "b": scenario("takeover-b")}
    _send(agent_client, docs, [("a", "pause"), ("b", "pause")])

    page = approver_client.get(f"/asks/{_ask_of(paused_run('takeover-a')).pk}/").content.decode()

    assert "cannot tell which one it answers" not in page


def test_a_call_id_paused_in_many_sessions_still_closes_the_reporting_sessions_ask(project: Project) -> None:
    """A scripted id pauses in every session that runs the script: the one named is found among them."""
    pause_data = load_fixture("c-checkin/checkin-pause.json")["pauseOutcome"]["pauseData"]
    asks = [
        ask_open(
            project=project,
            key=None,
            run_id=f"run-{n}",
            session_id=f"session-{n}",
            pause_data=pause_data,
            checkpoint=None,
            deadline=None,
            on_timeout="decline",
        )[0]
        for n in range(30)
    ]
    report = {"toolCallId": "c3", "approved": True, "by": "alice@ops"}
    meta = {"runId": "run-resumed-29", "sessionId": "session-29"}
    events = check_events([{"seq": 0, "type": "agentfootprint.checkin.decision", "payload": report, "meta": meta}])

    asks_from_events(project=project, events=events, key=None)

    decided = Ask.objects.filter(pk__in=[ask.pk for ask in asks], status=Ask.Status.DECIDED)
    assert [ask.session_id for ask in decided] == ["session-29"]
