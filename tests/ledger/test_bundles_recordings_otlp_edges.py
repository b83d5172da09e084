"""The edges of ingestion, recordings, audit bundles, integrity verification and OTLP: values the
framework can produce or a hostile client can send, each answered as the README or the
events-ledger spec promises (a verdict or a specific 4xx, never a 500), and the refusal
carriers of spec §4.3 that no fixture holds. Real PostgreSQL, no mocks.
"""

import copy
import hashlib
import json
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection

from ledger.audits.verify import ZERO_HASH, build_bundle, verify_bundles
from ledger.models import AuditBundle, MiddlewareDecision, OtlpSpan, Recording, Refusal, Run, RunEvent
from tests.conftest import DATA, fixture_events, load_fixture, person

pytestmark = pytest.mark.django_db

PREFIX = "agentfootprint."
MAX_SEQ = 2**31 - 1
OTLP_FIXTURE = (DATA / "g-otel/otlp-traces.json").read_bytes()


# --- helpers -------------------------------------------------------------------------------------


def _event(seq: int, run_id: str = "run-r", type_: str = "agentfootprint.agent.iteration_start", payload: Any = None):
    return {"seq": seq, "type": type_, "payload": {"n": seq} if payload is None else payload, "meta": {"runId": run_id}}


def _ingest_ok(client: Any, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    response = client.ingest(events)
    assert response.status_code == 200, response.content[:500]
    return response.json()["runs"]


def _verify(client: Any, run_id: str) -> dict[str, Any]:
    response = client.get(f"/api/v1/runs/{run_id}/verify")
    assert response.status_code == 200, response.content
    return response.json()


def _post_bundle(client: Any, body: Any) -> Any:
    client.raise_request_exception = False
    raw = body if isinstance(body, bytes | str) else json.dumps(body)
    return client.post("/api/v1/audit-bundles", raw, content_type="application/json")


def _bundle() -> dict[str, Any]:
    return load_fixture("f-audit/bundle.json")


def _segments() -> list[dict[str, Any]]:
    return load_fixture("f-audit/segments.json")["segments"]


def _otlp_one_span(**changes: Any) -> str:
    document = json.loads(OTLP_FIXTURE)
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span.update(changes)
    document["resourceSpans"][0]["scopeSpans"][0]["spans"] = [span]
    return json.dumps(document)


def _post_otlp(client: Any, body: str) -> Any:
    client.raise_request_exception = False
    return client.post("/v1/traces", body, content_type="application/json")


def _paused_run_recording(rows: list[dict[str, Any]], **run: Any) -> tuple[str, dict[str, Any]]:
    """Scenario b's first run (up to its pause) as a recording envelope whose snapshot holds `rows`."""
    events = load_fixture("b-middleware/events-declined.json")["events"]
    run_id = events[0]["meta"]["runId"]
    mine = [{k: v for k, v in e.items() if k != "seq"} for e in events if e["meta"]["runId"] == run_id]
    envelope = {
        "format": "agentfootprint.recording.v1",
        "run": {"runId": run_id, "complete": False, "droppedEvents": 0, **run},
        "recording": {"events": mine, "snapshot": {"sharedState": {"middlewareDecisions": rows}}},
    }
    return run_id, envelope


def _transform_row(**changes: Any) -> dict[str, Any]:
    """The normalize-currency transform row of b-middleware/ledger-at-pause.json (t1, iteration 1)."""
    row = {
        "middleware": "normalize-currency",
        "moment": "before-tool",
        "at": "tool",
        "toolName": "transfer_funds",
        "toolCallId": "t1",
        "iteration": 1,
        "outcome": "allow",
        "changed": True,
        "why": "normalized currency 'euro' to ISO 4217 'EUR'",
        "before": {"from": "ACC-100", "to": "ACC-200", "amount": 40, "currency": "euro"},
        "after": {"from": "ACC-100", "to": "ACC-200", "amount": 40, "currency": "EUR"},
    }
    row.update(changes)
    return {k: v for k, v in row.items() if v is not ...}


# === DEFECTS: each of these fails on the current code ============================================

# --- audit bundles -------------------------------------------------------------------------------


def test_audit_bundle_holding_the_frameworks_own_truncated_surrogate_pair_verifies(agent_client):
    """A bounded record whose 255-unit cut split an emoji (spec §5.3, §5.5 rule 3) is a valid bundle."""
    # The framework truncates strings at 255 UTF-16 units (§5.3): 254 ASCII units then an emoji
    # keeps only the emoji's high surrogate, which JSON.stringify writes as the escape \ud83d.
    why = "a" * 254 + "@@SURROGATE@@" + "\u2026"
    preimage = {
        "seq": 0,
        "timestamp": 1796040000000,
        "eventType": "agentfootprint.middleware.decision",
        "payload": {"middleware": "m", "outcome": "deny", "why": why},
        "meta": {"runId": "run-s"},
        "prevHash": ZERO_HASH,
    }
    # The canonical text, built independently of the server's canonicalizer (keys are ASCII).
    text = json.dumps(preimage, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("@@SURROGATE@@", "\\ud83d")
    digest = hashlib.sha256(text.encode()).hexdigest()
    record_text = text[:-1] + ',"hash":"' + digest + '"}'
    header = {
        "format": "agentfootprint.audit/1",
        "hashAlgorithm": "sha-256",
        "canonicalization": "afp-cjson/1",
        "chainHead": ZERO_HASH,
        "firstSeq": 0,
        "recordCount": 1,
        "exportedAt": 1796040000001,
        "library": {"name": "agentfootprint", "version": "9.62.0"},
    }
    body = '{"header":' + json.dumps(header) + ',"records":[' + record_text + '],"finalHash":"' + digest + '"}'
    assert verify_bundles(json.loads(body)) == {"valid": True, "recordsChecked": 1}  # Python's reader agrees

    response = _post_bundle(agent_client, body.encode())

    assert response.status_code == 201, response.content[:300]
    assert (response.json()["valid"], response.json()["recordsChecked"]) == (True, 1)
    assert bytes(AuditBundle.objects.get().body) == body.encode()


def test_audit_bundle_with_a_lone_surrogate_is_still_held_to_the_nesting_limit(agent_client):
    """Reading a lone surrogate keeps parse_json's other refusals: 300 levels of nesting is a 400 naming the depth."""
    body = load_fixture("f-audit/bundle.json")
    body["records"][0]["payload"] = "@@SLOT@@"
    text = json.dumps(body).replace('"@@SLOT@@"', '["\\ud83d", ' + "[" * 300 + "]" * 300 + "]")

    response = _post_bundle(agent_client, text.encode())

    assert response.status_code == 400, response.content[:300]
    assert "254 levels" in response.json()["error"]
    assert not AuditBundle.objects.exists()


def _first_seq_absent() -> Any:
    segment = _segments()[1]
    del segment["header"]["firstSeq"]
    return segment


def _first_seq_string() -> Any:
    segment = _segments()[1]
    segment["header"]["firstSeq"] = "52"
    return segment


def _records_not_a_list() -> Any:
    return {**_bundle(), "records": 5}


def _seq_holding_u0000() -> Any:
    bundle = _bundle()
    bundle["records"][3]["seq"] = "\u0000"
    return bundle


def _record_count_holding_u0000() -> Any:
    bundle = _bundle()
    bundle["header"]["recordCount"] = "\u0000"
    return bundle


def _first_seq_past_bigint() -> Any:
    records = [{"timestamp": 1, "eventType": "x", "payload": {}, "meta": {"runId": "r"}}]
    return build_bundle(records, exported_at=1, chain_head="ab" * 32, first_seq=2**63)


@pytest.mark.parametrize(
    "document",
    [
        pytest.param(_first_seq_absent, id="firstSeq-absent"),
        pytest.param(_first_seq_string, id="firstSeq-a-string"),
        pytest.param(_records_not_a_list, id="records-a-number"),
        pytest.param(_seq_holding_u0000, id="record-seq-holding-u0000"),
        pytest.param(_record_count_holding_u0000, id="recordCount-holding-u0000"),
        pytest.param(_first_seq_past_bigint, id="firstSeq-2**63"),
    ],
)
def test_audit_bundle_with_an_odd_header_or_record_value_gets_a_verdict_or_a_4xx_never_a_500(agent_client, document):
    """Whatever a header or record holds, the import answers a verdict or a 4xx, as verifyAuditBundle answers one."""
    response = _post_bundle(agent_client, document())

    assert response.status_code in (201, 422), (response.status_code, response.content[:200])
    if response.status_code == 201:
        assert "valid" in response.json()


def test_resending_a_segment_after_its_predecessor_arrived_answers_that_it_continues(agent_client):
    """A retried segment 2 posted after segment 1 is answered `continues`, not the stale `unanchored`."""
    first, second = _segments()
    assert _post_bundle(agent_client, second).json()["continuity"] == {"state": "unanchored"}
    stored_first = _post_bundle(agent_client, first).json()

    again = _post_bundle(agent_client, second)

    assert again.json()["valid"] is True
    assert again.json()["continuity"] == {
        "state": "continues",
        "bundleId": stored_first["id"],
        "predecessorValid": True,
    }


@pytest.fixture
def admin_client(client: Any, django_user_model: Any, project: Any) -> Any:
    client.force_login(person(django_user_model, "ada", project, "admin"))
    return client


def _upload(client: Any, project: Any, body: bytes) -> Any:
    return client.post("/audit-bundles/", {"project": project.pk, "bundle": SimpleUploadedFile("b.json", body)})


def test_bundle_page_names_record_0_when_the_genesis_record_is_the_broken_one(admin_client, project):
    """A tampered genesis record is 'Broken at record 0', not 'Broken at record ?' (brokenAt 0 is a record)."""
    bundle = _bundle()
    bundle["records"][0]["payload"]["agent"] = "someone-else"
    assert verify_bundles(bundle)["brokenAt"] == 0

    html = _upload(admin_client, project, json.dumps(bundle).encode()).content.decode()

    assert "Broken at record 0:" in html, html[html.find("verdict") : html.find("verdict") + 400]
    detail = admin_client.get(f"/audit-bundles/{AuditBundle.objects.get().pk}/").content.decode()
    assert "Broken at record 0:" in detail
    assert "from seq 0" in detail


def test_stored_bundle_page_does_not_claim_verified_after_its_stored_bytes_were_edited(admin_client, project):
    """The stored bundle's page re-checks what it shows: bytes edited in the database are not 'Verified'."""
    raw = (DATA / "f-audit/bundle.json").read_bytes()
    assert "Verified:" in _upload(admin_client, project, raw).content.decode()
    stored = AuditBundle.objects.get()
    # The fixture README's byte flip ('lookup' → 'mookup' in records[14]), done to the stored copy.
    tampered = (DATA / "f-audit/bundle-tampered-byte.json").read_bytes()
    AuditBundle.objects.filter(pk=stored.pk).update(body=tampered)

    detail = admin_client.get(f"/audit-bundles/{stored.pk}/").content.decode()

    assert "Verified:" not in detail
    assert "14" in detail


# --- integrity of stored records -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "value"),
    [
        pytest.param("wall_clock_ms", 1_000_000_000_000, id="wall_clock_ms"),
        pytest.param("tool_call_id", "t9", id="tool_call_id"),
    ],
)
def test_verify_detects_an_edited_tool_call_id_or_wall_clock_column(agent_client, column, value):
    """The pages read these columns beside seq and type; an edit to them is a broken record like an edit to type."""
    events = fixture_events("a-run-recording/events.json")
    run_id = events[0]["meta"]["runId"]
    _ingest_ok(agent_client, events)
    run = Run.objects.get(run_id=run_id)
    target = RunEvent.objects.filter(run=run, tool_call_id__isnull=False, wall_clock_ms__isnull=False).order_by(
        "position"
    )[0]
    with connection.cursor() as cur:
        cur.execute(
            f"UPDATE ledger_runevent SET {column} = %s WHERE run_id = %s AND position = %s",  # noqa: S608 - fixed names
            [value, run.pk, target.position],
        )

    verdict = _verify(agent_client, run_id)

    assert verdict["valid"] is False, verdict
    assert verdict["brokenAt"] == target.position


# --- native batches ------------------------------------------------------------------------------


def test_a_422_names_every_bad_event_even_past_two_hundred(agent_client):
    """README: schema violations are 422 with errors [{index, field, message}] for every bad event."""
    events = [_event(i) for i in range(300)]
    for event in events:
        event["seq"] = -1

    response = agent_client.ingest(events)

    assert response.status_code == 422
    assert {e["index"] for e in response.json()["errors"]} == set(range(300))
    assert not Run.objects.exists()


def test_an_unprefixed_type_is_an_unknown_type_and_projects_no_refusal_or_status(agent_client):
    """Only agentfootprint.* types are the framework's: a custom 'middleware.decision' is kept, not projected."""
    events = [
        _event(0, type_="agentfootprint.agent.turn_start", payload={"turnIndex": 0, "userPrompt": "hi"}),
        _event(1, type_="middleware.decision", payload={"middleware": "mine", "moment": "x", "outcome": "deny"}),
        _event(2, type_="error.fatal", payload={"error": "my app's own event"}),
    ]

    _ingest_ok(agent_client, events)

    assert not Refusal.objects.exists()
    assert not MiddlewareDecision.objects.exists()
    assert Run.objects.get().status == Run.Status.RUNNING


def test_a_skill_rejection_without_current_skill_has_no_python_none_in_its_reason(agent_client):
    """skill.rejected.currentSkillId is optional (spec §4.2): its absence must not read 'from None'."""
    payload = {"requestedId": "refunds", "allowed": ["billing"], "iteration": 2}

    _ingest_ok(agent_client, [_event(0, type_="agentfootprint.skill.rejected", payload=payload)])

    reason = Refusal.objects.get().reason
    assert "refunds" in reason
    assert "None" not in reason


# --- recordings ----------------------------------------------------------------------------------


def test_recording_whose_snapshot_before_holds_u0000_is_stored_not_a_500(agent_client):
    """README: U+0000 inside payloads is kept; a snapshot's before/after holding it must not make a 500."""
    run_id, envelope = _paused_run_recording([_transform_row(before="ssn \u0000 123-45-6789", after="ssn [ssn]")])
    agent_client.raise_request_exception = False

    response = agent_client.post_json("/api/v1/recordings", envelope)

    assert response.status_code == 201, response.content[:200]
    assert Recording.objects.filter(run__run_id=run_id).count() == 1


def test_recording_with_more_dropped_events_than_int4_holds_is_stored_or_refused_not_a_500(agent_client):
    """run.droppedEvents is a count the framework writes: a large one is kept or refused naming it, never a 500."""
    _, envelope = _paused_run_recording([], droppedEvents=2**31)
    agent_client.raise_request_exception = False

    response = agent_client.post_json("/api/v1/recordings", envelope)

    assert response.status_code in (201, 422), response.content[:200]
    if response.status_code == 422:
        assert "droppedEvents" in response.json()["error"]


# --- OTLP ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"name": "chat mock\u0000small"}, id="name-holding-u0000"),
        pytest.param({"status": {"code": 2, "message": "provider\u0000down"}}, id="status-message-holding-u0000"),
        pytest.param({"kind": 70000}, id="kind-past-smallint"),
        pytest.param({"status": {"code": 70000}}, id="status-code-past-smallint"),
    ],
)
def test_otlp_span_with_an_unusual_name_kind_or_status_is_kept_or_rejected_never_a_500(agent_client, changes):
    """A span protobuf decodes (UTF-8 strings, int32 enums) is stored or rejected as partialSuccess, never a 500."""
    response = _post_otlp(agent_client, _otlp_one_span(**changes))

    assert response.status_code == 200, (response.status_code, response.content[:200])
    rejected = int(response.json().get("partialSuccess", {}).get("rejectedSpans", 0))
    assert OtlpSpan.objects.count() + rejected == 1


# === GAPS: passing tests for promises no other test checks ========================================

# Every refusal carrier of spec §4.3, with a payload shaped as §4.2 writes it.
REFUSAL_CARRIERS = [
    (
        "middleware.decision",
        {
            "middleware": "m",
            "moment": "before-tool",
            "at": "tool",
            "toolName": "t",
            "toolCallId": "c1",
            "iteration": 1,
            "outcome": "deny",
            "changed": False,
            "why": "no",
        },
        "middleware",
    ),
    (
        "permission.check",
        {
            "capability": "tool_call",
            "actor": "agent",
            "target": "t",
            "result": "deny",
            "policyRuleId": "p1",
            "rationale": "not allowed",
        },
        "permission",
    ),
    (
        "permission.check",
        {"capability": "tool_call", "actor": "agent", "target": "t", "result": "halt", "rationale": "stop"},
        "permission",
    ),
    (
        "permission.halt",
        {"checkerId": "chk", "target": "t", "reason": "stop", "iteration": 2, "sequenceLength": 3},
        "permission",
    ),
    (
        "checkin.decision",
        {"toolName": "t", "toolCallId": "c1", "iteration": 1, "approved": False, "by": "dana", "note": "no"},
        "checkin",
    ),
    (
        "validation.args_invalid",
        {
            "toolName": "t",
            "toolCallId": "c1",
            "iteration": 1,
            "issues": [{"path": ["a"], "expected": "string", "got": "number"}],
            "enforced": True,
        },
        "validation",
    ),
    (
        "tools.effect",
        {
            "kind": "propose-transition",
            "outcome": "refused",
            "toolName": "t",
            "toolCallId": "c1",
            "iteration": 1,
            "refusalReason": "not reachable",
        },
        "effect",
    ),
    (
        "tools.effect",
        {
            "kind": "propose-transition",
            "outcome": "superseded",
            "toolName": "t",
            "toolCallId": "c1",
            "iteration": 1,
            "targetSkillId": "s",
            "supersededBy": "earlier-proposal",
        },
        "effect",
    ),
    (
        "tools.result_refused",
        {"toolName": "t", "toolCallId": "c1", "iteration": 1, "sizeChars": 900, "maxChars": 100},
        "ceiling",
    ),
    ("skill.rejected", {"requestedId": "s2", "currentSkillId": "s1", "allowed": ["s3"], "iteration": 1}, "skill"),
    ("artifacts.refused", {"op": "dispatch", "reason": "missing-or-expired", "ref": "art_x", "tool": "t"}, "artifact"),
    ("credential.failed", {"service": "crm", "reason": "expired token", "tool": "t"}, "credential"),
    (
        "agent.evidence_checked",
        {
            "iteration": 1,
            "posture": "rails",
            "candidates": 1,
            "unsupported": [{"value": "42", "shape": "number"}],
            "action": "refused",
            "afterRevision": False,
        },
        "evidence",
    ),
    (
        "agent.output_contract_unmet",
        {
            "stage": "schema-validate",
            "error": "missing field",
            "attempts": 2,
            "retriesSpent": 1,
            "fallbackConfigured": False,
            "iteration": 3,
        },
        "output-contract",
    ),
    (
        "integrity.context_error",
        {"kind": "dangling-reference", "seam": "wire", "subjects": [], "witnesses": [], "message": "ref not found"},
        "integrity",
    ),
]
# Variants of refusal carriers that refuse nothing and that no fixture file holds.
NOT_REFUSALS = [
    ("permission.check", {"capability": "tool_call", "actor": "agent", "result": "allow"}),
    ("permission.check", {"capability": "tool_call", "actor": "agent", "result": "gate_open"}),
    ("validation.args_invalid", {"toolName": "t", "toolCallId": "c1", "iteration": 1, "issues": [], "enforced": False}),
    (
        "agent.evidence_checked",
        {
            "iteration": 1,
            "posture": "assist",
            "candidates": 0,
            "unsupported": [],
            "action": "flagged",
            "afterRevision": False,
        },
    ),
]


@pytest.mark.parametrize(
    ("short_type", "payload", "category"),
    [pytest.param(*carrier, id=f"{carrier[0]}-{i}") for i, carrier in enumerate(REFUSAL_CARRIERS)],
)
def test_every_refusal_carrier_of_spec_4_3_is_one_refusal_row(agent_client, short_type, payload, category):
    """Spec §4.3: each refusal-carrying event kind becomes one refusal of its category, counted on the run."""
    _ingest_ok(agent_client, [_event(0, type_=PREFIX + short_type, payload=payload)])

    (refusal,) = Refusal.objects.all()
    assert (refusal.category, refusal.seq, refusal.event_type) == (category, 0, PREFIX + short_type)
    assert refusal.reason
    assert Run.objects.get().refusal_count == 1


@pytest.mark.parametrize(
    ("short_type", "payload"), [pytest.param(*event, id=f"{event[0]}-{i}") for i, event in enumerate(NOT_REFUSALS)]
)
def test_the_non_refusing_variants_of_refusal_carriers_are_not_refusals(agent_client, short_type, payload):
    """A permission allow or open gate, an unenforced validation, a flagged evidence check: no refusal, no count."""
    _ingest_ok(agent_client, [_event(0, type_=PREFIX + short_type, payload=payload)])

    assert not Refusal.objects.exists()
    assert Run.objects.get().refusal_count == 0


def test_receipts_at_the_largest_seq_are_exact_for_each_run_of_one_batch(agent_client):
    """seq 2**31-1 in two runs of one batch, re-sent and overlapped: accepted, duplicates, lastSeq, head, gaps."""
    first = _ingest_ok(
        agent_client,
        [
            _event(MAX_SEQ, "run-a"),
            _event(0, "run-b"),
            _event(MAX_SEQ - 1, "run-a"),
            _event(0, "run-a"),
            _event(MAX_SEQ, "run-b"),
        ],
    )
    assert [(r["runId"], r["accepted"], r["duplicates"], r["lastSeq"], r["gaps"]) for r in first] == [
        ("run-a", 3, 0, MAX_SEQ, [[1, MAX_SEQ - 2]]),
        ("run-b", 2, 0, MAX_SEQ, [[1, MAX_SEQ - 1]]),
    ]

    second = _ingest_ok(
        agent_client, [_event(MAX_SEQ, "run-a"), _event(1, "run-a"), _event(MAX_SEQ, "run-b"), _event(MAX_SEQ, "run-b")]
    )

    assert [(r["runId"], r["accepted"], r["duplicates"], r["lastSeq"], r["gaps"]) for r in second] == [
        ("run-a", 1, 1, MAX_SEQ, [[2, MAX_SEQ - 2]]),
        ("run-b", 0, 2, MAX_SEQ, [[1, MAX_SEQ - 1]]),
    ]
    assert second[1]["head"] == first[1]["head"]
    assert second[0]["head"] == Run.objects.get(run_id="run-a").head_hex != first[0]["head"]
    assert RunEvent.objects.count() == 6
    assert _verify(agent_client, "run-a") == {"valid": True, "recordsChecked": 4}
    assert _verify(agent_client, "run-b") == {"valid": True, "recordsChecked": 2}
    page = agent_client.get("/api/v1/runs/run-a/events", {"after_seq": MAX_SEQ - 2}).json()["events"]
    assert [e["seq"] for e in page] == [MAX_SEQ - 1, MAX_SEQ]


def test_segments_file_posted_as_it_is_verifies_both_segments(agent_client):
    """f-audit/segments.json, byte for byte ({scenario, segments: [seg1, seg2]}), verifies all 104 records."""
    raw = (DATA / "f-audit/segments.json").read_bytes()

    response = _post_bundle(agent_client, raw)

    assert response.status_code == 201
    assert {k: response.json()[k] for k in ("valid", "recordsChecked", "continuity")} == {
        "valid": True,
        "recordsChecked": 104,
        "continuity": {"state": "genesis"},
    }
    stored = AuditBundle.objects.get()
    assert (bytes(stored.body), stored.segment_count, stored.record_count) == (raw, 2, 104)


def test_recording_attaches_snapshot_before_and_after_keeping_absent_apart_from_null(agent_client):
    """README: a recording's snapshot before/after land on its decision rows; rows without them stay SQL NULL."""
    rows = load_fixture("b-middleware/ledger-at-pause.json")["rows"]
    run_id, envelope = _paused_run_recording(copy.deepcopy(rows))

    response = agent_client.post_json("/api/v1/recordings", envelope)

    assert response.status_code == 201, response.content[:300]
    with connection.cursor() as cur:
        cur.execute(
            "SELECT d.middleware, d.tool_call_id, d.before, d.after FROM ledger_middlewaredecision d"
            " JOIN ledger_run r ON r.id = d.run_id WHERE r.run_id = %s ORDER BY d.seq",
            [run_id],
        )
        stored = [
            (m, c, None if b is None else json.loads(b), None if a is None else json.loads(a))
            for m, c, b, a in cur.fetchall()
        ]
    expected = [(r["middleware"], r["toolCallId"], r.get("before"), r.get("after")) for r in rows]
    assert stored == expected
    assert sum(b is not None for _, _, b, _ in stored) == 1  # only the currency transform changed anything


PAUSED_B_RUN, RESUMED_B_RUN = "run-1796043009084-1", "run-1796043009518-2"


def _b_approved_held_back(agent_client: Any, held_back: Any) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """Ingests scenario b-approved's events but the one `held_back` picks (when given); that event,
    the resumed run's recording (its snapshot: the ledger at the pause plus the approval) and the
    currency transform's row."""
    events = fixture_events("b-middleware/events-approved.json")
    late = next(e for e in events if held_back(e)) if held_back else None
    assert agent_client.ingest([e for e in events if e is not late]).status_code == 200
    resumed = [e for e in events if e["meta"]["runId"] == RESUMED_B_RUN]
    approve_row = next(e["payload"] for e in resumed if e["type"] == "agentfootprint.middleware.decision")
    rows = [*load_fixture("b-middleware/ledger-at-pause.json")["rows"], approve_row]
    envelope = {
        "format": "agentfootprint.recording.v1",
        "run": {"runId": RESUMED_B_RUN, "complete": True, "droppedEvents": 0, "firstRetainedEventIndex": 0},
        "recording": {
            "events": [{k: v for k, v in e.items() if k != "seq"} for e in resumed],
            "snapshot": {"sharedState": {"middlewareDecisions": rows}},
        },
    }
    return late, envelope, next(r for r in rows if r.get("changed"))


def _paused_runs_transform() -> MiddlewareDecision:
    return MiddlewareDecision.objects.get(run__run_id=PAUSED_B_RUN, middleware="normalize-currency", tool_call_id="t1")


def test_a_resumed_runs_recording_gives_the_paused_runs_decisions_their_before_and_after(agent_client):
    """A resume carries the whole ledger on (spec §1.7): the resumed run's snapshot holds the paused
    run's rows too (fixture README, b: `ledgerAfterResume`), the currency transform of t1 among them."""
    _, envelope, transform = _b_approved_held_back(agent_client, None)

    response = agent_client.post_json("/api/v1/recordings", envelope)

    assert response.status_code == 201, response.content[:300]
    assert (_paused_runs_transform().before, _paused_runs_transform().after) == (
        transform["before"],
        transform["after"],
    )


def test_recording_snapshot_row_with_null_after_stores_json_null_and_absent_before_stays_sql_null(agent_client):
    """Key presence survives: `after: null` is JSON null on the row, a missing `before` is SQL NULL."""
    run_id, envelope = _paused_run_recording([_transform_row(before=..., after=None)])

    assert agent_client.post_json("/api/v1/recordings", envelope).status_code == 201

    with connection.cursor() as cur:
        cur.execute(
            "SELECT d.before IS NULL, d.after::text FROM ledger_middlewaredecision d JOIN ledger_run r"
            " ON r.id = d.run_id WHERE r.run_id = %s AND d.middleware = 'normalize-currency' AND d.tool_call_id = 't1'",
            [run_id],
        )
        assert cur.fetchone() == (True, "null")


# --- a lone surrogate in an event stream ----------------------------------------------------------


def _with_lone_surrogate(document: Any) -> bytes:
    """As JSON.stringify writes a string holding half an emoji: the escape \\ud83d alone."""
    return json.dumps(document).replace("@@HALF@@", "\\ud83d").encode()


def test_an_event_holding_half_an_emoji_is_stored_with_u_fffd_and_its_batch_is_kept(agent_client):
    """One lone surrogate (a tool result cut mid-emoji) must not cost the agent its whole batch:
    UTF-8 cannot carry it, so it is stored as U+FFFD; the chain verifies and a re-send is a duplicate."""
    events = [_event(0, payload={"result": "ok 👍"}), _event(1, payload={"result": "cut @@HALF@@", "@@HALF@@": 1})]
    body = _with_lone_surrogate({"events": events})

    response = agent_client.post("/api/v1/events", body, content_type="application/json")

    assert response.status_code == 200, response.content[:300]
    assert response.json()["runs"][0]["accepted"] == 2
    stored = json.loads(RunEvent.objects.get(run__run_id="run-r", seq=1).body)
    assert stored["payload"] == {"result": "cut \ufffd", "\ufffd": 1}
    assert _verify(agent_client, "run-r") == {"valid": True, "recordsChecked": 2}
    again = agent_client.post("/api/v1/events", body, content_type="application/json").json()["runs"][0]
    assert (again["accepted"], again["duplicates"]) == (0, 2)


def test_a_recording_holding_half_an_emoji_is_stored(agent_client):
    run_id, envelope = _paused_run_recording([_transform_row(before="name: Zoë @@HALF@@", after="name: [name]")])

    response = agent_client.post("/api/v1/recordings", _with_lone_surrogate(envelope), content_type="application/json")

    assert response.status_code == 201, response.content[:300]
    assert Recording.objects.filter(run__run_id=run_id).count() == 1


def test_other_bodies_still_refuse_a_lone_surrogate_and_bundles_keep_it(agent_client):
    """Only event streams read it as U+FFFD: an ask or decision body is refused (400), as before."""
    body = _with_lone_surrogate({"runId": "run-q", "pauseData": {"toolCallId": "q1", "question": "@@HALF@@"}})

    response = agent_client.post("/api/v1/asks", body, content_type="application/json")

    assert response.status_code == 400
    assert "surrogate" in response.json()["error"]


def test_a_paused_runs_decision_arriving_after_the_resumed_runs_recording_gains_its_before_and_after(agent_client):
    """As when the recording comes last: a late batch of the paused run (its transform of t1 held
    back) is matched against the resumed run's snapshot, which carries the paused run's rows on."""
    late, envelope, transform = _b_approved_held_back(
        agent_client,
        lambda e: (
            e["meta"]["runId"] == PAUSED_B_RUN
            and e["payload"].get("middleware") == "normalize-currency"
            and e["payload"].get("toolCallId") == "t1"
        ),
    )
    assert agent_client.post_json("/api/v1/recordings", envelope).status_code == 201

    assert agent_client.ingest([late]).status_code == 200

    assert (_paused_runs_transform().before, _paused_runs_transform().after) == (
        transform["before"],
        transform["after"],
    )


def test_a_recording_posted_again_reaches_a_run_linked_by_its_resume_since(agent_client):
    """The paused call's start (t3) arrives after the recording, so the resume that links the two
    runs was unknown then; posting the same recording again gives the paused run's decisions
    their values, and changes nothing else (the body is stored once)."""
    late, envelope, transform = _b_approved_held_back(
        agent_client,
        lambda e: (
            e["meta"]["runId"] == PAUSED_B_RUN
            and e["type"] == "agentfootprint.stream.tool_start"
            and e["payload"].get("toolCallId") == "t3"
        ),
    )
    assert agent_client.post_json("/api/v1/recordings", envelope).status_code == 201
    assert agent_client.ingest([late]).status_code == 200
    assert (_paused_runs_transform().before, _paused_runs_transform().after) == (None, None)

    assert agent_client.post_json("/api/v1/recordings", envelope).status_code == 200

    assert (_paused_runs_transform().before, _paused_runs_transform().after) == (
        transform["before"],
        transform["after"],
    )
    assert Recording.objects.filter(run__run_id=RESUMED_B_RUN).count() == 1
