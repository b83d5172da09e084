"""Reads behind the run waterfall: what one window of a run shows at its zoom, never the whole run.

A window is `[from_ms, to_ms]` in milliseconds from the run's first event. In it, a lane with few
spans is drawn span by span (each opens its event in the drawer); a lane with more is drawn as
time buckets of counts (each zooms into its stretch). The whole run at the widest zoom is read
from the run's overview row, so the first render of a 100,000-event run reads one row plus the
lanes that are short anyway; a narrower window reads one index range per lane.
"""

from dataclasses import dataclass, field
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from footprint_site.lib.durations import duration_ms_text
from footprint_site.replicas import lagging_reads_alias
from ledger.explorer import span_index
from ledger.models import Run, RunSpan, RunSpanOverview

# A lane with at most this many spans in the window is drawn span by span.
LANE_SPANS_SHOWN = 60
# A denser lane is drawn as this many buckets across the window (the overview's count).
WINDOW_BUCKETS = span_index.OVERVIEW_BUCKETS
# A run never indexed, or indexed and grown by at most this many records, is (re)built while the
# page waits (a few milliseconds); a longer backlog is the worker's, within its next pass.
BUILD_ON_PAGE_RECORDS = 20_000
# The chart's coordinates: x across the window in [0, WIDTH], LANE_HEIGHT per lane.
WIDTH = 1000
LANE_HEIGHT = 22
BAR_HEIGHT = 16
MIN_BAR = 2.0  # a mark, or a span too short to see, is still this wide
NARROWEST_WINDOW_MS = 4


@dataclass(slots=True)
class Bar:
    x: float
    width: float
    kind: str
    title: str
    refused: bool
    position: int | None = None  # a span: the record the drawer opens
    zoom: tuple[int, int] | None = None  # a bucket: the window it zooms into
    density: int = 0  # a bucket: 1 to 4, how many spans it holds against the lane's busiest

    @property
    def css(self) -> str:
        density = f" d{self.density}" if self.zoom else ""
        return f"bar k-{self.kind}{density}{' refused' if self.refused else ''}"


@dataclass
class Lane:
    number: int
    label: str
    spans: int  # in the window
    bars: list[Bar] = field(default_factory=list)
    y: int = 0
    bar_y: int = 0
    aggregated: bool = False


@dataclass
class Waterfall:
    run: Run
    from_ms: int
    to_ms: int
    duration_ms: int
    lanes: list[Lane]
    indexed_length: int
    chain_length: int

    @property
    def height(self) -> int:
        return max(1, len(self.lanes)) * LANE_HEIGHT

    @property
    def whole_run(self) -> bool:
        return self.from_ms <= 0 and self.to_ms >= self.duration_ms

    @property
    def behind(self) -> int:
        """Records stored after the index was built (shown within the worker's next pass)."""
        return max(0, self.chain_length - self.indexed_length)

    @property
    def ticks(self) -> list[str]:
        span = self.to_ms - self.from_ms
        return [duration_ms_text(self.from_ms + span * step / 4) for step in range(5)]

    def _window(self, start: float, end: float) -> tuple[int, int]:
        start = max(0.0, start)
        end = min(float(self.duration_ms), end)
        width = max(end - start, NARROWEST_WINDOW_MS)
        if start + width > self.duration_ms:
            start = max(0.0, self.duration_ms - width)
        return round(start), round(start + width)

    @property
    def zoom_in(self) -> tuple[int, int]:
        quarter = (self.to_ms - self.from_ms) / 4
        return self._window(self.from_ms + quarter, self.to_ms - quarter)

    @property
    def zoom_out(self) -> tuple[int, int]:
        """Twice as wide, the inverse of zoom_in where the run leaves room."""
        half = (self.to_ms - self.from_ms) / 2
        return self._window(self.from_ms - half, self.to_ms + half)

    @property
    def earlier(self) -> tuple[int, int]:
        width = self.to_ms - self.from_ms
        start = max(0, self.from_ms - width // 2)
        return start, start + width

    @property
    def later(self) -> tuple[int, int]:
        width = self.to_ms - self.from_ms
        end = min(self.duration_ms, self.to_ms + width // 2)
        return end - width, end

    @property
    def can_zoom_in(self) -> bool:
        return self.to_ms - self.from_ms > NARROWEST_WINDOW_MS


def _overview(run: Run, *, whole_run: bool) -> RunSpanOverview:
    """The run's overview, built now for a run never indexed or one a little behind. A window's
    read leaves its widest buckets unread (loaded if the window turns out to be the whole run)."""
    overviews = RunSpanOverview.objects.using(lagging_reads_alias())
    overview = (overviews if whole_run else overviews.defer("buckets")).filter(run_id=run.pk).first()
    behind = run.chain_length - (overview.indexed_length if overview else 0)
    if overview is None or 0 < behind <= BUILD_ON_PAGE_RECORDS:
        # A derived index written on a read: the spans are a pure function of the chain, so
        # building them here is a cache fill, and the worker would write the same rows.
        span_index.run_spans_build(run_pk=run.pk)
        # Read back where it was written: a page read from the replica would not see it yet.
        overview = RunSpanOverview.objects.using(DEFAULT_DB_ALIAS).get(run_id=run.pk)
    return overview


# Each lane is read from `low` (the window's start less the lane's longest span) to the window's
# end: one range of the (run, lane, start_ms) index per lane, however far into a long run the
# window lies. The lanes are joined LATERAL so the planner walks that range lane by lane; joined
# plainly, it estimated the lanes' union as most of the run and scanned the run's spans whole.
_LANES = "unnest(%(lanes)s::int[], %(lows)s::bigint[]) AS w(lane, low)"
_IN_WINDOW = (
    "s.run_id = %(run)s AND s.period = %(period)s AND s.lane = w.lane AND s.start_ms >= w.low"
    " AND s.start_ms <= %(to)s AND s.end_ms >= %(from)s"
)
# How many spans each lane has in the window, counted no further than one past LANE_SPANS_SHOWN:
# past that the lane is drawn as buckets, whose counts say how many.
_LANE_COUNTS_SQL = f"""
    SELECT w.lane, (SELECT count(*) FROM (SELECT FROM ledger_runspan s WHERE {_IN_WINDOW} LIMIT %(cap)s) AS shown)
    FROM {_LANES}
"""  # noqa: S608 - constant fragments; every value is bound
_SPANS_SQL = f"""
    SELECT w.lane, s.kind, s.start_ms, s.end_ms, s.position, s.label, s.refused
    FROM {_LANES} CROSS JOIN LATERAL (
        SELECT s.kind, s.start_ms, s.end_ms, s.position, s.label, s.refused FROM ledger_runspan s
        WHERE {_IN_WINDOW} ORDER BY s.start_ms LIMIT %(cap)s
    ) AS s
    ORDER BY w.lane, s.start_ms
"""  # noqa: S608 - constant fragments; every value is bound
_BUCKETS_SQL = f"""
    SELECT w.lane, s.bucket, s.spans, s.refused
    FROM {_LANES} CROSS JOIN LATERAL (
        SELECT least(width_bucket(greatest(s.start_ms, %(from)s), %(from)s, %(to)s + 1, %(buckets)s),
                     %(buckets)s) - 1 AS bucket, count(*) AS spans, count(*) FILTER (WHERE s.refused) AS refused
        FROM ledger_runspan s WHERE {_IN_WINDOW}
        GROUP BY 1
    ) AS s
    ORDER BY 1, 2
"""  # noqa: S608 - constant fragments; every value is bound


# A lane's cells of one level across the window: at most WINDOW_BUCKETS + 1 a lane.
_CELLS_SQL = """
    SELECT lane, cell, spans, refused FROM ledger_runspancell
    WHERE run_id = %(run)s AND level = %(level)s AND lane = ANY(%(lanes)s) AND cell BETWEEN %(first)s AND %(last)s
    ORDER BY lane, cell
"""


def _cell_level(duration_ms: int, window_ms: int) -> int:
    """The level of cells (RunSpanCell) that puts between WINDOW_BUCKETS / CELL_SPLIT and
    WINDOW_BUCKETS of them across a window this wide."""
    level = 0
    while span_index.CELL_SPLIT ** (level + 1) * window_ms <= duration_ms:
        level += 1
    return level


def _span_bar(waterfall: Waterfall, kind: str, start: int, end: int, position: int, label: str, refused: bool) -> Bar:
    scale = WIDTH / max(waterfall.to_ms - waterfall.from_ms, 1)
    x0 = max(start, waterfall.from_ms)
    x1 = min(end, waterfall.to_ms)
    length = duration_ms_text(end - start) if end > start else f"at {duration_ms_text(start)}"
    return Bar(
        x=round((x0 - waterfall.from_ms) * scale, 1),
        width=round(max((x1 - x0) * scale, MIN_BAR), 1),
        kind=kind,
        title=f"{label}, {length}{' (refused)' if refused else ''}",
        refused=refused,
        position=position,
    )


# Side by side, buckets of one shade are one bar of up to this many cells: they look the same,
# and a dense lane of a long run was 120 links (120 tab stops) saying the same thing.
MERGED_CELLS = 8


def _merged_cells(cells: list[tuple[int, int, int]], busiest: int) -> list[tuple[int, int, int, int, int]]:
    """(first bucket, last bucket, spans, refused, density): neighbouring buckets of the same
    density, refused or not alike, merged up to MERGED_CELLS."""
    merged: list[tuple[int, int, int, int, int]] = []
    for bucket, spans, refused in cells:
        density = 1 + min(3, 4 * spans // (busiest + 1))
        if merged:
            first, last, total, total_refused, shade = merged[-1]
            if (
                bucket == last + 1
                and density == shade
                and bool(refused) == bool(total_refused)
                and bucket - first < MERGED_CELLS
            ):
                merged[-1] = (first, bucket, total + spans, total_refused + refused, shade)
                continue
        merged.append((bucket, bucket, spans, refused, density))
    return merged


def _bucket_bars(
    waterfall: Waterfall, lane: Lane, cells: list[tuple[int, int, int]], origin_ms: float, cell_ms: float
) -> list[Bar]:
    """cells: (bucket, spans, refused), bucket n covering [origin_ms + n * cell_ms, + cell_ms):
    the window's own equal parts, or the cells of a RunSpanCell level, clipped to the window."""
    from_ms, to_ms = waterfall.from_ms, waterfall.to_ms
    scale = WIDTH / max(to_ms - from_ms, 1)
    busiest = max((spans for _, spans, _ in cells), default=1)
    kind = _LANE_KINDS.get(lane.number) or (
        RunSpan.Kind.BRANCH.value if lane.number >= span_index.FIRST_BRANCH_LANE else RunSpan.Kind.SUBFLOW.value
    )
    bars = []
    end_text = ""
    previous = None
    for first, last, spans, refused, density in _merged_cells(cells, busiest):
        start, end = origin_ms + first * cell_ms, origin_ms + (last + 1) * cell_ms
        # Adjacent bars share a boundary: its words are written once.
        start_text = end_text if previous == first - 1 else duration_ms_text(start)
        end_text, previous = duration_ms_text(end), last
        x0 = start if start > from_ms else from_ms
        x1 = end if end < to_ms else to_ms
        refused_text = f", {refused} refused" if refused else ""
        bars.append(
            Bar(
                x=round((x0 - from_ms) * scale, 1),
                width=round(max((x1 - x0) * scale, MIN_BAR), 1),
                kind=kind,
                title=f"{spans} {lane.label}{refused_text}, {start_text} to {end_text}: zoom in",
                refused=bool(refused),
                zoom=(int(start), max(int(end + 0.999), int(start) + NARROWEST_WINDOW_MS)),
                density=density,
            )
        )
    return bars


_LANE_KINDS = {
    span_index.LANE_TURNS: RunSpan.Kind.TURN.value,
    span_index.LANE_ITERATIONS: RunSpan.Kind.ITERATION.value,
    span_index.LANE_LLM: RunSpan.Kind.LLM.value,
    span_index.LANE_TOOLS: RunSpan.Kind.TOOL.value,
    span_index.LANE_STEPS: RunSpan.Kind.DISPATCH_STEP.value,
    span_index.LANE_WAITS: RunSpan.Kind.ASK_WAIT.value,
    span_index.LANE_REFUSALS: RunSpan.Kind.REFUSAL.value,
    span_index.LANE_ARTIFACTS: RunSpan.Kind.ARTIFACT.value,
}


def _window_bounds(duration_ms: int, from_ms: int | None, to_ms: int | None) -> tuple[int, int]:
    start = 0 if from_ms is None else min(max(from_ms, 0), duration_ms)
    end = duration_ms if to_ms is None else min(max(to_ms, start), duration_ms)
    if end - start < NARROWEST_WINDOW_MS:
        end = start + NARROWEST_WINDOW_MS
    return start, end


def run_waterfall(*, run: Run, from_ms: int | None = None, to_ms: int | None = None) -> Waterfall:
    """The run's lanes in the window `[from_ms, to_ms]` (the whole run when not given, clamped to
    it), each drawn span by span or as buckets by how many spans it holds there. The run is the
    caller's to scope (run_get_for_user); the spans are read by its primary key only."""
    overview = _overview(run, whole_run=from_ms is None and to_ms is None)
    start, end = _window_bounds(overview.duration_ms, from_ms, to_ms)
    waterfall = Waterfall(run, start, end, overview.duration_ms, [], overview.indexed_length, run.chain_length)
    whole = waterfall.whole_run
    labels = {entry["lane"]: entry["label"] for entry in overview.lanes}
    longest = {entry["lane"]: entry.get("longest", overview.duration_ms) for entry in overview.lanes}
    levels = {entry["lane"]: entry.get("levels", 0) for entry in overview.lanes}  # none: indexed before cells
    params: dict[str, Any] = {
        "run": run.pk, "period": run.period, "from": start, "to": end,
        "buckets": WINDOW_BUCKETS, "cap": LANE_SPANS_SHOWN + 1,
    }  # fmt: skip

    def lanes_from(numbers: list[int]) -> dict[str, Any]:
        return {**params, "lanes": numbers, "lows": [start - longest[number] for number in numbers]}

    with connections[lagging_reads_alias()].cursor() as cur:
        if whole:
            counts = {entry["lane"]: entry["spans"] for entry in overview.lanes}
        else:
            cur.execute(_LANE_COUNTS_SQL, lanes_from(sorted(longest)))
            counts = {lane: spans for lane, spans in cur.fetchall() if spans}
        lanes = {number: Lane(number, labels.get(number, "spans"), counts[number]) for number in sorted(counts)}
        few = [number for number, lane in lanes.items() if lane.spans <= LANE_SPANS_SHOWN]
        many = [number for number in lanes if number not in few]
        if few:
            cur.execute(_SPANS_SQL, lanes_from(few))
            for lane_number, kind, span_start, span_end, position, label, refused in cur.fetchall():
                lane = lanes[lane_number]
                lane.bars.append(_span_bar(waterfall, kind, span_start, span_end, position, label, refused))
        if many and not whole:
            level = _cell_level(overview.duration_ms, end - start)
            gridded = [number for number in many if levels.get(number, 0) > level]
            counted = [number for number in many if number not in gridded]
            cells: dict[int, list[tuple[int, int, int]]] = {}
            if gridded:
                cur.execute(
                    _CELLS_SQL,
                    {
                        **params, "level": level, "lanes": gridded,
                        "first": span_index.cell_of(start, overview.duration_ms, level),
                        "last": span_index.cell_of(end, overview.duration_ms, level),
                    },
                )  # fmt: skip
                for lane_number, cell, spans, refused in cur.fetchall():
                    cells.setdefault(lane_number, []).append((cell, spans, refused))
            if counted:
                cur.execute(_BUCKETS_SQL, lanes_from(counted))
                for lane_number, bucket, spans, refused in cur.fetchall():
                    cells.setdefault(lane_number, []).append((bucket, spans, refused))
            cell_ms = overview.duration_ms / (WINDOW_BUCKETS * span_index.CELL_SPLIT**level)
            for number in many:
                lane = lanes[number]
                if number in gridded:
                    lane.bars = _bucket_bars(waterfall, lane, cells.get(number, []), 0, cell_ms)
                else:
                    lane.bars = _bucket_bars(
                        waterfall, lane, cells.get(number, []), start, (end - start) / WINDOW_BUCKETS
                    )
                lane.spans = sum(spans for _, spans, _ in cells.get(number, []))
                lane.aggregated = True
    if whole:
        for number in many:
            stored = overview.buckets.get(str(number), [])
            cells_shown = [(b, n, r) for b, n, r, *_ in stored]
            lanes[number].bars = _bucket_bars(
                waterfall, lanes[number], cells_shown, 0, overview.duration_ms / WINDOW_BUCKETS
            )
            lanes[number].aggregated = True
    for index, lane in enumerate(lanes.values()):
        lane.y = index * LANE_HEIGHT
        lane.bar_y = lane.y + (LANE_HEIGHT - BAR_HEIGHT) // 2
    waterfall.lanes = list(lanes.values())
    return waterfall
