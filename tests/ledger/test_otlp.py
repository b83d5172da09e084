"""OTLP/HTTP trace ingestion (`POST /v1/traces`): spans kept verbatim and mapped onto runs."""

import base64
import copy
import gzip
import json
from typing import Any

import pytest
from django.test import Client
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from ledger.models import OtlpSpan, Refusal, Run, RunEvent, ToolCall
from ledger.otlp.wire import decode_spans, span_events
from tenancy.services import agent_key_create
from tests.conftest import DATA, ApiClient, load_fixture

pytestmark = pytest.mark.django_db

URL = "/v1/traces"
PROTOBUF = "application/x-protobuf"
FIXTURE_BYTES = (DATA / "g-otel/otlp-traces.json").read_bytes()
TRACE_ID = "4c5b3d1ba1045b2bf42e5832fb71db5c"
RUN_ID = f"otlp-{TRACE_ID}"
EXPECTED_CALLS = {("o1", "lookup_order", True), ("o2", "lookup_order", None), ("o3", "track_parcel", None)}


def _fixture() -> dict[str, Any]:
    return json.loads(FIXTURE_BYTES)


def _fixture_spans() -> list[dict[str, Any]]:
    return _fixture()["resourceSpans"][0]["scopeSpans"][0]["spans"]


def _with_spans(spans: list[dict[str, Any]]) -> dict[str, Any]:
    document = _fixture()
    document["resourceSpans"][0]["scopeSpans"][0]["spans"] = spans
    return document


def _base64_ids(document: dict[str, Any]) -> dict[str, Any]:
    """OTLP/JSON hex ids → the base64 the protobuf JSON mapping expects."""
    document = copy.deepcopy(document)
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return document


def _protobuf(document: dict[str, Any]) -> bytes:
    message = json_format.Parse(json.dumps(_base64_ids(document)), ExportTraceServiceRequest())
    return message.SerializeToString()


def _post(client: Client, body: bytes | str, content_type: str = "application/json", **headers: str) -> Any:
    return client.post(URL, body, content_type=content_type, headers=headers)


def _post_json(client: Client, document: dict[str, Any]) -> Any:
    response = _post(client, json.dumps(document))
    assert response.status_code == 200, response.content
    return response.json()


def _run(project: Any = None) -> Run:
    runs = Run.objects.filter(project=project) if project else Run.objects.all()
    (run,) = runs
    return run


def _summary(run: Run) -> dict[str, Any]:
    """Everything about the run that must not depend on how its spans were delivered."""
    events = list(RunEvent.objects.filter(run=run).order_by("seq"))
    return {
        "run_id": run.run_id,
        "source": run.source,
        "status": run.status,
        "tokens": (run.tokens_in, run.tokens_out),
        "iterations": run.iterations,
        "tool_call_count": run.tool_call_count,
        "refusal_count": run.refusal_count,
        "event_count": run.event_count,
        "has_gaps": run.has_gaps,
        "seqs_dense": [e.seq for e in events] == list(range(len(events))),
        "events": sorted(
            (e.type, e.doc["meta"]["spanId"], json.dumps(e.doc["payload"], sort_keys=True)) for e in events
        ),
        "tool_calls": {(c.tool_call_id, c.tool_name, c.error) for c in ToolCall.objects.filter(run=run)},
        "first_event_at": run.first_event_at,
        "last_event_at": run.last_event_at,
        "spans": sorted(
            OtlpSpan.objects.filter(project=run.project, trace_id=run.run_id.removeprefix("otlp-")).values_list(
                "span_id", "parent_span_id", "name"
            )
        ),
    }


def _stored_counts() -> tuple[int, ...]:
    return (
        OtlpSpan.objects.count(),
        Run.objects.count(),
        RunEvent.objects.count(),
        ToolCall.objects.count(),
        Refusal.objects.count(),
    )


# --- the fixture, in every encoding --------------------------------------------------------------


def test_otlp_json_fixture_keeps_every_span_verbatim(agent_client):
    response = _post(agent_client, FIXTURE_BYTES)

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {}  # no partialSuccess: everything was accepted
    spans = load_fixture("g-otel/spans.json")["spans"]
    assert OtlpSpan.objects.count() == len(spans) == 12
    for expected in spans:
        row = OtlpSpan.objects.get(trace_id=expected["traceId"], span_id=expected["spanId"])
        assert row.name == expected["name"]
        assert row.parent_span_id == (expected["parentSpanId"] or "")
        assert row.start_unix_nano == int(expected["startTimeUnixNano"])
        assert row.end_unix_nano == int(expected["endTimeUnixNano"])
        assert row.status_code == expected["status"]["code"]
        assert row.attributes == expected["attributes"]
        assert row.events == expected["events"]
        assert row.scope == expected["instrumentationScope"]
        assert row.resource_attributes == {"service.name": "order-desk-svc"}
    for sent in _fixture_spans():
        row = OtlpSpan.objects.get(span_id=sent["spanId"])
        as_sent = json_format.ParseDict(
            _base64_ids({"resourceSpans": [{"scopeSpans": [{"spans": [sent]}]}]}), ExportTraceServiceRequest()
        )
        as_stored = json_format.ParseDict(
            _base64_ids({"resourceSpans": [{"scopeSpans": [{"spans": [row.raw]}]}]}), ExportTraceServiceRequest()
        )
        assert as_stored == as_sent
        assert row.raw["spanId"] == sent["spanId"]  # hex, as OTLP/JSON writes it


def test_otlp_json_fixture_becomes_one_run_with_its_tool_calls_and_tokens(agent_client):
    _post_json(agent_client, _fixture())

    run = _run()
    assert run.run_id == RUN_ID
    assert run.source == Run.Source.OTLP
    assert run.status == Run.Status.COMPLETED
    assert {(c.tool_call_id, c.tool_name, c.error) for c in ToolCall.objects.filter(run=run)} == EXPECTED_CALLS
    chat = [s for s in load_fixture("g-otel/spans.json")["spans"] if s["name"].startswith("chat ")]
    assert run.tokens_in == sum(s["attributes"]["gen_ai.usage.input_tokens"] for s in chat) == 1040
    assert run.tokens_out == sum(s["attributes"]["gen_ai.usage.output_tokens"] for s in chat) == 48
    assert run.tool_call_count == 3
    assert run.iterations == 4
    assert not run.has_gaps
    # The span event agentfootprint.validation.args_invalid (enforced) is a refusal like the native event.
    (refusal,) = Refusal.objects.filter(run=run)
    assert (refusal.category, refusal.tool_call_id) == ("validation", "o1")
    first_chat = RunEvent.objects.get(
        run=run, type="agentfootprint.stream.llm_end", doc__meta__spanId="63f15e8617984c99"
    )
    assert first_chat.doc["payload"]["usage"] == {"input": 200, "output": 12}
    assert first_chat.doc["meta"]["traceId"] == TRACE_ID
    tool_start = RunEvent.objects.get(run=run, type="agentfootprint.stream.tool_start", tool_call_id="o3")
    assert tool_start.doc["meta"]["wallClockMs"] == 1796043018416  # the span's start, in ms


@pytest.mark.parametrize(
    ("content_type", "gzipped"),
    [(PROTOBUF, False), (PROTOBUF, True), ("application/json", True)],
)
def test_otlp_protobuf_and_gzip_bodies_give_the_same_run_as_json(
    agent_client, other_agent_client, other_project, content_type, gzipped
):
    _post_json(agent_client, _fixture())
    body = _protobuf(_fixture()) if content_type == PROTOBUF else FIXTURE_BYTES
    headers = {"Content-Encoding": "gzip"} if gzipped else {}

    response = _post(other_agent_client, gzip.compress(body) if gzipped else body, content_type, **headers)

    assert response.status_code == 200, response.content
    assert response["Content-Type"] == content_type
    if content_type == PROTOBUF:
        assert not ExportTraceServiceResponse.FromString(response.content).HasField("partial_success")
    other_run = _run(other_project)
    expected = _summary(Run.objects.exclude(pk=other_run.pk).get())
    assert _summary(other_run) == expected
    assert other_run.head_hash == Run.objects.exclude(pk=other_run.pk).get().head_hash


# --- idempotency and order -----------------------------------------------------------------------


def test_otlp_same_request_twice_stores_nothing_twice(agent_client):
    _post_json(agent_client, _fixture())
    before, summary, head = _stored_counts(), _summary(_run()), _run().head_hex

    again = _post(agent_client, _protobuf(_fixture()), PROTOBUF)

    assert again.status_code == 200
    assert _stored_counts() == before
    assert _summary(_run()) == summary
    assert _run().head_hex == head


def test_otlp_spans_in_reverse_order_across_two_requests_give_the_same_run(
    agent_client, other_agent_client, other_project
):
    _post_json(agent_client, _fixture())
    spans = list(reversed(_fixture_spans()))  # the root first, children before their parents after

    _post_json(other_agent_client, _with_spans(spans[:5]))
    _post_json(other_agent_client, _with_spans(spans[5:]))

    reordered = _run(other_project)
    assert _summary(reordered) == _summary(Run.objects.exclude(pk=reordered.pk).get())
    assert reordered.status == Run.Status.COMPLETED


def test_otlp_children_first_keep_their_parent_links(agent_client):
    spans = _fixture_spans()
    children = [s for s in spans if s["name"].startswith(("chat", "execute_tool"))]
    parents = [s for s in spans if s not in children]

    _post_json(agent_client, _with_spans(children))
    _post_json(agent_client, _with_spans(parents))

    stored = {row.span_id: row.parent_span_id for row in OtlpSpan.objects.all()}
    assert stored == {s["spanId"]: s.get("parentSpanId", "") for s in spans}
    assert all(parent == "" or parent in stored for parent in stored.values())
    assert _summary(_run())["seqs_dense"]


# --- partial success and refusals ----------------------------------------------------------------


def test_otlp_invalid_span_ids_are_rejected_as_partial_success(agent_client):
    spans = _fixture_spans()
    spans[0]["spanId"] = ""
    spans[1]["traceId"] = "not-hex-at-all"
    spans[2]["spanId"] = "0000000000000000"

    body = _post_json(agent_client, _with_spans(spans))

    partial = body["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 3
    assert "spanId must be 8 bytes" in partial["errorMessage"]
    assert "traceId must be 16 bytes" in partial["errorMessage"]
    assert OtlpSpan.objects.count() == 9
    assert {c.tool_call_id for c in ToolCall.objects.all()} == {"o2", "o3"}  # o1's span was rejected


def test_otlp_invalid_span_in_protobuf_answers_protobuf_partial_success(agent_client):
    message = ExportTraceServiceRequest.FromString(_protobuf(_fixture()))
    message.resource_spans[0].scope_spans[0].spans[0].span_id = b"\x01\x02\x03"

    response = _post(agent_client, message.SerializeToString(), PROTOBUF)

    assert response.status_code == 200
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert answer.partial_success.rejected_spans == 1
    assert "spanId" in answer.partial_success.error_message
    assert OtlpSpan.objects.count() == 11


@pytest.mark.parametrize(
    ("body", "content_type", "headers"),
    [
        (b"not protobuf", PROTOBUF, {}),
        (b"{not json", "application/json", {}),
        (b'{"resourceSpans": "many"}', "application/json", {}),
        (b"[]", "application/json", {}),
        (b"\x1f\x8b\x08\x00garbage", "application/json", {"Content-Encoding": "gzip"}),
        (gzip.compress(FIXTURE_BYTES)[:-20], "application/json", {"Content-Encoding": "gzip"}),
    ],
    ids=["protobuf", "json-syntax", "json-shape", "json-array", "gzip-garbage", "gzip-truncated"],
)
def test_otlp_undecodable_body_is_400(agent_client, body, content_type, headers):
    response = _post(agent_client, body, content_type, **headers)

    assert response.status_code == 400
    assert response["Content-Type"] == content_type
    assert _stored_counts() == (0, 0, 0, 0, 0)


def test_otlp_400_json_body_is_a_status_message(agent_client):
    response = _post(agent_client, b"{not json")

    assert response.json()["code"] == 3
    assert "not valid JSON" in response.json()["message"]


def test_otlp_other_content_type_is_415(agent_client):
    response = _post(agent_client, FIXTURE_BYTES, "text/plain")

    assert response.status_code == 415
    assert "application/x-protobuf" in response.json()["message"]
    assert not OtlpSpan.objects.exists()


def test_otlp_other_content_encoding_is_415(agent_client):
    response = _post(agent_client, FIXTURE_BYTES, **{"Content-Encoding": "br"})

    assert response.status_code == 415


def test_otlp_body_over_the_limit_is_413(agent_client, settings):
    settings.FOOTPRINT_MAX_REQUEST_BYTES = 1000

    response = _post(agent_client, FIXTURE_BYTES)

    assert response.status_code == 413
    assert "1000 bytes" in response.json()["message"]
    assert not OtlpSpan.objects.exists()


def test_otlp_gzip_bomb_is_413_without_inflating_it(agent_client, settings):
    settings.FOOTPRINT_MAX_REQUEST_BYTES = 64 * 1024
    bomb = gzip.compress(b'{"resourceSpans": []' + b" " * (50 * 1024 * 1024) + b"}")
    assert len(bomb) < settings.FOOTPRINT_MAX_REQUEST_BYTES

    response = _post(agent_client, bomb, **{"Content-Encoding": "gzip"})

    assert response.status_code == 413
    assert "after gunzip" in response.json()["message"]


def test_otlp_gzip_body_inflating_to_the_limit_is_accepted(agent_client, settings):
    settings.FOOTPRINT_MAX_REQUEST_BYTES = len(FIXTURE_BYTES)

    response = _post(agent_client, gzip.compress(FIXTURE_BYTES), **{"Content-Encoding": "gzip"})

    assert response.status_code == 200
    assert OtlpSpan.objects.count() == 12


# --- who may send and who may read --------------------------------------------------------------


@pytest.mark.parametrize("secret", [None, "not-a-key"])
def test_otlp_without_a_valid_key_is_401(secret):
    response = _post(ApiClient(secret), FIXTURE_BYTES)

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert not OtlpSpan.objects.exists()


def test_otlp_protobuf_without_a_key_is_401_with_a_protobuf_status(anonymous_api_client):
    response = _post(anonymous_api_client, _protobuf(_fixture()), PROTOBUF)

    assert response.status_code == 401
    assert response["Content-Type"] == PROTOBUF


def test_otlp_key_without_ingest_scope_is_403(project):
    _, secret = agent_key_create(project=project, scopes=["read"])

    response = _post(ApiClient(secret), FIXTURE_BYTES)

    assert response.status_code == 403
    assert not OtlpSpan.objects.exists()


def test_otlp_get_is_405(agent_client):
    assert agent_client.get(URL).status_code == 405


def test_otlp_run_is_readable_only_by_its_own_project(agent_client, other_agent_client):
    _post_json(agent_client, _fixture())

    mine = agent_client.get(f"/api/v1/runs/{RUN_ID}")
    theirs = other_agent_client.get(f"/api/v1/runs/{RUN_ID}")

    assert mine.status_code == 200
    assert mine.json()["source"] == "otlp"
    assert mine.json()["tokens"] == {"input": 1040, "output": 48}
    assert theirs.status_code == 404


def test_otlp_run_appears_on_the_run_page(agent_client, auditor_client):
    _post_json(agent_client, _fixture())

    response = auditor_client.get(f"/projects/acme/runs/{RUN_ID}/tab/tools/")

    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('class="dispatch"') == 3
    assert "track_parcel" in html
    assert "with gaps" not in html


def test_otlp_run_chain_verifies(agent_client):
    _post_json(agent_client, _fixture())

    assert agent_client.get(f"/api/v1/runs/{RUN_ID}/verify").json()["valid"] is True


# --- spans the mapping does not understand -------------------------------------------------------


def _plain_span(span_id: str, name: str, trace_id: str = "0af7651916cd43dd8448eb211c80319c") -> dict[str, Any]:
    return {
        "traceId": trace_id,
        "spanId": span_id,
        "name": name,
        "kind": 2,
        "startTimeUnixNano": "1796043018000000000",
        "endTimeUnixNano": "1796043018100000000",
        "attributes": [{"key": "http.request.method", "value": {"stringValue": "GET"}}],
    }


def test_otlp_unknown_span_is_stored_and_makes_no_run(agent_client):
    body = _post_json(agent_client, _with_spans([_plain_span("b7ad6b7169203331", "GET /health")]))

    assert body == {}
    row = OtlpSpan.objects.get()
    assert (row.name, row.kind, row.attributes) == ("GET /health", 2, {"http.request.method": "GET"})
    assert row.event_count == 0
    assert not Run.objects.exists()


def test_otlp_unknown_span_in_an_agent_trace_adds_no_events(agent_client):
    spans = [*_fixture_spans(), _plain_span("b7ad6b7169203331", "db.query", trace_id=TRACE_ID)]

    _post_json(agent_client, _with_spans(spans))

    assert OtlpSpan.objects.count() == 13
    assert not RunEvent.objects.filter(doc__meta__spanId="b7ad6b7169203331").exists()
    assert not _run().has_gaps


# --- the mapping, pure ---------------------------------------------------------------------------


def _one_span(span: dict[str, Any]) -> Any:
    (decoded,) = decode_spans(json.dumps(_with_spans([span])).encode(), as_json=True)
    return decoded


def test_span_events_failed_agent_turn_ends_in_error_fatal():
    root = next(s for s in _fixture_spans() if s["name"].startswith("invoke_agent"))
    root["status"] = {"code": Status.STATUS_CODE_ERROR, "message": "provider down"}

    events = span_events(_one_span(root))

    assert [e["type"] for e in events] == ["agentfootprint.agent.turn_start", "agentfootprint.error.fatal"]
    assert events[-1]["payload"]["message"] == "provider down"


def test_span_events_tool_span_without_call_id_still_makes_a_tool_call():
    tool = next(s for s in _fixture_spans() if s["name"] == "execute_tool track_parcel")
    tool["attributes"] = [a for a in tool["attributes"] if a["key"] != "gen_ai.tool.call.id"]

    start, end = span_events(_one_span(tool))

    assert start["payload"]["toolCallId"] == end["payload"]["toolCallId"] == "span-f7d7540df78b5efc"
    assert start["payload"]["toolName"] == "track_parcel"


# --- the real exporter ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_otlp_python_sdk_exporter_creates_the_run_and_tool_call(live_server, project, compression):
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    _, secret = agent_key_create(project=project, scopes=["ingest"])
    exporter = OTLPSpanExporter(
        endpoint=f"{live_server.url}/v1/traces",
        headers={"Authorization": f"Bearer {secret}"},
        compression=Compression.Gzip if compression == "gzip" else Compression.NoCompression,
    )
    provider = TracerProvider(resource=Resource.create({"service.name": "sdk-test"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.otlp")

    with tracer.start_as_current_span("invoke_agent sdk-test") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        root.set_attribute("gen_ai.agent.name", "sdk-test")
        with tracer.start_as_current_span("chat small-model") as chat:
            chat.set_attribute("gen_ai.operation.name", "chat")
            chat.set_attribute("gen_ai.request.model", "small-model")
            chat.set_attribute("gen_ai.usage.input_tokens", 30)
            chat.set_attribute("gen_ai.usage.output_tokens", 7)
        with tracer.start_as_current_span("execute_tool lookup_order") as tool:
            tool.set_attribute("gen_ai.operation.name", "execute_tool")
            tool.set_attribute("gen_ai.tool.name", "lookup_order")
            tool.set_attribute("gen_ai.tool.call.id", "call-1")
        trace_id = format(root.get_span_context().trace_id, "032x")
    assert provider.force_flush()
    provider.shutdown()

    run = Run.objects.get(project=project, run_id=f"otlp-{trace_id}")
    assert run.source == Run.Source.OTLP
    assert run.status == Run.Status.COMPLETED
    assert (run.tokens_in, run.tokens_out) == (30, 7)
    call = ToolCall.objects.get(run=run)
    assert (call.tool_call_id, call.tool_name) == ("call-1", "lookup_order")
    assert OtlpSpan.objects.filter(project=project, trace_id=trace_id).count() == 3
    assert (
        OtlpSpan.objects.get(project=project, name="chat small-model").resource_attributes["service.name"] == "sdk-test"
    )


def test_a_tool_call_id_too_long_to_file_costs_no_span_and_no_500(agent_client):
    """A 500 would drop the whole export (an exporter retries no 500): every span is stored, and
    the run's chain verifies."""
    document = _fixture()
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    tool = next(span for span in spans if span["name"].startswith("execute_tool"))
    for attribute in tool["attributes"]:
        if attribute["key"] == "gen_ai.tool.call.id":
            attribute["value"] = {"stringValue": "x" * 8000}

    _post_json(agent_client, document)  # 200

    assert OtlpSpan.objects.count() == len(_fixture_spans())
    assert agent_client.get(f"/api/v1/runs/{_run().run_id}/verify").json()["valid"] is True


def test_the_cost_the_adapter_stamps_on_the_turns_span_is_the_runs_cost(agent_client):
    """Spec §6: `cost.tick` is exported as `cost.cumulative_usd` on the top span; natively it is
    the run's cost, so the OTLP-fed run's page shows it too (it read "not reported")."""
    document = _fixture()
    root = next(s for s in document["resourceSpans"][0]["scopeSpans"][0]["spans"] if not s.get("parentSpanId"))
    root["attributes"].append({"key": "cost.cumulative_usd", "value": {"doubleValue": 0.0123}})

    _post_json(agent_client, document)

    run = _run()
    assert run.cost_usd == pytest.approx(0.0123)
    assert RunEvent.objects.filter(run=run, type="agentfootprint.cost.tick").count() == 1


def _agent_span(span_id: str, name: str, start_ms: int, end_ms: int, failed: bool, parent: str = "") -> dict[str, Any]:
    return {
        "traceId": TRACE_ID,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": f"invoke_agent {name}",
        "kind": 1,
        "startTimeUnixNano": str(start_ms * 1_000_000),
        "endTimeUnixNano": str(end_ms * 1_000_000),
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}},
            {"key": "gen_ai.agent.name", "value": {"stringValue": name}},
        ],
        "status": {"code": 2, "message": f"{name} failed"} if failed else {"code": 0},
    }


@pytest.mark.parametrize("one_request", [True, False])
@pytest.mark.parametrize(("root_failed", "expected"), [(True, "failed"), (False, "completed")])
def test_a_runs_status_is_its_root_agents_not_a_sub_agents(agent_client, one_request, root_failed, expected):
    """Multi-agent GenAI instrumentations nest invoke_agent spans (a sub-agent, a hand-off); the run
    is the trace, so its outcome is the root agent's, whatever the sub-agent's, whether the spans
    come in one request or one by one as they end (children first)."""
    root = _agent_span("1111111111111111", "planner", 1_796_043_018_100, 1_796_043_018_900, root_failed)
    child = _agent_span(
        "2222222222222222", "researcher", 1_796_043_018_200, 1_796_043_018_300, not root_failed, root["spanId"]
    )
    for spans in [[child, root]] if one_request else [[child], [root]]:
        _post_json(agent_client, _with_spans(spans))

    assert _run().status == expected


def test_an_exporters_retry_of_a_span_holding_a_large_double_is_the_same_span(agent_client):
    """jsonb keeps 1.2345678901234568e18 as the digits 1234567890123456800, which read back as an
    integer that Python's == finds unequal to the double sent: the very same request, re-sent
    because the 200 was lost, was rejected as "different content"."""
    document = _fixture()
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["attributes"].append({"key": "started.ns", "value": {"doubleValue": 1.2345678901234568e18}})
    body = json.dumps(_with_spans([span]))

    first, again = _post(agent_client, body).json(), _post(agent_client, body).json()

    assert "partialSuccess" not in first
    assert "partialSuccess" not in again


def _tree_leaves(run: Run) -> dict[str, tuple[int, int]]:
    """The run page's tree (ledger.explorer.run_page.run_tree): {leaf label: (events, tool calls)}."""
    from django.core.cache import cache

    from ledger.explorer.run_page import run_tree

    cache.clear()
    leaves: dict[str, tuple[int, int]] = {}
    for root in run_tree(run=run):
        for flow in root.children:
            for leaf in flow.children:
                events, tools = leaves.get(leaf.label, (0, 0))
                leaves[leaf.label] = (events + leaf.events, tools + leaf.tool_calls)
    return leaves


def test_spans_exported_one_by_one_as_they_end_build_the_same_tree_as_one_request(
    agent_client, other_agent_client, project, other_project
):
    """Issue #6: parent links build the tree however the spans arrive. A SimpleSpanProcessor
    exports each span as it ends, children before their iteration: by arrival, the first calls
    landed "before the first iteration" and every later one under the previous iteration."""
    _post_json(agent_client, _fixture())
    for span in _fixture_spans():  # the fixture is in end order: one export per ended span
        _post_json(other_agent_client, _with_spans([span]))

    at_once = _tree_leaves(_run(project))
    one_by_one = _tree_leaves(_run(other_project))

    assert {label: tools for label, (_, tools) in at_once.items() if label.startswith("iteration")} == {
        "iteration 1": 1,
        "iteration 2": 1,
        "iteration 3": 1,
        "iteration 4": 0,
    }
    assert one_by_one == at_once
