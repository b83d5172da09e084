"""Reads behind the refusal tracer: every refusal of the user's projects, grouped, and each one
walked back through the tool dispatch that produced it.

Every selector scopes rows through `projects_for_user`: a refusal of another project is never
counted, listed or found.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict

import orjson
from django.contrib.auth.models import AnonymousUser, User
from django.db import connections
from django.db.models import BigIntegerField, Case, Count, F, Min, OuterRef, Q, QuerySet, Subquery, Value, When
from django.db.models.functions import Coalesce
from django_stubs_ext import WithAnnotations

from footprint_site.pagination import Page, keyset_page
from footprint_site.replicas import lagging_reads_alias
from ledger.exceptions import RefusalNotFound
from ledger.explorer.result_shapes import ResultShape, result_shapes_of_calls
from ledger.framework.canonical_notes import canonical_notes
from ledger.models import Ask, MiddlewareDecision, Refusal, Run, RunEvent, ToolCall
from tenancy.selectors import projects_for_user

REPEAT_OFFENCES_SHOWN = 20
# A refusal's place in time: its event's wall clock, or before every real one when it was sent
# without one. The same expression as the index refusal_by_time (migration 0029), so the list walks it.
REFUSAL_TIME = Coalesce(F("wall_clock_ms"), Value(-1))
NEXT_EVENTS_SHOWN = 5
DISPATCH_EVENTS_MAX = 200
SUMMARY_CHARS = 140
# Payload keys that say what an event was about, most telling first (for one-line summaries).
SUMMARY_KEYS = (
    "why",
    "refusalReason",
    "reason",
    "result",
    "content",
    "finalContent",
    "rationale",
    "note",
    "userPrompt",
    "contentSummary",
    "detail",
    "toolName",
    "outcome",
    "toolCallCount",
    "slot",
)


@dataclass(frozen=True)
class RefusalFilter:
    """The list filters; `since`/`until` bound the refusing event's wall clock (events sent without
    `meta.wallClockMs` fall outside any time range)."""

    project: str | None = None  # a slug among the user's projects
    category: str | None = None
    rule: str | None = None
    tool: str | None = None
    agent: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def _refusals_for(user: User | AnonymousUser, filters: RefusalFilter) -> QuerySet[Refusal]:
    refusals = Refusal.objects.filter(run__project__in=projects_for_user(user))
    if filters.project:
        refusals = refusals.filter(run__project__slug=filters.project)
    if filters.category:
        refusals = refusals.filter(category=filters.category)
    if filters.rule:
        refusals = refusals.filter(rule=filters.rule)
    if filters.tool:
        refusals = refusals.filter(tool_name=filters.tool)
    if filters.agent:
        refusals = refusals.filter(run__agent_id=filters.agent)
    if filters.since:
        refusals = refusals.filter(wall_clock_ms__gte=_ms(filters.since))
    if filters.until:
        refusals = refusals.filter(wall_clock_ms__lt=_ms(filters.until))
    return refusals


def refusal_list(
    *,
    user: User | AnonymousUser,
    filters: RefusalFilter = RefusalFilter(),
    cursor: str | None = None,
    limit: int = 50,
) -> Page[Refusal]:
    """A page of refusals of the user's projects in time order, newest first: by the refusing
    event's wall clock (those sent without one last), then newest stored first; keyset-paged on the
    index refusal_by_time. Ids alone are the order batches arrived in, not the order things happened."""
    refusals = _refusals_for(user, filters).select_related("run__project").annotate(when_ms=REFUSAL_TIME)
    return keyset_page(refusals, order=("-when_ms", "-id"), cursor=cursor, limit=limit)


@dataclass
class RefusalGroups:
    """Counts of the filtered refusals, each list sorted by count (highest first)."""

    total: int = 0
    by_category: list[dict[str, Any]] = field(default_factory=list)
    by_rule: list[dict[str, Any]] = field(default_factory=list)
    by_tool: list[dict[str, Any]] = field(default_factory=list)
    by_agent: list[dict[str, Any]] = field(default_factory=list)


def _counts(refusals: QuerySet[Refusal], column: str, limit: int | None) -> list[dict[str, Any]]:
    rows = refusals.values(column).annotate(n=Count("id")).order_by("-n", column)
    return [{"value": row[column], "n": row["n"]} for row in (rows[:limit] if limit else rows)]


def refusal_groups(
    *, user: User | AnonymousUser, filters: RefusalFilter = RefusalFilter(), limit: int = 25
) -> RefusalGroups:
    """Refusal counts by category, rule, tool and the run's agent (one GROUP BY each); rule, tool
    and agent lists keep their `limit` largest groups. Categories are few and all shown, so their
    counts add up to `total`."""
    refusals = _refusals_for(user, filters)
    by_category = _counts(refusals, "category", None)
    return RefusalGroups(
        total=sum(row["n"] for row in by_category),
        by_category=by_category,
        by_rule=_counts(refusals, "rule", limit),
        by_tool=_counts(refusals, "tool_name", limit),
        by_agent=_counts(refusals, "run__agent_id", limit),
    )


def refusal_repeat_offences(
    *, user: User | AnonymousUser, filters: RefusalFilter = RefusalFilter(), limit: int = REPEAT_OFFENCES_SHOWN
) -> list[dict[str, Any]]:
    """The same (run, tool, rule) refused more than once within one run, most repeated first."""
    rows = (
        _refusals_for(user, filters)
        .values("run_id", "run__run_id", "run__project__slug", "tool_name", "rule")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .order_by("-n", "-run_id", "tool_name", "rule")
    )
    return [
        {
            "run_id": row["run__run_id"],
            "project_slug": row["run__project__slug"],
            "tool_name": row["tool_name"],
            "rule": row["rule"],
            "n": row["n"],
        }
        for row in rows[:limit]
    ]


# --- the chain walk ----------------------------------------------------------------------------


def json_text(value: Any) -> str:
    """A projected JSON value as JSON text, ready for the `pretty_json` filter."""
    return orjson.dumps(value).decode()


def _payload(event: RunEvent | None) -> dict[str, Any]:
    if event is None:
        return {}
    doc = event.doc if isinstance(event.doc, dict) else orjson.loads(event.body)
    payload = doc.get("payload") if isinstance(doc, dict) else None
    return payload if isinstance(payload, dict) else {}


def event_summary(event: RunEvent) -> str:
    """One line saying what an event was about: its most telling payload value, shortened."""
    payload = _payload(event)
    for key in SUMMARY_KEYS:
        value = payload.get(key)
        if value is None or value == "":
            continue
        text = value if isinstance(value, str) else json_text(value)
        text = " ".join(text.split())
        if len(text) > SUMMARY_CHARS:
            text = text[: SUMMARY_CHARS - 1] + "…"
        return f"{key}: {text}"
    return ""


@dataclass
class DispatchStep:
    event: RunEvent
    run_id: str
    is_refusal: bool


@dataclass
class RefusalChain:
    """Everything known about one refusal, from the tool call that met it to what came next."""

    refusal: Refusal
    run: Run
    event: RunEvent | None
    payload: dict[str, Any]
    tool_call: ToolCall | None
    # True when the refusing event named no tool call and the call was taken to be the one of the
    # same tool that was running at that seq (artifact and credential refusals carry no id).
    tool_call_inferred: bool
    # The run the call started in, when the refusal comes from a resumed run (a new runId).
    origin_run: Run | None
    dispatch: list[DispatchStep]
    # (runId, decision): a resumed call has decisions in two runs.
    decisions: list[tuple[str, MiddlewareDecision]]
    ask: Ask | None
    model_read: str | None
    model_read_source: str | None
    artifact_detail: str | None
    next_events: list[tuple[RunEvent, str]]
    # What the call's result said it covered and did not: often the context of a wrong answer.
    result_shapes: list[ResultShape] = field(default_factory=list)
    # A validation refusal's issues; an integrity refusal's run accounting of its checkers.
    validation_issues: list[dict[str, Any]] = field(default_factory=list)
    dispositions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def coverage_heading(self) -> str:
        return canonical_notes().coverage_heading

    @property
    def args_json(self) -> str | None:
        call = self.tool_call
        return json_text(call.args) if call is not None and call.args is not None else None

    @property
    def result_json(self) -> str | None:
        call = self.tool_call
        return json_text(call.result) if call is not None and call.result is not None else None


def _refusal_get_for_user(user: User | AnonymousUser, refusal_id: int) -> Refusal:
    refusal = (
        Refusal.objects.select_related("run__project")
        .filter(pk=refusal_id, run__project__in=projects_for_user(user))
        .first()
    )
    if refusal is None:
        raise RefusalNotFound("No such refusal.")
    return refusal


def _tool_call_of(refusal: Refusal, run: Run) -> tuple[ToolCall | None, bool]:
    if refusal.tool_call_id:
        return ToolCall.objects.with_args_and_result().filter(run=run, tool_call_id=refusal.tool_call_id).first(), False
    if not refusal.tool_name:
        return None, False
    running = (
        ToolCall.objects.with_args_and_result()
        .filter(run=run, tool_name=refusal.tool_name, start_seq__lte=refusal.seq)
        .filter(Q(end_seq__isnull=True) | Q(end_seq__gte=refusal.seq))
        .order_by("-start_seq")
        .first()
    )
    return running, running is not None


class ResumeOrigin(TypedDict):
    """What `resumed_tool_calls` adds to each call."""

    origin_run_id: int | None


# Quoted: WithAnnotations takes a TypedDict only for the type checker, and fails at import time.
def resumed_tool_calls(calls: QuerySet[ToolCall]) -> "QuerySet[WithAnnotations[ToolCall, ResumeOrigin]]":
    """The calls among `calls` that a resumed run finished, each annotated with `origin_run_id`:
    the earlier run of the project that began it, or None. A resumed run reports under a new
    runId, so its tool call has an end but no start of its own, and the run that began it left
    the call unfinished.

    Ids like 'c1' repeat across sessions: the resumed run's own session decides when it has one;
    without one, a call id that several earlier runs left unfinished names no origin rather than a
    guess. An annotation rather than a lookup per call, so the run page can pair a run's calls
    with other runs' in one query. An origin is always in the call's own project; scoping `calls`
    to a user is the caller's part.
    """
    starts = ToolCall.objects.unfinished().filter(
        run__project_id=OuterRef("run__project_id"),
        run_id__lt=OuterRef("run_id"),
        tool_call_id=OuterRef("tool_call_id"),
    )
    latest_of_session = (
        starts.filter(run__session_id=OuterRef("run__session_id")).order_by("-run_id").values("run_id")[:1]
    )
    only_start = (
        starts.values("tool_call_id")
        .annotate(n=Count("pk"), only_run_id=Min("run_id"))
        .filter(n=1)
        .values("only_run_id")
    )
    has_session = Q(run__session_id__isnull=False) & ~Q(run__session_id="")
    return calls.filter(start_seq__isnull=True, end_seq__isnull=False).annotate(
        origin_run_id=Case(
            When(has_session, then=Subquery(latest_of_session)),
            default=Subquery(only_start),
            output_field=BigIntegerField(),
        )
    )


def _origin_of(call: ToolCall) -> ToolCall | None:
    """The unfinished start of this resumed call in the run that began it (`resumed_tool_calls`)."""
    origin_run_id = resumed_tool_calls(ToolCall.objects.filter(pk=call.pk)).values("origin_run_id")
    return (
        ToolCall.objects.with_args_and_result()
        .filter(run_id=Subquery(origin_run_id), tool_call_id=call.tool_call_id)
        .select_related("run__project")
        .first()
    )


# A string-shape issue's `value` is an excerpt of at most 80 characters (and "…"); a longer one
# did not come from the framework and is cut for the page.
ISSUE_VALUE_CHARS = 81
DISPOSITION_EVENT = "agentfootprint.integrity.disposition"


def validation_issues(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The issues of a `validation.args_invalid` payload as rows: path, expected, got, and for
    string-shape issues (9.64: pattern, minLength, maxLength) `value` and `hint`."""
    issues = payload.get("issues")
    rows = []
    for issue in issues if isinstance(issues, list) else []:
        if not isinstance(issue, dict):
            continue
        value = issue.get("value")
        if isinstance(value, str) and len(value) > ISSUE_VALUE_CHARS:
            value = value[: ISSUE_VALUE_CHARS - 1] + "…"
        path = issue.get("path")
        rows.append(
            {
                "path": ".".join(map(str, path)) if isinstance(path, list) else (path or "(root)"),
                "expected": issue.get("expected"),
                "got": issue.get("got"),
                "value": json_text(value) if isinstance(value, str) else None,
                "hint": issue.get("hint") if isinstance(issue.get("hint"), str) else None,
            }
        )
    return rows


def run_dispositions(run: Run) -> list[dict[str, Any]]:
    """The rows of the run's last checker accounting (`integrity.disposition`: one row per check
    and seam; five from 9.63, with `unsupported-argument` at the choice seam)."""
    event = RunEvent.objects.of_run(run).filter(type=DISPOSITION_EVENT).order_by("-position").first()
    rows = _payload(event).get("rows")
    return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []


PERMISSION_EVENTS = ("agentfootprint.permission.check", "agentfootprint.permission.halt")
# Dispatch steps whose payload names the call's tool (`tool`), not the call (spec §1.8 steps 8-11).
TOOL_NAMED_EVENTS = (
    "agentfootprint.artifacts.resolved",
    "agentfootprint.artifacts.refused",
    "agentfootprint.artifacts.minted",
    "agentfootprint.artifacts.expired",
    "agentfootprint.credential.failed",
)


@dataclass(frozen=True)
class CallWindow:
    """Where a call's steps that name its tool, not the call, may be: after its start, before its end."""

    run_pk: int
    tool_call_id: str
    tool_name: str
    start_seq: int
    end_seq: int | None


_TOOL_NAMED_STEPS_SQL = """
SELECT w.tool_call_id, e.position
FROM unnest(%(runs)s::bigint[], %(calls)s::text[], %(tools)s::text[], %(starts)s::int[], %(ends)s::int[])
    AS w(run_id, tool_call_id, tool_name, start_seq, end_seq)
JOIN LATERAL (
    -- The permission gate names the tool as `target`: the first check, and halt, of that tool.
    (SELECT p.position, p.seq FROM ledger_runevent p WHERE p.run_id = w.run_id AND p.type = %(check)s
       AND p.seq > w.start_seq AND (w.end_seq IS NULL OR p.seq < w.end_seq)
       AND p.doc -> 'payload' ->> 'target' = w.tool_name ORDER BY p.seq LIMIT 1)
    UNION ALL
    (SELECT p.position, p.seq FROM ledger_runevent p WHERE p.run_id = w.run_id AND p.type = %(halt)s
       AND p.seq > w.start_seq AND (w.end_seq IS NULL OR p.seq < w.end_seq)
       AND p.doc -> 'payload' ->> 'target' = w.tool_name ORDER BY p.seq LIMIT 1)
    UNION ALL
    -- Wants resolution, the tool's own store calls and credentials name it as `tool`: all of them.
    SELECT a.position, a.seq FROM ledger_runevent a WHERE a.run_id = w.run_id AND a.type = ANY(%(named)s)
       AND a.seq > w.start_seq AND (w.end_seq IS NULL OR a.seq < w.end_seq)
       AND a.doc -> 'payload' ->> 'tool' = w.tool_name
) AS e ON true
"""


def tool_named_steps(windows: list[CallWindow]) -> dict[str, list[int]]:
    """The positions, in each window's run, of the events of the call's dispatch that name its tool
    rather than the call (spec §1.8), by call id: they are the call's when they fall between its
    start and its end."""
    if not windows:
        return {}
    with connections[lagging_reads_alias()].cursor() as cur:
        cur.execute(
            _TOOL_NAMED_STEPS_SQL,
            {
                "runs": [w.run_pk for w in windows],
                "calls": [w.tool_call_id for w in windows],
                "tools": [w.tool_name for w in windows],
                "starts": [w.start_seq for w in windows],
                "ends": [w.end_seq for w in windows],
                "check": PERMISSION_EVENTS[0],
                "halt": PERMISSION_EVENTS[1],
                "named": list(TOOL_NAMED_EVENTS),
            },
        )
        found: dict[str, list[int]] = {}
        for call_id, position in cur.fetchall():
            found.setdefault(call_id, []).append(position)
    return found


def _model_read(refusal: Refusal, payload: dict[str, Any], call: ToolCall | None) -> tuple[str | None, str | None]:
    if refusal.category == Refusal.Category.MIDDLEWARE and isinstance(payload.get("why"), str):
        return payload["why"], "the middleware's why (the model reads it as the tool result)"
    if refusal.category == Refusal.Category.EFFECT and isinstance(payload.get("refusalReason"), str):
        return payload["refusalReason"], "the effect's refusalReason"
    if call is not None and call.result is not None:
        text = call.result if isinstance(call.result, str) else json_text(call.result)
        return text, "the result of the tool call (stream.tool_end)"
    return None, None


def refusal_chain(*, user: User | AnonymousUser, refusal_id: int) -> RefusalChain:
    """The refusal and its cause: the refusing event, the tool call and its dispatch in order, the
    middleware decisions, the person who decided, what the model read, and the next events.

    Raises RefusalNotFound unless the refusal belongs to one of the user's projects.
    """
    refusal = _refusal_get_for_user(user, refusal_id)
    run = refusal.run
    event = RunEvent.objects.of_run(run).filter(seq=refusal.seq).first()
    payload = _payload(event)
    call, inferred = _tool_call_of(refusal, run)
    origin = _origin_of(call) if call is not None and call.start_seq is None else None
    origin_run = origin.run if origin is not None else None
    if origin is not None and call is not None:
        # The resumed run only ended the call: the name and arguments are in the run that began it.
        call.tool_name = call.tool_name or origin.tool_name
        if call.args is None:
            call.args = origin.args

    dispatch: list[DispatchStep] = []
    decisions: list[tuple[str, MiddlewareDecision]] = []
    ask: Ask | None = None
    if call is not None:
        runs = [run] + ([origin_run] if origin_run is not None else [])
        run_ids = {r.pk: r.run_id for r in runs}
        of_call = Q(run__in=runs, tool_call_id=call.tool_call_id)
        if event is not None:
            of_call |= Q(pk=event.pk)  # an inferred call: the refusing event names no call id
        began = origin if origin is not None else call
        if began.start_seq is not None and call.tool_name:
            window = CallWindow(
                (origin_run or run).pk,
                call.tool_call_id,
                call.tool_name,
                began.start_seq,
                None if origin is not None else call.end_seq,
            )
            of_call |= Q(run_id=window.run_pk, position__in=tool_named_steps([window]).get(call.tool_call_id, []))
        # The run that began the call has the lower id, so its part of the dispatch comes first.
        steps = (
            RunEvent.objects.filter(of_call)
            .order_by("run_id", "position")
            .only("run_id", "seq", "position", "type", "tool_call_id", "wall_clock_ms", "body")
        )
        dispatch = [
            DispatchStep(step, run_ids[step.run_id], step.run_id == run.pk and step.seq == refusal.seq)
            for step in steps[:DISPATCH_EVENTS_MAX]
        ]
        decisions = [
            (run_ids[decision.run_id], decision)
            for decision in MiddlewareDecision.objects.filter(run__in=runs, tool_call_id=call.tool_call_id).order_by(
                "run_id", "seq"
            )
        ]
        ask = (
            Ask.objects.filter(project_id=run.project_id, run_id__in=run_ids.values(), tool_call_id=call.tool_call_id)
            .defer("checkpoint", "pause_data")
            .order_by("-id")
            .first()
        )
    elif event is not None:
        dispatch = [DispatchStep(event, run.run_id, True)]

    model_read, model_read_source = _model_read(refusal, payload, call)
    detail = payload.get("detail")
    next_events = RunEvent.objects.of_run(run).filter(seq__gt=refusal.seq).order_by("seq")[:NEXT_EVENTS_SHOWN]
    return RefusalChain(
        refusal=refusal,
        run=run,
        event=event,
        payload=payload,
        tool_call=call,
        tool_call_inferred=inferred,
        origin_run=origin_run,
        dispatch=dispatch,
        decisions=decisions,
        ask=ask,
        model_read=model_read,
        model_read_source=model_read_source,
        artifact_detail=detail if refusal.category == Refusal.Category.ARTIFACT and isinstance(detail, str) else None,
        next_events=[(e, event_summary(e)) for e in next_events],
        result_shapes=(result_shapes_of_calls(run=run, calls=[call]).get(call.tool_call_id, []) if call else []),
        validation_issues=validation_issues(payload) if refusal.category == Refusal.Category.VALIDATION else [],
        dispositions=run_dispositions(run) if refusal.category == Refusal.Category.INTEGRITY else [],
    )
