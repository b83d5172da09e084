"""POST /api/v1/events and /api/v1/recordings against real PostgreSQL, through the Django test client.

Expected figures are derived from the framework's own fixture files (tests/data), so the tests
check the projections against what the framework really emitted, not against guesses.
"""

import copy
import hashlib
import json
import re
from collections import Counter
from typing import Any

import pytest
from django.db import connection
from django.db.models import BooleanField, ExpressionWrapper, Q, TextField
from django.db.models.functions import Cast

from ledger.models import (
    MiddlewareDecision,
    Recording,
    Refusal,
    Run,
    RunEvent,
    ToolCall,
    ToolEffect,
)
from tests.conftest import DATA, fixture_events, load_fixture

pytestmark = pytest.mark.django_db

PREFIX = "agentfootprint."
EVENT_FILES = [
    "a-run-recording/events.json",
    "b-middleware/events-approved.json",
    "b-middleware/events-declined.json",
    "c-checkin/events-approved.json",
    "c-checkin/events-declined.json",
    "d-artifacts/events.json",
    "e-tool-effects/events.json",
]
RECORDING = "a-run-recording/recording-envelope.json"


# --- helpers -------------------------------------------------------------------------------------


def _short(event: dict[str, Any]) -> str:
    return event["type"].removeprefix(PREFIX)


def _of_type(events: list[dict[str, Any]], short_type: str) -> list[dict[str, Any]]:
    return [e for e in events if _short(e) == short_type]


def _refusal_category(event: dict[str, Any]) -> str | None:
    """The refusal category of an event per events-ledger spec §4.3, or None when it refuses nothing."""
    payload = event.get("payload")
    p = payload if isinstance(payload, dict) else {}
    short = _short(event)
    if short == "middleware.decision":
        return "middleware" if p.get("outcome") == "deny" else None
    if short == "permission.check":
        return "permission" if p.get("result") in ("deny", "halt") else None
    if short == "permission.halt":
        return "permission"
    if short == "checkin.decision":
        return "checkin" if p.get("approved") is False else None
    if short == "validation.args_invalid":
        return "validation" if p.get("enforced") is True else None
    if short == "tools.effect":
        return "effect" if p.get("outcome") in ("refused", "superseded") else None
    if short == "agent.evidence_checked":
        return "evidence" if p.get("action") == "refused" else None
    return {
        "tools.result_refused": "ceiling",
        "skill.rejected": "skill",
        "artifacts.refused": "artifact",
        "credential.failed": "credential",
        "agent.output_contract_unmet": "output-contract",
        "integrity.context_error": "integrity",
    }.get(short)


def _expected_refusals(events: list[dict[str, Any]]) -> set[tuple[str, int, str]]:
    return {(e["meta"]["runId"], e["seq"], category) for e in events if (category := _refusal_category(e)) is not None}


def _ingest_ok(client: Any, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    response = client.ingest(events)
    assert response.status_code == 200, response.content
    return response.json()["runs"]


def _receipt(client: Any, events: list[dict[str, Any]]) -> dict[str, Any]:
    (receipt,) = _ingest_ok(client, events)
    return receipt


def _verify(client: Any, run_id: str) -> dict[str, Any]:
    response = client.get(f"/api/v1/runs/{run_id}/verify")
    assert response.status_code == 200, response.content
    return response.json()


def _run_events(client: Any, run_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/api/v1/runs/{run_id}/events", {"limit": 1000})
    assert response.status_code == 200, response.content
    return response.json()["events"]


def _event(
    seq: int,
    run_id: str = "run-x",
    type_: str = "agentfootprint.agent.iteration_start",
    payload: Any = None,
    **meta: Any,
) -> dict[str, Any]:
    event: dict[str, Any] = {"seq": seq, "type": type_, "meta": {"runId": run_id, **meta}}
    event["payload"] = {"iteration": seq} if payload is None else payload
    return event


def _a_run() -> list[dict[str, Any]]:
    return fixture_events("a-run-recording/events.json")


def _stored_seqs(run_id: str) -> list[int]:
    return list(RunEvent.objects.filter(run__run_id=run_id).order_by("seq").values_list("seq", flat=True))


# --- fixture files: projections ------------------------------------------------------------------


@pytest.mark.parametrize("name", EVENT_FILES)
def test_ingest_fixture_file_projects_counts_derived_from_the_file(agent_client, name):
    events = fixture_events(name)
    per_run = Counter(e["meta"]["runId"] for e in events)

    receipts = _ingest_ok(agent_client, events)

    assert {r["runId"]: r["accepted"] for r in receipts} == per_run
    assert all(r["duplicates"] == 0 and r["gaps"] == [] for r in receipts)
    for run_id, count in per_run.items():
        run = Run.objects.get(run_id=run_id)
        assert run.event_count == count
        assert run.max_seq == count - 1
        assert _verify(agent_client, run_id) == {"valid": True, "recordsChecked": count}

    starts = _of_type(events, "stream.tool_start")
    started = {(e["meta"]["runId"], e["payload"]["toolCallId"]) for e in starts}
    ended = {(e["meta"]["runId"], e["payload"]["toolCallId"]) for e in _of_type(events, "stream.tool_end")}
    assert len(started) == len(starts)
    # One row per tool_start; a tool_end whose start is in another run (a resumed call: resume()
    # starts a fresh runId) still gets its own row, keyed by (run, toolCallId).
    assert ToolCall.objects.filter(start_seq__isnull=False).count() == len(starts)
    assert ToolCall.objects.count() == len(started | ended)
    for run_id in per_run:
        run_starts = [e for e in starts if e["meta"]["runId"] == run_id]
        assert Run.objects.get(run_id=run_id).tool_call_count == len(run_starts)

    decisions = _of_type(events, "middleware.decision")
    assert Counter(MiddlewareDecision.objects.values_list("outcome", flat=True)) == Counter(
        e["payload"]["outcome"] for e in decisions
    )

    expected = _expected_refusals(events)
    stored = {(r.run.run_id, r.seq, r.category) for r in Refusal.objects.select_related("run")}
    assert stored == expected
    for run_id in per_run:
        assert Run.objects.get(run_id=run_id).refusal_count == sum(1 for r in expected if r[0] == run_id)


def test_ingest_run_recording_matches_readme_facts(agent_client):
    events = _a_run()
    receipt = _receipt(agent_client, events)

    # README: "All 76 typed events of the run"; two tools, each called once.
    assert receipt["accepted"] == 76
    assert receipt["lastSeq"] == 75
    run = Run.objects.get(run_id=receipt["runId"])
    assert run.event_count == 76
    assert run.tool_call_count == 2
    assert set(ToolCall.objects.values_list("tool_name", flat=True)) == {"lookup_order", "track_parcel"}
    assert run.session_id == "fixture-session-a"
    assert run.source == Run.Source.EVENTS
    assert run.status == Run.Status.COMPLETED
    usages = [e["payload"]["usage"] for e in _of_type(events, "stream.llm_end")]
    assert run.tokens_in == sum(u["input"] for u in usages)
    assert run.tokens_out == sum(u["output"] for u in usages)
    assert run.iterations == len(_of_type(events, "agent.iteration_start"))
    assert Refusal.objects.count() == 0


@pytest.mark.parametrize("name", ["b-middleware/events-approved.json", "b-middleware/events-declined.json"])
def test_ingest_middleware_ledger_has_twelve_decision_rows_per_run_pair(agent_client, name):
    events = fixture_events(name)
    _ingest_ok(agent_client, events)

    # README: ledgerAfterResume has 12 rows, one middleware.decision event per row.
    assert MiddlewareDecision.objects.count() == 12 == len(_of_type(events, "middleware.decision"))
    for event in _of_type(events, "middleware.decision"):
        row = MiddlewareDecision.objects.get(run__run_id=event["meta"]["runId"], seq=event["seq"])
        payload = event["payload"]
        assert (row.middleware, row.moment, row.outcome, row.tool_call_id, row.iteration, row.changed) == (
            payload["middleware"],
            payload["moment"],
            payload["outcome"],
            payload["toolCallId"],
            payload["iteration"],
            payload["changed"],
        )
        assert row.why == payload.get("why")
        # The event stream never carries before/after: SQL NULL means "not ingested".
        assert row.before is None
        assert row.after is None


def test_ingest_middleware_declined_denies_become_middleware_refusals(agent_client):
    events = fixture_events("b-middleware/events-declined.json")
    _ingest_ok(agent_client, events)

    denies = [e for e in _of_type(events, "middleware.decision") if e["payload"]["outcome"] == "deny"]
    assert len(denies) == 2  # frozen-accounts on t2, and four-eyes declined on resume
    refusals = Refusal.objects.filter(category=Refusal.Category.MIDDLEWARE).order_by("wall_clock_ms", "seq")
    assert sorted((r.rule, r.reason, r.tool_call_id) for r in refusals) == sorted(
        (e["payload"]["middleware"], e["payload"]["why"], e["payload"]["toolCallId"]) for e in denies
    )
    assert any(r.reason.startswith("declined by omar@treasury") for r in refusals)


def test_ingest_middleware_approved_has_one_deny_refusal(agent_client):
    events = fixture_events("b-middleware/events-approved.json")
    _ingest_ok(agent_client, events)

    (refusal,) = Refusal.objects.all()
    assert refusal.category == Refusal.Category.MIDDLEWARE
    assert refusal.rule == "frozen-accounts"
    assert "FROZEN-777" in refusal.reason


def test_ingest_checkin_declined_is_a_checkin_refusal(agent_client):
    events = fixture_events("c-checkin/events-declined.json")
    _ingest_ok(agent_client, events)

    (decision,) = _of_type(events, "checkin.decision")
    assert decision["payload"]["approved"] is False
    (refusal,) = Refusal.objects.select_related("run")
    assert refusal.category == Refusal.Category.CHECKIN
    assert (refusal.run.run_id, refusal.seq) == (decision["meta"]["runId"], decision["seq"])
    assert refusal.event_type == decision["type"]
    assert refusal.tool_name == decision["payload"]["toolName"]
    assert refusal.tool_call_id == decision["payload"]["toolCallId"]
    assert refusal.iteration == decision["payload"]["iteration"]
    assert decision["payload"]["by"] in refusal.reason
    assert decision["payload"]["note"] in refusal.reason


def test_ingest_checkin_approved_is_not_a_refusal(agent_client):
    events = fixture_events("c-checkin/events-approved.json")
    _ingest_ok(agent_client, events)

    assert [e["payload"]["approved"] for e in _of_type(events, "checkin.decision")] == [True]
    assert not Refusal.objects.exists()


def test_ingest_artifact_refusals_keep_the_payload_reason(agent_client):
    events = fixture_events("d-artifacts/events.json")
    receipt = _receipt(agent_client, events)

    refused = _of_type(events, "artifacts.refused")
    # README facts: 451 events, ten artifacts.refused
    assert receipt["accepted"] == 451
    assert len(refused) == 10
    rows = Refusal.objects.filter(category=Refusal.Category.ARTIFACT)
    assert rows.count() == 10
    assert sorted((r.seq, r.rule, r.reason, r.tool_name) for r in rows) == sorted(
        (e["seq"], e["payload"]["op"], e["payload"]["reason"], e["payload"]["tool"]) for e in refused
    )
    assert Counter(r.reason for r in rows) == Counter(e["payload"]["reason"] for e in refused)
    assert Run.objects.get().refusal_count == 10


def test_ingest_tool_effect_refusals_are_effect_refusals(agent_client):
    events = fixture_events("e-tool-effects/events.json")
    receipt = _receipt(agent_client, events)

    assert receipt["accepted"] == 222  # README fact
    effects = _of_type(events, "tools.effect")
    assert ToolEffect.objects.count() == len(effects)
    refused = [e for e in effects if e["payload"]["outcome"] == "refused"]
    assert len(refused) == 4
    rows = Refusal.objects.filter(category=Refusal.Category.EFFECT)
    assert sorted((r.seq, r.rule, r.reason, r.tool_name, r.tool_call_id) for r in rows) == sorted(
        (
            e["seq"],
            e["payload"]["kind"],
            e["payload"]["refusalReason"],
            e["payload"]["toolName"],
            e["payload"]["toolCallId"],
        )
        for e in refused
    )
    assert Refusal.objects.count() == 4


# --- ToolCall rows -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", EVENT_FILES)
def test_toolcall_rows_carry_args_result_duration_and_status_from_the_payload(agent_client, name):
    events = fixture_events(name)
    _ingest_ok(agent_client, events)

    starts = {(e["meta"]["runId"], e["payload"]["toolCallId"]): e for e in _of_type(events, "stream.tool_start")}
    ends = {(e["meta"]["runId"], e["payload"]["toolCallId"]): e for e in _of_type(events, "stream.tool_end")}
    rows = {
        (row.run.run_id, row.tool_call_id): row for row in ToolCall.objects.with_args_and_result().select_related("run")
    }
    assert rows.keys() == starts.keys() | ends.keys()
    for key, row in rows.items():
        start, end = starts.get(key), ends.get(key)
        if start is None:  # the tool_start is in the paused run, before resume()
            assert (row.tool_name, row.args, row.start_seq) == (None, None, None)
        else:
            assert row.tool_name == start["payload"]["toolName"]
            assert row.args == start["payload"]["args"]
            assert row.start_seq == start["seq"]
        if end is None:  # the tool_end is in the resumed run
            assert (row.result, row.duration_ms, row.status, row.error, row.end_seq) == (None,) * 5
        else:
            assert row.result == end["payload"]["result"]
            assert row.duration_ms == end["payload"]["durationMs"]
            assert row.status == end["payload"].get("status")  # absent → NULL
            assert row.error == end["payload"].get("error")
            assert row.end_seq == end["seq"]


def test_toolcall_status_absent_in_payload_stays_null(agent_client):
    events = fixture_events("e-tool-effects/events.json")
    _ingest_ok(agent_client, events)

    without_status = [
        e["payload"]["toolCallId"] for e in _of_type(events, "stream.tool_end") if "status" not in e["payload"]
    ]
    assert without_status  # malformed_effects and status_near_miss
    with connection.cursor() as cur:
        cur.execute("SELECT tool_call_id FROM ledger_toolcall WHERE status IS NULL ORDER BY tool_call_id")
        assert [r[0] for r in cur.fetchall()] == sorted(without_status)


def test_toolcall_status_envelope_records_denied(agent_client):
    _ingest_ok(agent_client, fixture_events("e-tool-effects/events.json"))

    envelope = ToolCall.objects.get(tool_name="status_envelope")
    assert envelope.status == "denied"
    near_miss = ToolCall.objects.with_args_and_result().get(tool_name="status_near_miss")
    # A {content, status} without the effects marker is plain data: no status recorded.
    assert near_miss.status is None
    assert near_miss.result == {"content": "refund denied: outside the 30-day window", "status": "denied"}
    assert ToolCall.objects.get(tool_name="propose_unreachable").status == "success"


def test_toolcall_absent_args_read_as_sql_null_and_null_result_as_json_null(agent_client):
    _ingest_ok(
        agent_client,
        [
            _event(0, type_="agentfootprint.stream.tool_start", payload={"toolName": "ping", "toolCallId": "k1"}),
            _event(
                1, type_="agentfootprint.stream.tool_end", payload={"toolCallId": "k1", "result": None, "durationMs": 3}
            ),
        ],
    )

    call = (
        ToolCall.objects.with_args_and_result()
        .annotate(
            args_absent=ExpressionWrapper(Q(args__isnull=True), output_field=BooleanField()),
            result_absent=ExpressionWrapper(Q(result__isnull=True), output_field=BooleanField()),
            result_text=Cast("result", TextField()),
        )
        .get()
    )
    assert (call.args_absent, call.result_absent, call.result_text, call.status) == (True, False, "null", None)


@pytest.mark.parametrize("number", [2**31, -(2**31), 2**53, 2**63, -(2**63), 1e300])
def test_a_number_past_its_projection_column_is_kept_in_the_event_and_projected_as_null(agent_client, number):
    events = [
        _event(0, type_="agentfootprint.stream.tool_start", payload={"toolName": "t", "toolCallId": "k1"}),
        _event(1, type_="agentfootprint.stream.tool_end", payload={"toolCallId": "k1", "durationMs": number}),
        _event(
            2,
            type_="agentfootprint.middleware.decision",
            payload={"middleware": "m", "moment": "before-tool", "outcome": "deny", "iteration": number},
        ),
        _event(3, type_="agentfootprint.stream.llm_end", payload={"usage": {"input": number, "output": 1}}),
    ]

    _ingest_ok(agent_client, events)

    fits_a_duration = abs(number) < 2**53
    assert ToolCall.objects.get().duration_ms == (int(number) if fits_a_duration else None)
    assert MiddlewareDecision.objects.get().iteration is None
    assert Refusal.objects.get().iteration is None
    assert Run.objects.values_list("tokens_in", "tokens_out").get() == (0, 1)
    stored = RunEvent.objects.get(seq=1)
    assert json.loads(stored.body)["payload"]["durationMs"] == number


def test_toolcall_end_before_start_in_separate_batches_fills_one_row(agent_client):
    start = _event(
        0,
        type_="agentfootprint.stream.tool_start",
        payload={"toolName": "ping", "toolCallId": "k1", "args": {"host": "a"}},
    )
    end = _event(
        1,
        type_="agentfootprint.stream.tool_end",
        payload={"toolCallId": "k1", "result": "pong", "durationMs": 7, "status": "success"},
    )
    _ingest_ok(agent_client, [end])
    _ingest_ok(agent_client, [start])

    row = ToolCall.objects.with_args_and_result().get()
    assert (row.tool_name, row.args, row.result, row.duration_ms, row.status, row.start_seq, row.end_seq) == (
        "ping",
        {"host": "a"},
        "pong",
        7,
        "success",
        0,
        1,
    )
    assert Run.objects.get().tool_call_count == 1


def test_toolcall_rows_of_a_new_run_and_of_a_known_run_in_one_batch(agent_client):
    # A run's first batch writes its calls as new rows; a later batch merges into the calls it has.
    def start(seq: int, run_id: str, call_id: str) -> dict[str, Any]:
        payload = {"toolName": "ping", "toolCallId": call_id}
        return _event(seq, run_id, type_="agentfootprint.stream.tool_start", payload=payload)

    def end(seq: int, run_id: str, call_id: str) -> dict[str, Any]:
        payload = {"toolCallId": call_id, "durationMs": seq, "status": "success"}
        return _event(seq, run_id, type_="agentfootprint.stream.tool_end", payload=payload)

    _ingest_ok(agent_client, [start(0, "known", "k1")])

    _ingest_ok(
        agent_client,
        [end(1, "known", "k1"), start(2, "known", "k2"), start(0, "new", "k1"), end(1, "new", "k1")],
    )

    rows = ToolCall.objects.order_by("run__run_id", "tool_call_id").values_list(
        "run__run_id", "tool_call_id", "tool_name", "start_seq", "end_seq", "duration_ms", "status"
    )
    assert list(rows) == [
        ("known", "k1", "ping", 0, 1, 1, "success"),
        ("known", "k2", "ping", 2, None, None, None),
        ("new", "k1", "ping", 0, 1, 1, "success"),
    ]
    assert dict(Run.objects.values_list("run_id", "tool_call_count")) == {"known": 2, "new": 1}


# --- recordings ----------------------------------------------------------------------------------


def _post_recording(client: Any, body: bytes) -> Any:
    return client.post_json("/api/v1/recordings", body)


def test_recording_first_post_stores_and_second_is_a_noop(agent_client):
    raw = (DATA / RECORDING).read_bytes()

    first = _post_recording(agent_client, raw)
    assert first.status_code == 201, first.content
    assert first.json()["stored"] is True
    assert first.json()["run"]["accepted"] == 76

    second = _post_recording(agent_client, raw)
    assert second.status_code == 200, second.content
    body = second.json()
    assert body["stored"] is False
    assert (body["run"]["accepted"], body["run"]["duplicates"]) == (0, 76)
    assert body["run"]["head"] == first.json()["run"]["head"]

    assert RunEvent.objects.count() == 76
    assert Recording.objects.count() == 1
    run = Run.objects.get()
    assert run.source == Run.Source.RECORDING
    assert run.event_count == 76
    assert run.tool_call_count == 2
    assert _verify(agent_client, run.run_id) == {"valid": True, "recordsChecked": 76}


def test_recording_after_its_events_stores_no_event_twice(agent_client):
    receipt = _receipt(agent_client, _a_run())

    response = _post_recording(agent_client, (DATA / RECORDING).read_bytes())

    assert response.status_code == 201, response.content
    run_receipt = response.json()["run"]
    assert (run_receipt["accepted"], run_receipt["duplicates"]) == (0, 76)
    assert run_receipt["head"] == receipt["head"]
    assert RunEvent.objects.count() == 76
    assert Run.objects.get().event_count == 76
    assert ToolCall.objects.count() == 2


def test_recording_events_match_the_events_file(agent_client):
    response = _post_recording(agent_client, (DATA / RECORDING).read_bytes())
    assert response.status_code == 201

    run_id = response.json()["run"]["runId"]
    assert _run_events(agent_client, run_id) == _a_run()


def test_recording_keeps_the_body_byte_for_byte(agent_client):
    raw = (DATA / RECORDING).read_bytes()
    assert _post_recording(agent_client, raw).status_code == 201

    recording = Recording.objects.get()
    assert bytes(recording.body) == raw
    assert bytes(recording.sha256) == hashlib.sha256(raw).digest()
    assert recording.complete is True
    assert recording.dropped_events == 0


def test_recording_unknown_format_is_refused_and_writes_nothing(agent_client):
    envelope = load_fixture(RECORDING)
    envelope["format"] = "agentfootprint.recording.v999"

    response = _post_recording(agent_client, json.dumps(envelope).encode())

    assert response.status_code == 422
    assert response.json()["code"] == "ERR_INVALID_RECORDING"
    assert "agentfootprint.recording.v1" in response.json()["error"]
    assert not Run.objects.exists()
    assert not RunEvent.objects.exists()
    assert not Recording.objects.exists()


def test_recording_over_the_byte_limit_is_refused(agent_client, settings):
    settings.FOOTPRINT_MAX_RECORDING_BYTES = 1000

    response = _post_recording(agent_client, (DATA / RECORDING).read_bytes())

    assert response.status_code == 413
    assert response.json()["code"] == "ERR_TOO_LARGE"
    assert "1000" in response.json()["error"]
    assert not Run.objects.exists()


# --- idempotency ---------------------------------------------------------------------------------


def test_ingest_same_batch_twice_accepts_nothing_the_second_time(agent_client):
    events = _a_run()
    first = _receipt(agent_client, events)

    second = _receipt(agent_client, events)

    assert (second["accepted"], second["duplicates"]) == (0, 76)
    assert second["head"] == first["head"]
    assert second["lastSeq"] == first["lastSeq"] == 75
    assert second["gaps"] == []
    assert RunEvent.objects.count() == 76
    run = Run.objects.get()
    assert (run.event_count, run.tool_call_count, run.iterations) == (76, 2, 3)
    assert ToolCall.objects.count() == 2


def test_ingest_overlapping_batch_accepts_only_the_new_events(agent_client, other_agent_client):
    events = _a_run()
    first = _receipt(agent_client, events[0:50])
    assert first["accepted"] == 50

    second = _receipt(agent_client, events[25:76])

    assert (second["accepted"], second["duplicates"]) == (26, 25)
    assert second["lastSeq"] == 75
    assert second["gaps"] == []
    assert _stored_seqs(first["runId"]) == list(range(76))
    assert Run.objects.get(project__slug="acme").event_count == 76
    assert _verify(agent_client, first["runId"]) == {"valid": True, "recordsChecked": 76}
    # Both batches arrived in seq order, so the store order equals the one-batch store order.
    one_batch = _receipt(other_agent_client, events)
    assert second["head"] == one_batch["head"]


def test_ingest_duplicate_seq_within_one_batch_is_counted_once(agent_client):
    events = _a_run()[:5]

    receipt = _receipt(agent_client, [*events, events[2]])

    assert (receipt["accepted"], receipt["duplicates"]) == (5, 1)
    assert RunEvent.objects.count() == 5


# --- gaps ----------------------------------------------------------------------------------------


def test_ingest_gap_is_reported_then_filled_by_late_events(agent_client):
    events = _a_run()
    run_id = events[0]["meta"]["runId"]
    assert _receipt(agent_client, events[0:10])["gaps"] == []

    with_gap = _receipt(agent_client, events[20:30])
    assert with_gap["gaps"] == [[10, 19]]
    assert with_gap["lastSeq"] == 29
    assert agent_client.get(f"/api/v1/runs/{run_id}").json()["hasGaps"] is True

    filled = _receipt(agent_client, events[10:20])
    assert filled["gaps"] == []
    assert filled["accepted"] == 10
    assert filled["lastSeq"] == 29

    positions = dict(RunEvent.objects.filter(run__run_id=run_id).values_list("seq", "position"))
    assert positions[10] > positions[29]  # appended to the chain, not inserted
    assert positions[10] == 20
    assert agent_client.get(f"/api/v1/runs/{run_id}").json()["hasGaps"] is False
    assert _verify(agent_client, run_id) == {"valid": True, "recordsChecked": 30}
    assert [e["seq"] for e in _run_events(agent_client, run_id)] == list(range(30))


def test_ingest_leading_gap_is_reported(agent_client):
    receipt = _receipt(agent_client, _a_run()[5:10])

    assert receipt["gaps"] == [[0, 4]]
    assert receipt["lastSeq"] == 9


def test_ingest_several_gaps_are_reported_in_order(agent_client):
    events = _a_run()

    receipt = _receipt(agent_client, [events[2], events[5], events[6], events[9]])

    assert receipt["gaps"] == [[0, 1], [3, 4], [7, 8]]


# --- conflicts and atomicity ---------------------------------------------------------------------


def test_ingest_changed_seq_is_a_conflict_and_stores_nothing_of_the_batch(agent_client):
    events = _a_run()
    run_id = events[0]["meta"]["runId"]
    before = _receipt(agent_client, events[:10])
    changed = copy.deepcopy(events[3])
    changed["payload"] = {"tampered": True}
    other_run = _event(0, run_id="run-brand-new")

    response = agent_client.ingest([events[10], changed, events[11], other_run])

    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "ERR_SEQ_CONFLICT"
    assert body["conflicts"] == [{"index": 1, "runId": run_id, "seq": 3}]
    assert _stored_seqs(run_id) == list(range(10))
    assert not Run.objects.filter(run_id="run-brand-new").exists()
    run = Run.objects.get(run_id=run_id)
    assert (run.event_count, run.max_seq, run.head_hex) == (10, 9, before["head"])
    assert _verify(agent_client, run_id) == {"valid": True, "recordsChecked": 10}


def test_ingest_same_seq_twice_in_one_batch_with_different_content_is_a_conflict(agent_client):
    first, second = _event(0), _event(0, payload={"iteration": 99})

    response = agent_client.ingest([first, second])

    assert response.status_code == 409
    assert response.json()["code"] == "ERR_SEQ_CONFLICT"
    assert not Run.objects.exists()


def test_ingest_batch_with_one_invalid_event_stores_nothing(agent_client):
    events = _a_run()[:6]
    broken = copy.deepcopy(events[4])
    del broken["meta"]["runId"]

    response = agent_client.ingest([*events[:4], broken, events[5]])

    assert response.status_code == 422
    assert response.json()["code"] == "ERR_INVALID_EVENTS"
    assert not Run.objects.exists()
    assert not RunEvent.objects.exists()


# --- bad input -----------------------------------------------------------------------------------


def test_ingest_invalid_json_is_400(agent_client):
    response = agent_client.post_json("/api/v1/events", b'{"events": [')

    assert response.status_code == 400
    assert response.json()["code"] == "ERR_MALFORMED_JSON"
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("[]", id="array-body"),
        pytest.param('"events"', id="string-body"),
        pytest.param("{}", id="no-events"),
        pytest.param('{"events": {}}', id="events-not-array"),
        pytest.param('{"events": []}', id="empty-events"),
        pytest.param(json.dumps({"events": [_event(0)], "extra": 1}), id="unknown-top-level-key"),
    ],
)
def test_ingest_body_of_wrong_shape_is_422(agent_client, body):
    response = agent_client.post_json("/api/v1/events", body)

    assert response.status_code == 422
    assert response.json()["code"] == "ERR_INVALID_EVENTS"
    assert response.json()["error"]
    assert not Run.objects.exists()


def _without_run_id(event: dict[str, Any]) -> None:
    del event["meta"]["runId"]


def _set(key: str, value: Any) -> Any:
    return lambda event: event.__setitem__(key, value)


@pytest.mark.parametrize(
    ("break_event", "field"),
    [
        pytest.param(_without_run_id, "meta.runId", id="missing-runId"),
        pytest.param(_set("seq", -1), "seq", id="negative-seq"),
        pytest.param(_set("seq", "1"), "seq", id="string-seq"),
        pytest.param(_set("seq", True), "seq", id="bool-seq"),
        pytest.param(_set("seq", 1.5), "seq", id="float-seq"),
        pytest.param(_set("extra", 1), "extra", id="unknown-envelope-key"),
        pytest.param(_set("type", ""), "type", id="empty-type"),
        pytest.param(_set("meta", "run-x"), "meta", id="meta-not-object"),
        pytest.param(lambda e: e["meta"].__setitem__("runId", ""), "meta.runId", id="empty-runId"),
        pytest.param(
            lambda e: e["meta"].__setitem__("wallClockMs", "now"), "meta.wallClockMs", id="string-wallClockMs"
        ),
    ],
)
def test_ingest_invalid_event_is_422_naming_index_and_field(agent_client, break_event, field):
    events = [_event(0), _event(1), _event(2)]
    break_event(events[1])

    response = agent_client.ingest(events)

    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "ERR_INVALID_EVENTS"
    assert {(e["index"], e["field"]) for e in body["errors"]} == {(1, field)}
    assert all(e["message"] for e in body["errors"])
    assert not Run.objects.exists()


def test_ingest_reports_every_invalid_event(agent_client):
    events = [_event(0), _event(1), _event(2)]
    events[0]["seq"] = -5
    del events[2]["meta"]["runId"]

    response = agent_client.ingest(events)

    assert response.status_code == 422
    problems = {(e["index"], e["field"]) for e in response.json()["errors"]}
    assert problems == {(0, "seq"), (2, "meta.runId")}


def test_ingest_over_the_event_limit_is_413_naming_the_limit(agent_client, settings):
    settings.FOOTPRINT_MAX_EVENTS_PER_REQUEST = 3

    response = agent_client.ingest([_event(i) for i in range(4)])

    assert response.status_code == 413
    body = response.json()
    assert body["code"] == "ERR_TOO_LARGE"
    assert "at most 3 events" in body["error"]
    assert body["limit"] == 3
    assert not Run.objects.exists()


def test_ingest_at_the_event_limit_is_accepted(agent_client, settings):
    settings.FOOTPRINT_MAX_EVENTS_PER_REQUEST = 3

    assert _receipt(agent_client, [_event(i) for i in range(3)])["accepted"] == 3


def test_ingest_over_the_byte_limit_is_413_naming_the_limit(agent_client, settings):
    settings.FOOTPRINT_MAX_REQUEST_BYTES = 300
    body = json.dumps({"events": [_event(i) for i in range(5)]})
    assert len(body) > 300

    response = agent_client.post_json("/api/v1/events", body)

    assert response.status_code == 413
    assert response.json()["code"] == "ERR_TOO_LARGE"
    assert "300 bytes" in response.json()["error"]
    assert not Run.objects.exists()


# --- verbatim storage ----------------------------------------------------------------------------


def test_ingest_unknown_event_type_is_kept_verbatim(agent_client):
    unknown = {
        "seq": 0,
        "type": "vendor.custom.thing_happened",
        "payload": {"z": [1, 2.5, "x", None, {"nested": True}], "a": "é ✓ \n\t", "big": 12345678901234},
        "meta": {"runId": "run-u", "wallClockMs": 1796043007832, "runtimeStageId": "x#1", "extra": {"k": "v"}},
    }
    no_payload = {"seq": 1, "type": "agentfootprint.agent.turn_start", "meta": {"runId": "run-u"}}

    receipt = _receipt(agent_client, [unknown, no_payload])

    assert receipt["accepted"] == 2
    returned = _run_events(agent_client, "run-u")
    assert returned == [unknown, no_payload]
    assert "payload" not in returned[1]
    assert RunEvent.objects.get(seq=0).type == "vendor.custom.thing_happened"
    assert _verify(agent_client, "run-u") == {"valid": True, "recordsChecked": 2}


def test_ingest_absent_payload_key_stays_absent_and_null_stays_null(agent_client):
    events = [
        {"seq": 0, "type": "agentfootprint.agent.turn_start", "meta": {"runId": "run-p"}},
        {"seq": 1, "type": "agentfootprint.agent.turn_start", "payload": None, "meta": {"runId": "run-p"}},
        {
            "seq": 2,
            "type": "agentfootprint.stream.tool_end",
            "payload": {"toolCallId": "q"},
            "meta": {"runId": "run-p"},
        },
    ]

    _ingest_ok(agent_client, events)

    response = agent_client.get("/api/v1/runs/run-p/events")
    returned = response.json()["events"]
    assert returned == events
    assert "payload" not in returned[0]
    assert returned[1]["payload"] is None
    assert b'"payload":null' in response.content
    assert "result" not in returned[2]["payload"]


def test_ingest_nul_character_in_payload_is_returned_exactly(agent_client):
    event = _event(
        0,
        run_id="run-nul",
        type_="agentfootprint.stream.token",
        payload={"text": "before\u0000after", "k\u0000ey": ["\u0000"]},
    )
    body = json.dumps({"events": [event]})
    assert "\\u0000" in body

    response = agent_client.post_json("/api/v1/events", body)

    assert response.status_code == 200, response.content
    events_response = agent_client.get("/api/v1/runs/run-nul/events")
    assert events_response.status_code == 200
    assert b"before\\u0000after" in events_response.content
    (returned,) = events_response.json()["events"]
    assert returned["payload"] == {"text": "before\x00after", "k\x00ey": ["\x00"]}
    assert returned == event
    # The queryable jsonb copy cannot hold U+0000; the hashed body is still the truth.
    assert RunEvent.objects.get().doc["payload"]["text"] == "before\ufffdafter"
    assert _verify(agent_client, "run-nul") == {"valid": True, "recordsChecked": 1}


def test_every_column_of_an_event_row_is_stored_as_sent(agent_client):
    """The rows are encoded to PostgreSQL's binary COPY format by hand: each column, NULL or not."""
    events = [
        _event(0, run_id="run-cols", type_="agentfootprint.stream.tool_start", payload={"toolCallId": "call-é"}),
        _event(1, run_id="run-cols", type_="ünïcode.type", wallClockMs=1_796_043_007_832),
        _event(2, run_id="run-cols", wallClockMs=1.7960430078329e12),  # a float time keeps its whole ms
        _event(3, run_id="run-cols", payload={"n": 1e2, "deep": {"x": [True, None, -0.5]}}),
    ]

    receipt = _receipt(agent_client, events)

    rows = RunEvent.objects.filter(run__run_id="run-cols").order_by("position")
    stored = [(r.seq, r.position, r.type, r.tool_call_id, r.wall_clock_ms) for r in rows]
    assert stored == [
        (0, 0, "agentfootprint.stream.tool_start", "call-é", None),
        (1, 1, "ünïcode.type", None, 1_796_043_007_832),
        (2, 2, "agentfootprint.agent.iteration_start", None, 1_796_043_007_832),
        (3, 3, "agentfootprint.agent.iteration_start", None, None),
    ]
    head = bytes(32)
    for row, event in zip(rows, events, strict=True):
        body = json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        assert row.body.encode() == body
        assert row.doc == json.loads(body)
        assert (bytes(row.prev_hash), bytes(row.hash)) == (head, hashlib.sha256(head + body).digest())
        head = bytes(row.hash)
    assert receipt["head"] == head.hex()


def test_a_batch_larger_than_a_copy_block_is_stored_and_chained_whole(agent_client):
    """The event rows go to PostgreSQL in blocks of about 120 KiB: a batch of several blocks, two
    runs and one event larger than a block (which psycopg then cuts itself) is stored as sent."""
    text = "x" * 1_000
    events = [_event(n // 2, run_id=f"run-blocks-{n % 2}", payload={"text": text, "n": n}) for n in range(400)]
    events.append(_event(200, run_id="run-blocks-0", payload={"text": "y" * 300_000}))

    receipts = {r["runId"]: r for r in _ingest_ok(agent_client, events)}

    assert {run_id: r["accepted"] for run_id, r in receipts.items()} == {"run-blocks-0": 201, "run-blocks-1": 200}
    for run_id in receipts:
        assert _run_events(agent_client, run_id) == [e for e in events if e["meta"]["runId"] == run_id]
        assert _verify(agent_client, run_id) == {"valid": True, "recordsChecked": receipts[run_id]["accepted"]}


def test_u0000_in_projected_fields_is_u_fffd_in_the_projections_and_kept_in_the_body(agent_client):
    start = {"toolName": "look\u0000up", "toolCallId": "c\u00001", "args": {"q": "\u0000"}}
    decision = {"middleware": "guard\u0000", "moment": "before-tool", "outcome": "deny", "toolCallId": "c\u00001"}
    events = [
        _event(0, run_id="run-nul-proj", type_="agentfootprint.stream.tool_start", payload=start),
        _event(1, run_id="run-nul-proj", type_="agentfootprint.middleware.decision", payload=decision),
        _event(2, run_id="run-nul-proj", compositionPath=["Agent:\u0000"]),
    ]

    _ingest_ok(agent_client, events)

    call = ToolCall.objects.with_args_and_result().get(run__run_id="run-nul-proj")
    assert (call.tool_call_id, call.tool_name, call.args) == ("c\ufffd1", "look\ufffdup", {"q": "\ufffd"})
    assert MiddlewareDecision.objects.get(run__run_id="run-nul-proj").middleware == "guard\ufffd"
    assert Refusal.objects.get(run__run_id="run-nul-proj").tool_call_id == "c\ufffd1"
    stored = RunEvent.objects.filter(run__run_id="run-nul-proj", tool_call_id="c\ufffd1").count()
    assert stored == 2, "the events rows of the call are found by the projected id"
    assert _run_events(agent_client, "run-nul-proj") == events
    assert _verify(agent_client, "run-nul-proj") == {"valid": True, "recordsChecked": 3}


def test_ingest_identity_and_status_reach_the_run(agent_client):
    _ingest_ok(
        agent_client,
        [
            _event(
                0,
                run_id="run-i",
                type_="agentfootprint.agent.turn_start",
                payload={},
                sessionId="s-1",
                tenant="acme-corp",
                principal="analyst-42",
                wallClockMs=1796043007000,
            ),
            _event(
                1,
                run_id="run-i",
                type_="agentfootprint.pause.request",
                payload={"reason": "ask"},
                wallClockMs=1796043008000,
            ),
        ],
    )

    run = Run.objects.get(run_id="run-i")
    assert (run.session_id, run.tenant, run.principal) == ("s-1", "acme-corp", "analyst-42")
    assert run.status == Run.Status.PAUSED
    assert run.first_event_at.timestamp() == 1796043007.0
    assert run.last_event_at.timestamp() == 1796043008.0


def test_ingest_late_lower_seq_does_not_override_status(agent_client):
    _ingest_ok(agent_client, [_event(5, run_id="run-s", type_="agentfootprint.agent.turn_end", payload={})])
    _ingest_ok(agent_client, [_event(1, run_id="run-s", type_="agentfootprint.pause.request", payload={})])

    assert Run.objects.get(run_id="run-s").status == Run.Status.COMPLETED


@pytest.mark.parametrize(
    ("type_", "payload"),
    [
        pytest.param(
            "agentfootprint.stream.tool_start",
            {"toolName": "lookup", "toolCallId": "call_" + "x" * 295, "args": {}},
            id="long-toolCallId",
        ),
        pytest.param(
            "agentfootprint.skill.rejected",
            {"requestedId": "s" * 300, "currentSkillId": "triage"},
            id="long-requestedId",
        ),
    ],
)
def test_ingest_payload_value_longer_than_a_projection_column_is_still_stored(agent_client, type_, payload):
    # The envelope puts no bound on payload strings (a toolCallId comes from the LLM provider, a
    # requested skill id from the model); the projection must not turn such an event into a 500.
    agent_client.raise_request_exception = False
    event = _event(0, run_id="run-long", type_=type_, payload=payload)

    response = agent_client.ingest([event])

    assert response.status_code == 200, response.content[:300]
    assert _run_events(agent_client, "run-long") == [event]
    assert _verify(agent_client, "run-long") == {"valid": True, "recordsChecked": 1}


def test_ingestion_statements_are_prepared_once_they_repeat(agent_client):
    """Parsing and planning the per-request statements anew was a fifth of PostgreSQL's work
    outside the COPYs: psycopg prepares them on their 5th run (settings: prepare_threshold)."""
    for seq in range(6):
        _receipt(agent_client, [_event(seq, run_id="run-prepared")])

    with connection.cursor() as cur:
        cur.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [statement for (statement,) in cur.fetchall()]
    assert any("INSERT INTO ledger_run" in statement for statement in prepared)
    assert any("UPDATE ledger_run SET" in statement for statement in prepared)
    assert _verify(agent_client, "run-prepared") == {"valid": True, "recordsChecked": 6}


@pytest.mark.parametrize(("value", "threshold"), [(None, 5), ("0", 0), ("off", None)])
def test_prepared_statements_can_be_turned_off_for_old_pgbouncers(monkeypatch, value, threshold):
    from footprint_site.settings import _database_from_environment

    monkeypatch.setenv("DATABASE_URL", "postgres://u@db.example:5432/footprint")
    if value is None:
        monkeypatch.delenv("DATABASE_PREPARE_THRESHOLD", raising=False)
    else:
        monkeypatch.setenv("DATABASE_PREPARE_THRESHOLD", value)

    assert _database_from_environment()["OPTIONS"]["prepare_threshold"] == threshold


def test_the_servers_connections_run_without_jit() -> None:
    """Every query here is short; JIT once spent 420 ms compiling a 4 ms search (bench/explorer.py)."""
    with connection.cursor() as cur:
        cur.execute("SHOW jit")
        assert cur.fetchone() == ("off",)


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("DATABASE_PREPARE_THRESHOLD", "maybe", "DATABASE_PREPARE_THRESHOLD='maybe': give a number of runs"),
        ("DATABASE_PREPARE_THRESHOLD", "-1", "DATABASE_PREPARE_THRESHOLD='-1': give a number of runs"),
        ("DATABASE_CONN_MAX_AGE", "a minute", "DATABASE_CONN_MAX_AGE='a minute' is not a valid int"),
    ],
)
def test_a_setting_that_is_not_a_number_stops_start_up_naming_it(monkeypatch, variable, value, says):
    from django.core.exceptions import ImproperlyConfigured

    from footprint_site.settings import _database_from_environment

    monkeypatch.setenv("DATABASE_URL", "postgres://u@db.example:5432/footprint")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ImproperlyConfigured, match=re.escape(says)):
        _database_from_environment()
