"""A run's status is its own outcome: a resume does not reopen the run that paused, and a
listener's exception does not fail a run that went on."""

import json
from typing import Any

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from ledger.models import Run
from ledger.otlp.wire import decode_spans, span_events
from tests.conftest import DATA, load_fixture, numbered_per_run

pytestmark = pytest.mark.django_db

B_FILE = "b-middleware/events-approved.json"
B_RUN = "run-1796043009084-1"  # pauses on t3; its resume is run-1796043009518-2
B_RESUMED = "run-1796043009518-2"
CONSUMER_SCOPE = "consumer-scope"


def _folded_b_events() -> list[dict[str, Any]]:
    """The b run's events as the JavaScript observer sends them: the `consumer-scope` pause events
    (pause.request, pause.resume) folded into the run that paused, numbered after its own."""
    folded = []
    for event in load_fixture(B_FILE)["events"]:
        if event["meta"]["runId"] == CONSUMER_SCOPE:
            event = {**event, "meta": {**event["meta"], "runId": B_RUN}}
        folded.append(event)
    return numbered_per_run(folded)


def _status(agent_client: Any, run_id: str) -> str:
    response = agent_client.get(f"/api/v1/runs/{run_id}")
    assert response.status_code == 200, response.content
    return str(response.json()["status"])


def test_a_resumed_run_keeps_paused_as_its_outcome_when_the_observer_folds_the_resume_into_it(agent_client):
    events = _folded_b_events()
    paused_run = [e["type"].removeprefix("agentfootprint.") for e in events if e["meta"]["runId"] == B_RUN]
    assert paused_run[-1] == "pause.resume"  # the paused run's last event, as the observer stores it

    response = agent_client.ingest(events)
    assert response.status_code == 200, response.content

    # The resumed turn is its own run (spec §2.4): the one that paused ended paused, as it does
    # when the same events arrive unfolded under consumer-scope, and is not "running" forever.
    assert _status(agent_client, B_RUN) == Run.Status.PAUSED
    assert _status(agent_client, B_RESUMED) == Run.Status.COMPLETED


def test_the_same_run_reads_alike_folded_or_under_consumer_scope(agent_client, other_agent_client):
    response = agent_client.ingest(_folded_b_events())
    assert response.status_code == 200, response.content
    response = other_agent_client.ingest(numbered_per_run(load_fixture(B_FILE)["events"]))
    assert response.status_code == 200, response.content

    assert _status(agent_client, B_RUN) == _status(other_agent_client, B_RUN) == Run.Status.PAUSED


def _turn(run_id: str, last: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    steps = [("agent.turn_start", {}), ("agent.turn_end", {"turnIndex": 0, "iterationCount": 1}), last]
    return [
        {"seq": seq, "type": "agentfootprint." + type_, "payload": payload, "meta": {"runId": run_id}}
        for seq, (type_, payload) in enumerate(steps)
    ]


@pytest.mark.parametrize(
    ("stage", "expected"),
    [("observer", Run.Status.COMPLETED), ("call-llm", Run.Status.FAILED)],
)
def test_a_listeners_exception_after_the_turn_ended_does_not_fail_the_run(agent_client, stage, expected):
    # The framework reports a listener's exception as error.fatal with stage 'observer' (spec §4.1);
    # listeners are fire-and-forget, so a listener throwing on turn_end leaves a completed run. Any
    # other stage is the run's own failure.
    fatal = ("error.fatal", {"error": "listener threw: TypeError", "stage": stage, "scope": "run"})
    response = agent_client.ingest(_turn(f"run-{stage}", fatal))
    assert response.status_code == 200, response.content

    assert _status(agent_client, f"run-{stage}") == expected


@pytest.mark.parametrize(
    ("moment", "outcome", "expected"),
    [
        ("input", "deny", Run.Status.DENIED),
        ("output", "deny", Run.Status.DENIED),
        ("before-tool", "deny", Run.Status.RUNNING),  # the tool does not run; the loop goes on (spec §1.6)
        ("input", "allow", Run.Status.RUNNING),
    ],
)
def test_a_message_middlewares_deny_ends_the_run_denied(agent_client, moment, outcome, expected):
    """Spec §1.6: an input or output deny stops the chart and `run()` throws MessageDeniedError."""
    run_id = f"run-{moment}-{outcome}"
    decision = {"middleware": "no-pii", "moment": moment, "iteration": 0, "outcome": outcome, "changed": False}
    events = [
        {"seq": 0, "type": "agentfootprint.agent.turn_start", "payload": {}, "meta": {"runId": run_id}},
        {"seq": 1, "type": "agentfootprint.middleware.decision", "payload": decision, "meta": {"runId": run_id}},
    ]
    assert agent_client.ingest(events).status_code == 200

    assert _status(agent_client, run_id) == expected


def _root_span_failed_with(event_attributes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    document = json.loads((DATA / "g-otel/otlp-traces.json").read_bytes())
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    root = next(s for s in spans if s["name"].startswith("invoke_agent"))
    root["status"] = {"code": Status.STATUS_CODE_ERROR, "message": "provider down"}
    root["events"] = [
        {"name": "agentfootprint.error.fatal", "timeUnixNano": root["endTimeUnixNano"], "attributes": event_attributes}
    ]
    document["resourceSpans"][0]["scopeSpans"][0]["spans"] = [root]
    (decoded,) = decode_spans(json.dumps(document).encode(), as_json=True)
    return span_events(decoded)


def _string(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def test_a_failed_root_span_whose_only_fatal_event_is_a_listeners_still_ends_the_run_failed():
    listener = [_string("agentfootprint.error.stage", "observer"), _string("agentfootprint.error.error", "x")]
    events = _root_span_failed_with(listener)

    types = [e["type"].removeprefix("agentfootprint.") for e in events]
    assert types == ["agent.turn_start", "error.fatal", "error.fatal"]
    assert events[-1]["payload"] == {"message": "provider down", "source": "otlp"}

    own = _root_span_failed_with([_string("agentfootprint.error.stage", "call-llm")])
    assert [e["type"].removeprefix("agentfootprint.") for e in own] == ["agent.turn_start", "error.fatal"]
