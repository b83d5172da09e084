"""The overview's rollups, folded from stored records by the worker behind ingestion.

Ingestion never waits for them: it stores events and moves on, and this pass counts each run's
new records into per-minute, per-hour and per-day counters (ActivityCount, ActivityHourCount,
ActivityDayCount) and per-day usage (AgentDayUsage), then advances the run's `rolled_up` mark in
the same transaction; likewise each ask's opening and decision (its `rolled_up`), so the asks
charts read counters too. A record is counted exactly once: one pass at a time (a session advisory
lock), and a mark that moved meanwhile throws the transaction's counts away. The overview reads
the counters, so its cost follows the window shown, never the size of the ledger; what the marks
have not reached yet is shown as the figures' age.
"""

import time
from dataclasses import dataclass

from django.db import connection, transaction

from footprint_site.lib.db import runs_past_mark_fold, session_connection
from ledger.models import DECISION_TIME_BUCKETS_PER_DOUBLING

RECORDS_PER_PASS = 20_000  # per run and pass, so one huge run cannot starve the others
RUNS_PER_PASS = 1000
# Runs folded together in one transaction, up to this many records: most runs are short, and a
# commit per run costs more than counting it (as with the search index).
RECORDS_PER_TRANSACTION = 20_000


# Adds the rows of a statement's `counted (project_id, minute, kind, key)` to the per-minute counters
# and, in the same statement (never one without the others), to the per-hour and per-day ones
# (ActivityCount, ActivityHourCount, ActivityDayCount). Its writes are common table expressions:
# the statement's own SELECT follows them.
_ADD_COUNTED = """
by_minute AS MATERIALIZED (
    SELECT project_id, minute, kind, key, count(*) AS count FROM counted GROUP BY project_id, minute, kind, key
),
minutes AS (
    INSERT INTO ledger_activitycount (project_id, minute, kind, key, count)
    SELECT project_id, minute, kind, key, count FROM by_minute
    ON CONFLICT (project_id, minute, kind, key) DO UPDATE SET count = ledger_activitycount.count + EXCLUDED.count
),
hours AS (
    INSERT INTO ledger_activityhourcount (project_id, hour, kind, key, count)
    SELECT project_id, date_trunc('hour', minute, 'UTC'), kind, key, sum(count) FROM by_minute GROUP BY 1, 2, 3, 4
    ON CONFLICT (project_id, hour, kind, key) DO UPDATE SET count = ledger_activityhourcount.count + EXCLUDED.count
),
days AS (
    INSERT INTO ledger_activitydaycount (project_id, day, kind, key, count)
    SELECT project_id, date_trunc('day', minute, 'UTC'), kind, key, sum(count) FROM by_minute GROUP BY 1, 2, 3, 4
    ON CONFLICT (project_id, day, kind, key) DO UPDATE SET count = ledger_activitydaycount.count + EXCLUDED.count
)
"""

# `run-ended` is keyed by the status an ending event moves its run to, as
# ledger.ingest.projections.status_of decides it (a listener's `error.fatal` ends nothing; a message
# middleware's deny ends the run).
_ACTIVITY_COUNTED = """
WITH w AS (SELECT * FROM unnest(%(runs)s::bigint[], %(starts)s::int[], %(stops)s::int[]) AS w(run_id, start, stop)),
e AS MATERIALIZED (
    SELECT r.project_id, e.run_id, e.seq, e.type, e.tool_call_id, e.doc, e.wall_clock_ms,
        date_trunc('minute', e.received_at) AS minute
    FROM w JOIN ledger_run r ON r.id = w.run_id
    JOIN ledger_runevent e ON e.run_id = w.run_id AND e.position >= w.start AND e.position < w.stop
),
-- Refusals in the minute their event says they happened, as the refusals page filters them.
refused AS (
    SELECT e.project_id, coalesce(date_trunc('minute', to_timestamp(f.wall_clock_ms / 1000.0)), e.minute) AS minute,
        f.category, f.rule, f.tool_name
    FROM e JOIN ledger_refusal f ON f.run_id = e.run_id AND f.seq = e.seq
),
counted (project_id, minute, kind, key) AS (
    SELECT project_id, minute, 'events', '' FROM e
    UNION ALL
    SELECT r.project_id, date_trunc('minute', coalesce(r.first_event_at, r.created_at)), 'run-started', ''
    FROM w JOIN ledger_run r ON r.id = w.run_id WHERE w.start = 0
    UNION ALL
    -- In the minute the ending event's wall clock names, as the run list's "last event" filter
    -- finds the run (its last_event_at), falling back to when it was stored.
    SELECT project_id, minute, 'run-ended', ending FROM (
        SELECT e.project_id,
        coalesce(date_trunc('minute', to_timestamp(e.wall_clock_ms / 1000.0)), e.minute) AS minute, CASE
            WHEN e.type = 'agentfootprint.agent.turn_end' THEN 'completed'
            WHEN e.type = 'agentfootprint.error.fatal'
                AND (e.doc->'payload'->>'stage') IS DISTINCT FROM 'observer' THEN 'failed'
            WHEN e.type = 'agentfootprint.permission.halt' THEN 'halted'
            WHEN e.type = 'agentfootprint.middleware.decision' AND e.doc->'payload'->>'outcome' = 'deny'
                AND e.doc->'payload'->>'moment' IN ('input', 'output') THEN 'denied'
        END AS ending FROM e
    ) AS endings WHERE ending IS NOT NULL
    UNION ALL
    SELECT project_id, minute, 'refusal-category', category FROM refused
    UNION ALL
    SELECT project_id, minute, 'refusal-rule', rule FROM refused WHERE rule IS NOT NULL
    UNION ALL
    SELECT project_id, minute, 'tool-refusal', tool_name FROM refused WHERE tool_name IS NOT NULL
    UNION ALL
    SELECT e.project_id, e.minute, 'tool-error', t.tool_name
    FROM e JOIN ledger_toolcall t ON t.run_id = e.run_id AND t.tool_call_id = e.tool_call_id
    WHERE e.type = 'agentfootprint.stream.tool_end' AND t.error AND t.tool_name IS NOT NULL
),
"""
_COUNT_ACTIVITY = _ACTIVITY_COUNTED + _ADD_COUNTED + "SELECT count(*) FROM by_minute"  # noqa: S608 - constants

# `usage.input`/`usage.output` when they are numbers, as the run's own totals count them.
_COUNT_TOKENS = """
INSERT INTO ledger_agentdayusage (project_id, day, agent, tokens_in, tokens_out, cost_usd)
SELECT r.project_id, (e.received_at AT TIME ZONE 'UTC')::date, coalesce(r.agent_id, ''),
    sum(CASE WHEN jsonb_typeof(e.doc->'payload'->'usage'->'input') = 'number'
        THEN (e.doc->'payload'->'usage'->>'input')::numeric ELSE 0 END)::bigint,
    sum(CASE WHEN jsonb_typeof(e.doc->'payload'->'usage'->'output') = 'number'
        THEN (e.doc->'payload'->'usage'->>'output')::numeric ELSE 0 END)::bigint,
    0
FROM unnest(%(runs)s::bigint[], %(starts)s::int[], %(stops)s::int[]) AS w(run_id, start, stop)
JOIN ledger_run r ON r.id = w.run_id
JOIN ledger_runevent e ON e.run_id = w.run_id AND e.position >= w.start AND e.position < w.stop
WHERE e.type = 'agentfootprint.stream.llm_end'
GROUP BY 1, 2, 3
ON CONFLICT (project_id, day, agent) DO UPDATE SET
    tokens_in = ledger_agentdayusage.tokens_in + EXCLUDED.tokens_in,
    tokens_out = ledger_agentdayusage.tokens_out + EXCLUDED.tokens_out
"""

# A run's `cost.tick` carries its cumulative estimate: what it grew by since the last fold is
# counted on the day of the range's last tick. Finite numbers only (JSON has no others).
_COUNT_COST = """
WITH ticks AS (
    SELECT e.run_id, r.project_id, coalesce(r.agent_id, '') AS agent,
        max((e.doc->'payload'->'cumulative'->>'estimatedUsd')::float8) AS cumulative,
        (max(e.received_at) AT TIME ZONE 'UTC')::date AS day
    FROM unnest(%(runs)s::bigint[], %(starts)s::int[], %(stops)s::int[]) AS w(run_id, start, stop)
    JOIN ledger_run r ON r.id = w.run_id
    JOIN ledger_runevent e ON e.run_id = w.run_id AND e.position >= w.start AND e.position < w.stop
    WHERE e.type = 'agentfootprint.cost.tick'
        AND jsonb_typeof(e.doc->'payload'->'cumulative'->'estimatedUsd') = 'number'
    GROUP BY e.run_id, r.project_id, r.agent_id
),
grown AS (
    SELECT t.*, t.cumulative - coalesce(c.cost_usd, 0) AS growth
    FROM ticks t LEFT JOIN ledger_rollupruncost c ON c.run_id = t.run_id
    WHERE t.cumulative > coalesce(c.cost_usd, 0)
),
marked AS (
    INSERT INTO ledger_rollupruncost (run_id, cost_usd) SELECT run_id, cumulative FROM grown
    ON CONFLICT (run_id) DO UPDATE SET cost_usd = EXCLUDED.cost_usd
)
INSERT INTO ledger_agentdayusage (project_id, day, agent, tokens_in, tokens_out, cost_usd)
SELECT project_id, day, agent, 0, 0, sum(growth) FROM grown GROUP BY project_id, day, agent
ON CONFLICT (project_id, day, agent) DO UPDATE SET cost_usd = ledger_agentdayusage.cost_usd + EXCLUDED.cost_usd
"""

# Up to %(limit)s asks with something uncounted (the partial index `ask_rollup_pending`), locked
# and marked in the statement that counts them: an ask decided meanwhile waits for this
# statement's transaction, then has its decision counted by the next pass; one being decided now
# is left (SKIP LOCKED) to the next pass. Time to decision in buckets of a fixed ratio
# (DECISION_TIME_BUCKETS_PER_DOUBLING); a deadline's closing is not a decision's time.
_ASKS_COUNTED = """
WITH due AS MATERIALIZED (
    SELECT id, project_id, created_at, decided_at, decided_via, rolled_up FROM ledger_ask
    WHERE rolled_up = 0 OR (rolled_up = 1 AND decided_at IS NOT NULL)
    LIMIT %(limit)s FOR UPDATE SKIP LOCKED
),
marked AS (
    UPDATE ledger_ask a SET rolled_up = CASE WHEN due.decided_at IS NULL THEN 1 ELSE 2 END
    FROM due WHERE a.id = due.id
),
counted (project_id, minute, kind, key) AS (
    SELECT project_id, date_trunc('minute', created_at), 'ask-opened', '' FROM due WHERE rolled_up = 0
    UNION ALL
    SELECT project_id, date_trunc('minute', decided_at),
        CASE WHEN decided_via = 'deadline' THEN 'ask-timed-out' ELSE 'ask-decided' END, ''
    FROM due WHERE decided_at IS NOT NULL
    UNION ALL
    SELECT project_id, date_trunc('minute', decided_at), 'ask-decision-time',
        floor(%(per_doubling)s * log(2.0, greatest(extract(epoch FROM decided_at - created_at), 0.001)))::int::text
    FROM due WHERE decided_at IS NOT NULL AND decided_via <> 'deadline'
),
"""
_COUNT_ASKS = _ASKS_COUNTED + _ADD_COUNTED + "SELECT count(*) FROM due"  # noqa: S608 - constants
ASKS_PER_TRANSACTION = 5000

_ADVANCE_MARKS = """
UPDATE ledger_run r SET rolled_up = w.stop
FROM unnest(%(runs)s::bigint[], %(starts)s::int[], %(stops)s::int[]) AS w(run_id, start, stop)
WHERE r.id = w.run_id AND r.rolled_up = w.start
"""

LOCK = "footprint.rollups"


@dataclass(frozen=True)
class FoldResult:
    records: int  # records counted by this pass
    asks: int = 0  # asks it counted the opening or decision of
    locked_out: bool = False  # another pass held the lock: this one did nothing


def rollups_fold_pending(*, budget_seconds: float = 15.0) -> FoldResult:
    """Count what ingestion stored since the last pass into the overview's rollups.

    One pass at a time (a session advisory lock): a pass finding it taken does nothing, so two
    workers (or passes queued behind a slow one) never count the same records twice. Writes
    ActivityCount, ActivityHourCount, ActivityDayCount, AgentDayUsage and RollupRunCost rows and
    advances `Ask.rolled_up` and `Run.rolled_up`, a transaction per group of asks or runs;
    enqueues nothing.
    """
    with session_connection().cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [LOCK])
        (locked,) = cur.fetchone()
    if not locked:
        return FoldResult(records=0, locked_out=True)
    try:
        deadline = time.monotonic() + budget_seconds
        # Asks first: a few a minute where runs store thousands of records, which could spend the
        # whole budget while ingestion is busy.
        asks = asks_fold_pending(deadline=deadline)
        records = runs_past_mark_fold(
            mark="rolled_up",
            deadline=deadline,
            fold=fold_ranges,
            runs_per_pass=RUNS_PER_PASS,
            records_per_run=RECORDS_PER_PASS,
            records_per_transaction=RECORDS_PER_TRANSACTION,
        )
        return FoldResult(records=records, asks=asks)
    finally:
        with session_connection().cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(hashtext(%s))", [LOCK])


def asks_fold_pending(*, deadline: float) -> int:
    """Count the openings and decisions of asks not counted yet into the overview's counters, a
    transaction per ASKS_PER_TRANSACTION asks, until none is left or `deadline` (time.monotonic())
    passes; returns how many asks it counted something of. Called under the rollups' lock."""
    counted = 0
    params = {"limit": ASKS_PER_TRANSACTION, "per_doubling": DECISION_TIME_BUCKETS_PER_DOUBLING}
    while time.monotonic() < deadline:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(_COUNT_ASKS, params)
            (asks,) = cur.fetchone()
        counted += asks
        if asks < ASKS_PER_TRANSACTION:
            break
    return counted


def fold_ranges(ranges: list[tuple[int, int, int]]) -> int:
    """Count records [start, stop) of each (run, start, stop) and advance the runs' marks, in one
    transaction; if any mark is no longer at its `start` (another pass counted it), nothing of
    this transaction is kept and 0 is returned."""
    params: dict[str, list[int]] = {}
    params["runs"], params["starts"], params["stops"] = (list(column) for column in zip(*ranges, strict=True))
    with transaction.atomic(), connection.cursor() as cur:
        # Marks first: their row locks make a second fold of the same ranges wait here, then find
        # the marks moved, before it has counted anything.
        cur.execute(_ADVANCE_MARKS, params)
        if cur.rowcount != len(ranges):
            transaction.set_rollback(True)
            return 0
        cur.execute(_COUNT_ACTIVITY, params)
        cur.execute(_COUNT_TOKENS, params)
        cur.execute(_COUNT_COST, params)
    return sum(stop - start for _, start, stop in ranges)
