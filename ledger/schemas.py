"""Schemas of the ledger API: what the operations answer, and the fields their inputs may carry.

Ingestion bodies are parsed by `ledger.ingest.envelopes` (hand validation on the hot path); the request
schemas below describe them for the OpenAPI document. Output schemas are what ninja serialises
each answer through, so the OpenAPI document is what the server answers. Operations whose keys
are absent rather than null declare `exclude_unset=True` and leave those fields unset.
"""

from typing import Any

from ninja import Schema
from pydantic import Field

from footprint_site.schemas import StrictIn

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


class AskIn(StrictIn):
    """POST /asks: the paused outcome plus runId. `ask_open` checks each value, in its own words."""

    runId: Any = None
    sessionId: Any = None
    pauseData: Any = None
    ask: Any = None
    checkIn: Any = None
    checkpoint: Any = None
    deadline: Any = None
    onTimeout: Any = None
    pausedAtMs: Any = None
    paused: Any = None


class DecisionIn(StrictIn):
    """POST /asks/{id}/decision; the operation checks each value, in its own words."""

    approved: Any = None
    by: Any = None
    note: Any = None
    value: Any = None


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
    # The framework's own value: a seq, or what its arithmetic makes of a header's text firstSeq.
    brokenAt: int | str | None = None
    reason: str | None = None


class AuditBundleStoredOut(Schema):
    """The framework's verifyAuditBundle answer, with where the bundle joins the stored chain."""

    valid: bool
    recordsChecked: int
    # The framework's own value: a seq, or what its arithmetic makes of a header's text firstSeq.
    brokenAt: int | str | None = None
    reason: str | None = None
    continuity: dict[str, Any] = Field(description="state: genesis, continues, broken or unanchored")
    id: int


class ReceiptsIn(StrictIn):
    """POST /receipts/verify: receipts as the events endpoint gave them (runId, records, head, signature)."""

    receipts: list[dict[str, Any]]


class ReceiptVerdictOut(Schema):
    runId: Any
    records: Any
    verdict: str
    reason: str


class ReceiptsOut(Schema):
    receipts: list[ReceiptVerdictOut]


class AuditBundleOut(Schema):
    """An agentfootprint.audit/1 bundle: header, chained records, final hash."""

    header: dict[str, Any]
    records: list[dict[str, Any]]
    finalHash: str


class AskOut(Schema):
    id: int
    runId: str
    toolCallId: str
    kind: str
    status: str
    createdAt: str | None
    onTimeout: str
    toolName: str | None = None
    sessionId: str | None = None
    question: str | None = None
    middleware: str | None = None
    deadline: str | None = None
    supersededBy: int | None = None
    decision: dict[str, Any] | None = Field(None, description="absent until decided")
    checkpoint: Any = Field(None, description="only for the key that posted the ask")


class AskAnswerOut(Schema):
    ask: AskOut


class AskListOut(Schema):
    asks: list[AskOut]
    nextCursor: str | None = None


class StandingApprovalOut(Schema):
    id: int
    toolName: str
    pattern: dict[str, Any] = Field(description="each argument: its exact value, or {min?, max?} for a number")
    agentId: str | None = Field(None, description="absent: any agent of the project")
    grantedBy: str
    grantedAt: str | None
    expiresAt: str
    askId: int = Field(description="the ask whose approval granted it")
    decided: int = Field(description="asks it decided since")
    note: str | None = None


class StandingApprovalListOut(Schema):
    standingApprovals: list[StandingApprovalOut]


class DecisionOut(Schema):
    status: str = Field(description="open or decided")
    decision: dict[str, Any] | None = Field(None, description="present once decided")
    retryAfterMs: int | None = Field(None, description="present when no wait slot was free: ask again after it")


# --- who is told and who decides (admin keys) ---------------------------------------------------


class AdminChannelIn(StrictIn):
    kind: str = Field(description="email, slack (a Slack-compatible incoming webhook) or webhook (signed JSON)")
    target: str = Field(description="email addresses, comma-separated, or the webhook's https URL")
    onNewAsk: bool = True
    onDeadline: bool = True
    includePayload: bool = Field(False, description="off: messages carry the agent, tool and question only")


class AdminChannelOut(Schema):
    name: str
    kind: str
    target: str
    onNewAsk: bool
    onDeadline: bool
    includePayload: bool
    active: bool
    lastStatus: str | None = Field(None, description="how the latest message went: pending, delivered or failed")
    lastError: str | None = Field(None, description="present when the latest message failed")


class AdminChannelListOut(Schema):
    channels: list[AdminChannelOut]


class AdminDeadlineRuleIn(StrictIn):
    toolName: str = Field("", description="the tool whose asks it governs; or middleware, not both")
    middleware: str = ""
    deadlineMinutes: int
    onTimeout: str = Field("decline", description="the default applied at the deadline: decline or approve")
    note: str = Field("", description="what the agent is told with the default")
    escalation: list[dict[str, Any]] = Field(
        default_factory=list, description="steps [{afterMinutes, notify}], in order, each before the deadline"
    )


class AdminDeadlineRuleOut(Schema):
    id: int
    toolName: str | None = None
    middleware: str | None = None
    deadlineMinutes: int
    onTimeout: str
    note: str
    escalation: list[dict[str, Any]]


class AdminDeadlineRuleListOut(Schema):
    rules: list[AdminDeadlineRuleOut]


class AdminGroupIn(StrictIn):
    name: str


class AdminMemberIn(StrictIn):
    username: str


class AdminMemberOut(Schema):
    id: int
    username: str


class AdminGroupOut(Schema):
    id: int
    name: str
    members: list[AdminMemberOut]


class AdminGroupListOut(Schema):
    groups: list[AdminGroupOut]


class AdminApprovalRuleIn(StrictIn):
    toolName: str
    group: str = Field(description="an approver group's name")
    quorum: int = Field(1, description="different people of the group needed, 1 to 10")
    conditions: str = Field("", description="one a line, as on the page: amount > 1000; empty: every call")


class AdminApprovalRuleOut(Schema):
    id: int
    toolName: str
    group: str
    quorum: int
    conditions: str


class AdminApprovalRuleListOut(Schema):
    rules: list[AdminApprovalRuleOut]
