"""OTLP/HTTP trace requests in, agentfootprint-shaped events out. Pure: no database.

`read_body` undoes the transfer encoding within a size limit, `decode_spans` turns an
ExportTraceServiceRequest (protobuf or OTLP/JSON) into `Span`s, and `span_events` maps one span
onto the typed events the rest of the ledger already understands (events-ledger spec §6 read
backwards). Seqs are not assigned here: that needs to know which spans are already stored.
`span_json` reads a span's stored protobuf copy back as OTLP/JSON.
"""

import base64
import math
import re
import zlib
from typing import Any

import orjson
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.internal.type_checkers import ToShortestFloat
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtobufSpan

from footprint_site.exceptions import BodyTooLarge, MalformedBody
from footprint_site.lib.ids import is_plain_id
from footprint_site.lib.jsonbody import MAX_DEPTH, nests_deeper_than, parse_stream_json
from ledger.ingest.envelopes import OTLP_RUN_PREFIX, replace_nul

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
PROTOBUF_TYPES = frozenset({PROTOBUF, "application/protobuf"})
CONTENT_TYPES = PROTOBUF_TYPES | {JSON}
AF_PREFIX = "agentfootprint."
MAX_TYPE_LENGTH = 200
MAX_PROBLEMS_REPORTED = 5
MAX_SAFE_INTEGER = 2**53 - 1  # a double holds every whole number up to here exactly
STATUS_ERROR = 2  # Status.StatusCode.STATUS_CODE_ERROR
MAX_NANOS = 2**63 - 1  # the columns are bigint; fixed64 could hold more
CHAT_OPERATIONS = frozenset({"chat", "generate_content", "text_completion"})
ITERATION_NAME = re.compile(r"iteration:(\d+)$")
# The GenAI semconv evaluation event: otelObservability writes an `agentfootprint.eval.score` as it.
EVALUATION_EVENT = "gen_ai.evaluation.result"
# A stand-in for an OTLP/JSON id that is not hex: one byte long, so the span is rejected below
# with the others that carry a bad id instead of failing the whole request.
NOT_HEX = base64.b64encode(b"\x00").decode()


class Span:
    """One span as received. `problem` is set when the span is invalid and must be rejected.

    A plain class, not a frozen dataclass: compiled, it is built in one native call, where a
    frozen dataclass's __init__ set each field through object.__setattr__ (3 µs a span, a fifth
    of decoding one). Nothing changes a span once decoded."""

    def __init__(
        self,
        *,
        trace_id: str,
        span_id: str,
        parent_span_id: str,
        name: str,
        kind: int,
        start_unix_nano: int,
        end_unix_nano: int,
        status_code: int,
        status_message: str,
        attributes: dict[str, Any],
        events: list[dict[str, Any]],
        resource_attributes: dict[str, Any],
        scope: dict[str, Any],
        protobuf: bytes,
        problem: str | None = None,
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_span_id = parent_span_id
        self.name = name
        self.kind = kind
        self.start_unix_nano = start_unix_nano
        self.end_unix_nano = end_unix_nano
        self.status_code = status_code
        self.status_message = status_message
        self.attributes = attributes
        # {name, timeUnixNano (a string, as in OTLP/JSON), attributes}
        self.events = events
        self.resource_attributes = resource_attributes
        self.scope = scope
        # The span as received, protobuf-encoded (an OTLP/JSON span as the message it decodes to):
        # the verbatim record, which `span_json` reads as OTLP/JSON. Kept as bytes, not as JSON:
        # writing the JSON copy was a third of decoding a request, and jsonb parsing it a third of
        # storing the row.
        self.protobuf = protobuf
        self.problem = problem

    @property
    def run_id(self) -> str:
        return OTLP_RUN_PREFIX + self.trace_id


# --- transport -----------------------------------------------------------------------------------


def read_body(body: bytes, *, gzipped: bool, limit: int) -> bytes:
    """The request body, gunzipped when `gzipped`; never more than `limit` bytes are inflated, so a
    small gzip bomb costs no more memory than an honest body of the limit's size."""
    if len(body) > limit:
        raise BodyTooLarge(f"A request body may be at most {limit} bytes; this one is {len(body)}.", limit=limit)
    if not gzipped:
        return body
    chunks: list[bytes] = []
    size = 0
    rest = body
    while True:  # a gzip stream may hold several members one after another
        inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
        try:
            chunk = inflater.decompress(rest, limit + 1 - size)
        except zlib.error as exc:
            raise MalformedBody(f"The body is not valid gzip: {exc}.") from None
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(
                f"A request body may be at most {limit} bytes after gunzip; this one inflates past that.",
                limit=limit,
            )
        if not inflater.eof:
            raise MalformedBody("The gzip body is truncated.")
        chunks.append(chunk)
        rest = inflater.unused_data
        if not rest:
            return b"".join(chunks)


def _hex_ids_to_base64(holder: Any, keys: tuple[str, ...]) -> None:
    if not isinstance(holder, dict):
        return
    for key in keys:
        value = holder.get(key)
        if isinstance(value, str) and value:
            try:
                holder[key] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                holder[key] = NOT_HEX


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def parse_request(body: bytes, *, as_json: bool) -> Any:
    """An ExportTraceServiceRequest from protobuf bytes or OTLP/JSON; MalformedBody if neither."""
    message = ExportTraceServiceRequest()
    if not as_json:
        try:
            message.ParseFromString(body)
        except DecodeError as exc:
            raise MalformedBody(f"The body is not a protobuf ExportTraceServiceRequest: {exc}.") from None
        return message
    document = parse_stream_json(body)  # an event stream: a lone surrogate escape is read as U+FFFD
    if not isinstance(document, dict):
        raise MalformedBody("The body must be an OTLP/JSON ExportTraceServiceRequest object {resourceSpans: [...]}.")
    # OTLP/JSON writes trace and span ids as hex where the protobuf JSON mapping expects base64.
    for resource_spans in _items(document.get("resourceSpans", document.get("resource_spans"))):
        if not isinstance(resource_spans, dict):
            continue
        for scope_spans in _items(resource_spans.get("scopeSpans", resource_spans.get("scope_spans"))):
            if not isinstance(scope_spans, dict):
                continue
            for span in _items(scope_spans.get("spans")):
                _hex_ids_to_base64(span, ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id"))
                for link in _items(span.get("links")) if isinstance(span, dict) else []:
                    _hex_ids_to_base64(link, ("traceId", "trace_id", "spanId", "span_id"))
    try:
        # OTLP/JSON receivers must ignore fields they do not know (the protocol grows).
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise MalformedBody(f"The body is not an OTLP/JSON ExportTraceServiceRequest: {exc}.") from None
    return message


# --- spans ---------------------------------------------------------------------------------------


def any_value(value: Any) -> Any:
    """An OTLP AnyValue as plain JSON (bytes as base64, non-finite doubles as their names)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        number = value.double_value
        return number if math.isfinite(number) else str(number)
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return None


def attributes_of(key_values: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in key_values}


# How `message_json` writes a field's value, as ProtoJSON (json_format) writes it.
PLAIN, INT64, BYTES, DOUBLE, FLOAT, MESSAGE, ELSEWHERE, KEY_VALUE = range(8)
KEY_VALUE_TYPE = "opentelemetry.proto.common.v1.KeyValue"
_CPP_KINDS = {
    FieldDescriptor.CPPTYPE_INT64: INT64,
    FieldDescriptor.CPPTYPE_UINT64: INT64,
    FieldDescriptor.CPPTYPE_DOUBLE: DOUBLE,
    FieldDescriptor.CPPTYPE_FLOAT: FLOAT,
    FieldDescriptor.CPPTYPE_MESSAGE: MESSAGE,
}
_field_kinds: dict[Any, tuple[str, int, bool]] = {}


def _field_kind(field: Any) -> tuple[str, int, bool]:
    """A field's JSON name, how its value is written, and whether it is repeated."""
    known = _field_kinds.get(field)
    if known is None:
        kind = BYTES if field.type == FieldDescriptor.TYPE_BYTES else _CPP_KINDS.get(field.cpp_type, PLAIN)
        message_type = field.message_type
        if field.is_extension or (
            message_type is not None
            and (message_type.GetOptions().map_entry or message_type.full_name.startswith("google.protobuf."))
        ):
            kind = ELSEWHERE  # maps, well-known types, extensions: none in OTLP's trace messages today
        elif message_type is not None and message_type.full_name == KEY_VALUE_TYPE:
            kind = KEY_VALUE
        known = _field_kinds[field] = (field.json_name, kind, field.is_repeated)
    return known


def _json_value(kind: int, value: Any) -> Any:
    if kind == PLAIN:
        return value
    if kind == MESSAGE:
        return message_json(value)
    if kind == KEY_VALUE:
        return _attribute(value)
    if kind == INT64:
        return str(value)
    if kind == BYTES:
        return base64.b64encode(value).decode()
    if math.isfinite(value):
        return value if kind == DOUBLE else ToShortestFloat(value)
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _attribute(key_value: Any) -> dict[str, Any]:
    """An attribute's ProtoJSON (as `message_json` writes it), from one read of the usual string,
    integer and boolean values: three levels of ListFields per attribute were half of what a
    span's verbatim copy cost."""
    value = key_value.value
    kind = value.WhichOneof("value")
    if kind == "string_value":
        written: dict[str, Any] = {"stringValue": value.string_value}
    elif kind == "int_value":
        written = {"intValue": str(value.int_value)}
    elif kind == "bool_value":
        written = {"boolValue": value.bool_value}
    else:
        return message_json(key_value)
    return {"key": key_value.key, "value": written} if key_value.key else {"value": written}


def message_json(message: Any) -> dict[str, Any]:
    """`message` as `json_format.MessageToDict(message, use_integers_for_enums=True)` writes it, in
    a fifth of its time. A field this does not write itself (a map, a well-known type) has
    json_format write the message."""
    document: dict[str, Any] = {}
    for field, value in message.ListFields():
        name, kind, repeated = _field_kind(field)
        if kind == ELSEWHERE:
            whole: dict[str, Any] = json_format.MessageToDict(message, use_integers_for_enums=True)
            return whole
        document[name] = [_json_value(kind, item) for item in value] if repeated else _json_value(kind, value)
    return document


def span_json(protobuf: bytes) -> dict[str, Any]:
    """A span's stored copy (`Span.protobuf`) as OTLP/JSON: camelCase keys, integer enums, hex ids
    (its own and its links'), and U+FFFD for U+0000 as in the span's other columns."""
    document = message_json(ProtobufSpan.FromString(protobuf))
    for holder in (document, *_items(document.get("links"))):
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in holder:
                holder[key] = base64.b64decode(holder[key]).hex()
    written: dict[str, Any] = replace_nul(document)
    return written


def same_span(protobuf: bytes, other: bytes) -> bool:
    """Whether two stored copies hold the same span: the same bytes, or (an encoder may order or
    keep unknown fields differently) the same OTLP/JSON."""
    return protobuf == other or span_json(protobuf) == span_json(other)


ENUM_RANGE = (-(2**15), 2**15 - 1)  # what the span row's smallint columns hold


def _problem_of(span: Any) -> str | None:
    trace_id, span_id, parent = bytes(span.trace_id), bytes(span.span_id), bytes(span.parent_span_id)
    if len(trace_id) != 16 or not any(trace_id):
        return "traceId must be 16 bytes (32 hex digits), not all zero"
    if len(span_id) != 8 or not any(span_id):
        return "spanId must be 8 bytes (16 hex digits), not all zero"
    if parent and len(parent) != 8:
        return "parentSpanId must be empty or 8 bytes (16 hex digits)"
    if span.start_time_unix_nano > MAX_NANOS or span.end_time_unix_nano > MAX_NANOS:
        return "startTimeUnixNano and endTimeUnixNano must be before the year 2262"
    # Open protobuf enums: a value no OTLP release defines is kept as long as it is a small one.
    if not (ENUM_RANGE[0] <= span.kind <= ENUM_RANGE[1] and ENUM_RANGE[0] <= span.status.code <= ENUM_RANGE[1]):
        return f"kind and status.code must be OTLP enum values (from {ENUM_RANGE[0]} to {ENUM_RANGE[1]})"
    return None


def decode_spans(body: bytes, *, as_json: bool) -> list[Span]:
    """Every span of the request, in request order; invalid ones carry a `problem`."""
    message = parse_request(body, as_json=as_json)
    spans: list[Span] = []
    for r, resource_spans in enumerate(message.resource_spans):
        resource_attributes = attributes_of(resource_spans.resource.attributes)
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            scope = message_json(scope_spans.scope)
            for n, span in enumerate(scope_spans.spans):
                problem = _problem_of(span)
                parent = bytes(span.parent_span_id)
                spans.append(
                    Span(
                        trace_id=bytes(span.trace_id).hex(),
                        span_id=bytes(span.span_id).hex(),
                        parent_span_id=parent.hex() if any(parent) else "",
                        name=span.name,
                        kind=span.kind,
                        start_unix_nano=span.start_time_unix_nano,
                        end_unix_nano=span.end_time_unix_nano,
                        status_code=span.status.code,
                        status_message=span.status.message,
                        attributes=attributes_of(span.attributes),
                        events=[
                            {
                                "name": event.name,
                                "timeUnixNano": str(event.time_unix_nano),
                                "attributes": attributes_of(event.attributes),
                            }
                            for event in span.events
                        ],
                        resource_attributes=resource_attributes,
                        scope=scope,
                        protobuf=span.SerializeToString(),
                        problem=(
                            f"resourceSpans[{r}].scopeSpans[{s}].spans[{n}] ({span.name!r}): {problem}"
                            if problem
                            else None
                        ),
                    )
                )
    return spans


# --- mapping onto typed events -------------------------------------------------------------------


def _str(attributes: dict[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _id(attributes: dict[str, Any], key: str) -> str | None:
    value = _str(attributes, key)
    return value if is_plain_id(value) else None


def _int(attributes: dict[str, Any], *keys: str) -> int | None:
    """A whole-number attribute; some SDKs record counts as doubles (30.0), which count too."""
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_SAFE_INTEGER:
            return int(value)
    return None


def _usd(attributes: dict[str, Any], key: str) -> float | None:
    value = attributes.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _some(**fields: Any) -> dict[str, Any]:
    """The fields that have a value: an attribute the span lacked stays absent, not null."""
    return {key: value for key, value in fields.items() if value is not None}


def _ms(nanos: int) -> int | None:
    return nanos // 1_000_000 if nanos else None


def _camel(words: str) -> str:
    parts = [p for p in re.split(r"[._]", words) if p]
    return (parts[0] if parts else "") + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def span_event_payload(event_type: str, attributes: dict[str, Any]) -> dict[str, Any]:
    """A span event's attributes as the event's payload: `agentfootprint.validation.tool_name` on a
    `agentfootprint.validation.*` event becomes `toolName`; other domains keep their word
    (`agentfootprint.decision.chosen` → `decisionChosen`)."""
    domain = event_type.removeprefix(AF_PREFIX).split(".", 1)[0] + "."
    payload: dict[str, Any] = {}
    for key, value in attributes.items():
        name = _camel(key.removeprefix(AF_PREFIX).removeprefix(domain))
        if name:
            payload[name] = value
    return payload


def _duration_ms(span: Span) -> int | None:
    if not span.start_unix_nano or span.end_unix_nano < span.start_unix_nano:
        return None
    return (span.end_unix_nano - span.start_unix_nano) // 1_000_000


def _failed(span: Span) -> bool:
    return span.status_code == STATUS_ERROR or "error.type" in span.attributes


def _json_attribute(attributes: dict[str, Any], key: str) -> Any:
    """gen_ai.tool.call.arguments/result are JSON text when recorded at all; kept as text when
    it is not JSON, or nests too deep for the event that carries it (in its payload's args)."""
    value = attributes.get(key)
    if isinstance(value, str):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
        return value if nests_deeper_than(parsed, MAX_DEPTH - 2) else parsed
    return value


Planned = tuple[str, dict[str, Any], int]  # (type without prefix, payload, unix nanos)


def _tool(span: Span) -> tuple[Planned, Planned]:
    a = span.attributes
    call_id = _str(a, "gen_ai.tool.call.id") or f"span-{span.span_id}"
    tool_name = _str(a, "gen_ai.tool.name", "tool.name") or span.name.removeprefix("execute_tool ").strip()
    start = _some(
        toolName=tool_name,
        toolCallId=call_id,
        args=_json_attribute(a, "gen_ai.tool.call.arguments"),
        protocol=_str(a, "agentfootprint.tool.protocol"),
        argKeys=a.get("agentfootprint.tool.args.keys"),
    )
    end = _some(
        toolCallId=call_id,
        result=_json_attribute(a, "gen_ai.tool.call.result"),
        resultType=_str(a, "agentfootprint.tool.result.type"),
        durationMs=_duration_ms(span),
        error=True if _failed(span) else None,
        errorType=_str(a, "error.type"),
        errorMessage=span.status_message or None,
    )
    return ("stream.tool_start", start, span.start_unix_nano), ("stream.tool_end", end, span.end_unix_nano)


def _chat(span: Span) -> tuple[Planned, Planned]:
    a = span.attributes
    model = _str(a, "gen_ai.request.model", "gen_ai.response.model")
    usage = _some(
        input=_int(a, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
        output=_int(a, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
        cacheRead=_int(a, "gen_ai.usage.cache_read.input_tokens"),
        cacheWrite=_int(a, "gen_ai.usage.cache_creation.input_tokens"),
    )
    reasons = a.get("gen_ai.response.finish_reasons")
    stop = reasons[0] if isinstance(reasons, list) and reasons else None
    start = _some(model=model, provider=_str(a, "gen_ai.provider.name", "gen_ai.system"))
    end = _some(
        usage=usage,
        model=model,
        durationMs=_duration_ms(span),
        stopReason=stop,
        providerResponseRef=_str(a, "gen_ai.response.id"),
        error=True if _failed(span) else None,
    )
    return ("stream.llm_start", start, span.start_unix_nano), ("stream.llm_end", end, span.end_unix_nano)


def _agent(span: Span) -> tuple[Planned, Planned | None]:
    a = span.attributes
    # Under `captureContent` (9.66) the turn's prompt and answer ride the agent span as AgentCore
    # names them; over `maxContentChars` the adapter states their size instead. They go back onto
    # the events they came from: turn_start's `userPrompt`, turn_end's `finalContent`.
    start = _some(
        turnIndex=_int(a, "agentfootprint.turn.index"),
        agentName=_str(a, "gen_ai.agent.name"),
        agentfootprintRunId=_str(a, "agentfootprint.run.id"),
        userPrompt=_str(a, "gen_ai.task.input"),
        userPromptOmittedChars=_int(a, "agentfootprint.task.input.omitted_chars"),
    )
    end: Planned | None
    if _failed(span):
        # A failed turn ends in error.fatal, not turn_end (which would mark the run completed); the
        # adapter usually records it as a span event already. A listener's error.fatal (stage
        # 'observer') fails no run, so it is not that record.
        already = any(
            e["name"] == AF_PREFIX + "error.fatal" and e["attributes"].get("agentfootprint.error.stage") != "observer"
            for e in span.events
        )
        payload = _some(message=span.status_message or None, errorType=_str(a, "error.type"), source="otlp")
        end = None if already else ("error.fatal", payload, span.end_unix_nano)
    else:
        payload = _some(
            turnIndex=_int(a, "agentfootprint.turn.index"),
            totalInputTokens=_int(a, "gen_ai.usage.input_tokens"),
            totalOutputTokens=_int(a, "gen_ai.usage.output_tokens"),
            iterationCount=_int(a, "agentfootprint.iteration.count"),
            durationMs=_duration_ms(span),
            finalContent=_str(a, "gen_ai.task.output"),
            finalContentOmittedChars=_int(a, "agentfootprint.task.output.omitted_chars"),
        )
        end = ("agent.turn_end", payload, span.end_unix_nano)
    return ("agent.turn_start", start, span.start_unix_nano), end


def _evaluation(span: Span, a: dict[str, Any]) -> dict[str, Any]:
    """A `gen_ai.evaluation.result` span event as the `eval.score` it was made from (otel.ts ·
    `evaluationAttrs`): on the span it scores, on an `agentfootprint.evaluation` span under the
    turn, or on one of its own that says why it stands alone (`agentfootprint.eval.unparented`)."""
    value = a.get("gen_ai.evaluation.score.value")
    threshold = a.get("agentfootprint.eval.threshold")
    return _some(
        metricId=_str(a, "gen_ai.evaluation.name"),
        value=value if _is_number(value) else None,
        label=_str(a, "gen_ai.evaluation.score.label"),
        explanation=_str(a, "gen_ai.evaluation.explanation"),
        explanationOmittedChars=_int(a, "agentfootprint.eval.explanation.omitted_chars"),
        target=_str(a, "agentfootprint.eval.target"),
        targetRef=_str(a, "agentfootprint.eval.target_ref"),
        threshold=threshold if _is_number(threshold) else None,
        evaluator=_str(a, "agentfootprint.eval.evaluator"),
        unparented=_str(span.attributes, "agentfootprint.eval.unparented"),
        source="otlp",
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _iteration(span: Span, number: int) -> tuple[Planned, Planned]:
    count = _int(span.attributes, "agentfootprint.tool_call.count")
    return (
        ("agent.iteration_start", {"iteration": number}, span.start_unix_nano),
        ("agent.iteration_end", _some(iteration=number, toolCallCount=count), span.end_unix_nano),
    )


def iteration_number(name: str, attributes: dict[str, Any]) -> int | None:
    """The loop iteration an `iteration:N` span is (its `iteration.number`, else its name)."""
    number = _int(attributes, "iteration.number")
    if number is not None:
        return number
    match = ITERATION_NAME.match(name)
    return int(match.group(1)) if match else None


def is_agent_span(attributes: dict[str, Any]) -> bool:
    return _str(attributes, "gen_ai.operation.name") == "invoke_agent"


def span_events(span: Span, *, nested_agent: bool = False) -> list[dict[str, Any]]:
    """The span as typed event envelopes without `seq`: its start event, its `agentfootprint.*`
    span events in time order, then its end event. A span of no known kind maps to its span
    events only (often none); the span itself is still stored verbatim. A `nested_agent` (an
    `invoke_agent` span below another: a sub-agent, a hand-off) is a step of the trace's turn, not
    the turn: its start and end are not the run's (the run's outcome is its root agent's)."""
    operation = _str(span.attributes, "gen_ai.operation.name")
    ends: tuple[Planned | None, Planned | None] = (None, None)
    if operation == "execute_tool":
        ends = _tool(span)
    elif operation in CHAT_OPERATIONS:
        ends = _chat(span)
    elif operation == "invoke_agent" and not nested_agent:
        ends = _agent(span)
    elif (number := iteration_number(span.name, span.attributes)) is not None:
        ends = _iteration(span, number)

    inner: list[tuple[int, int, Planned]] = []
    for index, event in enumerate(span.events):
        name = event["name"]
        at = int(event["timeUnixNano"]) or span.start_unix_nano
        if name == EVALUATION_EVENT:
            inner.append((at, index, ("eval.score", _evaluation(span, event["attributes"]), at)))
        elif name.startswith(AF_PREFIX) and len(name) <= MAX_TYPE_LENGTH:
            inner.append((at, index, (name.removeprefix(AF_PREFIX), span_event_payload(name, event["attributes"]), at)))
    cost = _usd(span.attributes, "cost.cumulative_usd") if operation == "invoke_agent" else None
    if cost is not None:  # the adapter's cost.tick, stamped on the turn's span (spec §6): as of its end
        tick = ("cost.tick", {"cumulative": {"estimatedUsd": cost}, "source": "otlp"}, span.end_unix_nano)
        inner.append((span.end_unix_nano, len(span.events), tick))
    inner.sort(key=lambda item: item[:2])
    planned = [p for p in (ends[0], *(item[2] for item in inner), ends[1]) if p is not None]

    identity = {}
    if operation == "invoke_agent" and not nested_agent:
        # An id a run cannot be filed under (over 200 characters, U+0000) stays in the verbatim span only.
        identity = _some(
            principal=_id(span.attributes, "agentfootprint.principal.id"),
            tenant=_id(span.attributes, "agentfootprint.tenant.id"),
        )
    return [
        {
            "type": AF_PREFIX + type_,
            "payload": payload,
            "meta": _some(
                runId=span.run_id,
                wallClockMs=_ms(at),
                spanId=span.span_id,
                traceId=span.trace_id,
                **identity,
            ),
        }
        for type_, payload, at in planned
    ]


# --- responses -----------------------------------------------------------------------------------


def export_response(*, rejected: int, message: str, as_json: bool) -> bytes:
    """ExportTraceServiceResponse; `partialSuccess` only when something was rejected."""
    response = ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if as_json:
        return json_format.MessageToJson(response, indent=None).encode()
    body: bytes = response.SerializeToString()
    return body


def _status_message_class() -> Any:
    """google.rpc.Status, the error body OTLP/HTTP prescribes. Built from its two scalar fields in a
    private descriptor pool: its usual home (googleapis-common-protos) is not a dependency here,
    and a private pool cannot clash with it when it is installed."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="footprint/google_rpc_status.proto", package="google.rpc", syntax="proto3"
    )
    message = proto.message_type.add(name="Status")
    field = descriptor_pb2.FieldDescriptorProto
    message.field.add(name="code", number=1, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL, json_name="code")
    message.field.add(name="message", number=2, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL, json_name="message")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("google.rpc.Status"))


RpcStatus = _status_message_class()
# The google.rpc.Code of each HTTP status this endpoint answers: INVALID_ARGUMENT, UNAUTHENTICATED,
# PERMISSION_DENIED, NOT_FOUND (a /v1/ path not served), UNIMPLEMENTED (a method other than POST),
# FAILED_PRECONDITION, RESOURCE_EXHAUSTED (too large; too many failed keys), INTERNAL, UNAVAILABLE.
GRPC_CODES = {400: 3, 401: 16, 403: 7, 404: 5, 405: 12, 409: 9, 413: 8, 415: 3, 429: 8, 500: 13, 503: 14}


def answer_type(request_content_type: str | None) -> str:
    """The Content-Type of an answer: the request's own, as OTLP/HTTP requires (either protobuf
    name), and JSON for a request in any other type."""
    return request_content_type if request_content_type in PROTOBUF_TYPES else JSON


def error_body(*, http_status: int, message: str, as_json: bool) -> bytes:
    status = RpcStatus(code=GRPC_CODES.get(http_status, 2), message=message)
    if as_json:
        return json_format.MessageToJson(status, indent=None).encode()
    body: bytes = status.SerializeToString()
    return body


def export_message(rejected: list[str], unmapped: list[str]) -> str:
    """partialSuccess.error_message: the spans rejected, then the spans stored with some of their
    events left unmapped (a warning, as OTLP allows beside rejected_spans 0)."""
    parts = []
    if rejected:
        parts.append(f"{len(rejected)} span(s) rejected: {_listed(rejected)}")
    if unmapped:
        parts.append(
            f"{len(unmapped)} span(s) stored, some of their events kept only in the stored span: {_listed(unmapped)}"
        )
    return "; ".join(parts) + "." if parts else ""


def _listed(problems: list[str]) -> str:
    shown = "; ".join(problem.rstrip(".") for problem in problems[:MAX_PROBLEMS_REPORTED])
    more = len(problems) - MAX_PROBLEMS_REPORTED
    return f"{shown}; and {more} more" if more > 0 else shown
