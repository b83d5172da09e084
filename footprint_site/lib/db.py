"""psycopg's own cursor on Django's connection, for the paths that need what Django's cursors lack.

Django's cursors bind parameters on the client (escaped into the SQL text in Python), so
PostgreSQL plans every statement anew, and they offer no COPY. psycopg's `Cursor` binds on the
server, so psycopg prepares a statement once it repeats on a connection (settings:
prepare_threshold). Both helpers keep what Django's cursors promise besides: database errors
become Django's, so a connection lost midway is the 503 of DatabaseUnavailableMiddleware and
not a 500, and Django learns that the connection may be broken.
"""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from psycopg import Cursor


@contextmanager
def server_binding_cursor() -> Iterator[Cursor[Any]]:
    """The psycopg cursor itself, for ingestion's typed statements and binary COPY; every database
    error raised inside the block, COPY included, is translated. No health check: callers write
    inside a transaction, where reconnecting would drop what the transaction did so far."""
    connection.ensure_connection()
    with connection.wrap_database_errors, Cursor(connection.connection) as cursor:
        yield cursor


def prepared_cursor() -> CursorWrapper:
    """The psycopg cursor in Django's wrapper, for the artifact read path's fixed statements:
    execute wrappers see each statement and the connection's health is checked, as with
    `connection.cursor()`. Planning the artifact get's payload lookup across the daily partitions
    cost more than running it (p50 1.6-1.9 ms a call, 0.43 ms prepared)."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    # Never Django's debug wrapper: psycopg keeps no query text for a prepared statement, so DEBUG
    # logs and CaptureQueriesContext would record None. Execute wrappers see every statement.
    return CursorWrapper(Cursor(connection.connection), connection)


# The alias of DATABASE_DIRECT_URL (settings): PostgreSQL itself, past a transaction-pooling PgBouncer.
DIRECT = "direct"


def session_connection() -> BaseDatabaseWrapper:
    """The connection for what lives as long as a PostgreSQL session, not a transaction: LISTEN
    and session advisory locks. Behind a transaction-pooling PgBouncer each statement may reach a
    different server session, so a lock taken on one would never be released by an unlock sent on
    another; these go to DATABASE_DIRECT_URL instead, and the work they guard stays pooled."""
    return connections[DIRECT] if DIRECT in connections.settings else connections[DEFAULT_DB_ALIAS]


def runs_past_mark_fold(
    *,
    mark: str,
    deadline: float,
    fold: Callable[[list[tuple[int, int, int]]], int],
    runs_per_pass: int,
    records_per_run: int,
    records_per_transaction: int,
) -> int:
    """Hand the records of runs whose chain grew past their `mark` column to `fold`, as
    (run, start, stop) ranges of at most `records_per_transaction` records a call, oldest runs
    first, each run at most `records_per_run` a round so one huge run cannot starve the others;
    until nothing is pending or `deadline` (time.monotonic()) passes. Returns what `fold` counted.
    The worker passes that keep a derived copy of the ledger (search index, rollups) walk it so."""
    folded = 0
    while time.monotonic() < deadline:
        with connection.cursor() as cur:
            cur.execute(
                f"SELECT id, {mark}, chain_length FROM ledger_run WHERE chain_length > {mark} ORDER BY id LIMIT %s",  # noqa: S608 - a column name of ours
                [runs_per_pass],
            )
            pending = [(run_pk, start, min(length, start + records_per_run)) for run_pk, start, length in cur]
        if not pending:
            break
        batch: list[tuple[int, int, int]] = []
        batch_records = 0
        for run_pk, start, stop in pending:
            if batch and batch_records + stop - start > records_per_transaction:
                folded += fold(batch)
                batch, batch_records = [], 0
            batch.append((run_pk, start, stop))
            batch_records += stop - start
        folded += fold(batch)
    return folded


def partition_detach_and_drop(cursor: Any, table: str, name: str) -> None:
    """Detach partition `name` of `table` without blocking its readers or writers (CONCURRENTLY
    needs autocommit), then drop it. A detach a killed pass left pending is finished, not restarted."""
    cursor.execute(
        "SELECT i.inhdetachpending FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE c.relname = %s",
        [name],
    )
    row = cursor.fetchone()
    if row is not None:
        mode = "FINALIZE" if row[0] else "CONCURRENTLY"
        cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {name} {mode}")
    cursor.execute(f"DROP TABLE IF EXISTS {name}")
