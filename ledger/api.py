"""Agent-facing JSON operations. Each parses, authenticates, calls one service or selector."""

import math
from datetime import datetime
from typing import Any

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.dateparse import parse_datetime
from ninja import Query, Router, Schema
from pydantic import Field, field_validator

from footprint_site.auth import AgentKeyAuth, agent_key_of, project_of
from footprint_site.exceptions import InvalidParameter
from footprint_site.http import body_within
from footprint_site.lib.jsonbody import parse_json
from footprint_site.lib.times import to_utc
from footprint_site.responses import json_response
from ledger.asks import selectors as ask_selectors
from ledger.asks import services as ask_services
from ledger.asks import waits
from ledger.asks.waits import WaitsFull
from ledger.audits import integrity_selectors
from ledger.audits import selectors as audit_selectors
from ledger.audits.services import audit_bundle_import
from ledger.exceptions import AskInvalid, AskSuperseded
from ledger.explorer import selectors
from ledger.ingest import recordings
from ledger.ingest import services as ingest_services
from ledger.ingest.envelopes import parse_event_batch
from ledger.models import Ask, Run
from ledger.schemas import (
    EVENT_BATCH_SCHEMA,
    RECORDING_SCHEMA,
    ErrorOut,
    EventsPageOut,
    IngestOut,
    RecordingOut,
    RunListOut,
    RunOut,
    VerifyOut,
)

router = Router(tags=["ledger"])
ERRORS = {
    400: ErrorOut,
    401: ErrorOut,
    403: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    413: ErrorOut,
    415: ErrorOut,
    422: ErrorOut,
    429: ErrorOut,
    503: ErrorOut,
}


def _body_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


@router.post(
    "/events",
    response={200: IngestOut, **ERRORS},
    auth=AgentKeyAuth("ingest"),
    openapi_extra=_body_schema(EVENT_BATCH_SCHEMA),
)
def ingest_events(request: HttpRequest) -> HttpResponse:
    """Store a batch of typed events; answers after COMMIT with a receipt per run."""
    events = parse_event_batch(
        body_within(request, settings.FOOTPRINT_MAX_REQUEST_BYTES),
        max_events=settings.FOOTPRINT_MAX_EVENTS_PER_REQUEST,
    )
    key = agent_key_of(request)
    receipts = ingest_services.events_ingest(project=key.project, events=events, key=key)
    return json_response({"runs": [r.as_json() for r in receipts]})


@router.post(
    "/recordings",
    response={200: RecordingOut, 201: RecordingOut, **ERRORS},
    auth=AgentKeyAuth("ingest"),
    openapi_extra=_body_schema(RECORDING_SCHEMA),
)
def ingest_recording(request: HttpRequest) -> HttpResponse:
    """Store an agentfootprint.recording.v1 envelope; 201 the first time, 200 when already stored."""
    key = agent_key_of(request)
    receipt, created = recordings.recording_ingest(
        project=key.project, body=body_within(request, settings.FOOTPRINT_MAX_RECORDING_BYTES), key=key
    )
    return json_response({"run": receipt.as_json(), "stored": created}, status=201 if created else 200)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def run_as_json(run: Run) -> dict[str, Any]:
    out: dict[str, Any] = {
        "runId": run.run_id,
        "source": run.source,
        "status": run.status,
        "firstEventAt": _iso(run.first_event_at),
        "lastEventAt": _iso(run.last_event_at),
        "tokens": {"input": run.tokens_in, "output": run.tokens_out},
        "iterations": run.iterations,
        "toolCalls": run.tool_call_count,
        "refusals": run.refusal_count,
        "events": run.chain_length,  # every record, the server's decisions too: what /events lists
        "lastSeq": run.max_seq if run.max_seq >= 0 else None,
        "head": run.head_hex,
        "hasGaps": run.has_gaps,
    }
    for key, value in (
        ("sessionId", run.session_id),
        ("tenant", run.tenant),
        ("principal", run.principal),
        ("agentId", run.agent_id),
    ):
        if value is not None:
            out[key] = value
    return out


class RunQuery(Schema):
    session: str | None = None
    status: Run.Status | None = None
    agent: str | None = None
    tool: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    has_refusals: bool = False
    has_open_asks: bool = False
    q: str | None = Field(None, max_length=selectors.MAX_SEARCH_CHARS)  # each word is one indexed lookup
    cursor: str | None = None
    limit: int = 50

    @field_validator("since", "until")
    @classmethod
    def _storable(cls, value: datetime | None) -> datetime | None:
        return None if value is None else to_utc(value)


@router.get("/runs", response={200: RunListOut, **ERRORS}, auth=AgentKeyAuth("read"))
def list_runs(request: HttpRequest, query: Query[RunQuery]) -> HttpResponse:
    """Runs of the key's project, newest first; pass `nextCursor` back as `cursor` for the next page.
    `q` searches the runs' event payloads (PostgreSQL full-text search)."""
    limit = max(1, min(query.limit, 200))
    filters = selectors.RunFilter(
        session=query.session,
        status=query.status,
        agent=query.agent,
        tool=query.tool,
        since=query.since,
        until=query.until,
        has_refusals=query.has_refusals,
        has_open_asks=query.has_open_asks,
        text=query.q,
    )
    runs = selectors.run_list(projects=[project_of(request)], filters=filters, cursor=query.cursor, limit=limit)
    page: dict[str, Any] = {"runs": [run_as_json(r) for r in runs.items]}
    if runs.has_more:
        page["nextCursor"] = runs.next_cursor
    return json_response(page)


@router.get("/runs/{run_id}", response={200: RunOut, **ERRORS}, auth=AgentKeyAuth("read"))
def get_run(request: HttpRequest, run_id: str) -> HttpResponse:
    return json_response(run_as_json(selectors.run_get(project=project_of(request), run_id=run_id)))


@router.get("/runs/{run_id}/events", response={200: EventsPageOut, **ERRORS}, auth=AgentKeyAuth("read"))
def list_run_events(request: HttpRequest, run_id: str, after_seq: int = -1, limit: int = 100) -> HttpResponse:
    """The run's events in seq order, byte for byte as stored (the canonical text that was hashed); the
    server's own records (no seq, `meta.author`) each follow the event chained before it."""
    limit = max(1, min(limit, 1000))
    run = selectors.run_get(project=project_of(request), run_id=run_id)
    events = selectors.run_events_page(run=run, after_seq=after_seq, limit=limit)
    # The stored bodies are already JSON: splice them in rather than re-encoding each one.
    body = b'{"events":[' + b",".join(e.body.encode() for e in events.items) + b"]"
    if events.has_more:
        body += b',"nextAfterSeq":' + orjson.dumps(events.next_after)
    return HttpResponse(body + b"}", content_type="application/json")


@router.get("/runs/{run_id}/verify", response={200: VerifyOut, **ERRORS}, auth=AgentKeyAuth("read"))
def verify_run(request: HttpRequest, run_id: str) -> HttpResponse:
    """Re-check the run's hash chain; names the first record whose stored content no longer matches."""
    run = selectors.run_get(project=project_of(request), run_id=run_id)
    return json_response(integrity_selectors.run_chain_verify(run=run).as_json())


# --- asks ----------------------------------------------------------------------------------------

ASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["runId", "pauseData"],
    "properties": {
        "runId": {"type": "string", "minLength": 1},
        "sessionId": {"type": "string"},
        "pauseData": {"type": "object", "required": ["toolCallId"]},
        "ask": {"type": "object"},
        "checkIn": {"type": "object"},
        "checkpoint": {"description": "the paused outcome's checkpoint, stored verbatim, returned only to this key"},
        "deadline": {"type": "string", "format": "date-time"},
        "onTimeout": {"enum": ["decline", "approve"]},
        "pausedAtMs": {
            "type": "integer",
            "description": "when the run paused, Unix ms by the agent's clock (its events' meta.wallClockMs):"
            " orders the session's asks before the pause event arrives",
        },
    },
}
ASK_KEYS = frozenset(ASK_SCHEMA["properties"]) | {"paused"}
DECISION_KEYS = frozenset({"approved", "by", "note", "value"})


def ask_as_json(ask: Ask, *, with_checkpoint: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": ask.pk,
        "runId": ask.run_id,
        "toolCallId": ask.tool_call_id,
        "kind": ask.kind,
        "status": ask.status,
        "createdAt": _iso(ask.created_at),
        "onTimeout": ask.on_timeout,
    }
    for key, value in (
        ("toolName", ask.tool_name),
        ("sessionId", ask.session_id),
        ("question", ask.question),
        ("middleware", ask.middleware),
        ("deadline", _iso(ask.deadline)),
        ("supersededBy", ask.superseded_by_id),
    ):
        if value is not None:
            out[key] = value
    decision = ask.decision()
    if decision is not None:
        out["decision"] = decision
    if with_checkpoint and ask.checkpoint is not None:
        out["checkpoint"] = orjson.loads(bytes(ask.checkpoint))
    return out


def _parse_deadline(value: Any) -> datetime | None:
    if value is None:
        return None
    refusal = AskInvalid("deadline must be an ISO 8601 date-time with a time zone, e.g. 2026-12-01T09:00:00Z.")
    try:
        parsed = parse_datetime(value) if isinstance(value, str) else None
        if parsed is None:
            raise refusal
        return to_utc(parsed)
    except ValueError:  # well-formed but impossible (month 13), or beyond what PostgreSQL can hold
        raise refusal from None


@router.post(
    "/asks",
    response={200: dict[str, Any], 201: dict[str, Any], **ERRORS},
    auth=AgentKeyAuth("asks"),
    openapi_extra=_body_schema(ASK_SCHEMA),
)
def open_ask(request: HttpRequest) -> HttpResponse:
    """Open the ask of a paused run (idempotent per run and tool call: a re-post answers with the same ask)."""
    document = parse_json(body_within(request, settings.FOOTPRINT_MAX_RECORDING_BYTES))
    if not isinstance(document, dict) or not isinstance(document.get("runId"), str) or not document["runId"]:
        raise AskInvalid("The body is the paused outcome plus runId: {runId, pauseData, checkpoint?, deadline?, …}.")
    unknown = document.keys() - ASK_KEYS
    if unknown:
        raise AskInvalid(f"Unknown fields: {', '.join(sorted(unknown))}.")
    checkpoint = document.get("checkpoint")
    ask, created = ask_services.ask_open(
        project=project_of(request),
        key=agent_key_of(request),
        run_id=document["runId"],
        session_id=document.get("sessionId"),
        pause_data=document.get("pauseData"),
        checkpoint=orjson.dumps(checkpoint) if checkpoint is not None else None,
        deadline=_parse_deadline(document.get("deadline")),
        on_timeout=document.get("onTimeout", "decline"),
        paused_at_ms=document.get("pausedAtMs"),
    )
    return json_response({"ask": ask_as_json(ask)}, status=201 if created else 200)


class AskQuery(Schema):
    status: Ask.Status | None = None
    run: str | None = None
    session: str | None = None
    kind: Ask.Kind | None = None
    cursor: str | None = None
    limit: int = 50


@router.get("/asks", response={200: dict[str, Any], **ERRORS}, auth=AgentKeyAuth("asks", "decide"))
def list_asks(request: HttpRequest, query: Query[AskQuery]) -> HttpResponse:
    """Asks of the key's project, newest first, for an integration that decides them (a `decide`
    key) or an agent; `status=open` lists those waiting for a decision, as the inbox does. Pass
    `nextCursor` back as `cursor` for the next page. No checkpoint is ever listed."""
    limit = max(1, min(query.limit, 200))
    filters = ask_selectors.AskFilter(status=query.status, run_id=query.run, session_id=query.session, kind=query.kind)
    asks = ask_selectors.ask_list(project=project_of(request), filters=filters, cursor=query.cursor, limit=limit)
    page: dict[str, Any] = {"asks": [ask_as_json(ask) for ask in asks.items]}
    if asks.has_more:
        page["nextCursor"] = asks.next_cursor
    return json_response(page)


@router.get("/asks/{ask_id}", response={200: dict[str, Any], **ERRORS}, auth=AgentKeyAuth("asks", "decide"))
def get_ask(request: HttpRequest, ask_id: int) -> HttpResponse:
    """The ask; its checkpoint is included only for the key that posted it."""
    ask = ask_selectors.ask_get(project=project_of(request), ask_id=ask_id)
    mine = ask.posted_by_key_id is not None and ask.posted_by_key_id == agent_key_of(request).pk
    return json_response({"ask": ask_as_json(ask, with_checkpoint=mine)})


# How long a client whose wait found no free slot waits before asking again: the waits it queues
# behind end within 55 s, most sooner (a decision, a supersede).
WAITS_FULL_RETRY_MS = 2000


@router.get("/asks/{ask_id}/decision", response={200: dict[str, Any], **ERRORS}, auth=AgentKeyAuth("asks"))
def wait_for_decision(request: HttpRequest, ask_id: int, wait: float = 0) -> HttpResponse:
    """The decision, at once when made; with `wait` (≤ 55 s) the request is held open until it is.
    409 `ERR_ASK_SUPERSEDED` once the ask's session paused again: no run waits on it (it opens
    again only if a late pause event shows it was the session's latest after all). A wait this
    process has no thread to spare for answers "open" at once with `retryAfterMs` (and
    Retry-After): ask again after that long."""
    if not math.isfinite(wait):
        raise InvalidParameter("wait must be a number of seconds from 0 to 55.")
    ask = ask_selectors.ask_get(project=project_of(request), ask_id=ask_id)
    try:
        ask = waits.ask_wait_for_decision(ask=ask, wait_seconds=max(0.0, min(wait, waits.ASK_WAIT_MAX_SECONDS)))
    except WaitsFull:  # every thread this process may hold waits: ask again shortly
        response = json_response({"status": "open", "retryAfterMs": WAITS_FULL_RETRY_MS})
        response["Retry-After"] = str(WAITS_FULL_RETRY_MS // 1000)
        return response
    if ask.status == Ask.Status.SUPERSEDED:  # no run waits on it: waiting on would wait for nothing
        raise AskSuperseded.of(session_id=ask.session_id, superseded_by=ask.superseded_by_id)
    decision = ask.decision()
    if decision is None:
        return json_response({"status": "open"})
    return json_response({"status": "decided", "decision": decision})


@router.post("/asks/{ask_id}/decision", response={200: dict[str, Any], **ERRORS}, auth=AgentKeyAuth("decide"))
def decide_ask(request: HttpRequest, ask_id: int) -> HttpResponse:
    """Decide from an integration (a chat bot, a ticket system) whose key has scope `decide`.

    `by` names who decided. 409 once decided; 403 for the key that opened the ask.
    """
    document = parse_json(body_within(request, settings.FOOTPRINT_MAX_REQUEST_BYTES))
    ask = ask_selectors.ask_get(project=project_of(request), ask_id=ask_id)
    if not isinstance(document, dict) or not isinstance(document.get("by"), str) or not document["by"].strip():
        raise AskInvalid("The body is {approved, by, note?, value?}; `by` names who decided.")
    unknown = document.keys() - DECISION_KEYS
    if unknown:
        raise AskInvalid(f"Unknown fields: {', '.join(sorted(unknown))}. The body is {{approved, by, note?, value?}}.")
    approved = document.get("approved", True if ask.kind == Ask.Kind.PLAIN else None)
    if not isinstance(approved, bool):
        raise AskInvalid("approved must be true or false.")
    note = document.get("note")
    if note is not None and not isinstance(note, str):
        raise AskInvalid("note must be a string.")
    ask = ask_services.ask_decide(
        ask_id=ask.pk,
        approved=approved,
        via=Ask.Via.API,
        by_label=document["by"].strip(),
        key=agent_key_of(request),
        note=note,
        value=document.get("value", ask_services.NO_VALUE),
    )
    return json_response({"status": "decided", "decision": ask.decision()})


# --- audit bundles -------------------------------------------------------------------------------


@router.post(
    "/audit-bundles",
    response={200: dict[str, Any], 201: dict[str, Any], **ERRORS},
    auth=AgentKeyAuth("ingest"),
    openapi_extra=_body_schema({"description": "an agentfootprint.audit/1 bundle, or drained segments in order"}),
)
def import_audit_bundle(request: HttpRequest) -> HttpResponse:
    """Verify with the framework's algorithm and store byte for byte: {valid, recordsChecked, brokenAt?, reason?}."""
    bundle, created = audit_bundle_import(
        project=project_of(request), body=body_within(request, settings.FOOTPRINT_MAX_RECORDING_BYTES)
    )
    return json_response({**bundle.verdict, "id": bundle.pk}, status=201 if created else 200)


@router.get("/runs/{run_id}/audit-bundle", response={200: dict[str, Any], **ERRORS}, auth=AgentKeyAuth("read"))
def export_audit_bundle(request: HttpRequest, run_id: str) -> HttpResponse:
    """The run's ledger as an agentfootprint.audit/1 bundle that verifyAuditBundle accepts."""
    run = selectors.run_get(project=project_of(request), run_id=run_id)
    return json_response(audit_selectors.run_audit_bundle(run=run))
