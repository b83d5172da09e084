"""Asks over the API: an agent opens one and long-polls its decision; an integration with the
`decide` scope lists and decides them."""

import math
from datetime import datetime
from typing import Any

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.dateparse import parse_datetime
from ninja import Query, Router, Status

from footprint_site.auth import AgentKeyAuth, agent_key_of, project_of
from footprint_site.exceptions import InvalidParameter
from footprint_site.http import body_within
from footprint_site.lib.jsonbody import parse_json
from footprint_site.lib.times import iso_z, to_utc
from footprint_site.schemas import ERRORS, StrictIn, body_fields, json_body
from ledger.asks import approver_selectors, waits
from ledger.asks import selectors as ask_selectors
from ledger.asks import services as ask_services
from ledger.exceptions import AskInvalid, AskSuperseded
from ledger.models import Ask
from ledger.schemas import (
    AskAnswerOut,
    AskIn,
    AskListOut,
    DecisionIn,
    DecisionOut,
    StandingApprovalListOut,
)

router = Router(tags=["asks"])

ASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["runId", "pauseData"],
    "additionalProperties": False,  # AskIn refuses what it does not name
    "properties": {
        "paused": {"description": "the paused outcome's own flag, accepted and not stored"},
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


def ask_as_json(ask: Ask, *, with_checkpoint: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": ask.pk,
        "runId": ask.run_id,
        "toolCallId": ask.tool_call_id,
        "kind": ask.kind,
        "status": ask.status,
        "createdAt": iso_z(ask.created_at),
        "onTimeout": ask.on_timeout,
    }
    for key, value in (
        ("toolName", ask.tool_name),
        ("sessionId", ask.session_id),
        ("question", ask.question),
        ("middleware", ask.middleware),
        ("deadline", iso_z(ask.deadline)),
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
    response={200: AskAnswerOut, 201: AskAnswerOut, **ERRORS},
    auth=AgentKeyAuth("asks"),
    openapi_extra=json_body(ASK_SCHEMA),
    exclude_unset=True,
)
def open_ask(request: HttpRequest) -> Status[dict[str, Any]]:
    """Open the ask of a paused run (idempotent per run and tool call: a re-post answers with the same ask)."""
    document = parse_json(body_within(request, settings.FOOTPRINT_MAX_RECORDING_BYTES))
    if not isinstance(document, dict) or not isinstance(document.get("runId"), str) or not document["runId"]:
        raise AskInvalid("The body is the paused outcome plus runId: {runId, pauseData, checkpoint?, deadline?, …}.")
    fields = body_fields(AskIn, document, code=AskInvalid.code)
    ask, created = ask_services.ask_open(
        project=project_of(request),
        key=agent_key_of(request),
        run_id=fields.runId,
        session_id=fields.sessionId,
        pause_data=fields.pauseData,
        checkpoint=orjson.dumps(fields.checkpoint) if fields.checkpoint is not None else None,
        deadline=_parse_deadline(fields.deadline),
        on_timeout=document.get("onTimeout", "decline"),  # an explicit null is the service's to refuse
        paused_at_ms=fields.pausedAtMs,
    )
    return Status(201 if created else 200, {"ask": ask_as_json(ask)})


class AskQuery(StrictIn):
    status: Ask.Status | None = None
    run: str | None = None
    session: str | None = None
    kind: Ask.Kind | None = None
    cursor: str | None = None
    limit: int = 50


@router.get("/asks", response={200: AskListOut, **ERRORS}, auth=AgentKeyAuth("asks", "decide"), exclude_unset=True)
def list_asks(request: HttpRequest, query: Query[AskQuery]) -> dict[str, Any]:
    """Asks of the key's project, newest first, for an integration that decides them (a `decide`
    key) or an agent; `status=open` lists those waiting for a decision, as the inbox does. Pass
    `nextCursor` back as `cursor` for the next page. No checkpoint is ever listed."""
    limit = max(1, min(query.limit, 200))
    filters = ask_selectors.AskFilter(status=query.status, run_id=query.run, session_id=query.session, kind=query.kind)
    asks = ask_selectors.ask_list(project=project_of(request), filters=filters, cursor=query.cursor, limit=limit)
    page: dict[str, Any] = {"asks": [ask_as_json(ask) for ask in asks.items]}
    if asks.has_more:
        page["nextCursor"] = asks.next_cursor
    return page


@router.get(
    "/asks/{ask_id}", response={200: AskAnswerOut, **ERRORS}, auth=AgentKeyAuth("asks", "decide"), exclude_unset=True
)
def get_ask(request: HttpRequest, ask_id: int) -> dict[str, Any]:
    """The ask; its checkpoint is included only for the key that posted it."""
    ask = ask_selectors.ask_get(project=project_of(request), ask_id=ask_id)
    mine = ask.posted_by_key_id is not None and ask.posted_by_key_id == agent_key_of(request).pk
    return {"ask": ask_as_json(ask, with_checkpoint=mine)}


# How long a client whose wait found no free slot waits before asking again: the waits it queues
# behind end within 55 s, most sooner (a decision, a supersede).
WAITS_FULL_RETRY_MS = 2000


@router.get(
    "/asks/{ask_id}/decision", response={200: DecisionOut, **ERRORS}, auth=AgentKeyAuth("asks"), exclude_unset=True
)
def wait_for_decision(request: HttpRequest, response: HttpResponse, ask_id: int, wait: float = 0) -> dict[str, Any]:
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
    except waits.WaitsFull:  # every thread this process may hold waits: ask again shortly
        response["Retry-After"] = str(WAITS_FULL_RETRY_MS // 1000)
        return {"status": "open", "retryAfterMs": WAITS_FULL_RETRY_MS}
    if ask.status == Ask.Status.SUPERSEDED:  # no run waits on it: waiting on would wait for nothing
        raise AskSuperseded.of(session_id=ask.session_id, superseded_by=ask.superseded_by_id)
    decision = ask.decision()
    if decision is None:
        return {"status": "open"}
    return {"status": "decided", "decision": decision}


@router.post("/asks/{ask_id}/decision", response={200: DecisionOut, **ERRORS}, auth=AgentKeyAuth("decide"))
def decide_ask(request: HttpRequest, ask_id: int) -> dict[str, Any]:
    """Decide from an integration (a chat bot, a ticket system) whose key has scope `decide`.

    `by` names who decided. 409 once decided; 403 for the key that opened the ask.
    """
    document = parse_json(body_within(request, settings.FOOTPRINT_MAX_REQUEST_BYTES))
    ask = ask_selectors.ask_get(project=project_of(request), ask_id=ask_id)
    if not isinstance(document, dict) or not isinstance(document.get("by"), str) or not document["by"].strip():
        raise AskInvalid("The body is {approved, by, note?, value?}; `by` names who decided.")
    body_fields(DecisionIn, document, code=AskInvalid.code)
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
    return {"status": "decided", "decision": ask.decision()}


@router.get(
    "/standing-approvals",
    response={200: StandingApprovalListOut, **ERRORS},
    auth=AgentKeyAuth("read"),
    exclude_unset=True,
)
def list_standing_approvals(request: HttpRequest) -> dict[str, Any]:
    """The standing approvals in force in the key's project, soonest to expire first: who granted
    each, the tool and argument pattern it covers, its agent (absent: any), and how many asks it
    decided since."""
    listed = []
    for standing, decided in approver_selectors.standing_approvals_in_force_counted(project=project_of(request)):
        item: dict[str, Any] = {
            "id": standing.pk,
            "toolName": standing.tool_name,
            "pattern": standing.pattern,
            "grantedBy": standing.granted_by_label,
            "grantedAt": iso_z(standing.granted_at),
            "expiresAt": iso_z(standing.expires_at),
            "askId": standing.source_ask_id,
            "decided": decided,
        }
        if standing.agent_id is not None:
            item["agentId"] = standing.agent_id
        if standing.note:
            item["note"] = standing.note
        listed.append(item)
    return {"standingApprovals": listed}
