"""The full-text index of stored events, built by the worker behind ingestion.

Agents never wait for it: ingestion stores events and moves on; this pass turns each run's new
records into chunks of `to_tsvector('simple', …)` and advances the run's `search_indexed` mark.
Searches read the chunks plus whatever the mark has not reached yet, so nothing stored is ever
missing from a search result, only slower to find for a few seconds.
"""

import time

from django.db import connection, transaction

from ledger.models import RunSearchChunk

CHUNK_RECORDS = 50  # records per indexed row, at most
# Each record is indexed in its first SEARCHED_CHARS characters, and a chunk also closes once its
# text passes that many, so no chunk's text exceeds twice as much (well below 1 MB of lexemes).
SEARCHED_CHARS = RunSearchChunk.SEARCHED_CHARS
RECORDS_PER_PASS = 5000  # per run and pass, so one huge run cannot starve the others
RUNS_PER_PASS = 200

_INDEX_RANGE = """
INSERT INTO ledger_runsearchchunk (run_id, first_position, last_position, document)
SELECT %(run)s, min(position), max(position), strip(to_tsvector('simple', string_agg(text, ' ' ORDER BY position)))
FROM (
    SELECT position, left(body, %(cap)s) AS text, (position - %(start)s) / %(chunk)s AS by_count,
        sum(least(length(body), %(cap)s)) OVER (ORDER BY position) / %(cap)s AS by_size
    FROM ledger_runevent
    WHERE run_id = %(run)s AND position >= %(start)s AND position < %(stop)s
) AS records
GROUP BY by_count, by_size
ON CONFLICT DO NOTHING
"""


def search_index_pending(*, budget_seconds: float = 20.0) -> int:
    """Index what ingestion stored since the last pass; returns the number of records indexed."""
    indexed = 0
    deadline = time.monotonic() + budget_seconds
    while time.monotonic() < deadline:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT id, search_indexed, chain_length FROM ledger_run"
                " WHERE chain_length > search_indexed ORDER BY id LIMIT %s",
                [RUNS_PER_PASS],
            )
            pending = cur.fetchall()
        if not pending:
            break
        for run_pk, start, length in pending:
            indexed += _index_run(run_pk, start, min(length, start + RECORDS_PER_PASS))
    return indexed


def _index_run(run_pk: int, start: int, stop: int) -> int:
    """Index records [start, stop) of one run; another pass that got there first wins."""
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            _INDEX_RANGE,
            {"run": run_pk, "start": start, "stop": stop, "chunk": CHUNK_RECORDS, "cap": SEARCHED_CHARS},
        )
        cur.execute(
            "UPDATE ledger_run SET search_indexed = %s WHERE id = %s AND search_indexed = %s",
            [stop, run_pk, start],
        )
        if cur.rowcount == 0:
            transaction.set_rollback(True)
            return 0
    return stop - start
