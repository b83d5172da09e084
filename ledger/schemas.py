"""Schemas of the ledger API, for the OpenAPI document and for reads.

Ingestion bodies are parsed by `ledger.ingest.envelopes` (hand validation on the hot path); the request
schemas below describe them for the OpenAPI document.
"""

from typing import Any

from ninja import Schema
from pydantic import Field

EVENT_BATCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["events"],
    "additionalProperties": False,
    "properties": {
        "events": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["seq", "type", "meta"],
                "additionalProperties": False,
                "properties": {
                    "seq": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
                    "type": {"type": "string", "minLength": 1, "maxLength": 200},
                    "payload": {},
                    "meta": {
                        "type": "object",
                        "required": ["runId"],
                        "properties": {
                            "runId": {"type": "string", "minLength": 1, "maxLength": 200},
                            "sessionId": {"type": "string", "minLength": 1, "maxLength": 200},
                            "tenant": {"type": "string", "minLength": 1, "maxLength": 200},
                            "principal": {"type": "string", "minLength": 1, "maxLength": 200},
                            "wallClockMs": {"type": "number", "minimum": 0},
                            "subflowPath": {"type": "array"},
                            "compositionPath": {"type": "array"},
                        },
                    },
                },
            },
        }
    },
}

RECORDING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["format", "run", "recording"],
    "properties": {
        "format": {"const": "agentfootprint.recording.v1"},
        "run": {"type": "object", "required": ["runId"]},
        "recording": {"type": "object", "required": ["events"]},
    },
}


class ErrorOut(Schema):
    error: str
    code: str


class ReceiptOut(Schema):
    runId: str
    accepted: int
    duplicates: int
    lastSeq: int | None
    head: str = Field(description="hex SHA-256 chain head of the run after this request")
    gaps: list[list[int]] = Field(description="[from, to] seq ranges never received")
    gapsTruncated: bool | None = None


class IngestOut(Schema):
    runs: list[ReceiptOut]


class RecordingOut(Schema):
    run: ReceiptOut
    stored: bool = Field(description="false when this exact recording was already stored")


class RunOut(Schema):
    runId: str
    sessionId: str | None = None
    tenant: str | None = None
    principal: str | None = None
    agentId: str | None = None
    source: str
    status: str
    firstEventAt: str | None = None
    lastEventAt: str | None = None
    tokens: dict[str, int]
    iterations: int
    toolCalls: int
    refusals: int
    events: int
    lastSeq: int | None
    head: str
    hasGaps: bool


class RunListOut(Schema):
    runs: list[RunOut]
    nextCursor: str | None = None


class EventsPageOut(Schema):
    events: list[dict[str, Any]]
    nextAfterSeq: int | None = None


class VerifyOut(Schema):
    valid: bool
    recordsChecked: int
    brokenAt: int | None = None
    reason: str | None = None
