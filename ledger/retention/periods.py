"""Removing a whole expired month: its partitions of every large table detached and dropped, not
its rows deleted one by one (ledger/partitions.py).

A month is dropped once it is over and the runs in it that must outlive it hold at most
MAX_KEPT_SHARE of its records: runs held, of a project that keeps its runs forever, or still
within their project's retention (a run's time runs from its last event, so a run created late in
the month with events in the next counts by its last one). Before the drop, run by run:
- a run that must outlive the month is moved to the `_kept` partition: its rows' period and
  `Run.period` change in one transaction holding the run's row lock, so no read ever sees its
  chain split between two partitions;
- every other run is archived as retention archives (written, read back, digest checked), then
  its tombstone is written and its run row removed in one transaction; its events and
  projections stay in the month's partition until the drop.
Only when no run is left in the month are its partitions detached (CONCURRENTLY: readers and
writers of other months never wait) and dropped. A pass stopped anywhere leaves the partitions in
place, with the runs it had not reached intact, or everything archived and tombstoned; the next
pass carries on, finishing a detach a killed pass left pending.

A month whose runs to keep hold more than MAX_KEPT_SHARE of its records waits: its expired runs
go row by row as before, for moving most of a month costs more than deleting a little of it.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction

from footprint_site.lib.db import partition_detach_and_drop
from ledger import partitions
from ledger.models import Run, RunTombstone
from ledger.retention import archive

logger = logging.getLogger(__name__)

MAX_KEPT_SHARE = 0.25

# The month's runs to keep past its drop, and their records: held, of a project keeping its runs
# forever, or still within their project's retention at `now`.
_TO_KEEP_SQL = """
SELECT r.id, r.chain_length FROM ledger_run r
LEFT JOIN ledger_ledgerretention p ON p.project_id = r.project_id
WHERE r.period = %(period)s AND (
    p.id IS NULL
    OR coalesce(r.last_event_at, r.created_at) >= %(now)s - make_interval(days => p.keep_days)
    OR EXISTS (SELECT 1 FROM ledger_runhold h WHERE h.project_id = r.project_id AND h.run_id = r.run_id
               AND h.released_at IS NULL))
"""
_RECORDS_SQL = "SELECT count(*), coalesce(sum(chain_length), 0) FROM ledger_run WHERE period = %(period)s"


@dataclass(frozen=True)
class PeriodDrop:
    period: int
    archived: int  # runs archived and tombstoned, their rows dropped with the partitions
    kept: int  # runs moved to the kept partition
    dropped: bool  # False: left in place (a run busy, grown or held meanwhile, an archive failure)


def months_over(now: datetime) -> list[int]:
    """The months (and the legacy partition, 0) whose partitions exist and that ended before `now`."""
    this_month = partitions.period_of(now.date())
    names = partitions.existing_partitions()
    months = sorted(p for p in partitions.month_periods(names) if p < this_month)
    legacy = partitions.partition_name("ledger_runevent", partitions.LEGACY_PERIOD)
    if legacy in names:
        # Dropped once it holds rows and their runs are done; an empty one (a database created
        # partitioned) costs nothing and stays for writers that name no period.
        with connection.cursor() as cur:
            cur.execute(f"SELECT EXISTS (SELECT 1 FROM {legacy})")  # noqa: S608 - a fixed name
            if cur.fetchone()[0]:
                months.insert(0, partitions.LEGACY_PERIOD)
    return months


def period_due(*, period: int, now: datetime) -> bool:
    with connection.cursor() as cur:
        cur.execute(_TO_KEEP_SQL, {"period": period, "now": now})
        kept_records = sum(length for _, length in cur.fetchall())
        cur.execute(_RECORDS_SQL, {"period": period})
        _, records = cur.fetchone()
    return kept_records <= MAX_KEPT_SHARE * records


ArchiveRun = Callable[..., RunTombstone | None]  # ledger.retention.services.run_archive_and_remove


def periods_drop_due(*, now: datetime, deadline: float, archive_run: ArchiveRun) -> list[PeriodDrop]:
    """Drop every due month, oldest first, until `deadline` (time.monotonic()). The caller holds
    retention's advisory lock: one pass at a time archives and drops."""
    done = []
    for period in months_over(now):
        if time.monotonic() > deadline:
            break
        if period_due(period=period, now=now):
            done.append(period_drop(period=period, now=now, archive_run=archive_run, deadline=deadline))
    return done


def period_drop(*, period: int, now: datetime, archive_run: ArchiveRun, deadline: float = float("inf")) -> PeriodDrop:
    """Keep, archive (each run through `archive_run`), then drop one month, in that order (see the
    module's docstring)."""
    with connection.cursor() as cur:
        cur.execute(_TO_KEEP_SQL, {"period": period, "now": now})
        to_keep = [pk for pk, _ in cur.fetchall()]
    for run_pk in to_keep:
        run_rehome(run_pk=run_pk, period=partitions.KEPT_PERIOD)
    archived = 0
    runs = Run.objects.filter(period=period).select_related("project__ledger_retention").order_by("id")
    for run in runs.iterator():
        if time.monotonic() > deadline:
            return PeriodDrop(period, archived, len(to_keep), dropped=False)
        keep_days = run.project.ledger_retention.keep_days
        try:
            tombstone = archive_run(run_pk=run.pk, keep_days=keep_days, rows_dropped_with_period=True)
        except archive.ArchiveUnavailable as exc:
            logger.warning("retention left month %s in place: run %s: %s", period, run.run_id, exc)
            return PeriodDrop(period, archived, len(to_keep), dropped=False)
        if tombstone is None:
            return PeriodDrop(period, archived, len(to_keep), dropped=False)
        archived += 1
    if Run.objects.filter(period=period).exists():  # a run moved here meanwhile: the next pass decides
        return PeriodDrop(period, archived, len(to_keep), dropped=False)
    with connection.cursor() as cur:
        for table in partitions.TABLES:
            partition_detach_and_drop(cur, table, partitions.partition_name(table, period))
    logger.info("retention dropped month %s: %d runs archived, %d kept", period, archived, len(to_keep))
    return PeriodDrop(period, archived, len(to_keep), dropped=True)


def run_rehome(*, run_pk: int, period: int) -> int:
    """Move every row of the run to `period`'s partition and set its `Run.period`; returns the rows moved.

    One transaction per run, holding the run's row lock (as ingestion takes it): ingestion of that
    run waits, nothing else does, and no read sees the run's chain half in one partition and half
    in another. Moving a row between partitions is an UPDATE of its period (a delete and an insert).
    """
    moved = 0
    with transaction.atomic():
        run = Run.objects.select_for_update().only("id", "period").filter(pk=run_pk).first()
        if run is None or run.period == period:
            return 0
        with connection.cursor() as cur:
            for table in partitions.TABLES:
                cur.execute(
                    f"UPDATE {table} SET period = %s WHERE run_id = %s AND period = %s",  # noqa: S608 - fixed names
                    [period, run.pk, run.period],
                )
                moved += cur.rowcount
        Run.objects.filter(pk=run.pk).update(period=period)
    return moved
