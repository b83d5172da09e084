"""OTLP from `otelObservability({ captureContent })` (agentfootprint 9.66): the turn's prompt and
answer the agent span carries (`gen_ai.task.input` / `gen_ai.task.output`, or their size when over
`maxContentChars`) go back onto the events they were made from, and so does each
`gen_ai.evaluation.result`; spans recorded under an evaluation instrumentation scope
(`opentelemetry.instrumentation.*`, what `agentCoreEvaluationSpans()` records under) map like any."""

import copy
import json
from typing import Any

import pytest
from django.test import Client
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ledger.models import OtlpSpan, Run, RunEvent
from tenancy.models import Project
from tests.conftest import ApiClient, load_fixture
from tests.ledger.test_otlp import _base64_ids

pytestmark = pytest.mark.django_db

URL = "/v1/traces"
FIXTURE = "i-9.70-pauses/otlp-capture-content.json"
TRACE = "7e1f0c2a9b3d4e5f8a6b7c8d9e0f1a2b"
UNPARENTED_TRACE = "0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"
OMITTED_TRACE = "5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d"
G_TRACE = "4c5b3d1ba1045b2bf42e5832fb71db5c"
PROMPT = "Where is order A-17, and has it shipped?"
ANSWER = "Order A-17 shipped on 2026-11-28; parcel P-9 is out for delivery."
SCOPE = "opentelemetry.instrumentation.agentfootprint"


def _post(client: ApiClient, document: dict[str, Any]) -> None:
    document = {key: value for key, value in document.items() if key != "scenario"}
    response = client.post(URL, json.dumps(document), content_type="application/json")
    assert response.status_code == 200, response.content
    assert "partialSuccess" not in response.json(), response.json()


def _events(trace_id: str, type_: str) -> list[dict[str, Any]]:
    rows = RunEvent.objects.filter(run__run_id=f"otlp-{trace_id}", type=f"agentfootprint.{type_}").order_by("seq")
    return [row.doc["payload"] for row in rows]


def _agentfootprint_run_id(document: dict[str, Any]) -> str:
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    root = next(span for span in spans if span["traceId"] == TRACE and span["name"].startswith("invoke_agent"))
    return next(a["value"]["stringValue"] for a in root["attributes"] if a["key"] == "agentfootprint.run.id")


def test_the_captured_prompt_and_answer_land_on_the_turns_events(agent_client: ApiClient) -> None:
    _post(agent_client, load_fixture(FIXTURE))

    (start,) = _events(TRACE, "agent.turn_start")
    (end,) = _events(TRACE, "agent.turn_end")
    assert start["userPrompt"] == PROMPT
    assert end["finalContent"] == ANSWER
    assert Run.objects.get(run_id=f"otlp-{TRACE}").status == Run.Status.COMPLETED


def test_a_prompt_over_max_content_chars_keeps_its_stated_size(agent_client: ApiClient) -> None:
    _post(agent_client, load_fixture(FIXTURE))

    (start,) = _events(OMITTED_TRACE, "agent.turn_start")
    assert "userPrompt" not in start
    assert start["userPromptOmittedChars"] == 70_000


def test_an_evaluation_filed_after_the_turn_is_the_runs_eval_score(agent_client: ApiClient) -> None:
    document = load_fixture(FIXTURE)
    _post(agent_client, document)

    (score,) = _events(TRACE, "eval.score")
    assert score == {
        "metricId": "groundedness",
        "value": 0.75,
        "label": "fail",
        "explanation": "The answer cites parcel P-9, which track_parcel returned.",
        "target": "turn",
        "targetRef": _agentfootprint_run_id(document),
        "threshold": 0.8,
        "evaluator": "llm",
        "source": "otlp",
    }


def test_an_unparented_evaluation_says_why_it_stands_alone(agent_client: ApiClient) -> None:
    document = load_fixture(FIXTURE)
    _post(agent_client, document)

    (score,) = _events(UNPARENTED_TRACE, "eval.score")
    assert score["unparented"] == "owner-unverified"
    assert score["explanationOmittedChars"] == 70_000
    assert "explanation" not in score
    assert score["targetRef"] == _agentfootprint_run_id(document)


def test_spans_under_the_evaluation_scope_map_as_the_default_scopes_do(agent_client: ApiClient) -> None:
    """g-otel's trace (scope `agentfootprint`) and the same spans under the evaluation scope."""
    original = load_fixture("g-otel/otlp-traces.json")
    renamed = copy.deepcopy(original)
    renamed["resourceSpans"][0]["scopeSpans"][0]["scope"] = {"name": SCOPE}
    for span in renamed["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        span["traceId"] = "1" * 32
    _post(agent_client, original)
    _post(agent_client, renamed)

    def mapped(trace_id: str) -> list[tuple[Any, ...]]:
        rows = RunEvent.objects.filter(run__run_id=f"otlp-{trace_id}").order_by("seq")
        return [(row.type, row.tool_call_id, row.doc["payload"]) for row in rows]

    assert mapped("1" * 32) == mapped(G_TRACE)
    assert OtlpSpan.objects.filter(trace_id="1" * 32, scope={"name": SCOPE}).count() == 12


def test_the_run_page_shows_the_prompt_the_answer_and_the_score(
    agent_client: ApiClient, auditor_client: Client, project: Project
) -> None:
    _post(agent_client, load_fixture(FIXTURE))
    run_url = f"/projects/{project.slug}/runs/otlp-{TRACE}/"

    page = auditor_client.get(run_url).content.decode()
    assert "eval.score" in page
    for type_, text in (("agent.turn_start", PROMPT), ("agent.turn_end", ANSWER), ("eval.score", "groundedness")):
        row = RunEvent.objects.get(run__run_id=f"otlp-{TRACE}", type=f"agentfootprint.{type_}")
        detail = auditor_client.get(f"{run_url}events/{row.position}/")
        assert detail.status_code == 200
        assert text in detail.content.decode(), type_


def test_a_captured_prompt_from_protobuf_is_the_same_as_from_json(agent_client: ApiClient) -> None:
    document = {k: v for k, v in load_fixture(FIXTURE).items() if k != "scenario"}
    message = json_format.Parse(json.dumps(_base64_ids(document)), ExportTraceServiceRequest())
    response = agent_client.post(URL, message.SerializeToString(), content_type="application/x-protobuf")

    assert response.status_code == 200
    (start,) = _events(TRACE, "agent.turn_start")
    assert start["userPrompt"] == PROMPT
    (score,) = _events(TRACE, "eval.score")
    assert score["value"] == 0.75
