"""The waterfall's span index: a run's events paired into timed spans and marks, built by the worker.

A span is the stretch between two of the run's events (a turn's start and end, an LLM call's, a
tool call's, a pause and its resume); a mark is one event placed where it happened (a dispatch
step, a refusal, an artifact minted or resolved). Spans go to `RunSpan`, one lane per kind and
one per subflow, and the widest view of them to `RunSpanOverview`, so a page never reads a run's
events to draw it.

A changed run's spans are rebuilt whole from its chain: pairing a start with its end needs the
events before it, and rebuilding keeps the index a pure function of the chain (derived data,
dropped and rebuilt at will).
"""

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from django.db import connection, transaction

from footprint_site.lib.db import session_connection
from ledger.models import Run, RunSpan

Kind = RunSpan.Kind

LANE_TURNS, LANE_ITERATIONS, LANE_LLM, LANE_TOOLS, LANE_STEPS, LANE_WAITS, LANE_REFUSALS, LANE_ARTIFACTS = range(8)
FIXED_LANES = {
    LANE_TURNS: "turns",
    LANE_ITERATIONS: "iterations",
    LANE_LLM: "LLM calls",
    LANE_TOOLS: "tool calls",
    LANE_STEPS: "dispatch steps",
    LANE_WAITS: "a person's waits",
    LANE_REFUSALS: "refusals",
    LANE_ARTIFACTS: "artifacts",
}
FIRST_SUBFLOW_LANE = len(FIXED_LANES)
# Subflows beyond this many share the last subflow lane, so a run cannot grow the chart without end.
SUBFLOW_LANES = 12
# A Parallel composition's branches each get a lane after the subflows', as many, the same way.
FIRST_BRANCH_LANE = FIRST_SUBFLOW_LANE + SUBFLOW_LANES
BRANCH_LANES = 12
# Time buckets per lane at the widest zoom (the overview): enough to show where a run was busy on
# a wide screen, few enough that a dense lane stays a few kilobytes.
OVERVIEW_BUCKETS = 120

# The zoom levels' grids (RunSpanCell): level L has OVERVIEW_BUCKETS * CELL_SPLIT^L cells. A lane
# of more than OVERVIEW_BUCKETS spans gets levels while they have no more cells than it has spans
# (a narrower window holds about OVERVIEW_BUCKETS * CELL_SPLIT of its spans at most, few enough to
# count), and never more than MAX_CELL_LEVEL.
CELL_SPLIT = 4
MAX_CELL_LEVEL = 8

READ_RECORDS = 20_000  # events read per query while building
RUNS_PER_PASS = 200
ADVISORY_LOCK = "footprint.span-index"

# Short payload fields that name a span (read through footprint_payload_gist, migration 0002).
LABEL_KEYS = [
    "toolName", "toolCallId", "model", "middleware", "moment", "outcome", "ref", "kind", "approved", "result",
    "parentId", "branchId", "id",
]  # fmt: skip
# Outcomes of a dispatch step that stopped or changed the call: marked like a refusal.
REFUSING_OUTCOMES = {"deny", "denied", "block", "blocked", "halt", "reject", "rejected", "refused"}
PAIRED = {
    "agent.turn_start": ("turn", Kind.TURN, LANE_TURNS, True),
    "agent.turn_end": ("turn", Kind.TURN, LANE_TURNS, False),
    "agent.iteration_start": ("iteration", Kind.ITERATION, LANE_ITERATIONS, True),
    "agent.iteration_end": ("iteration", Kind.ITERATION, LANE_ITERATIONS, False),
    "stream.llm_start": ("llm", Kind.LLM, LANE_LLM, True),
    "stream.llm_end": ("llm", Kind.LLM, LANE_LLM, False),
    "pause.request": ("wait", Kind.ASK_WAIT, LANE_WAITS, True),
    "pause.resume": ("wait", Kind.ASK_WAIT, LANE_WAITS, False),
}

_EVENTS_SQL = """
    SELECT e.position, e.seq, e.type, e.tool_call_id, e.wall_clock_ms,
           left(e.doc -> 'meta' -> 'subflowPath' ->> 0, 100), footprint_payload_gist(e.doc, %(keys)s),
           e.doc -> 'meta' -> 'compositionPath',
           CASE WHEN e.type = 'agentfootprint.composition.fork_start' THEN e.doc -> 'payload' -> 'branches' END
    FROM ledger_runevent e
    WHERE e.run_id = %(run)s AND e.period = %(period)s AND e.position >= %(after)s AND e.position < %(stop)s
    ORDER BY e.position LIMIT %(limit)s
"""
_COPY_CELLS = "COPY ledger_runspancell (run_id, lane, level, cell, spans, refused) FROM STDIN"
_COPY_SPANS = (
    "COPY ledger_runspan (run_id, period, lane, kind, start_ms, end_ms, first_seq, last_seq, position, label,"
    " refused)"
    " FROM STDIN"
)


@dataclass
class _Open:
    start_ms: int
    seq: int | None
    position: int
    label: str


@dataclass
class BuiltSpans:
    rows: list[tuple[int, str, int, int, int | None, int | None, int, str, bool]]
    lanes: dict[int, str]
    duration_ms: int


def _events(run_pk: int, period: int, stop: int) -> Iterator[tuple[Any, ...]]:
    after = 0
    while after < stop:
        with connection.cursor() as cur:
            params: dict[str, Any] = {
                "run": run_pk,
                "period": period,
                "after": after,
                "stop": stop,
                "limit": READ_RECORDS,
            }
            params["keys"] = LABEL_KEYS
            cur.execute(_EVENTS_SQL, params)
            rows = cur.fetchall()
        if not rows:
            return
        yield from rows
        after = rows[-1][0] + 1


def _fields(gist: Any) -> dict[str, Any]:
    if isinstance(gist, str):
        gist = orjson.loads(gist)
    return gist if isinstance(gist, dict) else {}


def branch_of(composition_path: Any) -> tuple[str, str] | None:
    """(parallel id, branch) of an event inside a Parallel composition's branch: the element after
    the innermost `Parallel:<id>` of its compositionPath, by the id after its kind ("Agent:a" → "a")."""
    if not isinstance(composition_path, list):
        return None
    for index in range(len(composition_path) - 2, -1, -1):
        element = composition_path[index]
        if isinstance(element, str) and element.startswith("Parallel:"):
            branch = composition_path[index + 1]
            if isinstance(branch, str):
                return element.removeprefix("Parallel:"), branch.split(":", 1)[-1]
            return None
    return None


def _step_refused(fields: dict[str, Any]) -> bool:
    outcome = fields.get("outcome") or fields.get("result")
    return (isinstance(outcome, str) and outcome.lower() in REFUSING_OUTCOMES) or fields.get("approved") is False


def spans_from_events(events: Iterator[tuple[Any, ...]], refusals: dict[int, str]) -> BuiltSpans:
    """Pair a run's events (in chain order) into spans and marks. `refusals` maps a refused
    event's seq to its label. Times are milliseconds from the run's first timed event; an event
    without a time (a server record) takes the time of the one before it."""
    rows: list[tuple[int, str, int, int, int | None, int | None, int, str, bool]] = []
    lanes = dict(FIXED_LANES)
    subflow_lanes: dict[str, int] = {}
    open_pairs: dict[str, list[_Open]] = {}
    open_tools: dict[str, _Open] = {}
    subflow: tuple[str, _Open, int | None] | None = None  # name, opened, last seq
    branch_lanes: dict[tuple[str, str], int] = {}
    branch_names: dict[tuple[str, str], str] = {}  # from fork_start's branch list, when it came
    # (parallel, branch) → opened, the seq and time of its last event so far
    open_branches: dict[tuple[str, str], tuple[_Open, int | None, int]] = {}
    origin: int | None = None
    now = 0
    last: tuple[int | None, int] = (None, 0)

    def close(lane: int, kind: str, opened: _Open, seq: int | None, refused: bool = False) -> None:
        rows.append((lane, kind, opened.start_ms, max(now, opened.start_ms), opened.seq, seq, opened.position,
                     opened.label, refused))  # fmt: skip

    def lane_of(given: dict[Any, int], key: Any, first: int, count: int, label: str, overflow: str) -> int:
        """The lane given to `key`, giving it the next of `count` lanes from `first` (the last one
        shared by every key past the others: `overflow`)."""
        if key not in given:
            shared = len(given) >= count - 1
            given[key] = first + (count - 1 if shared else len(given))
            lanes[given[key]] = overflow if shared else label
        return given[key]

    def branch_lane(key: tuple[str, str]) -> int:
        if key in branch_lanes:
            return branch_lanes[key]
        label = f"branch {branch_names.get(key, key[1])} of {key[0]}"
        return lane_of(branch_lanes, key, FIRST_BRANCH_LANE, BRANCH_LANES, label, "other branches")

    def close_branch(key: tuple[str, str], seq: int | None = None) -> None:
        """The branch's span ends at its last event, or at the event that completes it."""
        opened, last_seq, last_ms = open_branches.pop(key)
        end = now if seq is not None else last_ms
        rows.append((branch_lane(key), Kind.BRANCH, opened.start_ms, max(end, opened.start_ms), opened.seq,
                     seq if seq is not None else last_seq, opened.position, opened.label, False))  # fmt: skip

    def mark(lane: int, kind: str, seq: int | None, position: int, label: str, refused: bool = False) -> None:
        rows.append((lane, kind, now, now, seq, seq, position, label, refused))

    def subflow_lane(name: str) -> int:
        return lane_of(subflow_lanes, name, FIRST_SUBFLOW_LANE, SUBFLOW_LANES, f"subflow {name}", "other subflows")

    for position, seq, event_type, tool_call_id, wall_clock_ms, subflow_name, gist, composition, forked in events:
        if wall_clock_ms is not None:
            origin = wall_clock_ms if origin is None else origin
            now = max(now, wall_clock_ms - origin)
        last = (seq, position)
        short = event_type.removeprefix("agentfootprint.")
        fields = _fields(gist)
        # Parallel branches: each branch's events, however they interleave with the others', are
        # one span on the branch's lane, from its first event to its completion or its last event.
        # Most events are in no Parallel composition: their path (JSON text) is not parsed at all.
        if isinstance(composition, str):
            composition = orjson.loads(composition) if "Parallel:" in composition else None
        branch = branch_of(composition)
        forked = orjson.loads(forked) if isinstance(forked, str) else forked
        if isinstance(forked, list):  # a fork_start's branches: their names, for their lanes
            for entry in forked:
                if isinstance(entry, dict) and entry.get("id") is not None:
                    name = entry.get("name") or entry["id"]
                    branch_names[(str(fields.get("parentId")), str(entry["id"]))] = str(name)
        if branch is not None:
            if branch in open_branches:
                opened_branch = open_branches[branch][0]
            else:
                label = f"branch {branch_names.get(branch, branch[1])}"
                opened_branch = _Open(now, seq, position, label)
            open_branches[branch] = (opened_branch, seq, now)
        if short == "composition.branch_complete":
            done = (str(fields.get("parentId")), str(fields.get("branchId")))
            if done in open_branches:
                close_branch(done, seq)
        elif short in ("composition.merge_end", "composition.exit"):
            parent = str(fields.get("parentId") if short == "composition.merge_end" else fields.get("id"))
            for key in [key for key in open_branches if key[0] == parent]:
                close_branch(key)
        # Subflows: consecutive events in one subflow are one span on its lane.
        if subflow is not None and subflow[0] != subflow_name:
            close(subflow_lane(subflow[0]), Kind.SUBFLOW, subflow[1], subflow[2])
            subflow = None
        if subflow_name:
            opened = subflow[1] if subflow is not None else _Open(now, seq, position, f"subflow {subflow_name}")
            subflow = (subflow_name, opened, seq)
        if short in PAIRED:
            pair, kind, lane, starts = PAIRED[short]
            # Paired within their branch: two branches' LLM calls at once each end their own.
            opened_in = f"{pair} {branch}" if branch is not None else pair
            if starts:
                names = {"llm": f"LLM call {fields.get('model') or ''}".strip(), "wait": "waiting for a person"}
                opened = _Open(now, seq, position, names.get(pair, str(kind.label)))
                open_pairs.setdefault(opened_in, []).append(opened)
            elif open_pairs.get(opened_in):
                close(lane, kind, open_pairs[opened_in].pop(), seq)
        elif short == "stream.tool_start":
            call = tool_call_id or str(fields.get("toolCallId") or position)
            name = fields.get("toolName") or "tool"
            open_tools[call] = _Open(now, seq, position, f"{name} ({call})")
        elif short == "stream.tool_end":
            call = tool_call_id or str(fields.get("toolCallId") or "")
            if call in open_tools:
                close(LANE_TOOLS, Kind.TOOL, open_tools.pop(call), seq)
        elif short.startswith("artifacts."):
            label = f"artifact {short.removeprefix('artifacts.')} {fields.get('ref') or ''}".strip()
            mark(LANE_ARTIFACTS, Kind.ARTIFACT, seq, position, label, refused=short == "artifacts.refused")
        elif tool_call_id is not None:
            who = fields.get("middleware") or fields.get("toolName") or ""
            outcome = fields.get("outcome") or fields.get("result") or ""
            label = " ".join(str(part) for part in (short, who, outcome) if part)
            mark(LANE_STEPS, Kind.DISPATCH_STEP, seq, position, label, refused=_step_refused(fields))
        if seq is not None and seq in refusals:
            mark(LANE_REFUSALS, Kind.REFUSAL, seq, position, refusals[seq], refused=True)
    # What is still open ends where the run's record ends (a run still going, or one cut short).
    last_seq = last[0]
    if subflow is not None:
        close(subflow_lane(subflow[0]), Kind.SUBFLOW, subflow[1], subflow[2])
    for key in list(open_branches):
        close_branch(key)
    for opened_in, opened_list in open_pairs.items():
        pair = opened_in.split(" ", 1)[0]
        _, kind, lane, _ = next(spec for spec in PAIRED.values() if spec[0] == pair)
        for opened in opened_list:
            opened.label += " (not ended)"
            close(lane, kind, opened, last_seq)
    for opened in open_tools.values():
        opened.label += " (not ended)"
        close(LANE_TOOLS, Kind.TOOL, opened, last_seq)
    used = {row[0] for row in rows}
    return BuiltSpans(rows, {lane: label for lane, label in lanes.items() if lane in used}, now)


def overview_of(built: BuiltSpans) -> tuple[list[dict[str, Any]], dict[str, list[list[int]]]]:
    """The lanes with their span counts, longest span (a window's reads start that far before
    it) and levels of cells (RunSpanCell), and each lane's busy buckets at the widest zoom:
    [bucket, spans, refused, first start, last end, first span's position]."""
    counts: dict[int, int] = {}
    longest: dict[int, int] = {}
    buckets: dict[int, dict[int, list[int]]] = {}
    width = max(built.duration_ms, 1)
    for lane, _kind, start, end, _first, _last, position, _label, refused in built.rows:
        counts[lane] = counts.get(lane, 0) + 1
        longest[lane] = max(longest.get(lane, 0), end - start)
        bucket = min(OVERVIEW_BUCKETS - 1, start * OVERVIEW_BUCKETS // width)
        cell = buckets.setdefault(lane, {}).get(bucket)
        if cell is None:
            buckets[lane][bucket] = [bucket, 1, int(refused), start, end, position]
        else:
            cell[1] += 1
            cell[2] += int(refused)
            cell[4] = max(cell[4], end)
    lanes = [
        {
            "lane": lane, "label": built.lanes[lane], "spans": counts[lane], "longest": longest[lane],
            "levels": cell_levels(counts[lane]),
        }
        for lane in sorted(counts)
    ]  # fmt: skip
    return lanes, {str(lane): sorted(cells.values()) for lane, cells in buckets.items()}


def cell_levels(spans: int) -> int:
    """How many levels of cells a lane of this many spans gets (0: its windows count spans)."""
    if spans <= OVERVIEW_BUCKETS:
        return 0
    levels = 1
    while levels < MAX_CELL_LEVEL and OVERVIEW_BUCKETS * CELL_SPLIT**levels <= spans:
        levels += 1
    return levels


def cell_of(start_ms: int, duration_ms: int, level: int) -> int:
    """The cell of level `level` that a span starting at `start_ms` counts in (level 0 is the
    overview's buckets)."""
    cells = OVERVIEW_BUCKETS * CELL_SPLIT**level
    return min(cells - 1, start_ms * cells // max(duration_ms, 1))


def cells_of(built: BuiltSpans, lanes: list[dict[str, Any]]) -> Iterator[tuple[int, int, int, int, int]]:
    """(lane, level, cell, spans, refused) of every busy cell of the lanes given levels."""
    levels = {entry["lane"]: entry["levels"] for entry in lanes if entry["levels"]}
    counted: dict[tuple[int, int, int], list[int]] = {}
    for lane, _kind, start, _end, _first, _last, _position, _label, refused in built.rows:
        count = levels.get(lane, 0)
        if not count:
            continue
        # A level's cell is the finest level's divided by CELL_SPLIT per level between them
        # (floors nest), so each span's cell is computed once.
        finest = cell_of(start, built.duration_ms, count - 1)
        for level in range(count):
            tally = counted.setdefault((lane, level, finest // CELL_SPLIT ** (count - 1 - level)), [0, 0])
            tally[0] += 1
            tally[1] += int(refused)
    for (lane, level, cell), (spans, refusals) in counted.items():
        yield lane, level, cell, spans, refusals


def run_spans_build(*, run_pk: int) -> int:
    """Rebuild one run's spans and overview from its chain as it stands, in one transaction, and
    mark the run indexed up to its chain length; returns the number of spans written.

    The run's row is locked first (FOR UPDATE, the order ingestion takes it in), so the chain
    read is the chain the mark records and a concurrent rebuild of the same run waits for this one.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().only("id", "chain_length", "spans_indexed", "period").get(pk=run_pk)
        length = run.chain_length
        with connection.cursor() as cur:
            cur.execute(
                "SELECT r.seq, r.category || coalesce(': ' || left(r.rule, 80), '') FROM ledger_refusal r"
                " WHERE r.run_id = %s AND r.period = %s",
                [run_pk, run.period],
            )
            refusals = dict(cur.fetchall())
        built = spans_from_events(_events(run_pk, run.period, length), refusals)
        lanes, buckets = overview_of(built)
        with connection.cursor() as cur:
            cur.execute("DELETE FROM ledger_runspan WHERE run_id = %s AND period = %s", [run_pk, run.period])
            cur.execute("DELETE FROM ledger_runspancell WHERE run_id = %s", [run_pk])
            with cur.copy(_COPY_SPANS) as copy:
                for row in built.rows:
                    copy.write_row((run_pk, run.period, *row))
            with cur.copy(_COPY_CELLS) as copy:
                for cell in cells_of(built, lanes):
                    copy.write_row((run_pk, *cell))
            cur.execute(
                "INSERT INTO ledger_runspanoverview (run_id, indexed_length, duration_ms, lanes, buckets, built_at)"
                " VALUES (%s, %s, %s, %s, %s, now()) ON CONFLICT (run_id) DO UPDATE SET"
                " indexed_length = EXCLUDED.indexed_length, duration_ms = EXCLUDED.duration_ms,"
                " lanes = EXCLUDED.lanes, buckets = EXCLUDED.buckets, built_at = now()",
                [run_pk, length, built.duration_ms, orjson.dumps(lanes).decode(), orjson.dumps(buckets).decode()],
            )
            cur.execute("UPDATE ledger_run SET spans_indexed = %s WHERE id = %s", [length, run_pk])
    return len(built.rows)


def run_spans_index_pending(*, budget_seconds: float = 20.0) -> int:
    """Rebuild the spans of every run whose chain grew since it was indexed, oldest run first,
    until the budget is spent; returns the number of runs rebuilt.

    One pass at a time (a session advisory lock): a pass finding it taken does nothing, so passes
    queued behind a slow one never rebuild the same run twice over.
    """
    with session_connection().cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [ADVISORY_LOCK])
        (locked,) = cur.fetchone()
    if not locked:
        return 0
    try:
        deadline = time.monotonic() + budget_seconds
        with connection.cursor() as cur:
            cur.execute(
                "SELECT id FROM ledger_run WHERE chain_length > spans_indexed ORDER BY id LIMIT %s", [RUNS_PER_PASS]
            )
            pending = [run_pk for (run_pk,) in cur.fetchall()]
        rebuilt = 0
        for run_pk in pending:
            if time.monotonic() >= deadline:
                break
            run_spans_build(run_pk=run_pk)
            rebuilt += 1
        return rebuilt
    finally:
        with session_connection().cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(hashtext(%s))", [ADVISORY_LOCK])
