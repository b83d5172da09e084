"""Monthly partitions of the large per-run tables, named `<table>_pYYYYMM`.

Every row of these tables carries its run's period: the month the run was created, as an int
yyyymm (`Run.period`). A run's rows all live in that month's partition however long it runs, so
(run, position) stays unique under the keys extended by period, and removing a month is dropping
its partitions. Two more partitions per table: `_legacy`, the table as it was before
partitioning (period 0, attached in place by migration 0036 rather than copied), and `_kept`,
where retention moves the runs that must outlive the month they were created in.

The partitions of the coming months are created ahead by the beat's `ledger.partitions_ensure`.
There is no DEFAULT partition: one would be scanned, under lock, whenever a month is created.
"""

from collections.abc import Iterable
from datetime import UTC, date, datetime
from typing import Any

from django.db import connection, transaction

TABLES = (
    "ledger_runevent",
    "ledger_middlewaredecision",
    "ledger_permissionverdict",
    "ledger_tooleffect",
    "ledger_refusal",
    "ledger_toolcall",
    "ledger_runspan",
    "ledger_runsearchchunk",
)
LEGACY_PERIOD = 0  # the rows written before partitioning: below the first month
KEPT_PERIOD = 999999  # no month: the runs kept past their month's drop (a hold, a longer retention)
MONTHS_AHEAD = 3
ENSURE_LOCK = "footprint.ledger-partitions"


def period_of(day: date) -> int:
    return day.year * 100 + day.month


def current_period() -> int:
    return period_of(datetime.now(tz=UTC).date())


def next_period(period: int) -> int:
    year, month = divmod(period, 100)
    return period + 1 if month < 12 else (year + 1) * 100 + 1


def period_start(period: int) -> datetime:
    year, month = divmod(period, 100)
    return datetime(year, month, 1, tzinfo=UTC)


def partition_name(table: str, period: int) -> str:
    if period == LEGACY_PERIOD:
        return f"{table}_legacy"
    if period == KEPT_PERIOD:
        return f"{table}_kept"
    return f"{table}_p{period}"


def month_partition_sql(table: str, period: int) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {partition_name(table, period)} PARTITION OF {table} "
        f"FOR VALUES FROM ({period}) TO ({next_period(period)})"
    )


def ensure_partitions_sql(*, existing: Iterable[str], today_period: int | None = None) -> list[str]:
    """The statements creating the missing partitions of this month and the next MONTHS_AHEAD,
    given the names of the partitions that exist."""
    have = set(existing)
    period = today_period or current_period()
    statements = []
    for _ in range(MONTHS_AHEAD + 1):
        statements += [month_partition_sql(t, period) for t in TABLES if partition_name(t, period) not in have]
        period = next_period(period)
    return statements


def existing_partitions(cursor: Any = None) -> set[str]:
    """The names of the partitions of every partitioned table."""
    if cursor is None:
        with connection.cursor() as own:
            return existing_partitions(own)
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = ANY(%s)",
        [list(TABLES)],
    )
    return {row[0] for row in cursor.fetchall()}


def month_periods(names: Iterable[str]) -> set[int]:
    """The months that have a partition of the events table among `names`."""
    prefix = "ledger_runevent_p"
    return {int(n.removeprefix(prefix)) for n in names if n.startswith(prefix) and n.removeprefix(prefix).isdigit()}


def partitions_ensure() -> int:
    """Create the partitions of this month and the next MONTHS_AHEAD; returns how many were made.

    Exactly once under two beats: one pass at a time (a transaction advisory lock), and the
    statements are IF NOT EXISTS, so a pass finding the lock taken, or arriving after, does nothing.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s))", [ENSURE_LOCK])
        if not cursor.fetchone()[0]:
            return 0
        statements = ensure_partitions_sql(existing=existing_partitions(cursor))
        for statement in statements:
            cursor.execute(statement)
    return len(statements)
