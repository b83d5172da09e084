"""What a resumed run's report may close: not with an id PostgreSQL cannot hold (a 500 lost the
batch), not a question (its answer is the tool's result), not from a key that may not handle asks,
and not with a report from before the pause."""

import time
from typing import Any

import pytest

from ledger.models import Ask, RunEvent
from tenancy.models import Project
from tests.conftest import ApiClient
from tests.ledger.ask_helpers import ASKS, b_body, open_ask, plain_body, sibling

pytestmark = pytest.mark.django_db


def _event(run_id: str, seq: int, type_: str, payload: dict[str, Any], wall: int | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"runId": run_id}
    if wall is not None:
        meta["wallClockMs"] = wall
    return {"seq": seq, "type": "agentfootprint." + type_, "payload": payload, "meta": meta}


def _verdict_row(tool_call_id: str = "t3", why: str = "approved by dana@treasury") -> dict[str, Any]:
    """The b fixture's four-eyes ask, as its resumed run's row reports it (spec §1.7)."""
    return {
        "middleware": "four-eyes",
        "moment": "before-tool",
        "at": "tool",
        "toolName": "transfer_funds",
        "toolCallId": tool_call_id,
        "iteration": 3,
        "outcome": "allow",
        "changed": False,
        "why": why,
    }


# --- a report naming a call id with U+0000 ------------------------------------------------------


@pytest.mark.parametrize(
    ("type_", "payload"),
    [
        ("middleware.decision", _verdict_row("t\u00003")),  # today's verdict-row path
        ("checkin.decision", {"toolCallId": "t\u00003", "approved": True, "by": "x"}),
    ],
)
def test_a_reported_decision_whose_call_id_holds_nul_is_not_a_500(
    agent_client: ApiClient, type_: str, payload: dict[str, Any]
) -> None:
    """Ingestion keeps U+0000 in a payload (the queryable copies replace it); a report holding one
    in its call id names no ask (an id cannot hold it), so it is stored and closes nothing."""
    agent_client.raise_request_exception = False
    plain_row = {**_verdict_row("t\u00003"), "why": "checked"}
    assert agent_client.ingest([_event("run-nul-a", 0, "middleware.decision", plain_row)]).status_code == 200

    response = agent_client.ingest([_event("run-nul-b", 0, type_, payload)])

    assert response.status_code < 500, response.content
    if response.status_code == 200:
        assert RunEvent.objects.filter(run__run_id="run-nul-b").count() == 1


# --- a checkin.decision and a question -------------------------------------------------------


def test_a_checkin_decision_does_not_close_a_question_without_its_answer(agent_client: ApiClient) -> None:
    """Closed "approved" with no `answer`, the agent could not resume it (ERR_PAUSE_ANSWER_REQUIRED)
    and nobody could answer it any more (409). The framework files checkin.decision for check-ins."""
    ask = open_ask(agent_client, plain_body("q1", run_id="run-q"))
    report = {"toolCallId": "q1", "approved": True, "by": "someone"}
    assert agent_client.ingest([_event("run-q-resumed", 0, "checkin.decision", report)]).status_code == 200

    closed = Ask.objects.get(pk=ask["id"])
    assert closed.status == Ask.Status.OPEN, (closed.status, closed.approved, closed.answered, closed.decided_via)


# --- a key that may not handle asks --------------------------------------------------------------


def test_an_ingest_only_key_cannot_approve_another_agents_ask_with_a_verdict_row(
    agent_client: ApiClient, project: Project
) -> None:
    """A key with scope `ingest` alone (an exporter's, a log shipper's) is no agent's: its row is
    stored as evidence and decides nothing (deciding takes `decide`; a report, an agent's key)."""
    forger = sibling(project, ["ingest"])
    forged = [
        _event("run-forged", 0, "middleware.decision", _verdict_row()),
        _event("run-forged", 1, "stream.tool_end", {"toolCallId": "t3", "result": "ok"}),
    ]
    ask = open_ask(agent_client)
    assert forger.ingest(forged).status_code == 200

    answer = agent_client.get(f"{ASKS}/{ask['id']}/decision").json()
    assert answer["status"] == "open", answer


# --- a report from before the pause -------------------------------------------------------------


def test_a_verdict_row_from_before_the_pause_does_not_close_the_ask(agent_client: ApiClient) -> None:
    """A resumed run's report follows its pause: one stamped a day before it (scripted ids like
    `t3` repeat across runs) is another run's, never this pause's answer."""
    now_ms = int(time.time() * 1000)
    old = [
        _event("run-yesterday", 0, "middleware.decision", _verdict_row(), wall=now_ms - 86_400_000),
        _event("run-yesterday", 1, "stream.tool_end", {"toolCallId": "t3", "result": "ok"}, wall=now_ms - 86_399_000),
    ]
    assert agent_client.ingest(old).status_code == 200

    response = agent_client.post_json(ASKS, b_body(pausedAtMs=now_ms - 60_000))

    assert response.status_code == 201, response.content
    assert response.json()["ask"]["status"] == "open", response.json()["ask"]
