"""Agent-facing JSON operations. Each parses, authenticates, calls one service or selector."""

from datetime import datetime
from typing import Any

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Schema

from footprint_site.auth import AgentKeyAuth, project_of
from footprint_site.responses import json_response
from ledger import selectors, services
from ledger.envelopes import parse_event_batch
from ledger.exceptions import BodyTooLarge
from ledger.models import Run
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
    422: ErrorOut,
}


def _body_within(request: HttpRequest, limit: int) -> bytes:
    declared = request.META.get("CONTENT_LENGTH")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"A request body may be at most {limit} bytes; this one is {declared}.", limit=limit)
    body = request.body
    if len(body) > limit:
        raise BodyTooLarge(f"A request body may be at most {limit} bytes; this one is {len(body)}.", limit=limit)
    return body


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
        _body_within(request, settings.FOOTPRINT_MAX_REQUEST_BYTES),
        max_events=settings.FOOTPRINT_MAX_EVENTS_PER_REQUEST,
    )
    receipts = services.events_ingest(project=project_of(request), events=events)
    return json_response({"runs": [r.as_json() for r in receipts]})


@router.post(
    "/recordings",
    response={200: RecordingOut, 201: RecordingOut, **ERRORS},
    auth=AgentKeyAuth("ingest"),
    openapi_extra=_body_schema(RECORDING_SCHEMA),
)
def ingest_recording(request: HttpRequest) -> HttpResponse:
    """Store an agentfootprint.recording.v1 envelope; 201 the first time, 200 when already stored."""
    receipt, created = services.recording_ingest(
        project=project_of(request), body=_body_within(request, settings.FOOTPRINT_MAX_RECORDING_BYTES)
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
        "events": run.event_count,
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


class RunFilter(Schema):
    session: str | None = None
    status: Run.Status | None = None
    since: datetime | None = None
    until: datetime | None = None
    cursor: str | None = None
    limit: int = 50


@router.get("/runs", response={200: RunListOut, **ERRORS}, auth=AgentKeyAuth("read"))
def list_runs(request: HttpRequest, filters: Query[RunFilter]) -> HttpResponse:
    """Runs of the key's project, newest first; pass `nextCursor` back as `cursor` for the next page."""
    limit = max(1, min(filters.limit, 200))
    runs = selectors.run_list(
        projects=[project_of(request)],
        session=filters.session,
        status=filters.status,
        since=filters.since,
        until=filters.until,
        before_id=selectors.decode_cursor(filters.cursor),
        limit=limit,
    )
    page: dict[str, Any] = {"runs": [run_as_json(r) for r in runs[:limit]]}
    if len(runs) > limit:
        page["nextCursor"] = selectors.encode_cursor(runs[limit - 1].pk)
    return json_response(page)


@router.get("/runs/{run_id}", response={200: RunOut, **ERRORS}, auth=AgentKeyAuth("read"))
def get_run(request: HttpRequest, run_id: str) -> HttpResponse:
    return json_response(run_as_json(selectors.run_get(project=project_of(request), run_id=run_id)))


@router.get("/runs/{run_id}/events", response={200: EventsPageOut, **ERRORS}, auth=AgentKeyAuth("read"))
def list_run_events(request: HttpRequest, run_id: str, after_seq: int = -1, limit: int = 100) -> HttpResponse:
    """The run's events in seq order, byte for byte as stored (the canonical text that was hashed)."""
    limit = max(1, min(limit, 1000))
    run = selectors.run_get(project=project_of(request), run_id=run_id)
    events = selectors.run_events_page(run=run, after_seq=after_seq, limit=limit)
    # The stored bodies are already JSON: splice them in rather than re-encoding each one.
    body = b'{"events":[' + b",".join(e.body.encode() for e in events[:limit]) + b"]"
    if len(events) > limit:
        body += b',"nextAfterSeq":' + orjson.dumps(events[limit - 1].seq)
    return HttpResponse(body + b"}", content_type="application/json")


@router.get("/runs/{run_id}/verify", response={200: VerifyOut, **ERRORS}, auth=AgentKeyAuth("read"))
def verify_run(request: HttpRequest, run_id: str) -> HttpResponse:
    """Re-check the run's hash chain; names the first record whose stored content no longer matches."""
    run = selectors.run_get(project=project_of(request), run_id=run_id)
    return json_response(selectors.run_chain_verify(run=run).as_json())
