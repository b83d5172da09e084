"""Writes otlp-capture-content.json from ../g-otel/otlp-traces.json (agentfootprint 9.62.0, real
SDK output) with what otelObservability 9.66+ adds, as src/adapters/observability/otel.ts and
agentcore.ts write it: the scope `agentCoreEvaluationSpans()` records under, the turn's prompt and
answer under `captureContent`, and `gen_ai.evaluation.result` span events. Run from this folder."""

import copy
import hashlib
import json
from pathlib import Path

HERE = Path(__file__).parent
SCOPE = "opentelemetry.instrumentation.agentfootprint"  # AGENTCORE_EVALUATIONS_SCOPE_NAME
TRACE = "7e1f0c2a9b3d4e5f8a6b7c8d9e0f1a2b"
UNPARENTED_TRACE = "0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"
OMITTED_TRACE = "5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d"
SESSION = "fixture-session-i-otel"
PROMPT = "Where is order A-17, and has it shipped?"
ANSWER = "Order A-17 shipped on 2026-11-28; parcel P-9 is out for delivery."
EXPLANATION = "The answer cites parcel P-9, which track_parcel returned."


def s(value):
    return {"stringValue": value}


def attr(key, value):
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": value}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": s(value)}


def evaluation(target_ref, *, explanation=None, omitted=None):
    attrs = [
        attr("gen_ai.evaluation.name", "groundedness"),
        attr("gen_ai.evaluation.score.value", 0.75),
        attr("gen_ai.evaluation.score.label", "fail"),
    ]
    if explanation is not None:
        attrs.append(attr("gen_ai.evaluation.explanation", explanation))
    if omitted is not None:
        attrs.append(attr("agentfootprint.eval.explanation.omitted_chars", omitted))
    attrs += [
        attr("agentfootprint.eval.target", "turn"),
        attr("agentfootprint.eval.target_ref", target_ref),
        attr("agentfootprint.eval.threshold", 0.8),
        attr("agentfootprint.eval.evaluator", "llm"),
    ]
    return attrs


def main():
    source = json.loads((HERE.parent / "g-otel" / "otlp-traces.json").read_text())
    document = copy.deepcopy(source)
    resource = document["resourceSpans"][0]
    scope_spans = resource["scopeSpans"][0]
    scope_spans["scope"] = {"name": SCOPE}
    spans = scope_spans["spans"]
    digest = hashlib.sha256(SESSION.encode()).hexdigest()
    for span in spans:
        span["traceId"] = TRACE
        if span["name"].startswith(("invoke_agent", "chat", "execute_tool")):
            span["attributes"].append(attr("gen_ai.conversation.id", digest))
    root = next(span for span in spans if span["name"].startswith("invoke_agent"))
    run_id = next(a["value"]["stringValue"] for a in root["attributes"] if a["key"] == "agentfootprint.run.id")
    root["attributes"] += [attr("gen_ai.task.input", PROMPT), attr("gen_ai.task.output", ANSWER)]
    end = int(root["endTimeUnixNano"])
    # A score filed from the run's session after its turn closed: a short span under the root.
    spans.append(
        {
            "traceId": TRACE,
            "spanId": "e7a1b2c3d4e5f607",
            "parentSpanId": root["spanId"],
            "name": "agentfootprint.evaluation",
            "kind": 1,
            "startTimeUnixNano": str(end + 5_000_000),
            "endTimeUnixNano": str(end + 5_000_000),
            "attributes": [],
            "events": [
                {
                    "timeUnixNano": str(end + 5_000_000),
                    "name": "gen_ai.evaluation.result",
                    "attributes": evaluation(run_id, explanation=EXPLANATION),
                }
            ],
            "status": {"code": 0},
            "flags": 257,
        }
    )
    # A score `agent.emit` filed after the run, with no session: a trace of its own.
    unparented = {
        "traceId": UNPARENTED_TRACE,
        "spanId": "f0e1d2c3b4a59687",
        "name": "agentfootprint.evaluation",
        "kind": 1,
        "startTimeUnixNano": str(end + 9_000_000),
        "endTimeUnixNano": str(end + 9_000_000),
        "attributes": [
            attr("service.name", "order-desk-svc"),
            attr("agentfootprint.eval.unparented", "owner-unverified"),
        ],
        "events": [
            {
                "timeUnixNano": str(end + 9_000_000),
                "name": "gen_ai.evaluation.result",
                "attributes": evaluation(run_id, omitted=70_000),
            }
        ],
        "status": {"code": 0},
        "flags": 257,
    }
    # A turn whose prompt was over maxContentChars: its size stated, never cut.
    omitted = copy.deepcopy(root)
    omitted.update(traceId=OMITTED_TRACE, spanId="a1b2c3d4e5f60718")
    omitted["attributes"] = [
        a for a in omitted["attributes"] if a["key"] not in ("gen_ai.task.input", "gen_ai.conversation.id")
    ] + [attr("agentfootprint.task.input.omitted_chars", 70_000)]
    scope_spans["spans"] = [*spans, unparented, omitted]
    document["scenario"] = (
        "i-otel: g-otel's trace as otelObservability 9.66+ exports it with captureContent and the "
        "AgentCore Evaluations scope name, a score filed after the turn, an unparented score and a "
        "turn whose prompt was over maxContentChars"
    )
    (HERE / "otlp-capture-content.json").write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
