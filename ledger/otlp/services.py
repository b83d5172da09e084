"""OTLP spans in: each kept verbatim, each mapped onto typed events that go through `events_ingest`.

One run per trace ("otlp-<trace id>"). A span's events get their seqs when the span is first
stored (the next free seqs of its trace, recorded on the OtlpSpan row), so the numbering never
depends on the order spans arrive in, and a re-sent span is recognised by (trace id, span id)
and maps to nothing new.
"""

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from footprint_site.lib.db import server_binding_cursor
from footprint_site.lib.js import js_equal
from footprint_site.lib.jsonb import JsonbDecoder
from ledger.exceptions import BatchInvalid
from ledger.ingest.envelopes import Event, check_events
from ledger.ingest.services import events_ingest
from ledger.models import OtlpSpan, Run
from ledger.otlp.rows import SPANS_COPY, SpanRowsWriter
from ledger.otlp.wire import Span, export_message, is_agent_span, same_span, span_events, span_json
from tenancy.models import AgentKey, Project


@dataclass(frozen=True)
class OtlpReceipt:
    accepted: int
    rejected: int
    message: str
    stored: int
    duplicates: int


def _lock_traces(project: Project, trace_ids: list[str]) -> None:
    # Numbering reads the trace's highest numbers and then inserts above them: two requests
    # carrying spans of one trace must take turns. Sorted, so two requests cannot deadlock.
    with connection.cursor() as cur:
        for trace_id in sorted(trace_ids):
            cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"otlp:{project.pk}:{trace_id}"])


def _stored_copies(
    project: Project, by_trace: dict[str, dict[str, Span]]
) -> dict[tuple[str, str], tuple[bytes | None, str | None]]:
    """The verbatim copies of the request's spans that are stored already, by (trace id, span id):
    (protobuf, None), or (None, its OTLP/JSON text) for a span stored before migration 0037."""
    with server_binding_cursor() as cur:
        # The span ids as one text, split by PostgreSQL: a 512-span request's IN list cost Django
        # more time to build than PostgreSQL to answer, and psycopg dumping them as an array half
        # of that still. They are hex (decode_spans), so a comma cannot be in one. Usually no row.
        cur.execute(
            "SELECT trace_id, span_id, protobuf, CASE WHEN protobuf IS NULL THEN raw::text END FROM ledger_otlpspan"
            " WHERE project_id = %s AND trace_id = ANY(%s) AND span_id = ANY(string_to_array(%s, ','))",
            [project.pk, list(by_trace), ",".join(span_id for spans in by_trace.values() for span_id in spans)],
        )
        return {
            (trace_id, span_id): (protobuf, stored_json)
            for trace_id, span_id, protobuf, stored_json in cur
            if span_id in by_trace[trace_id]  # a span id of one trace stored under another is not it
        }


def _same_as_stored(stored: tuple[bytes | None, str | None], span: Span) -> bool:
    protobuf, stored_json = stored
    if protobuf is not None:
        return same_span(protobuf, span.protobuf)
    # Kept as OTLP/JSON (before migration 0037), compared by value as jsonb read its numbers back.
    return js_equal(json.loads(stored_json or "null", cls=JsonbDecoder), span_json(span.protobuf))


def _next_numbers(project: Project, trace_ids: list[str]) -> dict[str, tuple[int, int]]:
    """Per trace: (next span_number, next free seq)."""
    with server_binding_cursor() as cur:
        # Its SQL, not the ORM's: building the query cost more than PostgreSQL answering it.
        cur.execute(
            "SELECT trace_id, max(span_number) + 1, max(first_seq + event_count) FROM ledger_otlpspan"
            " WHERE project_id = %s AND trace_id = ANY(%s) GROUP BY trace_id",
            [project.pk, trace_ids],
        )
        return {trace_id: (number, seq) for trace_id, number, seq in cur}


def _numbered(envelopes: list[dict[str, Any]], first_seq: int) -> tuple[list[Event], int]:
    """The span's events numbered from `first_seq`, and how many of its mapped envelopes were left
    out. The span is valid (decode_spans said so): an envelope its mapping made that is not one
    (an attribute nesting too deep, say) costs that event, never the span, which is kept verbatim.
    The envelopes are this request's own (span_events made them): numbered in place, not copied."""
    for offset, envelope in enumerate(envelopes):
        envelope["seq"] = first_seq + offset
    try:
        return check_events(envelopes, from_otlp=True), 0
    except BatchInvalid:
        pass
    events: list[Event] = []
    for envelope in envelopes:
        envelope["seq"] = first_seq + len(events)
        try:
            events += check_events([envelope], from_otlp=True)
        except BatchInvalid:
            continue
    return events, len(envelopes) - len(events)


MAX_ANCESTRY = 64  # parent links followed up from an agent span; a cycle or a deeper tree ends there


def _nested_agents(project: Project, trace_id: str, spans: dict[str, Span]) -> set[str]:
    """The `invoke_agent` spans among `spans` that have another `invoke_agent` span above them, in
    this request or stored earlier (each stored one read once per request). A parent that arrives
    later (exporters send children first) is not known yet; its own end is numbered after the
    child's then, so it still decides the run's status."""
    known: dict[str, tuple[dict[str, Any], str] | None] = {
        span_id: (span.attributes, span.parent_span_id) for span_id, span in spans.items()
    }
    # The agent spans' parents not in the request, in one query (their own parents as needed).
    missing = {
        span.parent_span_id
        for span in spans.values()
        if is_agent_span(span.attributes) and span.parent_span_id and span.parent_span_id not in known
    }
    if missing:
        known |= dict.fromkeys(missing)
        stored = OtlpSpan.objects.filter(project=project, trace_id=trace_id, span_id__in=missing)
        known |= {
            span_id: (attributes, parent)
            for span_id, attributes, parent in stored.values_list("span_id", "attributes", "parent_span_id")
        }
    nested = set()
    for span in spans.values():
        if not is_agent_span(span.attributes):
            continue
        parent_id, seen = span.parent_span_id, {span.span_id}
        while parent_id and parent_id not in seen and len(seen) < MAX_ANCESTRY:
            seen.add(parent_id)
            if parent_id not in known:
                known[parent_id] = (
                    OtlpSpan.objects.filter(project=project, trace_id=trace_id, span_id=parent_id)
                    .values_list("attributes", "parent_span_id")
                    .first()
                )
            parent = known[parent_id]
            if parent is None:
                break
            if is_agent_span(parent[0]):
                nested.add(span.span_id)
                break
            parent_id = parent[1]
    return nested


@transaction.atomic
def otlp_ingest(*, project: Project, spans: list[Span], key: AgentKey | None = None) -> OtlpReceipt:
    """Store the spans not stored yet and ingest their events; count the invalid ones as rejected,
    and a span id sent again with other content (the copy stored first stands). A valid span is
    always stored; a mapped event of it that is not a valid envelope is left out (and named).

    Preconditions: `spans` come from `ledger.otlp.decode_spans` (a span with a `problem` is
    rejected, not stored). Writes OtlpSpan rows (binary COPY of the spans not stored yet, read
    under the traces' locks) and, through `events_ingest(source=otlp)`, the runs, their
    chained events and projections, all in one transaction; `key`, the agent key that posted
    them, opens the asks their pauses open. Enqueues nothing.
    """
    problems = [span.problem for span in spans if span.problem]
    by_trace: dict[str, dict[str, Span]] = defaultdict(dict)
    for span in spans:
        if span.problem is not None:
            continue
        first = by_trace[span.trace_id].setdefault(span.span_id, span)  # the first copy in a request wins
        if first is not span and not same_span(first.protobuf, span.protobuf):
            problems.append(f"span {span.span_id} is in the request twice, with different content: the first is kept")
    trace_ids = sorted(by_trace)
    _lock_traces(project, trace_ids)
    # Exact under the trace locks: nobody else can store spans of these traces until COMMIT.
    stored = _stored_copies(project, by_trace)
    for (trace_id, span_id), stored_copy in stored.items():
        # An exporter's retry sends the same span.
        if not _same_as_stored(stored_copy, by_trace[trace_id][span_id]):
            problems.append(f"span {span_id} was stored earlier with different content: the stored one is kept")
    numbers = _next_numbers(project, trace_ids)
    rows: list[tuple[Span, int, int, int]] = []  # span, span_number, first_seq, event_count
    events: list[Event] = []
    unmapped: list[str] = []
    duplicates = 0
    for trace_id in trace_ids:
        number, seq = numbers.get(trace_id, (0, 0))
        fresh = [span for span_id, span in by_trace[trace_id].items() if (trace_id, span_id) not in stored]
        duplicates += len(by_trace[trace_id]) - len(fresh)
        nested = _nested_agents(project, trace_id, by_trace[trace_id])
        for span in sorted(fresh, key=lambda s: (s.start_unix_nano, s.span_id)):
            span_events_checked, left_out = _numbered(span_events(span, nested_agent=span.span_id in nested), seq)
            if left_out:
                unmapped.append(f"span {span.span_id} ({span.name!r}): {left_out} of its mapped events are not valid")
            rows.append((span, number, seq, len(span_events_checked)))
            events.extend(span_events_checked)
            number += 1
            seq += len(span_events_checked)
    if rows:
        with server_binding_cursor() as cur, cur.copy(SPANS_COPY) as copy:
            writer = SpanRowsWriter(copy.write, project.pk)
            for row in rows:
                writer.append(*row)
            writer.finish()
    if events:
        events_ingest(project=project, events=events, source=Run.Source.OTLP, key=key)
    return OtlpReceipt(
        accepted=len(spans) - len(problems),
        rejected=len(problems),
        message=export_message(problems, unmapped),
        stored=len(rows),
        duplicates=duplicates,
    )
