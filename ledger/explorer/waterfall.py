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


@dataclass
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


def _overview(run: Run) -> RunSpanOverview:
    """The run's overview, built now for a run never indexed or one a little behind."""
    overview = RunSpanOverview.objects.using(lagging_reads_alias()).filter(run_id=run.pk).first()
    behind = run.chain_length - (overview.indexed_length if overview else 0)
    if overview is None or 0 < behind <= BUILD_ON_PAGE_RECORDS:
        # A derived index written on a read: the spans are a pure function of the chain, so
        # building them here is a cache fill, and the worker would write the same rows.
        span_index.run_spans_build(run_pk=run.pk)
        # Read back where it was written: a page read from the replica would not see it yet.
        overview = RunSpanOverview.objects.using(DEFAULT_DB_ALIAS).get(run_id=run.pk)
    return overview


# Each lane is read from `low` (the window's start less the lane's longest span) to the window's
# end: one range of the (run, lane, start_ms) index, however far into a long run the window lies.
_LANES = "unnest(%(lanes)s::int[], %(lows)s::bigint[]) AS w(lane, low)"
_IN_WINDOW = "s.run_id = %(run)s AND s.lane = w.lane AND s.start_ms >= w.low AND s.start_ms <= %(to)s"
_SPANS_SQL = f"""
    SELECT s.lane, s.kind, s.start_ms, s.end_ms, s.position, s.label, s.refused
    FROM {_LANES} JOIN ledger_runspan s ON {_IN_WINDOW}
    WHERE s.end_ms >= %(from)s
    ORDER BY s.lane, s.start_ms
"""  # noqa: S608 - constant fragments; every value is bound
_LANE_COUNTS_SQL = f"""
    SELECT w.lane, count(*) FROM {_LANES} JOIN ledger_runspan s ON {_IN_WINDOW}
    WHERE s.end_ms >= %(from)s
    GROUP BY w.lane
"""  # noqa: S608 - constant fragments; every value is bound
_BUCKETS_SQL = f"""
    SELECT s.lane, least(width_bucket(greatest(s.start_ms, %(from)s), %(from)s, %(to)s + 1, %(buckets)s),
                         %(buckets)s) - 1 AS bucket,
           count(*), count(*) FILTER (WHERE s.refused)
    FROM {_LANES} JOIN ledger_runspan s ON {_IN_WINDOW}
    WHERE s.end_ms >= %(from)s
    GROUP BY 1, 2 ORDER BY 1, 2
"""  # noqa: S608 - constant fragments; every value is bound


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


def _bucket_bars(waterfall: Waterfall, lane: Lane, cells: list[tuple[int, int, int]]) -> list[Bar]:
    """cells: (bucket, spans, refused) across the window in WINDOW_BUCKETS equal parts."""
    width = (waterfall.to_ms - waterfall.from_ms) / WINDOW_BUCKETS
    busiest = max((spans for _, spans, _ in cells), default=1)
    bars = []
    for bucket, spans, refused in cells:
        start = waterfall.from_ms + bucket * width
        zoom = (int(start), max(int(start + width + 0.999), int(start) + NARROWEST_WINDOW_MS))
        refused_text = f", {refused} refused" if refused else ""
        bars.append(
            Bar(
                x=round(bucket * WIDTH / WINDOW_BUCKETS, 1),
                width=round(WIDTH / WINDOW_BUCKETS, 1),
                kind=_LANE_KINDS.get(lane.number, RunSpan.Kind.SUBFLOW.value),
                title=(
                    f"{spans} {lane.label}{refused_text}, {duration_ms_text(start)}"
                    f" to {duration_ms_text(start + width)}: zoom in"
                ),
                refused=bool(refused),
                zoom=zoom,
                density=1 + min(3, 4 * spans // (busiest + 1)),
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
    overview = _overview(run)
    start, end = _window_bounds(overview.duration_ms, from_ms, to_ms)
    waterfall = Waterfall(run, start, end, overview.duration_ms, [], overview.indexed_length, run.chain_length)
    whole = waterfall.whole_run
    labels = {entry["lane"]: entry["label"] for entry in overview.lanes}
    longest = {entry["lane"]: entry.get("longest", overview.duration_ms) for entry in overview.lanes}
    params: dict[str, Any] = {"run": run.pk, "from": start, "to": end, "buckets": WINDOW_BUCKETS}

    def lanes_from(numbers: list[int]) -> dict[str, Any]:
        return {**params, "lanes": numbers, "lows": [start - longest[number] for number in numbers]}

    with connections[lagging_reads_alias()].cursor() as cur:
        if whole:
            counts = {entry["lane"]: entry["spans"] for entry in overview.lanes}
        else:
            cur.execute(_LANE_COUNTS_SQL, lanes_from(sorted(longest)))
            counts = dict(cur.fetchall())
        lanes = {number: Lane(number, labels.get(number, "spans"), counts[number]) for number in sorted(counts)}
        few = [number for number, lane in lanes.items() if lane.spans <= LANE_SPANS_SHOWN]
        many = [number for number in lanes if number not in few]
        if few:
            cur.execute(_SPANS_SQL, lanes_from(few))
            for lane_number, kind, span_start, span_end, position, label, refused in cur.fetchall():
                lane = lanes[lane_number]
                lane.bars.append(_span_bar(waterfall, kind, span_start, span_end, position, label, refused))
        if many and not whole:
            cur.execute(_BUCKETS_SQL, lanes_from(many))
            cells: dict[int, list[tuple[int, int, int]]] = {}
            for lane_number, bucket, spans, refused in cur.fetchall():
                cells.setdefault(lane_number, []).append((bucket, spans, refused))
            for number in many:
                lanes[number].bars = _bucket_bars(waterfall, lanes[number], cells.get(number, []))
                lanes[number].aggregated = True
    if whole:
        for number in many:
            stored = overview.buckets.get(str(number), [])
            lanes[number].bars = _bucket_bars(waterfall, lanes[number], [(b, n, r) for b, n, r, *_ in stored])
            lanes[number].aggregated = True
    for index, lane in enumerate(lanes.values()):
        lane.y = index * LANE_HEIGHT
        lane.bar_y = lane.y + (LANE_HEIGHT - BAR_HEIGHT) // 2
    waterfall.lanes = list(lanes.values())
    return waterfall
