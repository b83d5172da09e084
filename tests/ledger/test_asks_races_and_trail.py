"""Asks under races and their audit trail: exactly one decision, no deadlock with ingestion, the long-poll, the
audit trail of who decided, and what a decision body may carry."""

import copy
import json
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from ledger.asks.services import ask_open, asks_apply_deadlines
from ledger.models import Ask, RunEvent
from tenancy.models import Membership, Project
from tenancy.services import agent_key_create
from tests.conftest import ApiClient, load_fixture, person
from tests.ledger.ask_helpers import in_thread

pytestmark = pytest.mark.django_db

ASKS = "/api/v1/asks"
DECISION_EVENT = "ledger.human_decision"
B_OUTCOME = load_fixture("b-middleware/ask-pause.json")["pauseOutcome"]
B_CHECKPOINT = load_fixture("b-middleware/ask-checkpoint.json")
B_RUN = "run-1796043009968-3"


def _secret_of(client: ApiClient) -> str:
    return client.defaults["HTTP_AUTHORIZATION"].removeprefix("Bearer ")


def _open_b(client: ApiClient, run_id: str = B_RUN) -> int:
    body = {**copy.deepcopy(B_OUTCOME), "checkpoint": copy.deepcopy(B_CHECKPOINT), "runId": run_id}
    response = client.post_json(ASKS, body)
    assert response.status_code in (200, 201), response.content
    return int(response.json()["ask"]["id"])


def _open_plain(client: ApiClient, tool_call_id: str = "q1", run_id: str = "run-q") -> int:
    body = {"runId": run_id, "pauseData": {"toolCallId": tool_call_id, "toolName": "ask_user", "question": "Region?"}}
    response = client.post_json(ASKS, body)
    assert response.status_code == 201, response.content
    return int(response.json()["ask"]["id"])


def _event(run_id: str, seq: int, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": type_,
        "payload": payload,
        "meta": {"runId": run_id, "wallClockMs": 1796040000000 + seq},
    }


def _raw_connection() -> psycopg.Connection[Any]:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    return psycopg.connect(**params)


def _wait_until_blocked(raw: psycopg.Connection[Any], count: int, timeout: float = 10.0) -> None:
    """Until `count` other backends of this database wait on a lock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with raw.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            (waiting,) = cur.fetchone()  # type: ignore[misc]
        raw.commit()
        if waiting >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} backends ever waited on a lock")


# --- bad decision bodies ------------------------------------------------------------------------


def test_api_decision_with_an_unknown_field_is_422_and_decides_nothing(
    integration_client: ApiClient, agent_client: ApiClient
) -> None:
    """A decision body field the API does not know (here the spec's `{answer}`) is refused, not dropped."""
    ask_id = _open_plain(agent_client)

    response = integration_client.post_json(f"{ASKS}/{ask_id}/decision", {"by": "bot", "answer": "eu-west-1"})

    assert response.status_code == 422, (response.status_code, response.content)
    assert "answer" in response.json()["error"]
    ask = Ask.objects.get(pk=ask_id)
    assert ask.status == Ask.Status.OPEN, f"decided with answer {ask.value!r}: the agent resumes with null"
    assert not RunEvent.objects.filter(type=DECISION_EVENT).exists()


@pytest.mark.parametrize("value", ["yes", 42, ["ACC-900"], {"value": "ACC-900"}, {"kind": 7, "value": "ACC-900"}])
def test_api_decision_value_of_a_consent_gate_must_be_a_decision_value(
    integration_client: ApiClient, agent_client: ApiClient, value: Any
) -> None:
    """A check-in / middleware-ask decision's `value` is a DecisionValue {kind: string, value, …} (spec §2.7)."""
    ask_id = _open_b(agent_client)

    response = integration_client.post_json(
        f"{ASKS}/{ask_id}/decision", {"approved": True, "by": "bot", "value": value}
    )

    assert response.status_code == 422, (response.status_code, response.content)
    assert "value" in response.json()["error"]
    assert Ask.objects.get(pk=ask_id).status == Ask.Status.OPEN
    assert not RunEvent.objects.filter(type=DECISION_EVENT).exists()


# --- a decision racing the run's own report of a resume ----------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("decider", ["api", "page", "deadline-pass"])
def test_decision_racing_a_reported_resume_never_fails(
    agent_client: ApiClient, integration_client: ApiClient, project: Project, django_user_model: Any, decider: str
) -> None:
    """A decision (API, page or deadline) and the resumed run's `checkin.decision` arriving together: none errors."""
    secret = _secret_of(agent_client)
    integration_secret = _secret_of(integration_client)
    approver = person(django_user_model, "bob", project, Membership.Role.APPROVER)
    run, resumed = "run-a", "run-z"  # ingestion locks its runs in sorted order: run-a, then run-z
    turn = "agentfootprint.agent.turn_start"
    assert (
        agent_client.ingest(
            [_event(run, 0, turn, {"turnIndex": 0}), _event(resumed, 0, turn, {"turnIndex": 0})]
        ).status_code
        == 200
    )
    ask_id = _open_b(agent_client, run_id=run)
    Ask.objects.filter(pk=ask_id).update(deadline=timezone.now() - timedelta(seconds=1))

    def decide_it() -> Any:
        if decider == "api":
            return ApiClient(integration_secret).post_json(
                f"{ASKS}/{ask_id}/decision", {"approved": False, "by": "dana"}
            )
        if decider == "page":
            client = Client()
            client.force_login(approver)
            return client.post(f"/asks/{ask_id}/decide/", {"decision": "decline"})
        return asks_apply_deadlines()

    reported = {"toolName": "transfer_funds", "toolCallId": "t3", "iteration": 1, "approved": True, "by": "alice@ops"}
    batch = [
        _event(run, 1, "agentfootprint.pause.resume", {"resumeInput": {"approved": True, "by": "alice@ops"}}),
        _event(resumed, 1, "agentfootprint.checkin.decision", reported),
    ]
    out: dict[str, Any] = {}
    holder = _raw_connection()
    watcher = _raw_connection()
    try:
        with holder.cursor() as cur:  # a third writer holds run-z for a moment, as any ingestion may
            cur.execute("SELECT id FROM ledger_run WHERE run_id = %s FOR UPDATE", [resumed])
        ingest = in_thread(lambda: ApiClient(secret).ingest(batch), out, "ingest")
        _wait_until_blocked(watcher, 1)  # the ingestion holds run-a and waits for run-z
        decide = in_thread(decide_it, out, "decide")
        _wait_until_blocked(watcher, 2)  # the decision holds the ask and waits for run-a
        holder.commit()
        ingest.join(30)
        decide.join(30)
    finally:
        holder.close()
        watcher.close()

    statuses = {name: getattr(out[name], "status_code", out[name]) for name in ("ingest", "decide")}
    shown = {name: getattr(out[name], "content", b"")[:300] for name in out}
    assert statuses["ingest"] == 200, (statuses, shown)
    expected = {"api": (200, 409), "page": (302, 409), "deadline-pass": (0, 1)}[decider]
    assert statuses["decide"] in expected, (statuses, shown)
    assert Ask.objects.get(pk=ask_id).status == Ask.Status.DECIDED


# --- the long-poll ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_decision_long_poll_wakes_at_once_when_the_run_reports_the_decision(agent_client: ApiClient) -> None:
    """An ask closed by the run's own `checkin.decision` wakes its long-poll at once, not at the end of the wait."""
    secret = _secret_of(agent_client)
    ask_id = _open_b(agent_client, run_id="run-a")
    out: dict[str, Any] = {}

    def wait() -> tuple[float, Any]:
        started = time.monotonic()
        response = ApiClient(secret).get(f"{ASKS}/{ask_id}/decision?wait=12")
        return time.monotonic() - started, response.json()

    waiter = in_thread(wait, out, "waiter")
    time.sleep(0.5)
    reported = {"toolName": "transfer_funds", "toolCallId": "t3", "iteration": 1, "approved": True, "by": "alice@ops"}
    assert agent_client.ingest([_event("run-z", 0, "agentfootprint.checkin.decision", reported)]).status_code == 200
    assert Ask.objects.get(pk=ask_id).status == Ask.Status.DECIDED  # the run's report closed it
    waiter.join(30)

    elapsed, body = out["waiter"]
    assert body["status"] == "decided"
    assert elapsed < 6, f"the long-poll answered after {elapsed:.1f} s: no NOTIFY for a run-reported decision"


# --- the audit trail ----------------------------------------------------------------------------


def test_api_decision_records_the_key_that_made_it(agent_client: ApiClient, project: Project) -> None:
    """An API decision keeps the authenticated key beside the free-text `by` (spec §9.3), in the ask and the chain."""
    key, secret = agent_key_create(project=project, scopes=["decide"])
    ask_id = _open_b(agent_client)

    response = ApiClient(secret).post_json(f"{ASKS}/{ask_id}/decision", {"approved": True, "by": "bob"})

    assert response.status_code == 200, response.content
    event = RunEvent.objects.get(type=DECISION_EVENT)
    stored = Ask.objects.get(pk=ask_id)
    recorded = {f.name: getattr(stored, f.attname) for f in Ask._meta.concrete_fields}
    assert key.prefix in event.body or key.pk in (recorded.get("decided_by_key"), recorded.get("decided_by_key_id")), (
        f"the decision names only by={stored.decided_by_label!r}; nothing records that key {key.prefix} made it"
    )


def test_ingested_events_cannot_forge_a_server_authored_decision(agent_client: ApiClient) -> None:
    """Only the server writes `ledger.human_decision` into a chain: an agent posting one is refused."""
    ask_id = _open_b(agent_client)
    forged = {
        "seq": 0,
        "type": DECISION_EVENT,
        "payload": {
            "askId": ask_id,
            "kind": "ask",
            "toolCallId": "t3",
            "toolName": "transfer_funds",
            "via": "page",
            "decision": {"approved": True, "by": "bob", "at": 1796040000000},
        },
        "meta": {"runId": B_RUN, "wallClockMs": 1796040000000, "author": "footprint-ledger"},
    }

    response = agent_client.ingest([forged])

    assert response.status_code == 422, (response.status_code, response.content[:300])
    assert not RunEvent.objects.filter(type=DECISION_EVENT).exists()


# --- opening an ask: the agent's POST racing the ingestion of its own pause.request ------------


@pytest.mark.django_db(transaction=True)
def test_ingested_pause_request_racing_the_agents_open_ask_is_stored_not_5xx(
    agent_client: ApiClient, project: Project
) -> None:
    """The observer's pause.request batch and openAsk's POST for the same pause land together: both succeed, one ask."""
    from django.db import transaction

    secret = _secret_of(agent_client)
    pause_data = copy.deepcopy(B_OUTCOME["pauseData"])
    pause = _event(
        "run-a", 0, "agentfootprint.pause.request", {"reason": "stage requested pause", "questionPayload": pause_data}
    )
    opened, go = threading.Event(), threading.Event()
    out: dict[str, Any] = {}

    def open_ask() -> int:  # POST /api/v1/asks's service, held open until the ingestion waits on it
        with transaction.atomic():
            ask, _ = ask_open(
                project=project,
                key=None,
                run_id="run-a",
                session_id=None,
                pause_data=pause_data,
                checkpoint=None,
                deadline=None,
                on_timeout="decline",
            )
            opened.set()
            go.wait(20)
        return ask.pk

    watcher = _raw_connection()
    try:
        poster = in_thread(open_ask, out, "open")
        assert opened.wait(20)
        ingest = in_thread(lambda: ApiClient(secret).ingest([pause]), out, "ingest")
        _wait_until_blocked(watcher, 1)  # the ingestion's insert of the same ask waits on the open one
        go.set()
        poster.join(30)
        ingest.join(30)
    finally:
        go.set()
        watcher.close()

    response = out["ingest"]
    assert getattr(response, "status_code", response) == 200, getattr(response, "content", response)
    assert Ask.objects.filter(run_id="run-a", tool_call_id="t3").count() == 1
    assert RunEvent.objects.filter(type="agentfootprint.pause.request").count() == 1


def test_api_answer_longer_than_the_pages_cap_is_422_and_decides_nothing(
    integration_client: ApiClient, agent_client: ApiClient
) -> None:
    """The API holds a plain ask's answer to the page form's 100,000-character cap, as it holds `note` to 2,000."""
    ask_id = _open_plain(agent_client)

    response = integration_client.post_json(f"{ASKS}/{ask_id}/decision", {"by": "bot", "value": "v" * 2_000_000})

    assert response.status_code in (413, 422), (response.status_code, response.content[:200])
    assert "value" in response.json()["error"]
    assert Ask.objects.get(pk=ask_id).status == Ask.Status.OPEN


# --- exactly once: the page's double submit, an integration and the deadline pass at once -------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("deadline_passed", [False, True], ids=["in-time", "deadline-passed"])
def test_page_double_submit_api_and_deadline_pass_at_once_decide_exactly_once(
    agent_client: ApiClient,
    integration_client: ApiClient,
    project: Project,
    django_user_model: Any,
    deadline_passed: bool,
) -> None:
    """Two submits of one person's form, an API decision and the deadline pass race: one decision, one chain
    event. Past the deadline that decision is the deadline's, whether the pass or a late decider records it."""
    approver = person(django_user_model, "bob", project, Membership.Role.APPROVER)
    ask_id = _open_b(agent_client)
    deadline = timezone.now() + (timedelta(seconds=-1) if deadline_passed else timedelta(hours=1))
    Ask.objects.filter(pk=ask_id).update(deadline=deadline, on_timeout="approve")
    secret = _secret_of(integration_client)
    barrier = threading.Barrier(4)
    out: dict[str, Any] = {}

    def page_submit() -> int:
        client = Client()
        client.force_login(approver)
        barrier.wait(20)
        return client.post(f"/asks/{ask_id}/decide/", {"decision": "decline", "note": "no PO"}).status_code

    def api() -> int:
        client = ApiClient(secret)
        barrier.wait(20)
        return client.post_json(f"{ASKS}/{ask_id}/decision", {"approved": True, "by": "slack:omar"}).status_code

    def deadline_pass() -> int:
        barrier.wait(20)
        return asks_apply_deadlines()

    threads = [
        in_thread(page_submit, out, "page-1"),
        in_thread(page_submit, out, "page-2"),
        in_thread(api, out, "api"),
        in_thread(deadline_pass, out, "deadline"),
    ]
    for thread in threads:
        thread.join(60)

    assert not any(isinstance(v, BaseException) for v in out.values()), out
    stored = Ask.objects.get(pk=ask_id)
    if deadline_passed:
        assert (out["page-1"], out["page-2"], out["api"]) == (409, 409, 409), out
        assert out["deadline"] in (0, 1), out
        assert (stored.decided_via, stored.approved) == (Ask.Via.DEADLINE, True)
    else:
        wins = [n for n in ("page-1", "page-2") if out[n] == 302] + (["api"] if out["api"] == 200 else [])
        assert len(wins) == 1, out
        assert all(out[n] in (302, 409) for n in ("page-1", "page-2")), out
        assert out["api"] in (200, 409), out
        assert out["deadline"] == 0, out
    assert RunEvent.objects.filter(type=DECISION_EVENT).count() == 1
    event = json.loads(RunEvent.objects.get(type=DECISION_EVENT).body)
    assert event["payload"]["decision"] == stored.decision()
    verdict = agent_client.get(f"/api/v1/runs/{B_RUN}/verify").json()
    assert verdict["valid"] is True, verdict


# --- a run's report of its own decision must close only its own ask -----------------------------


def test_reported_check_in_decision_of_an_already_decided_ask_never_decides_another_one(
    agent_client: ApiClient, approver_client: Client
) -> None:
    """Bob declines session Y's c3 on the page; Y's resumed run reports it: session X's open c3 stays open."""
    outcome = load_fixture("c-checkin/checkin-pause.json")["pauseOutcome"]
    asks = {}
    for run_id in ("run-x", "run-y"):
        response = agent_client.post_json(ASKS, {**copy.deepcopy(outcome), "runId": run_id})
        assert response.status_code == 201, response.content
        asks[run_id] = response.json()["ask"]["id"]
    assert (
        approver_client.post(
            f"/asks/{asks['run-y']}/decide/", {"decision": "decline", "note": "wrong channel"}
        ).status_code
        == 302
    )
    # agent.resume(checkpoint_y, decision) emits checkin.decision under the resumed run's fresh runId
    reported = {
        "toolName": "post_to_channel",
        "toolCallId": "c3",
        "iteration": 3,
        "approved": False,
        "by": "bob",
        "note": "wrong channel",
    }

    assert (
        agent_client.ingest([_event("run-y-resumed", 0, "agentfootprint.checkin.decision", reported)]).status_code
        == 200
    )

    x = Ask.objects.get(pk=asks["run-x"])
    assert x.status == Ask.Status.OPEN, (
        f"run-x's ask was decided via {x.decided_via} by {x.decided_by_label!r}: session Y's decision closed it"
    )
