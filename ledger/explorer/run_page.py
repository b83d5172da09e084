"""Reads behind the run page: header, timeline, tree, dispatches, verdicts, artifacts.

Built for runs of 100,000 events and more: every read here is bounded (one page, one node list,
one tool call's steps) and walks an index; a payload is read only when a person opens it.
"""

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson
from django.core.cache import cache
from django.db import connections
from django.db.models import F, Q, QuerySet, Value
from django.db.models.fields.json import KeyTextTransform, KeyTransform

from artifacts.kinds import default_result_tool
from artifacts.models import Artifact
from footprint_site.lib import durations
from footprint_site.pagination import Page, keyset_page, keyset_pages, page_of
from footprint_site.replicas import lagging_reads_alias
from ledger.audits.integrity_selectors import integrity_check_latest
from ledger.explorer import selectors
from ledger.explorer.result_shapes import ResultShape, result_shapes_of_calls
from ledger.ingest.envelopes import OTLP_RUN_PREFIX
from ledger.models import Ask, MiddlewareDecision, OtlpSpan, PermissionVerdict, Refusal, Run, RunEvent, ToolCall
from ledger.otlp.wire import iteration_number
from ledger.refusals.selectors import CallWindow, resumed_tool_calls, tool_named_steps

TIMELINE_PAGE = 100
DISPATCH_PAGE = 25
TAB_LIMIT = 200
# Payload fields worth a glance in a timeline row: short scalars that say what happened.
GIST_KEYS = (
    "toolName",
    "middleware",
    "moment",
    "outcome",
    "kind",
    "ref",
    "reason",
    "why",
    "question",
    "model",
    "status",
    "approved",
    "by",
)
GIST_CHARS = 140


@dataclass
class TimelineRow:
    seq: int | None  # None for a record the server wrote (a person's decision)
    position: int
    type: str
    tool_call_id: str | None
    wall_clock_ms: int | None
    stage: str | None
    gist: str
    run_start_ms: int | None = None  # the run's first event, which times are shown after

    @property
    def short_type(self) -> str:
        return self.type.removeprefix("agentfootprint.")

    @property
    def by_server(self) -> bool:
        return self.seq is None

    @property
    def moment(self) -> datetime | None:
        return durations.moment_from_ms(self.wall_clock_ms) if self.wall_clock_ms is not None else None

    @property
    def absolute(self) -> str:
        """The wall-clock moment in UTC, for the hover title (pages.js shows it in the reader's zone)."""
        moment = self.moment
        return durations.absolute_text(moment) if moment else ""

    @property
    def time(self) -> str:
        """How long after the run's first event this one happened ('+4.2 s'), formatted once here
        rather than by a template filter per row (a page has a hundred)."""
        if self.wall_clock_ms is None:
            return "—"
        if self.run_start_ms is None:
            return self.absolute
        return durations.offset_text(timedelta(milliseconds=self.wall_clock_ms - self.run_start_ms))


def _fields(gist: Any) -> dict[str, Any]:
    """The small object SQL picked out of the payload (jsonb may arrive as text)."""
    if isinstance(gist, str):
        gist = orjson.loads(gist)
    return gist if isinstance(gist, dict) else {}


def _gist(fields: Any, shown: tuple[str, ...] = ()) -> str:
    """'toolName: lookup · outcome: deny' from the payload's picked fields; `shown` keys are
    already on screen beside it."""
    fields = _fields(fields)
    parts = [f"{key}: {fields[key]}" for key in GIST_KEYS if key in fields and key not in shown]
    text = " · ".join(parts)
    return text if len(text) <= GIST_CHARS else text[: GIST_CHARS - 1] + "…"


# Only short scalar payload fields leave the database (footprint_payload_gist, migration 0002):
# a timeline page never ships whole payloads.
_TIMELINE_SQL = """
    SELECT e.seq, e.position, e.type, e.tool_call_id, e.wall_clock_ms,
           left(e.doc -> 'meta' ->> 'runtimeStageId', 200), footprint_payload_gist(e.doc, %(gist_keys)s)
    FROM ledger_runevent e
    WHERE e.run_id = %(run)s AND e.period = %(period)s AND e.seq > %(after)s
    ORDER BY e.seq LIMIT %(limit)s
"""
_EVENTS_OF_TYPES_SQL = """
    SELECT e.seq, e.position, e.type, e.tool_call_id, e.wall_clock_ms,
           left(e.doc -> 'meta' ->> 'runtimeStageId', 200), footprint_payload_gist(e.doc, %(gist_keys)s)
    FROM ledger_runevent e
    WHERE e.run_id = %(run)s AND e.period = %(period)s AND e.type = ANY(%(types)s) AND e.seq > %(after_seq)s
    ORDER BY e.seq LIMIT %(limit)s
"""


# The server's own records on a timeline page (`selectors.run_server_records_following`), by position.
_RECORDS_AT_SQL = """
    SELECT e.seq, e.position, e.type, e.tool_call_id, e.wall_clock_ms,
           left(e.doc -> 'meta' ->> 'runtimeStageId', 200), footprint_payload_gist(e.doc, %(gist_keys)s)
    FROM ledger_runevent e
    WHERE e.run_id = %(run)s AND e.period = %(period)s AND e.position = ANY(%(positions)s)
"""


def _timeline_rows(sql: str, params: dict[str, Any], run_start_ms: int | None = None) -> list[TimelineRow]:
    with connections[lagging_reads_alias()].cursor() as cur:
        cur.execute(sql, {**params, "gist_keys": list(GIST_KEYS)})
        return [
            TimelineRow(seq, position, type_, call, wall, stage, _gist(gist), run_start_ms)
            for seq, position, type_, call, wall, stage, gist in cur.fetchall()
        ]


def _start_ms(run: Run) -> int | None:
    return int(run.first_event_at.timestamp() * 1000) if run.first_event_at else None


def run_timeline_page(*, run: Run, after_seq: int = -1, limit: int = TIMELINE_PAGE) -> Page[TimelineRow]:
    """A page of events after `after_seq` in seq order (keyset on the run's seq index), with the
    server's own records placed after the event each follows in the chain, so the page lists every
    record the run's record count counts."""
    start = _start_ms(run)
    rows = _timeline_rows(
        _TIMELINE_SQL, {"run": run.pk, "period": run.period, "after": after_seq, "limit": limit + 1}, start
    )
    page = page_of(rows, order="seq", limit=limit)
    follows = selectors.run_server_records_following(run=run, after_seq=after_seq, upto_seq=page.next_after)
    if not follows:
        return page
    server = _timeline_rows(_RECORDS_AT_SQL, {"run": run.pk, "period": run.period, "positions": list(follows)}, start)
    keyed = [((row.seq if row.seq is not None else -1, 0, row.position), row) for row in page.items]
    keyed += [((follows[row.position], 1, row.position), row) for row in server]
    return Page([row for _, row in sorted(keyed, key=lambda pair: pair[0])], page.next_after)


def run_event_get(*, run: Run, position: int) -> RunEvent | None:
    """One stored record with its bytes, for the drawer. Server-authored records have no seq, so
    records are addressed by their place in the chain."""
    return RunEvent.objects.of_run(run).filter(position=position).first()


@dataclass
class RunHeader:
    duration: timedelta | None
    open_asks: int
    integrity: Any
    resumes: list[Run]
    resumed_by: list[Run]
    server_records: int  # of the run's records, those the server wrote (a person's decisions)


def run_header(*, run: Run) -> RunHeader:
    duration = run.last_event_at - run.first_event_at if run.first_event_at and run.last_event_at else None
    open_asks = Ask.objects.filter(project_id=run.project_id, run_id=run.run_id, status=Ask.Status.OPEN).count()
    links = run_resume_links(run=run)
    resumes = list(dict.fromkeys(link.run for link in links if not link.resumed_this))
    resumed_by = list(dict.fromkeys(link.run for link in links if link.resumed_this))
    server_records = run.chain_length - run.event_count
    return RunHeader(duration, open_asks, integrity_check_latest(run=run), resumes, resumed_by, server_records)


# Resumed turns link a run to one or two others; the bound keeps the header and a page of
# dispatches one short read whatever a project sends.
RESUME_LINKS_MAX = 50


@dataclass(frozen=True)
class ResumeLink:
    """Another run linked to this one by a resumed turn (spec §2.4): it finished the call
    `tool_call_id` that this run paused on (`resumed_this`), or began the call this run finished."""

    tool_call_id: str
    run: Run
    resumed_this: bool


def run_resume_links(*, run: Run, tool_call_ids: list[str] | None = None) -> list[ResumeLink]:
    """The runs of the run's project linked to it by a resume, earliest first, paired call by call
    by the refusal tracer's rule (`resumed_tool_calls`: same session, no guess); only for
    `tool_call_ids` when given."""
    # Read first, not as a subquery: PostgreSQL cannot estimate how few calls are unfinished
    # (end_seq < start_seq) and scanned every later run's calls for them (9 ms on 100,000 runs).
    paused_here = list(ToolCall.objects.unfinished().filter(run=run).values_list("tool_call_id", flat=True))
    resumed_here = resumed_tool_calls(ToolCall.objects.of_run(run)).filter(origin_run_id__isnull=False)
    resumed_later = resumed_tool_calls(
        ToolCall.objects.filter(run__project_id=run.project_id, run_id__gt=run.pk, tool_call_id__in=paused_here)
    ).filter(origin_run_id=run.pk)
    if tool_call_ids is not None:
        resumed_here = resumed_here.filter(tool_call_id__in=tool_call_ids)
        resumed_later = resumed_later.filter(tool_call_id__in=tool_call_ids)
    fields = ("tool_call_id", "other_run_id", "resumed_this")
    pairs = list(
        resumed_here.annotate(other_run_id=F("origin_run_id"), resumed_this=Value(False))
        .values_list(*fields)
        .union(
            resumed_later.annotate(other_run_id=F("run_id"), resumed_this=Value(True)).values_list(*fields), all=True
        )
        .order_by("other_run_id", "tool_call_id")[:RESUME_LINKS_MAX]
    )
    runs = Run.objects.only("run_id").in_bulk({other for _, other, _ in pairs})
    return [ResumeLink(call_id, runs[other], resumed_this) for call_id, other, resumed_this in pairs]


# --- tree -------------------------------------------------------------------------------------


@dataclass
class TreeNode:
    label: str
    depth: int
    events: int
    first_seq: int
    last_seq: int
    tool_calls: int = 0
    refusals: int = 0
    children: list["TreeNode"] = field(default_factory=list)


_TREE_SQL = """
WITH e AS (
    -- A refusal is its event's row in ledger_refusal: the projection's rules, as Run.refusal_count counts.
    SELECT ev.seq, ev.type, f.seq IS NOT NULL AS refused,
           COALESCE(ev.doc -> 'meta' -> 'compositionPath', '[]'::jsonb) AS comp,
           COALESCE(ev.doc -> 'meta' -> 'subflowPath', '[]'::jsonb) AS sub,
           COALESCE(ev.doc -> 'meta' ->> 'iterIndex', ev.doc -> 'payload' ->> 'iterIndex',
                    ev.doc -> 'payload' ->> 'iteration',
                    %(span_iterations)s::jsonb ->> (ev.doc -> 'meta' ->> 'spanId')) AS it
    FROM ledger_runevent ev LEFT JOIN ledger_refusal f ON f.run_id = ev.run_id AND f.seq = ev.seq
    WHERE ev.run_id = %(run)s AND ev.seq IS NOT NULL
), grouped AS (
    -- An event without an iteration number belongs to the last numbered one in its composition;
    -- an OTLP run's events belong to their spans' iterations, however the spans arrived.
    SELECT *, count(it) OVER (PARTITION BY comp ORDER BY seq) AS grp FROM e
), carried AS (
    SELECT *, CASE WHEN %(by_span)s THEN it ELSE first_value(it) OVER (PARTITION BY comp, grp ORDER BY seq) END
           AS iteration FROM grouped
)
SELECT comp, sub, iteration, count(*), min(seq), max(seq),
       count(*) FILTER (WHERE type = 'agentfootprint.stream.tool_start'),
       count(*) FILTER (WHERE refused)
FROM carried GROUP BY comp, sub, iteration ORDER BY min(seq)
"""


def run_tree(*, run: Run) -> list[TreeNode]:
    """Composition path → subflow path → iteration, each node with its event count and seq range.

    One pass over the run's events; the answer depends only on the stored chain, so it is cached
    under the chain's length (new events make a new key).
    """
    trace_id = _otlp_trace_id(run)
    by_span = trace_id is not None
    span_iterations = _span_iterations(run.project_id, trace_id) if trace_id is not None else {}
    key = f"run-tree:{run.pk}:{run.chain_length}:{len(span_iterations)}"
    cached = cache.get(key)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    with connections[lagging_reads_alias()].cursor() as cur:
        cur.execute(
            _TREE_SQL, {"run": run.pk, "span_iterations": orjson.dumps(span_iterations).decode(), "by_span": by_span}
        )
        rows = cur.fetchall()
    roots: dict[str, TreeNode] = {}
    subs: dict[tuple[str, str], TreeNode] = {}
    for comp, sub, iteration, count, first, last, tools, refusals in rows:
        comp_label = _path_label(comp, "run root")
        sub_label = _path_label(sub, "root flow")
        root = roots.setdefault(comp_label, TreeNode(comp_label, 0, 0, first, last))
        node = subs.get((comp_label, sub_label))
        if node is None:
            node = subs[(comp_label, sub_label)] = TreeNode(sub_label, 1, 0, first, last)
            root.children.append(node)
        outside = "outside the iterations" if by_span else "before the first iteration"
        leaf_label = f"iteration {iteration}" if iteration is not None else outside
        node.children.append(TreeNode(leaf_label, 2, count, first, last, tools, refusals))
        for parent in (root, node):
            parent.events += count
            parent.first_seq = min(parent.first_seq, first)
            parent.last_seq = max(parent.last_seq, last)
            parent.tool_calls += tools
            parent.refusals += refusals
    tree = list(roots.values())
    cache.set(key, tree, timeout=3600)
    return tree


def _otlp_trace_id(run: Run) -> str | None:
    """The trace a run fed over OTLP is (its run id is `otlp-<trace id>`), else None."""
    if run.source != Run.Source.OTLP or not run.run_id.startswith(OTLP_RUN_PREFIX):
        return None
    return run.run_id.removeprefix(OTLP_RUN_PREFIX)


def _span_iterations(project_id: int, trace_id: str) -> dict[str, int]:
    """The loop iteration of each of the trace's spans that lies in one (an `iteration:N` span
    itself, or the nearest such span above it), by span id. Parent links, not arrival order:
    exporters send each span as it ends, children before their parents."""
    spans = {
        span_id: (parent, iteration_number(name, {"iteration.number": number}))
        for span_id, parent, name, number in OtlpSpan.objects.filter(
            project_id=project_id, trace_id=trace_id
        ).values_list("span_id", "parent_span_id", "name", KeyTransform("iteration.number", "attributes"))
    }
    found: dict[str, int | None] = {}

    def iteration_of(span_id: str, depth: int = 0) -> int | None:
        if span_id not in found:
            parent, own = spans.get(span_id, ("", None))
            found[span_id] = None  # a cycle of parent links ends here
            if own is not None:
                found[span_id] = own
            elif parent and depth < MAX_SPAN_DEPTH:
                found[span_id] = iteration_of(parent, depth + 1)
        return found[span_id]

    return {span_id: number for span_id in spans if (number := iteration_of(span_id)) is not None}


MAX_SPAN_DEPTH = 256  # parent links followed up from a span


def _path_label(path: Any, empty: str) -> str:
    if isinstance(path, str):
        path = orjson.loads(path)
    if isinstance(path, list) and path:
        return " / ".join(str(part) for part in path)
    return empty


# --- tool call dispatches ---------------------------------------------------------------------


@dataclass
class DispatchStep:
    seq: int | None
    position: int
    run_id: str
    stage: str
    gist: str
    is_refusal: bool


@dataclass
class Dispatch:
    call: ToolCall
    steps: list[DispatchStep]
    asks: list[Ask]
    # What the result said it covered and did not (absent / coverage / semantic shapes).
    shapes: list[ResultShape] = field(default_factory=list)


def _stage_of(type_: str, moment: str | None) -> str:
    short = type_.removeprefix("agentfootprint.")
    if short == "middleware.decision":
        return f"{moment or 'middleware'} decision"
    return _STAGES.get(short, short)


_STAGES = {
    "permission.check": "permission",
    "permission.halt": "permission halt",
    "validation.args_invalid": "argument validation",
    "validation.args_repaired": "argument validation",
    "checkin.request": "check-in asked",
    "checkin.decision": "check-in decided",
    "pause.request": "ask (run paused)",
    "artifacts.resolved": "wants resolved",
    "artifacts.refused": "wants refused",
    "artifacts.presented": "artifact presented",
    "stream.tool_start": "execution started",
    "stream.tool_progress": "execution progress",
    "stream.tool_end": "execution ended",
    "tools.effect": "effect",
    "tools.result_refused": "result ceiling",
}


def run_dispatches(*, run: Run, after_id: int = 0, limit: int = DISPATCH_PAGE) -> Page[Dispatch]:
    """A page of the run's tool calls (in call order) with every step of their dispatch, in order,
    including the steps and asks of the run linked to it by a resume for that call
    (`run_resume_links`): never those of another run that merely reused the call id."""
    page = keyset_page(  # pk order is first-seen order
        ToolCall.objects.with_args_and_result().filter(run=run), order="pk", after=after_id, limit=limit
    )
    return page.map(lambda calls: _dispatches(run, calls))


def _dispatches(run: Run, calls: list[ToolCall]) -> list[Dispatch]:
    if not calls:
        return []
    ids = [call.tool_call_id for call in calls]
    links = run_resume_links(run=run, tool_call_ids=ids)
    # Steps naming the tool rather than the call (the permission gate, wants resolution, store
    # calls) are the call's when they fall between its start and end in this run.
    named = tool_named_steps(
        [
            CallWindow(run.pk, call.tool_call_id, call.tool_name, call.start_seq, call.end_seq)
            for call in calls
            if call.start_seq is not None and call.tool_name
        ]
    )
    owner_of = {position: call_id for call_id, found in named.items() for position in found}
    with connections[lagging_reads_alias()].cursor() as cur:
        # The run that began a call has the lower id, so its part of the dispatch comes first.
        cur.execute(
            """
            SELECT e.tool_call_id, e.run_id, e.seq, e.position, r.run_id, e.type,
                   e.doc -> 'payload' ->> 'moment', footprint_payload_gist(e.doc, %(gist_keys)s)
            FROM unnest(%(runs)s::bigint[], %(ids)s::text[]) AS linked(run_id, tool_call_id)
            JOIN ledger_runevent e ON e.run_id = linked.run_id AND e.tool_call_id = linked.tool_call_id
            JOIN ledger_run r ON r.id = e.run_id
            UNION ALL
            SELECT NULL, e.run_id, e.seq, e.position, r.run_id, e.type,
                   e.doc -> 'payload' ->> 'moment', footprint_payload_gist(e.doc, %(gist_keys)s)
            FROM ledger_runevent e JOIN ledger_run r ON r.id = e.run_id
            WHERE e.run_id = %(run)s AND e.position = ANY(%(named)s)
            ORDER BY 2, 4
            """,
            {
                "runs": [run.pk] * len(ids) + [link.run.pk for link in links],
                "ids": ids + [link.tool_call_id for link in links],
                "run": run.pk,
                "named": list(owner_of),
                "gist_keys": list(GIST_KEYS),
            },
        )
        steps: dict[str, list[DispatchStep]] = {call_id: [] for call_id in ids}
        for call_id, _, seq, position, run_id, type_, moment, gist in cur.fetchall():
            fields = _fields(gist)
            steps[call_id or owner_of[position]].append(
                DispatchStep(
                    seq,
                    position,
                    run_id,
                    _stage_of(type_, moment),
                    _gist(fields, shown=("toolName", "moment")),
                    _is_refusal(type_, fields),
                )
            )
    of_calls = Q(run_id=run.run_id, tool_call_id__in=ids)
    for link in links:
        of_calls |= Q(run_id=link.run.run_id, tool_call_id=link.tool_call_id)
    asks: dict[str, list[Ask]] = {}
    for ask in Ask.objects.filter(of_calls, project_id=run.project_id).defer("checkpoint", "pause_data").order_by("pk"):
        asks.setdefault(ask.tool_call_id, []).append(ask)
    shapes = result_shapes_of_calls(run=run, calls=calls)
    return [
        Dispatch(call, steps[call.tool_call_id], asks.get(call.tool_call_id, []), shapes.get(call.tool_call_id, []))
        for call in calls
    ]


def _is_refusal(type_: str, fields: dict[str, Any]) -> bool:
    """A step that said no: a deny or refused outcome, a declined decision, or a refusal event."""
    return (
        fields.get("outcome") in ("deny", "refused")
        or fields.get("approved") is False
        or type_.endswith(("_refused", ".refused", ".halt"))
    )


# --- verdicts, artifacts ----------------------------------------------------------------------

MOMENTS = ("input", "before-tool", "after-tool", "output")


@dataclass
class DiffLine:
    kind: str  # "add", "del", "same" or "hunk"
    text: str


@dataclass
class VerdictRow:
    decision: MiddlewareDecision
    diff: list[DiffLine]


def run_verdicts_page(*, run: Run, after_seq: int = -1) -> dict[str, Any]:
    """A page of the run's middleware decisions, grouped by moment in the spec's order (others
    after), each with a line diff of before/after where a recording supplied them, and of its
    permission verdicts; `next_after_seq` when more follow."""
    of_run: list[QuerySet[Any]] = [MiddlewareDecision.objects.of_run(run), PermissionVerdict.objects.of_run(run)]
    (decisions, verdicts), next_after_seq = keyset_pages(of_run, order="seq", after=after_seq, limit=TAB_LIMIT)
    grouped: dict[str, list[VerdictRow]] = {}
    for decision in decisions:
        grouped.setdefault(decision.moment, []).append(VerdictRow(decision, _diff(decision)))
    order = [m for m in MOMENTS if m in grouped] + sorted(m for m in grouped if m not in MOMENTS)
    return {
        "moments": [(moment, grouped[moment]) for moment in order],
        "verdicts": verdicts,
        "next_after_seq": next_after_seq,
    }


def _diff(decision: MiddlewareDecision) -> list[DiffLine]:
    if decision.before is None and decision.after is None:
        return []
    before = orjson.dumps(decision.before, option=orjson.OPT_INDENT_2).decode().splitlines()
    after = orjson.dumps(decision.after, option=orjson.OPT_INDENT_2).decode().splitlines()
    lines: list[DiffLine] = []
    for line in list(difflib.unified_diff(before, after, "before", "after", lineterm="", n=2))[2:]:
        kind = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "same")
        lines.append(DiffLine(kind, line))
    return lines


_ARTIFACT_EVENT_TYPES = tuple(
    f"agentfootprint.artifacts.{name}" for name in ("minted", "resolved", "expired", "refused", "presented")
)


@dataclass(frozen=True)
class StoredArtifact:
    artifact: Artifact
    result_of: str | None  # whose result it is, when it is a tool's (9.70 result kinds)


def _with_result_kinds(run: Run, artifacts: Sequence[Artifact]) -> list[StoredArtifact]:
    """Each artifact, and whose result it is when it is a tool's: placed by the call that minted it
    (its `stream.tool_end` result is the ticket naming this ref) under the tool's declared
    `resultKind` or the default `tool-result/<toolName>` (9.70); or of a tool's default kind."""
    origin_calls = {a.pk: getattr(a, "origin_call", None) for a in artifacts}  # annotated by the query
    calls = {
        call.tool_call_id: call
        for call in ToolCall.objects.with_args_and_result().filter(
            run=run, tool_call_id__in={c for c in origin_calls.values() if c}
        )
    }
    stored = []
    for artifact in artifacts:
        origin_call = origin_calls[artifact.pk]
        call = calls.get(origin_call) if origin_call else None
        default_tool = default_result_tool(artifact.kind)
        result = call.result if call is not None else None
        placed = isinstance(result, dict) and result.get("placed") is True and result.get("ref") == artifact.ref
        result_of = None
        if call is not None and placed:
            tool = call.tool_name or "(tool not named)"
            how = "its default result kind" if default_tool == call.tool_name else "the result kind the tool declares"
            result_of = f"the result of {tool} (call {call.tool_call_id}), placed under {how}"
        elif default_tool is not None:
            result_of = f"the default result kind of tool {default_tool}"
        stored.append(StoredArtifact(artifact, result_of))
    return stored


def run_artifact_activity(*, run: Run, after_seq: int = -1) -> dict[str, Any]:
    """A page of the run's artifact events (minted, resolved, expired, refused, presented), with
    `next_after_seq` when more follow, and the first stored artifacts whose origin is this run
    (`stored_more` when there are more: the project's artifact list filters by run)."""
    rows = _timeline_rows(
        _EVENTS_OF_TYPES_SQL,
        {
            "run": run.pk,
            "period": run.period,
            "types": list(_ARTIFACT_EVENT_TYPES),
            "limit": TAB_LIMIT + 1,
            "after_seq": after_seq,
        },
    )
    events = page_of(rows, order="seq", limit=TAB_LIMIT)
    # Only the first page of them: the artifact list, filtered by this run, pages the rest.
    stored = keyset_page(
        Artifact.objects.filter(store__project_id=run.project_id, origin_run_id=run.run_id)
        .defer("origin")
        .annotate(origin_call=KeyTextTransform("toolCallId", "origin")),
        order="created_at",
        limit=TAB_LIMIT,
    )
    return {
        "artifact_events": events.items,
        "next_after_seq": events.next_after,
        "stored_artifacts": _with_result_kinds(run, stored.items),
        "stored_more": stored.has_more,
    }


def run_refusals_page(*, run: Run, after_seq: int = -1) -> dict[str, Any]:
    """A page of the run's refusals in seq order; `next_after_seq` when more follow."""
    page = keyset_page(Refusal.objects.of_run(run), order="seq", after=after_seq, limit=TAB_LIMIT)
    return {"refusals": page.items, "next_after_seq": page.next_after}


def run_asks_page(*, run: Run, after_id: int = 0) -> dict[str, Any]:
    """A page of the run's asks in the order they were opened; `next_after` when more follow."""
    asks = Ask.objects.filter(project_id=run.project_id, run_id=run.run_id).defer("checkpoint", "pause_data")
    page = keyset_page(asks, order="pk", after=after_id, limit=TAB_LIMIT)
    return {"asks": page.items, "next_after": page.next_after}


def run_otlp_spans_page(*, run: Run, after_number: int = -1) -> dict[str, Any]:
    """For a run fed over OTLP: a page of its spans in the order received, each with the seqs of
    the events it was mapped to; `next_after` (a span number) when more follow."""
    trace_id = _otlp_trace_id(run)
    if trace_id is None:
        return {"spans": [], "next_after": None}
    spans = OtlpSpan.objects.filter(project_id=run.project_id, trace_id=trace_id).defer("protobuf", "stored_json")
    page = keyset_page(spans, order="span_number", after=after_number, limit=TAB_LIMIT)
    return {"spans": page.items, "next_after": page.next_after}
