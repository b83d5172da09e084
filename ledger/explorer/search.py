"""The full-text index of stored events, built by the worker behind ingestion.

Agents never wait for it: ingestion stores events and moves on; this pass turns each run's new
records into chunks of `to_tsvector('simple', …)` and advances the run's `search_indexed` mark.
Searches read the chunks plus whatever the mark has not reached yet, so nothing stored is ever
missing from a search result, only slower to find for a few seconds.
"""

import time

from django.db import connection, transaction

from footprint_site.lib.db import runs_past_mark_fold, session_connection
from ledger.models import RunSearchChunk

CHUNK_RECORDS = 50  # records per indexed row, at most
# Each record is indexed in its first SEARCHED_CHARS characters, and a chunk also closes once its
# text passes that many, so no chunk's text exceeds twice as much (well below 1 MB of lexemes).
SEARCHED_CHARS = RunSearchChunk.SEARCHED_CHARS
RECORDS_PER_PASS = 5000  # per run and pass, so one huge run cannot starve the others
RUNS_PER_PASS = 1000
# Runs indexed together in one transaction, up to this many records: a commit per run (most runs
# are short) cost more than the indexing (100,000 six-event runs: 159 s one by one).
RECORDS_PER_TRANSACTION = 5000

_INDEX_RANGES = """
INSERT INTO ledger_runsearchchunk (run_id, period, first_position, last_position, document)
SELECT run_id, period, min(position), max(position),
    strip(to_tsvector('simple', string_agg(text, ' ' ORDER BY position)))
FROM (
    SELECT e.run_id, e.period, e.position, left(e.body, %(cap)s) AS text,
        (e.position - w.start) / %(chunk)s AS by_count,
        sum(least(length(e.body), %(cap)s)) OVER (PARTITION BY e.run_id ORDER BY e.position) / %(cap)s AS by_size
    FROM unnest(%(runs)s::bigint[], %(starts)s::int[], %(stops)s::int[]) AS w(run_id, start, stop)
    JOIN ledger_runevent e ON e.run_id = w.run_id AND e.position >= w.start AND e.position < w.stop
) AS records
GROUP BY run_id, period, by_count, by_size
ON CONFLICT DO NOTHING
"""
_ADVANCE_MARKS = """
UPDATE ledger_run r SET search_indexed = w.stop
FROM unnest(%(runs)s::bigint[], %(starts)s::int[], %(stops)s::int[]) AS w(run_id, start, stop)
WHERE r.id = w.run_id AND r.search_indexed = w.start
"""


def search_index_pending(*, budget_seconds: float = 20.0) -> int:
    """Index what ingestion stored since the last pass; returns the number of records indexed.

    One pass at a time (a session advisory lock): a pass finding it taken does nothing, so passes
    queued behind a slow one never index the same records twice.
    """
    with session_connection().cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(hashtext('footprint.search-index'))")
        (locked,) = cur.fetchone()
    if not locked:
        return 0
    try:
        return runs_past_mark_fold(
            mark="search_indexed",
            deadline=time.monotonic() + budget_seconds,
            fold=_index_ranges,
            runs_per_pass=RUNS_PER_PASS,
            records_per_run=RECORDS_PER_PASS,
            records_per_transaction=RECORDS_PER_TRANSACTION,
        )
    finally:
        with session_connection().cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(hashtext('footprint.search-index'))")


def _index_ranges(ranges: list[tuple[int, int, int]]) -> int:
    """Index records [start, stop) of each (run, start, stop) and advance the runs' marks, in one
    transaction; if a mark moved meanwhile (a pass of an older version), none of it is kept."""
    params: dict[str, int | list[int]] = {"chunk": CHUNK_RECORDS, "cap": SEARCHED_CHARS}
    params["runs"], params["starts"], params["stops"] = (list(column) for column in zip(*ranges, strict=True))
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(_INDEX_RANGES, params)
        cur.execute(_ADVANCE_MARKS, params)
        if cur.rowcount != len(ranges):
            transaction.set_rollback(True)
            return 0
    return sum(stop - start for _, start, stop in ranges)
