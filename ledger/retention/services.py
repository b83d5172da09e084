"""Retention's writes: a project's run retention, legal holds, and the pass that archives and
removes runs past their time.

The ledger is append-only everywhere else; this is the one place its rows are deleted, and only
after the run's audit bundle has been written to the archive store, read back and its digest
checked. The removal and its tombstone commit together: a pass stopped at any point leaves the
run in place (perhaps with an archive written again next time) or the run gone with its
tombstone, never neither.
"""

import hashlib
import logging
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import orjson
from django.db import connection, transaction
from django.db.models import ForeignKey, ForeignObjectRel
from django.db.models.functions import Now
from django.utils import timezone

from footprint_site.lib.db import session_connection
from ledger import partitions
from ledger.audits.selectors import run_audit_bundle
from ledger.models import LedgerRetention, OtlpSpan, Run, RunHold, RunTombstone
from ledger.retention import archive, periods
from tenancy.models import AdminChange, Project
from tenancy.services import Actor, admin_change_record

logger = logging.getLogger(__name__)

OTLP_RUN_PREFIX = "otlp-"


def run_retention_set(*, project: Project, keep_days: int | None, actor: Actor) -> LedgerRetention | None:
    """Keep the project's runs `keep_days` after their last event (None: forever). ValueError,
    naming the field, for a number out of range; nothing is written then."""
    if keep_days is not None and not LedgerRetention.MIN_DAYS <= keep_days <= LedgerRetention.MAX_DAYS:
        raise ValueError(
            f"keep_days must be a whole number of days from {LedgerRetention.MIN_DAYS} to "
            f"{LedgerRetention.MAX_DAYS}, or empty to keep runs forever; got {keep_days}."
        )
    with transaction.atomic():
        current = LedgerRetention.objects.select_for_update().filter(project=project).first()
        before = current.keep_days if current else None
        if before == keep_days:
            return current
        if keep_days is None:
            LedgerRetention.objects.filter(project=project).delete()
            policy = None
        else:
            policy, _ = LedgerRetention.objects.update_or_create(project=project, defaults={"keep_days": keep_days})
        admin_change_record(
            actor=actor,
            action=AdminChange.Action.RUN_RETENTION_CHANGED,
            project=project,
            target_type="project",
            target_id=project.pk,
            target_label=f"runs of {project.slug}",
            before={"keep_days": before},
            after={"keep_days": keep_days},
        )
    return policy


def run_hold_place(*, project: Project, run_id: str, reason: str, actor: Actor) -> RunHold:
    """Hold the run against retention until released. ValueError for a run that does not exist or
    an empty reason."""
    reason = reason.strip()
    if not reason:
        raise ValueError("reason: say why the run is held (a case number, a request), in a few words.")
    with transaction.atomic():
        if not Run.objects.filter(project=project, run_id=run_id).exists():
            raise ValueError(f"run_id: project {project.slug} has no run {run_id!r}.")
        hold = RunHold.objects.create(project=project, run_id=run_id, reason=reason[:500], placed_by=actor.label)
        admin_change_record(
            actor=actor,
            action=AdminChange.Action.RUN_HOLD_PLACED,
            project=project,
            target_type="run",
            target_id=hold.pk,
            target_label=f"run {run_id}",
            before=None,
            after={"reason": hold.reason},
        )
    return hold


def run_hold_release(*, hold: RunHold, actor: Actor) -> None:
    with transaction.atomic():
        released = RunHold.objects.filter(pk=hold.pk, released_at__isnull=True).update(
            released_at=Now(), released_by=actor.label
        )
        if not released:
            return  # released meanwhile: one release, one record
        admin_change_record(
            actor=actor,
            action=AdminChange.Action.RUN_HOLD_RELEASED,
            project=hold.project,
            target_type="run",
            target_id=hold.pk,
            target_label=f"run {hold.run_id}",
            before={"reason": hold.reason},
            after=None,
        )


@dataclass(frozen=True)
class RetentionPass:
    removed: int
    records: int
    skipped: int
    failed: int
    periods_dropped: int = 0  # whole months whose partitions were dropped (ledger.retention.periods)


def runs_retention_pass(
    *, now: datetime | None = None, limit: int = 200, budget_seconds: float = 50.0
) -> RetentionPass:
    """Archive and remove, oldest first, the runs of every project past its retention, up to
    `limit` runs or `budget_seconds`. Held runs stay. Runs that are busy (ingestion holds them),
    grew meanwhile or whose archive failed are left for the next pass."""
    with session_connection().cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(hashtext('footprint.runs-retention'))")
        (locked,) = cur.fetchone()
    if not locked:
        return RetentionPass(0, 0, 0, 0)  # another pass is at it: the same runs would be archived twice
    try:
        now = now or timezone.now()
        deadline = time.monotonic() + budget_seconds
        drops = periods.periods_drop_due(now=now, deadline=deadline, archive_run=run_archive_and_remove)
        done = _retention_pass(now, limit, deadline)
        return replace(done, periods_dropped=sum(drop.dropped for drop in drops))
    finally:
        with session_connection().cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(hashtext('footprint.runs-retention'))")


def _retention_pass(now: datetime, limit: int, deadline: float) -> RetentionPass:
    removed = records = skipped = failed = 0
    for policy in LedgerRetention.objects.select_related("project").order_by("project_id"):
        due = (
            Run.objects.filter(project=policy.project, last_event_at__lt=now - timedelta(days=policy.keep_days))
            .exclude(
                run_id__in=RunHold.objects.filter(project=policy.project, released_at__isnull=True).values("run_id")
            )
            .order_by("last_event_at")
            .values_list("pk", flat=True)[: limit - removed]
        )
        for run_pk in due:
            if time.monotonic() > deadline:
                return RetentionPass(removed, records, skipped, failed)
            try:
                tombstone = run_archive_and_remove(run_pk=run_pk, keep_days=policy.keep_days)
            except archive.ArchiveUnavailable as exc:
                logger.warning("retention left run %s in place: %s", run_pk, exc)
                failed += 1
                continue
            if tombstone is None:
                skipped += 1
            else:
                removed += 1
                records += tombstone.chain_length
        if removed >= limit:
            break
    return RetentionPass(removed, records, skipped, failed)


def run_archive_and_remove(
    *, run_pk: int, keep_days: int, rows_dropped_with_period: bool = False
) -> RunTombstone | None:
    """Archive one run, check the archive, then remove the run and write its tombstone in one
    transaction. None when the run is gone, held, busy or grew since its archive was written.

    `rows_dropped_with_period`: the run's rows in the partitioned tables are left for its month's
    partition drop (ledger.retention.periods), which follows once every run of the month is done."""
    run = Run.objects.select_related("project").filter(pk=run_pk).first()
    if run is None:
        return None
    body = orjson.dumps(run_audit_bundle(run=run))
    digest = hashlib.sha256(body).hexdigest()
    name = archive.archive_name(project_slug=run.project.slug, run_id=run.run_id, chain_length=run.chain_length)
    location = archive.archive_put(name, body)
    if hashlib.sha256(archive.archive_get(location)).hexdigest() != digest:
        raise archive.ArchiveUnavailable(f"The archive {location} read back differs from what was written.")
    with transaction.atomic():
        # Ingestion appends under this row's lock: a run being written to now is left for later.
        locked = Run.objects.select_for_update(skip_locked=True).filter(pk=run.pk, chain_length=run.chain_length)
        if not locked.exists():
            return None
        if RunHold.objects.filter(project=run.project, run_id=run.run_id, released_at__isnull=True).exists():
            return None
        tombstone = RunTombstone.objects.create(
            project=run.project,
            run_id=run.run_id,
            chain_length=run.chain_length,
            head_hash=bytes(run.head_hash),
            first_event_at=run.first_event_at,
            last_event_at=run.last_event_at,
            keep_days=keep_days,
            archive_location=location,
            archive_sha256=digest,
            archive_bytes=len(body),
        )
        _delete_run_rows(run, partitioned_rows=not rows_dropped_with_period)
    logger.info(
        "retention removed run %s of %s (%d records) to %s", run.run_id, run.project.slug, run.chain_length, location
    )
    return tombstone


def _delete_run_rows(run: Run, *, partitioned_rows: bool = True) -> None:
    """Every row that belongs to the run, table by table in SQL (the ORM's cascade would load the
    ids of a 100,000-event run into memory first), then the run itself. In the partitioned tables,
    by the run's period (its one partition), unless `partitioned_rows` is False: then they go with
    the partition."""
    with connection.cursor() as cur:
        for field in run_foreign_keys():
            table = field.model._meta.db_table
            if table in partitions.TABLES:
                if partitioned_rows:
                    cur.execute(
                        f'DELETE FROM "{table}" WHERE "{field.column}" = %s AND period = %s',  # noqa: S608 - names from the models
                        [run.pk, run.period],
                    )
                continue
            cur.execute(
                f'DELETE FROM "{table}" WHERE "{field.column}" = %s',  # noqa: S608 - names from the models
                [run.pk],
            )
        cur.execute('DELETE FROM "ledger_run" WHERE id = %s', [run.pk])
    if run.source == Run.Source.OTLP and run.run_id.startswith(OTLP_RUN_PREFIX):
        OtlpSpan.objects.filter(project=run.project, trace_id=run.run_id.removeprefix(OTLP_RUN_PREFIX)).delete()


def run_foreign_keys() -> list[ForeignKey[Run]]:
    """The foreign keys to Run of every model, those without a reverse accessor included."""
    relations = (field for field in Run._meta.get_fields(include_hidden=True) if isinstance(field, ForeignObjectRel))
    return [relation.field for relation in relations if isinstance(relation.field, ForeignKey)]
