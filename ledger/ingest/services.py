"""Durable, idempotent, hash-chained ingestion of typed events.

One request is one transaction: the receipt is sent only after COMMIT, and a batch with any bad
event stores nothing. Concurrent batches for the same run serialize on the run's row lock (taken
by the upsert that also reads the chain head), always in runId order so two batches that touch
the same runs cannot deadlock.
"""

import functools
import struct
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import orjson
from django.db import transaction
from psycopg import Cursor
from psycopg.types.json import Jsonb

from footprint_site.lib.chain import link_hash
from footprint_site.lib.db import server_binding_cursor
from ledger.asks.services import asks_close_handed_back, asks_from_events, runs_traced_from_consumer_scope
from ledger.audits.receipts import receipt_signature
from ledger.exceptions import SeqConflict
from ledger.ingest.decision_values import recording_values_attach
from ledger.ingest.envelopes import Event, replace_nul
from ledger.ingest.projections import Projection, call_id_of, project_events
from ledger.ingest.runs import CONSUMER_SCOPE, RunReceipt, RunState, doc_for_jsonb, lock_run_row
from ledger.models import Run
from tenancy.models import AgentKey, Project

MAX_GAPS_REPORTED = 1000


def _stored_bodies(cur: Cursor[Any], state: RunState, events: list[Event]) -> dict[int, bytes]:
    """Bodies already stored under the batch's seqs. Skipped when every seq is past the last one."""
    if min(e.seq for e in events) > state.max_seq:
        return {}
    cur.execute(
        "SELECT seq, body FROM ledger_runevent WHERE run_id = %s AND period = %s AND seq = ANY(%b)",
        [state.pk, state.period, [e.seq for e in events]],
    )
    return {seq: body.encode() for seq, body in cur.fetchall()}


def _split_new(
    run_id: str, events: list[Event], stored: dict[int, bytes], batch: list[Event]
) -> tuple[list[Event], int]:
    """New events in seq order and the count of duplicates; a changed duplicate is a conflict.
    `batch` is the whole request, for the index a conflict names."""
    if not stored and _ascending(events):
        return events, 0  # the usual batch: every event new, already in seq order
    fresh: dict[int, Event] = {}
    duplicates = 0
    for event in events:
        earlier = stored.get(event.seq)
        if earlier is None and event.seq in fresh:
            earlier = fresh[event.seq].body
        if earlier is None:
            fresh[event.seq] = event
        elif earlier == event.body:
            duplicates += 1
        else:
            index = batch.index(event)
            raise SeqConflict(
                f"Event at index {index} has seq {event.seq} of run '{run_id}', which is already stored "
                "with different content. A seq names one event forever; resend the original or number the "
                "new event after the run's last seq. Nothing was stored.",
                conflicts=[{"index": index, "runId": run_id, "seq": event.seq}],
            )
    return [fresh[seq] for seq in sorted(fresh)], duplicates


def _ascending(events: list[Event]) -> bool:
    previous = -1
    for event in events:
        if event.seq <= previous:
            return False
        previous = event.seq
    return True


def _raw_json(data: bytes) -> bytes:
    return data


@dataclass(frozen=True)
class CopyTarget:
    """A table written by binary COPY: its columns and their PostgreSQL types, in row order."""

    table: str
    columns: tuple[tuple[str, str], ...]

    @property
    def statement(self) -> str:
        names = ", ".join(name for name, _ in self.columns)
        return f"COPY {self.table} ({names}) FROM STDIN (FORMAT BINARY)"


def _columns(spec: str) -> tuple[tuple[str, str], ...]:
    """'run_id:int8 seq:int4 …' → (("run_id", "int8"), …)."""
    pairs = [item.split(":") for item in spec.split()]
    return tuple((name, kind) for name, kind in pairs)


EVENTS = CopyTarget(
    "ledger_runevent",
    _columns(
        "run_id:int8 seq:int4 position:int4 type:text tool_call_id:text wall_clock_ms:int8 body:text doc:jsonb"
        " prev_hash:bytea hash:bytea period:int4"
    ),
)


# PostgreSQL's binary COPY framing, and the packers of an `EVENTS` row's fixed-size parts. Module
# constants with bound `pack` functions: compiled, a class attribute or a method lookup per field
# costs more than the packing itself.
COPY_SIGNATURE: Final = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # then flags and header-extension length, 0
COPY_TRAILER: Final = b"\xff\xff"
EVENT_FIELDS: Final = len(EVENTS.columns)
NULL_FIELD: Final = b"\xff\xff\xff\xff"
_pack_row_head: Final = struct.Struct(">hiqiiii").pack  # field count, run_id, seq, position, with lengths
_pack_no_wall_clock: Final = struct.Struct(">ii").pack  # NULL wall_clock_ms, then body's length
_pack_wall_clock: Final = struct.Struct(">iqi").pack  # wall_clock_ms, then body's length
_pack_jsonb_head: Final = struct.Struct(">ib").pack  # length, then jsonb's binary format version (1)
_pack_hashes_and_period: Final = struct.Struct(">i32si32sii").pack


# A block is sent at the end of the row that takes it past this: under psycopg's largest single
# write (MAX_BUFFER_SIZE, 128 KiB; a longer one it cuts into copies) unless that row is large.
COPY_BLOCK_BYTES: Final = 120 * 1024
ROW_OVERHEAD_BYTES: Final = 150  # a row's fields other than body and doc, its type and call id included


class EventRowsWriter:
    """`EVENTS` rows in PostgreSQL's binary COPY format, encoded here rather than by psycopg, and
    handed to `write` (the open COPY's) a block of about COPY_BLOCK_BYTES at a time.

    Every ingested event is one row: psycopg's per-field dumpers cost more than the rest of the
    row's work in Python, while the layout is fixed: a field count, then each field as its byte
    length and bytes (-1 for NULL), big-endian. `body` is sent as is for `doc` too (jsonb's binary
    form is a version byte and the JSON text) unless it holds U+0000, which jsonb cannot.

    In blocks, not one buffer for the request: a 720 KB buffer was copied whole by the join and
    again by psycopg cutting it into pieces of its largest write, each copy leaving the caches;
    a block is sent while its bytes are still in them, and PostgreSQL starts on it meanwhile.
    """

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self.write = write
        self.parts: list[bytes] = [COPY_SIGNATURE]
        self.pending = 0  # bytes in `parts`, roughly: the bodies and the fixed-size parts

    def append(
        self,
        run_pk: int,
        period: int,
        position: int,
        event: Event,
        tool_call_id: str | None,
        prev: bytes,
        head: bytes,
    ) -> None:
        body, wall = event.body, event.wall_clock_ms
        doc = doc_for_jsonb(body, event.holds_nul)
        self.parts += (
            _pack_row_head(EVENT_FIELDS, 8, run_pk, 4, event.seq, 4, position),
            _text_field(event.type),
            NULL_FIELD if tool_call_id is None else _text_field(tool_call_id),
            _pack_no_wall_clock(-1, len(body)) if wall is None else _pack_wall_clock(8, wall, len(body)),
            body,
            _pack_jsonb_head(len(doc) + 1, 1),
            doc,
            _pack_hashes_and_period(32, prev, 32, head, 4, period),
        )
        self.pending += len(body) + len(doc) + ROW_OVERHEAD_BYTES
        if self.pending >= COPY_BLOCK_BYTES:
            self.write(b"".join(self.parts))
            self.parts, self.pending = [], 0

    def finish(self) -> None:
        self.parts.append(COPY_TRAILER)
        self.write(b"".join(self.parts))


@functools.lru_cache(maxsize=1024)
def _text_field(value: str) -> bytes:
    """A text field: length and UTF-8 bytes. Event types and tool call ids repeat: cached."""
    encoded = value.encode()
    return struct.pack(">i", len(encoded)) + encoded


DECISIONS = CopyTarget(
    "ledger_middlewaredecision",
    _columns(
        "run_id:int8 seq:int4 middleware:text moment:text at:text phase:text tool_name:text tool_call_id:text"
        " iteration:int4 outcome:text changed:bool why:text component_id:text origins:jsonb period:int4"
    ),
)
VERDICTS = CopyTarget(
    "ledger_permissionverdict",
    _columns(
        "run_id:int8 seq:int4 event_type:text capability:text actor:text target:text result:text"
        " policy_rule_id:text rationale:text reason:text period:int4"
    ),
)
EFFECTS = CopyTarget(
    "ledger_tooleffect",
    _columns(
        "run_id:int8 seq:int4 kind:text outcome:text tool_name:text tool_call_id:text iteration:int4"
        " target_skill_id:text reason:text instruction_id:text delivery_lease:text refusal_reason:text"
        " superseded_by:text period:int4"
    ),
)
REFUSALS = CopyTarget(
    "ledger_refusal",
    _columns(
        "run_id:int8 seq:int4 event_type:text category:text rule:text reason:text tool_name:text"
        " tool_call_id:text iteration:int4 wall_clock_ms:int8 period:int4"
    ),
)
TOOL_CALLS = CopyTarget(
    "ledger_toolcall",
    _columns(
        "run_id:int8 tool_call_id:text tool_name:text error:bool status:text duration_ms:int8 start_seq:int4"
        " end_seq:int4 period:int4"
    ),
)
TOOL_CALL_FIELDS: Final = [name for name, _ in TOOL_CALLS.columns[2:-1]]  # as ledger.ingest.projections names them


def _copy(cur: Cursor[Any], target: CopyTarget, rows: list[tuple[Any, ...]]) -> None:
    if not rows:
        return
    with cur.copy(target.statement) as copy:
        copy.set_types([kind for _, kind in target.columns])
        for row in rows:
            copy.write_row(row)


def _tool_call_id(event: Event) -> str | None:
    value = call_id_of(event.payload)
    return replace_nul(value) if value is not None and event.holds_nul else value  # as the call's row holds it


def _ms_to_datetime(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def _write_projection(
    cur: Cursor[Any], projection: Projection, states: dict[str, RunState], first_batch: set[str]
) -> None:
    """`first_batch`: the runs that had no stored event before this batch, so no tool call either."""

    def with_pk(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return [(states[row[0]].pk, *row[1:], states[row[0]].period) for row in rows]

    decisions = [
        (*row[:-1], None if row[-1] is None else Jsonb(row[-1].encode(), dumps=_raw_json))
        for row in projection.decisions
    ]
    _copy(cur, DECISIONS, with_pk(decisions))
    _copy(cur, VERDICTS, with_pk(projection.verdicts))
    _copy(cur, EFFECTS, with_pk(projection.effects))
    _copy(cur, REFUSALS, with_pk(projection.refusals))
    # A run's first batch has no earlier start or end to merge with: its calls are new rows, and
    # COPY writes them for half the CPU PostgreSQL spends on the upsert (0.45 against 0.9 ms for 62).
    new_calls: list[tuple[Any, ...]] = []
    merged_calls: list[dict[str, Any]] = []
    for (run_id, call_id), fields in projection.tool_calls.items():
        if run_id in first_batch:
            state = states[run_id]
            new_calls.append((state.pk, call_id, *[fields.get(name) for name in TOOL_CALL_FIELDS], state.period))
        else:
            state = states[run_id]
            merged_calls.append({"run_id": state.pk, "period": state.period, "tool_call_id": call_id, **fields})
    _copy(cur, TOOL_CALLS, new_calls)
    if merged_calls:
        # One JSON document for all the calls: psycopg would dump an array per column, element by element.
        cur.execute(TOOL_CALL_UPSERT, [Jsonb(orjson.dumps(merged_calls), dumps=_raw_json)])


# tool_start and tool_end fill different columns and may arrive in either order. A call id may be
# used twice in a run (providers number calls per response): then, as within one batch, the start
# with the highest seq gives the start's columns and the end with the highest seq the end's,
# together (an end without `error` clears the `error` an earlier end set), whatever the batching.
TOOL_CALL_UPSERT: Final = """
    INSERT INTO ledger_toolcall AS t (run_id, period, tool_call_id, tool_name, error, status, duration_ms, start_seq,
        end_seq)
    SELECT * FROM jsonb_to_recordset(%b) AS c(run_id int8, period int4, tool_call_id text, tool_name text, error bool,
        status text, duration_ms int8, start_seq int4, end_seq int4)
    ON CONFLICT (run_id, tool_call_id, period) DO UPDATE SET
        tool_name = CASE WHEN EXCLUDED.start_seq > t.start_seq OR t.start_seq IS NULL
                         THEN EXCLUDED.tool_name ELSE t.tool_name END,
        start_seq = CASE WHEN EXCLUDED.start_seq > t.start_seq OR t.start_seq IS NULL
                         THEN EXCLUDED.start_seq ELSE t.start_seq END,
        error = CASE WHEN EXCLUDED.end_seq > t.end_seq OR t.end_seq IS NULL THEN EXCLUDED.error ELSE t.error END,
        status = CASE WHEN EXCLUDED.end_seq > t.end_seq OR t.end_seq IS NULL THEN EXCLUDED.status ELSE t.status END,
        duration_ms = CASE WHEN EXCLUDED.end_seq > t.end_seq OR t.end_seq IS NULL
                           THEN EXCLUDED.duration_ms ELSE t.duration_ms END,
        end_seq = CASE WHEN EXCLUDED.end_seq > t.end_seq OR t.end_seq IS NULL THEN EXCLUDED.end_seq ELSE t.end_seq END
"""


def _gaps(cur: Cursor[Any], run_pk: int, period: int) -> tuple[list[list[int]], bool]:
    cur.execute(
        """
        SELECT gap_from, gap_to FROM (
            SELECT -1::int8 AS seq, min(seq)::int8 AS next_seq FROM ledger_runevent
            WHERE run_id = %(run)s AND period = %(period)s AND seq IS NOT NULL
            UNION ALL  -- int8: seq + 1 must not overflow at the largest seq (2**31 - 1)
            SELECT seq::int8, (lead(seq) OVER (ORDER BY seq))::int8 FROM ledger_runevent
            WHERE run_id = %(run)s AND period = %(period)s AND seq IS NOT NULL
        ) AS s(seq, next_seq), LATERAL (SELECT seq + 1, next_seq - 1) AS g(gap_from, gap_to)
        WHERE next_seq > seq + 1
        ORDER BY gap_from LIMIT %(limit)s
        """,
        {"run": run_pk, "period": period, "limit": MAX_GAPS_REPORTED + 1},
    )
    gaps = [[int(a), int(b)] for a, b in cur.fetchall()]
    return gaps[:MAX_GAPS_REPORTED], len(gaps) > MAX_GAPS_REPORTED


@transaction.atomic
def events_ingest(
    *, project: Project, events: list[Event], source: str = Run.Source.EVENTS, key: AgentKey | None = None
) -> list[RunReceipt]:
    """Store the events not stored yet, chain them, project them, and return a receipt per run.

    Preconditions: `events` passed `ledger.ingest.envelopes.check_events`. Writes RunEvent rows (appended
    to each run's chain in seq order within the batch), the projections of the new events, the
    runs' summaries, the asks that pause events open (ledger.asks.services), as opened by
    `key`, the agent key that posted them, and, on new decisions of a run with a stored
    recording, its before/after values. Raises SeqConflict, storing nothing, when a seq is re-sent
    with new content.
    """
    by_run: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        by_run[event.run_id].append(event)

    receipts: list[RunReceipt] = []
    fresh_by_run: dict[str, list[Event]] = {}
    new_events: list[Event] = []
    states: dict[str, RunState] = {}
    duplicates: dict[str, int] = {}
    accepted: dict[str, int] = {}
    first_batch: set[str] = set()
    with server_binding_cursor() as cur:
        locked: set[str] = set(by_run)
        if CONSUMER_SCOPE in by_run:  # its pauses pause other runs: locked with these, in one order
            locked = locked | runs_traced_from_consumer_scope(project=project, events=by_run[CONSUMER_SCOPE])
        for run_id in sorted(locked):
            if run_id not in by_run:
                cur.execute(
                    "SELECT 1 FROM ledger_run WHERE project_id = %s AND run_id = %s FOR UPDATE", [project.pk, run_id]
                )
                continue
            run_events = by_run[run_id]
            state = states[run_id] = lock_run_row(cur, project, run_id, run_events, source)
            if state.chain_length == 0:
                first_batch.add(run_id)
            fresh, duplicates[run_id] = _split_new(run_id, run_events, _stored_bodies(cur, state, run_events), events)
            fresh_by_run[run_id] = fresh
            new_events.extend(fresh)
            accepted[run_id] = len(fresh)
        if new_events:  # every run is locked (the COPY holds the connection): chained in runId order
            with cur.copy(EVENTS.statement) as copy:
                rows = EventRowsWriter(copy.write)
                for run_id, fresh in fresh_by_run.items():
                    state = states[run_id]
                    head = state.head
                    for offset, event in enumerate(fresh):
                        prev, head = head, link_hash(head, event.body)
                        rows.append(
                            state.pk, state.period, state.chain_length + offset, event, _tool_call_id(event), prev, head
                        )
                    state.chain_length += len(fresh)
                    state.head = head
                rows.finish()
        projection = project_events(new_events)
        _write_projection(cur, projection, states, first_batch)

        for run_id in sorted(by_run):
            state = states[run_id]
            delta = projection.deltas.get(run_id)
            cur.execute(
                """
                UPDATE ledger_run SET
                    chain_length = %(chain_length)s, head_hash = %(head)s,
                    event_count = event_count + %(accepted)s,
                    max_seq = GREATEST(max_seq, %(max_seq)s),
                    tokens_in = tokens_in + %(tokens_in)s, tokens_out = tokens_out + %(tokens_out)s,
                    iterations = iterations + %(iterations)s,
                    tool_call_count = tool_call_count + %(tool_calls)s,
                    refusal_count = refusal_count + %(refusals)s,
                    status = CASE WHEN %(status_seq)s > status_seq THEN %(status)s ELSE status END,
                    status_seq = GREATEST(status_seq, %(status_seq)s),
                    first_event_at = LEAST(first_event_at, %(first)s),
                    last_event_at = GREATEST(last_event_at, %(last)s),
                    agent_id = COALESCE(agent_id, %(agent_id)s),
                    cost_usd = GREATEST(cost_usd, %(cost_usd)s),
                    updated_at = now()
                WHERE id = %(pk)s
                RETURNING event_count, max_seq
                """,
                {
                    "pk": state.pk,
                    "chain_length": state.chain_length,
                    "head": state.head,
                    "accepted": accepted[run_id],
                    "max_seq": max(e.seq for e in by_run[run_id]),
                    "tokens_in": delta.tokens_in if delta else 0,
                    "tokens_out": delta.tokens_out if delta else 0,
                    "iterations": delta.iterations if delta else 0,
                    "tool_calls": delta.tool_calls if delta else 0,
                    "refusals": delta.refusals if delta else 0,
                    "status": delta.status if delta else None,
                    "status_seq": delta.status_seq if delta else -1,
                    "first": _ms_to_datetime(delta.first_wall_ms if delta else None),
                    "last": _ms_to_datetime(delta.last_wall_ms if delta else None),
                    "agent_id": delta.agent_id if delta else None,
                    "cost_usd": delta.cost_usd if delta else None,
                },
            )
            event_count, max_seq = cur.fetchone()  # type: ignore[misc]
            gaps, truncated = ([], False) if event_count == max_seq + 1 else _gaps(cur, state.pk, state.period)
            head_hex = state.head.hex()
            receipts.append(
                RunReceipt(
                    run_id=run_id,
                    accepted=accepted[run_id],
                    duplicates=duplicates[run_id],
                    last_seq=max_seq,
                    head=head_hex,
                    records=state.chain_length,
                    signature=receipt_signature(
                        project_slug=project.slug, run_id=run_id, records=state.chain_length, head_hex=head_hex
                    ),
                    gaps=gaps,
                    gaps_truncated=truncated,
                )
            )
        # After the runs' own status: a pause reported under another run's id pauses the run it names.
        if projection.ask_events:
            asks_from_events(project=project, events=projection.ask_events, key=key)
        if projection.call_ends:
            asks_close_handed_back(project=project, ends=projection.call_ends, key=key)
        recorded = sorted({states[row[0]].pk for row in projection.decisions if states[row[0]].has_recording})
        if recorded:
            recording_values_attach(run_pks=recorded)
    return receipts
