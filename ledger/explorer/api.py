"""Runs read back over the API: the list, one run, and its stored events with the server's own
records among them."""

from datetime import datetime
from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse
from ninja import Query, Router
from pydantic import Field, field_validator

from footprint_site.auth import AgentKeyAuth, project_of
from footprint_site.lib.times import iso_z, to_utc
from footprint_site.schemas import ERRORS, StrictIn
from ledger.explorer import selectors
from ledger.models import Run
from ledger.schemas import (
    EventsPageOut,
    RunListOut,
    RunOut,
)

router = Router(tags=["runs"])


def run_as_json(run: Run) -> dict[str, Any]:
    out: dict[str, Any] = {
        "runId": run.run_id,
        "source": run.source,
        "status": run.status,
        "firstEventAt": iso_z(run.first_event_at),
        "lastEventAt": iso_z(run.last_event_at),
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


class RunQuery(StrictIn):
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


# Runs and asks leave out what they do not have (sessionId, deadline, …) rather than answer null.
@router.get("/runs", response={200: RunListOut, **ERRORS}, auth=AgentKeyAuth("read"), exclude_unset=True)
def list_runs(request: HttpRequest, query: Query[RunQuery]) -> dict[str, Any]:
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
    return page


@router.get("/runs/{run_id}", response={200: RunOut, **ERRORS}, auth=AgentKeyAuth("read"), exclude_unset=True)
def get_run(request: HttpRequest, run_id: str) -> dict[str, Any]:
    return run_as_json(selectors.run_get(project=project_of(request), run_id=run_id))


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
