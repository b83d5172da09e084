"""A run's row and its chain, below ingestion and decisions alike: the run lock both take, in one
order, and the server's own events appended to a chain."""

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import orjson
from psycopg import Cursor
from psycopg.types.json import Jsonb

from footprint_site.lib.chain import link_hash
from footprint_site.lib.db import server_binding_cursor
from footprint_site.lib.jsonbody import json_holds_nul
from ledger.ingest.envelopes import IDENTITY_KEYS, Event, canonical_bytes, replace_nul
from ledger.models import Run
from tenancy.models import Project


@dataclass
class RunReceipt:
    run_id: str
    accepted: int
    duplicates: int
    last_seq: int | None
    head: str
    records: int
    signature: str  # ledger.audits.receipts: the agent's proof of what was stored
    gaps: list[list[int]]
    gaps_truncated: bool = False

    def as_json(self) -> dict[str, Any]:
        receipt: dict[str, Any] = {
            "runId": self.run_id,
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "lastSeq": self.last_seq,
            "head": self.head,
            "records": self.records,
            "signature": self.signature,
            "gaps": self.gaps,
        }
        if self.gaps_truncated:
            receipt["gapsTruncated"] = True
        return receipt


@dataclass
class RunState:
    pk: int
    chain_length: int
    head: bytes
    max_seq: int
    has_recording: bool
    period: int  # the run's month: every row written for it carries it (ledger/partitions.py)


RUN_IDENTITY_KEYS = (*IDENTITY_KEYS, "compositionPath")


CONSUMER_SCOPE: Final = "consumer-scope"  # the runId 9.62.0 gives pause events (ledger.asks)


def _identity_of(events: list[Event]) -> dict[str, Any]:
    """Each identity key's first non-null value in the run's events. One pass per key: most keys
    are on the first event or on none."""
    return {
        key: next((event.meta[key] for event in events if event.meta.get(key) is not None), None)
        for key in RUN_IDENTITY_KEYS
    }


def lock_run_row(cur: Cursor[Any], project: Project, run_id: str, events: list[Event], source: str) -> RunState:
    identity = _identity_of(events)
    cur.execute(
        """
        INSERT INTO ledger_run (project_id, run_id, session_id, tenant, principal, composition_path,
            source, status, status_seq, tokens_in, tokens_out, iterations, tool_call_count,
            refusal_count, event_count, max_seq, chain_length, head_hash, created_at, updated_at, period)
        VALUES (%s, %s, %s, %s, %s, %s, %s, 'running', -1, 0, 0, 0, 0, 0, 0, -1, 0, %s, now(), now(),
            (to_char(now() AT TIME ZONE 'UTC', 'YYYYMM'))::int)  -- its period: ledger.partitions
        ON CONFLICT (project_id, run_id) DO UPDATE SET
            session_id = COALESCE(ledger_run.session_id, EXCLUDED.session_id),
            tenant = COALESCE(ledger_run.tenant, EXCLUDED.tenant),
            principal = COALESCE(ledger_run.principal, EXCLUDED.principal),
            updated_at = now()
        RETURNING id, chain_length, head_hash, max_seq, has_recording, period
        """,
        [
            project.pk,
            run_id,
            identity["sessionId"],
            identity["tenant"],
            identity["principal"],
            Jsonb(replace_nul(identity["compositionPath"] or [])),
            source,
            bytes(32),
        ],
    )
    pk, chain_length, head, max_seq, has_recording, period = cur.fetchone()  # type: ignore[misc]
    return RunState(
        pk=pk, chain_length=chain_length, head=bytes(head), max_seq=max_seq, has_recording=has_recording, period=period
    )


def doc_for_jsonb(body: bytes, holds_nul: bool) -> bytes:
    # jsonb cannot hold U+0000: the queryable copy carries U+FFFD there; `body` keeps the truth.
    if not holds_nul:
        return body
    return orjson.dumps(replace_nul(orjson.loads(body)))


SERVER_AUTHOR = "footprint-ledger"


def run_lock(*, project: Project, run_id: str) -> None:
    """Take the run's row lock (creating the run if it is new) for the rest of the transaction.

    Ingestion locks its runs before it touches their asks; a decision takes the same lock before
    it claims the ask, so the two wait on each other instead of deadlocking.
    """
    with server_binding_cursor() as cur:
        lock_run_row(cur, project, run_id, [], Run.Source.EVENTS)


def run_append_server_event(*, project: Project, run_id: str, type_: str, payload: dict[str, Any]) -> str:
    """Append an event the server itself authored (seq NULL) to a run's chain; returns the new head.

    Takes the run's row lock like ingestion, so it chains after whatever is stored at that moment.
    """
    now_ms = int(datetime.now(tz=UTC).timestamp() * 1000)
    body = canonical_bytes(
        {"type": type_, "payload": payload, "meta": {"runId": run_id, "wallClockMs": now_ms, "author": SERVER_AUTHOR}}
    )
    with server_binding_cursor() as cur:
        state = lock_run_row(cur, project, run_id, [], Run.Source.EVENTS)
        head = link_hash(state.head, body)
        cur.execute(
            "INSERT INTO ledger_runevent (run_id, period, seq, position, type, tool_call_id, wall_clock_ms, body,"
            " doc, prev_hash, hash, received_at) VALUES (%s, %s, NULL, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, now())",
            [
                state.pk,
                state.period,
                state.chain_length,
                type_,
                payload.get("toolCallId"),
                now_ms,
                body.decode(),
                doc_for_jsonb(body, json_holds_nul(body)).decode(),
                state.head,
                head,
            ],
        )
        cur.execute(
            "UPDATE ledger_run SET chain_length = chain_length + 1, head_hash = %s, updated_at = now() WHERE id = %s",
            [head, state.pk],
        )
    return head.hex()
