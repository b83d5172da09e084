"""Projections that do not depend on arrival order: a recording before its late events, a pause reported elsewhere."""

from typing import Any

import pytest

from ledger.models import MiddlewareDecision, Run
from tests.conftest import load_fixture, numbered_per_run

pytestmark = pytest.mark.django_db

B_FILE = "b-middleware/events-approved.json"
B_RUN = "run-1796043009084-1"  # the run that pauses on t3 (four-eyes asks)


def _b_run_events() -> list[dict[str, Any]]:
    return [e for e in numbered_per_run(load_fixture(B_FILE)["events"]) if e["meta"]["runId"] == B_RUN]


def _recording(run_id: str, events: list[dict[str, Any]], rows: list[dict[str, Any]], first: int) -> dict[str, Any]:
    """An agentfootprint.recording.v1 envelope whose tail of events starts at `first` (the
    framework keeps a capped tail), with the snapshot's middleware ledger rows."""
    return {
        "format": "agentfootprint.recording.v1",
        "producer": {"agentfootprintVersion": "9.62.0", "footprintjsVersion": "9.24.0"},
        "run": {
            "runId": run_id,
            "startedAt": "2026-11-30T12:50:09.084Z",
            "complete": False,
            "droppedEvents": first,
            "firstRetainedEventIndex": first,
        },
        "privacy": {"mode": "full", "policyId": "agentfootprint.privacy.full.v1"},
        "recording": {
            "events": [{k: v for k, v in e.items() if k != "seq"} for e in events],
            "snapshot": {"sharedState": {"middlewareDecisions": rows}},
            "structure": {},
        },
    }


def test_recording_before_and_after_reach_a_decision_whose_event_arrives_after_the_recording(agent_client):
    # The recording keeps a tail of the events (firstRetainedEventIndex 30): the currency transform's
    # decision event (seq 18) is not in it, but its snapshot row (with before/after) is. The agent's
    # live batch carrying seq 0..29 arrives after the recording (a retried, late batch).
    events = _b_run_events()
    rows = load_fixture("b-middleware/ledger-at-pause.json")["rows"]
    transform = next(r for r in rows if r["changed"])
    assert (transform["middleware"], transform["toolCallId"]) == ("normalize-currency", "t1")

    response = agent_client.post_json("/api/v1/recordings", _recording(B_RUN, events[30:], rows, first=30))
    assert response.status_code == 201, response.content
    response = agent_client.ingest(events[:30])
    assert response.status_code == 200, response.content
    assert response.json()["runs"][0]["gaps"] == []

    decision = MiddlewareDecision.objects.get(run__run_id=B_RUN, middleware="normalize-currency", tool_call_id="t1")
    assert decision.changed is True
    # The server holds these values (the stored recording); the decision row must carry them,
    # whichever of the recording and the event arrived first.
    assert (decision.before, decision.after) == (transform["before"], transform["after"])


def test_a_run_whose_pause_is_reported_under_consumer_scope_reads_as_paused(agent_client):
    # 9.62.0 emits pause.request under runId 'consumer-scope' (fixture README, b-middleware). The
    # server traces that pause back to the run that paused for its ask; the run's status must
    # follow the same attribution instead of staying 'running' while its ask is open.
    raw = load_fixture(B_FILE)
    before_resume = numbered_per_run(raw["events"])[: raw["resumeStartsAtSeq"]]
    assert any(e["meta"]["runId"] == "consumer-scope" for e in before_resume)

    response = agent_client.ingest(before_resume)
    assert response.status_code == 200, response.content

    run = agent_client.get(f"/api/v1/runs/{B_RUN}").json()
    paused = agent_client.get("/api/v1/runs", {"status": "paused"}).json()["runs"]
    assert run["status"] == Run.Status.PAUSED
    assert B_RUN in [r["runId"] for r in paused]
