"""OTLP spans and audit bundles: strict as the framework is, and a valid span is never lost to its mapping."""

import json
from typing import Any

import pytest

from ledger.audits.verify import ZERO_HASH, build_bundle, record_hash, verify_bundles
from ledger.models import OtlpSpan, Run, RunEvent
from tests.conftest import DATA, load_fixture

pytestmark = pytest.mark.django_db

OTLP_FIXTURE = (DATA / "g-otel/otlp-traces.json").read_bytes()
TRACE_ID = "4c5b3d1ba1045b2bf42e5832fb71db5c"


def _post_bundle(client: Any, body: Any) -> Any:
    client.raise_request_exception = False
    raw = body if isinstance(body, bytes | str) else json.dumps(body)
    return client.post("/api/v1/audit-bundles", raw, content_type="application/json")


def _post_otlp(client: Any, body: str | bytes, content_type: str = "application/json") -> Any:
    client.raise_request_exception = False
    return client.post("/v1/traces", body, content_type=content_type)


def _otlp_document() -> dict[str, Any]:
    return json.loads(OTLP_FIXTURE)


def _spans(document: dict[str, Any]) -> list[dict[str, Any]]:
    return document["resourceSpans"][0]["scopeSpans"][0]["spans"]


def _rechained(records: list[dict[str, Any]]) -> dict[str, Any]:
    """A bundle whose records are kept exactly as given (seq included), with every hash recomputed."""
    previous = ZERO_HASH
    chained = []
    for record in records:
        record = {k: v for k, v in record.items() if k != "hash"}
        record["prevHash"] = previous
        record["hash"] = previous = record_hash(record)
        chained.append(record)
    bundle = build_bundle([], exported_at=1)
    bundle["header"]["recordCount"] = len(chained)
    return {**bundle, "records": chained, "finalHash": previous}


# --- audit bundles -------------------------------------------------------------------------------


def test_audit_record_whose_seq_is_true_is_refused_as_the_framework_refuses_it(agent_client):
    """verifyAuditBundle compares `record.seq !== firstSeq + i`: `true` is not 1 in JavaScript."""
    records = load_fixture("f-audit/bundle.json")["records"][:3]
    records[1]["seq"] = True
    bundle = _rechained(records)

    assert verify_bundles(bundle)["valid"] is False
    response = _post_bundle(agent_client, bundle)
    assert response.status_code in (200, 201), response.content[:300]
    assert response.json()["valid"] is False
    assert response.json()["brokenAt"] == 1


def test_audit_header_record_count_true_is_refused_as_the_framework_refuses_it():
    """verifyAuditBundle: `header.recordCount !== records.length`; `true` is not 1."""
    records = load_fixture("f-audit/bundle.json")["records"][:1]
    bundle = _rechained(records)
    bundle["header"]["recordCount"] = True

    assert verify_bundles(bundle)["valid"] is False


# --- GET /api/v1/runs/{id}/verify ----------------------------------------------------------------


def test_verify_detects_a_queryable_copy_whose_boolean_was_edited_into_a_number(agent_client):
    """README: verify names the first record whose queryable copy (`doc`) no longer matches its bytes.
    `true` edited to `1` in doc is such an edit (the pages show 1), though Python finds True == 1."""
    from django.db import connection

    from tests.conftest import fixture_events

    events = fixture_events("b-middleware/events-declined.json")
    run_id = events[0]["meta"]["runId"]
    assert agent_client.ingest(events).status_code == 200
    run = Run.objects.get(run_id=run_id)
    target = next(
        e
        for e in RunEvent.objects.filter(run=run).order_by("position")
        if isinstance(e.doc.get("payload"), dict) and e.doc["payload"].get("changed") is True
    )
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE ledger_runevent SET doc = jsonb_set(doc, '{payload,changed}', '1')"
            " WHERE run_id = %s AND position = %s",
            [run.pk, target.position],
        )

    verdict = agent_client.get(f"/api/v1/runs/{run_id}/verify").json()

    assert verdict["valid"] is False, verdict
    assert verdict["brokenAt"] == target.position


# --- OTLP ----------------------------------------------------------------------------------------


def test_native_events_may_not_name_a_run_otlp_and_write_nothing(agent_client):
    """`otlp-<trace id>` is the run POST /v1/traces numbers by itself; native seqs there would collide."""
    native = {"seq": 0, "type": "agentfootprint.agent.turn_start", "payload": {}, "meta": {"runId": f"otlp-{TRACE_ID}"}}

    response = agent_client.ingest([native])

    assert response.status_code == 422, response.content
    (problem,) = response.json()["errors"]
    assert problem["field"] == "meta.runId"
    assert "POST /v1/traces" in problem["message"]
    assert not Run.objects.exists()
    assert _post_otlp(agent_client, OTLP_FIXTURE).status_code == 200


def test_otlp_spans_of_a_trace_whose_run_native_events_took_earlier_get_a_409_not_a_500(agent_client, project):
    """Stored before the `otlp-` rule: the trace's numbering collides with the native seqs."""
    from ledger.ingest.envelopes import check_events
    from ledger.ingest.services import events_ingest

    native = {"seq": 0, "type": "agentfootprint.agent.turn_start", "payload": {}, "meta": {"runId": f"otlp-{TRACE_ID}"}}
    events_ingest(project=project, events=check_events([native], from_otlp=True))

    response = _post_otlp(agent_client, OTLP_FIXTURE)

    assert response.status_code == 409, response.content[:300]
    assert OtlpSpan.objects.count() == 0


def _long_tenant(document: dict[str, Any]) -> None:
    root = next(s for s in _spans(document) if s["name"].startswith("invoke_agent"))
    root["attributes"].append({"key": "agentfootprint.tenant.id", "value": {"stringValue": "t" * 300}})


def _deep_tool_arguments(document: dict[str, Any]) -> None:
    tool = next(s for s in _spans(document) if s["name"].startswith("execute_tool"))
    tool["attributes"].append({"key": "gen_ai.tool.call.arguments", "value": {"stringValue": "[" * 300 + "]" * 300}})


@pytest.mark.parametrize(
    "change",
    [pytest.param(_long_tenant, id="tenant-id-of-300-chars"), pytest.param(_deep_tool_arguments, id="deep-args-text")],
)
def test_otlp_valid_span_whose_attributes_do_not_map_onto_an_event_is_still_kept(agent_client, change):
    """README: every span is kept verbatim beside its mapping, including spans the mapping does not
    understand; only bad ids, times past 2262 and out-of-range kind/status are rejected. An attribute
    the event mapping cannot use must not cost the span itself (and with it the run's turn or tool call)."""
    document = _otlp_document()
    change(document)

    response = _post_otlp(agent_client, json.dumps(document))

    assert response.status_code == 200, response.content[:300]
    assert "partialSuccess" not in response.json(), response.json()
    assert OtlpSpan.objects.count() == len(_spans(document))


def test_otlp_json_attribute_holding_half_an_emoji_is_stored_not_the_whole_export_refused(agent_client):
    """The framework bounds span-event attributes to 256 UTF-16 units, which can split an emoji, and
    JSON.stringify writes the half as a `\\ud83d` escape. The protobuf encoding of the same spans (UTF-8,
    U+FFFD there) is stored; the OTLP/JSON one must not lose every span of the request with a 400."""
    document = _otlp_document()
    span = _spans(document)[0]
    span["attributes"].append({"key": "agentfootprint.note", "value": {"stringValue": "x" * 255 + "\ud83d"}})
    body = json.dumps(document)  # writes the lone surrogate as the escape \ud83d, as JSON.stringify does
    assert "\\ud83d" in body

    response = _post_otlp(agent_client, body)

    assert response.status_code == 200, response.content[:300]
    assert OtlpSpan.objects.count() == len(_spans(document))


def test_a_span_event_that_maps_to_no_valid_event_is_left_out_the_span_kept_and_named(agent_client):
    document = _otlp_document()
    tool = next(s for s in _spans(document) if s["name"] == "execute_tool lookup_order" and s["events"])
    tool["events"][0]["name"] = "agentfootprint.validation\u0000args_invalid"  # no event type holds U+0000

    response = _post_otlp(agent_client, json.dumps(document))

    assert response.status_code == 200, response.content[:300]
    partial = response.json()["partialSuccess"]
    assert partial.get("rejectedSpans", 0) == 0
    assert tool["name"] in partial["errorMessage"]
    assert "1 of its mapped events" in partial["errorMessage"]
    assert OtlpSpan.objects.count() == len(_spans(document))
    assert RunEvent.objects.filter(type="agentfootprint.stream.tool_start").count() == 3  # the call is kept


def test_token_counts_recorded_as_doubles_count_and_an_empty_content_encoding_is_identity(agent_client):
    """Some SDKs record gen_ai.usage.* as doubles (30.0); a proxy may send `Content-Encoding:` empty."""
    document = _otlp_document()
    for span in _spans(document):
        for attribute in span["attributes"]:
            if attribute["key"].startswith("gen_ai.usage.") and "intValue" in attribute["value"]:
                attribute["value"] = {"doubleValue": float(attribute["value"]["intValue"])}

    response = agent_client.post(
        "/v1/traces", json.dumps(document), content_type="application/json", headers={"Content-Encoding": ""}
    )

    assert response.status_code == 200, response.content[:300]
    run = Run.objects.get(run_id=f"otlp-{TRACE_ID}")
    assert run.tokens_in == 1040


def test_a_span_sent_again_with_other_content_is_rejected_naming_it_and_the_first_copy_stands(agent_client):
    assert "partialSuccess" not in _post_otlp(agent_client, OTLP_FIXTURE).json()
    document = _otlp_document()
    changed = _spans(document)[0]
    changed["name"] = "chat something-else"
    span_id = changed["spanId"]

    again = _post_otlp(agent_client, json.dumps(document)).json()["partialSuccess"]

    assert int(again["rejectedSpans"]) == 1
    assert span_id in again["errorMessage"]
    assert OtlpSpan.objects.get(span_id=span_id).name != "chat something-else"


def _as_stored_before_protobuf_copies() -> None:
    """Rewrite the stored spans as the version before migration 0037 kept them: OTLP/JSON only."""
    for span in OtlpSpan.objects.all():
        OtlpSpan.objects.filter(pk=span.pk).update(stored_json=span.raw, protobuf=None)


def test_a_span_stored_as_otlp_json_before_is_read_and_recognised_when_sent_again(agent_client):
    """Spans stored before their copy was kept as protobuf keep their OTLP/JSON copy (the upgrade
    rewrites nothing): they read as before, and an exporter's retry of one is the same span."""
    assert "partialSuccess" not in _post_otlp(agent_client, OTLP_FIXTURE).json()
    as_json = {span.span_id: span.raw for span in OtlpSpan.objects.all()}
    _as_stored_before_protobuf_copies()
    count, events = OtlpSpan.objects.count(), RunEvent.objects.count()

    assert {span.span_id: span.raw for span in OtlpSpan.objects.all()} == as_json
    again = _post_otlp(agent_client, OTLP_FIXTURE)

    assert again.status_code == 200, again.content[:300]
    assert "partialSuccess" not in again.json()
    assert (OtlpSpan.objects.count(), RunEvent.objects.count()) == (count, events)


def test_a_span_stored_as_otlp_json_before_and_sent_again_changed_is_rejected(agent_client):
    assert "partialSuccess" not in _post_otlp(agent_client, OTLP_FIXTURE).json()
    _as_stored_before_protobuf_copies()
    document = _otlp_document()
    changed = _spans(document)[0]
    changed["name"] = "chat something-else"

    again = _post_otlp(agent_client, json.dumps(document)).json()["partialSuccess"]

    assert int(again["rejectedSpans"]) == 1
    assert changed["spanId"] in again["errorMessage"]


def test_a_span_twice_in_one_request_with_other_content_is_rejected(agent_client):
    document = _otlp_document()
    spans = _spans(document)
    spans.append({**spans[0], "name": "chat other"})

    partial = _post_otlp(agent_client, json.dumps(document)).json()["partialSuccess"]

    assert int(partial["rejectedSpans"]) == 1
    assert spans[0]["spanId"] in partial["errorMessage"]
    assert OtlpSpan.objects.count() == len(spans) - 1


def test_verify_calls_valid_the_numbers_jsonb_writes_back_otherwise(agent_client):
    """jsonb rewrites some numbers (1e16 as 10000000000000000): the same value, not an edit."""
    payload = {"big": 1e16, "small": 1e-7, "huge": 1.5e300, "whole": 100.0, "flags": [True, False, 1, 0]}
    event = {"seq": 0, "type": "agentfootprint.agent.turn_start", "payload": payload, "meta": {"runId": "run-n"}}
    assert agent_client.ingest([event]).status_code == 200

    verdict = agent_client.get("/api/v1/runs/run-n/verify").json()

    assert verdict == {"valid": True, "recordsChecked": 1}
