"""Agents post their runs: event batches and whole recordings. The event batch is the hot path:
its body is parsed by hand (ledger.ingest.envelopes), measured, and answered as bytes."""

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from ninja import Router, Status

from footprint_site.auth import AgentKeyAuth, agent_key_of
from footprint_site.http import body_within
from footprint_site.responses import json_response
from footprint_site.schemas import ERRORS, json_body
from ledger.ingest import recordings
from ledger.ingest import services as ingest_services
from ledger.ingest.envelopes import parse_event_batch
from ledger.schemas import (
    EVENT_BATCH_SCHEMA,
    RECORDING_SCHEMA,
    IngestOut,
    RecordingOut,
)

router = Router(tags=["ingest"])


@router.post(
    "/events",
    response={200: IngestOut, **ERRORS},
    auth=AgentKeyAuth("ingest"),
    openapi_extra=json_body(EVENT_BATCH_SCHEMA),
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
    openapi_extra=json_body(RECORDING_SCHEMA),
    exclude_unset=True,  # gapsTruncated only when true
)
def ingest_recording(request: HttpRequest) -> Status[dict[str, Any]]:
    """Store an agentfootprint.recording.v1 envelope; 201 the first time, 200 when already stored."""
    key = agent_key_of(request)
    receipt, created = recordings.recording_ingest(
        project=key.project, body=body_within(request, settings.FOOTPRINT_MAX_RECORDING_BYTES), key=key
    )
    return Status(201 if created else 200, {"run": receipt.as_json(), "stored": created})
