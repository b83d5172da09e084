"""The overview's reads: a window of the rollups and the chain checks of a person's projects.

Every selector takes the projects it answers for (the person's, or one of them) and reads nothing
else. Their cost follows the window (its columns and checks), never the ledger's size: events and
asks are read only through the rollups.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.db.models import QuerySet
from django.utils import timezone

from footprint_site.replicas import lagging_reads_alias
from ledger.models import DECISION_TIME_BUCKETS_PER_DOUBLING, ActivityCount
from tenancy.models import Project

# date_bin's origin: buckets of a day or of hours start at UTC midnight.
_ORIGIN = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Window:
    name: str  # as it appears in the URL
    label: str
    length: timedelta
    step: timedelta  # one chart column

    @property
    def bucket_count(self) -> int:
        return int(self.length / self.step)


WINDOWS = {
    window.name: window
    for window in (
        Window("hour", "Last hour", timedelta(hours=1), timedelta(minutes=1)),
        Window("day", "Last day", timedelta(days=1), timedelta(hours=1)),
        Window("week", "Last week", timedelta(days=7), timedelta(hours=6)),
        Window("30d", "Last 30 days", timedelta(days=30), timedelta(days=1)),
    )
}
DEFAULT_WINDOW = "day"


def window_buckets(window: Window, now: datetime) -> list[datetime]:
    """The starts of the window's columns, oldest first; the last one holds `now`."""
    last = _ORIGIN + ((now - _ORIGIN) // window.step) * window.step
    return [last - window.step * i for i in range(window.bucket_count - 1, -1, -1)]


@dataclass
class AskFigures:
    opened: list[int]
    decided: list[int]
    timed_out: list[int]
    decision_p50: timedelta | None
    decision_p90: timedelta | None
    decided_total: int


@dataclass(frozen=True)
class AgentUsage:
    day: date
    agent: str
    tokens_in: int
    tokens_out: int
    cost_usd: float


@dataclass(frozen=True)
class BrokenChain:
    project_slug: str
    run_id: str
    broken_at: int | None
    checked_at: datetime


@dataclass
class IntegrityFigures:
    verified: int
    broken: int
    breaks: list[BrokenChain]


@dataclass
class Overview:
    window: Window
    buckets: list[datetime]
    # (kind, key) → a count per bucket
    counts: dict[tuple[str, str], list[int]]
    # (kind, key) → its count over the whole window, for the kinds charted as rankings (RANKED_KINDS)
    totals: dict[tuple[str, str], int]
    asks: AskFigures
    usage: list[AgentUsage]
    integrity: IntegrityFigures
    # The oldest stored record the rollups have not counted yet; None when they are up to date.
    pending_since: datetime | None
    has_runs: bool
    now: datetime = field(default_factory=timezone.now)

    @property
    def since(self) -> datetime:
        return self.buckets[0]

    def series(self, kind: str) -> dict[str, list[int]]:
        """Each key of a kind with its counts, the largest total first."""
        found = {key: counts for (k, key), counts in self.counts.items() if k == kind}
        return dict(sorted(found.items(), key=lambda item: (-sum(item[1]), item[0])))

    def ranking(self, kind: str) -> dict[str, int]:
        """Each key of a ranked kind with its count over the window, the largest first."""
        found = {key: total for (k, key), total in self.totals.items() if k == kind}
        return dict(sorted(found.items(), key=lambda item: (-item[1], item[0])))


# Kinds charted as rankings over the whole window (rules, tools), never as columns: each key is
# summed over the window in the read, one row a key where a column each would be one a bucket
# (a 30-day window's tools and rules were four rows in five, and a busier ledger fills more of
# a day's or a week's buckets).
RANKED_KINDS = ["refusal-rule", "tool-error", "tool-refusal"]
# Summed over the window too: the decision times' buckets, read as percentiles.
_SUMMED_KINDS = [*RANKED_KINDS, ActivityCount.Kind.ASK_DECISION_TIME]
# A window reads the coarsest counters its columns are whole multiples of: a 30-day window reads
# 30 days a project and key, a week 168 hours, where their minutes grow to 43,200 and 10,080 as
# the ledger gets busier. (table, its time column) → the statement; names from this module only.
# A ranked kind's bucket is NULL: its rows are summed over the window.
_COUNTS = {
    (table, column): f"""
SELECT kind, key, CASE WHEN kind = ANY(%(ranked)s) THEN NULL ELSE date_bin(%(step)s, {column}, %(origin)s) END
    AS bucket, sum(count)
FROM {table}
WHERE project_id = ANY(%(projects)s) AND {column} >= %(since)s AND {column} < %(until)s
GROUP BY kind, key, bucket
"""  # noqa: S608 - constant names; every value is bound
    for table, column in (
        ("ledger_activitycount", "minute"),
        ("ledger_activityhourcount", "hour"),
        ("ledger_activitydaycount", "day"),
    )
}


def _counts_sql(step: timedelta) -> str:
    if step % timedelta(days=1) == timedelta(0):
        return _COUNTS[("ledger_activitydaycount", "day")]
    if step % timedelta(hours=1) == timedelta(0):
        return _COUNTS[("ledger_activityhourcount", "hour")]
    return _COUNTS[("ledger_activitycount", "minute")]


# An agent's day across the projects shown is one row: the table names no project (its links
# list the agent's runs in all of them), and a row a project would make the table grow with them.
_USAGE = """
SELECT day, agent, sum(tokens_in)::bigint, sum(tokens_out)::bigint, sum(cost_usd) FROM ledger_agentdayusage
WHERE project_id = ANY(%(projects)s) AND day >= %(since)s::date GROUP BY day, agent ORDER BY day, agent
"""
_INTEGRITY = """
SELECT c.valid, p.slug, r.run_id, c.broken_at, c.finished_at
FROM ledger_integritycheck c JOIN ledger_run r ON r.id = c.run_id JOIN ledger_project p ON p.id = r.project_id
WHERE r.project_id = ANY(%(projects)s) AND c.status = 'done' AND c.finished_at >= %(since)s
ORDER BY c.finished_at DESC
"""
# Runs the rollups have not reached the end of (the partial index `run_rollup_pending`), and the
# first record each has not counted; asks whose opening or decision they have not counted
# (`ask_rollup_pending`), and when that happened.
_PENDING_SINCE = """
SELECT least(
    (SELECT min(e.received_at) FROM ledger_run r
    JOIN ledger_runevent e ON e.run_id = r.id AND e.period = r.period AND e.position = r.rolled_up
    WHERE r.chain_length > r.rolled_up AND r.project_id = ANY(%(projects)s)),
    (SELECT min(CASE WHEN rolled_up = 0 THEN created_at ELSE decided_at END) FROM ledger_ask
    WHERE (rolled_up = 0 OR (rolled_up = 1 AND decided_at IS NOT NULL)) AND project_id = ANY(%(projects)s))
)
"""
_HAS_RUNS = "SELECT EXISTS (SELECT 1 FROM ledger_run WHERE project_id = ANY(%(projects)s))"
BREAKS_LISTED = 5


def overview_get(*, projects: QuerySet[Project] | list[Project], window: Window) -> Overview:
    """The overview of the given projects over the window, read from the rollups."""
    now = timezone.now()
    buckets = window_buckets(window, now)
    place = {bucket: i for i, bucket in enumerate(buckets)}
    params: dict[str, Any] = {
        "projects": [project.pk for project in projects],
        "step": window.step,
        "origin": _ORIGIN,
        "since": buckets[0],
        # A refusal stamped ahead of the server's clock stays out, as in the columns.
        "until": buckets[-1] + window.step,
        "ranked": _SUMMED_KINDS,
    }
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * len(buckets))
    totals: dict[tuple[str, str], int] = {}
    alias = lagging_reads_alias()
    with transaction.atomic(using=alias), connections[alias].cursor() as cur:
        # Every read here is small, but the pending-rollup join's estimate follows the number of
        # runs (a column comparison is guessed at a third of the table): on a large ledger the
        # planner chose a parallel plan whose workers took 10 ms to start for a 0.1 ms answer.
        cur.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        cur.execute(_counts_sql(window.step), params)
        for kind, key, bucket, count in cur.fetchall():
            if bucket is None:
                totals[(kind, key)] = int(count)
            elif bucket in place:
                counts[(kind, key)][place[bucket]] += int(count)
        cur.execute(_USAGE, params)
        usage = [AgentUsage(*row) for row in cur.fetchall()]
        cur.execute(_INTEGRITY, params)
        checks = cur.fetchall()
        cur.execute(_PENDING_SINCE, params)
        (pending_since,) = cur.fetchone()
        cur.execute(_HAS_RUNS, params)
        (has_runs,) = cur.fetchone()
    breaks = [BrokenChain(slug, run_id, broken_at, at) for valid, slug, run_id, broken_at, at in checks if not valid]
    asks = _ask_figures(counts, totals, len(buckets))
    return Overview(
        window=window,
        buckets=buckets,
        counts=dict(counts),
        totals=totals,
        asks=asks,
        usage=usage,
        integrity=IntegrityFigures(
            verified=len(checks) - len(breaks), broken=len(breaks), breaks=breaks[:BREAKS_LISTED]
        ),
        pending_since=pending_since,
        has_runs=has_runs,
        now=now,
    )


def _ask_figures(
    counts: dict[tuple[str, str], list[int]], totals: dict[tuple[str, str], int], width: int
) -> AskFigures:
    """The asks' columns, and time to decision's p50/p90 from its buckets (within 4.4%, see
    DECISION_TIME_BUCKETS_PER_DOUBLING); the asks' rows are taken out of `counts` and `totals`."""
    opened, decided, timed_out = (
        counts.pop((kind, ""), [0] * width)
        for kind in (ActivityCount.Kind.ASK_OPENED, ActivityCount.Kind.ASK_DECIDED, ActivityCount.Kind.ASK_TIMED_OUT)
    )
    by_bucket = sorted(
        (int(key), totals.pop((kind, key)))
        for kind, key in list(totals)
        if kind == ActivityCount.Kind.ASK_DECISION_TIME
    )
    decided_total = sum(count for _, count in by_bucket)
    return AskFigures(
        opened=opened,
        decided=decided,
        timed_out=timed_out,
        decision_p50=_decision_time_percentile(by_bucket, decided_total, 0.5),
        decision_p90=_decision_time_percentile(by_bucket, decided_total, 0.9),
        decided_total=decided_total,
    )


def _decision_time_percentile(by_bucket: list[tuple[int, int]], total: int, fraction: float) -> timedelta | None:
    """The decision time below which `fraction` of them fall: the geometric middle of the bucket
    holding the one at that rank, as percentile_cont counts ranks (0 … total - 1)."""
    if not total:
        return None
    rank = fraction * (total - 1)
    below = 0
    for bucket, count in by_bucket:
        below += count
        if rank < below:
            return timedelta(seconds=2 ** ((bucket + 0.5) / DECISION_TIME_BUCKETS_PER_DOUBLING))
    raise AssertionError("a rank below the total is in some bucket")
