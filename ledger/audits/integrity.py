"""Writes about integrity: on-demand chain re-checks (with progress) and the periodic anchors."""

import logging

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection, transaction
from django.utils import timezone

from footprint_site.celery import task_send_on_commit
from footprint_site.lib.chain import GENESIS
from ledger.audits import anchors
from ledger.audits.integrity_selectors import run_chain_verify
from ledger.models import AnchoredHead, ChainAnchor, IntegrityCheck, Run
from tenancy.models import Project

logger = logging.getLogger(__name__)


def integrity_check_request(*, run: Run, user: User | AnonymousUser | None) -> IntegrityCheck | None:
    """Start a re-walk of the run's chain. Short chains are walked now; long ones by a worker,
    which reports progress on the check row as it goes. None if the run was deleted meanwhile."""
    check = IntegrityCheck.objects.create(
        run=run,
        requested_by=user if isinstance(user, User) else None,
        records_total=run.chain_length,
    )
    if run.chain_length <= settings.FOOTPRINT_INLINE_VERIFY_MAX_RECORDS:
        return integrity_check_run(check_id=check.pk)
    task_send_on_commit("ledger.tasks.integrity_check", check.pk)
    return check


def integrity_check_run(*, check_id: int) -> IntegrityCheck | None:
    """Walk the chain for a queued check. Running it again (a worker died mid-walk) starts over.

    The task is queued on commit and may run after the run, and with it (a cascade) the check,
    was deleted: then, or if that happens during the walk, nothing is written and None returned.
    """
    check = IntegrityCheck.objects.select_related("run__project").filter(pk=check_id).first()
    if check is None or check.status == IntegrityCheck.Status.DONE:
        return check
    IntegrityCheck.objects.filter(pk=check_id).update(status=IntegrityCheck.Status.RUNNING, records_checked=0)

    def report(checked: int) -> None:
        IntegrityCheck.objects.filter(pk=check_id).update(records_checked=checked)

    verdict = run_chain_verify(run=check.run, progress=report)
    finished = {
        "status": IntegrityCheck.Status.DONE,
        "records_total": check.run.chain_length,
        "records_checked": verdict.records_checked,
        "valid": verdict.valid,
        "broken_at": verdict.broken_at,
        "reason": verdict.reason or "",
        "finished_at": timezone.now(),
    }
    # An UPDATE, not save(): save() would INSERT again a check deleted during the walk.
    if not IntegrityCheck.objects.filter(pk=check_id).update(**finished):
        return None
    for field, value in finished.items():
        setattr(check, field, value)
    return check


def chain_anchors_write() -> int:
    """Sign, per project, the heads of every run whose chain grew since it was last anchored.

    Returns the number of anchors written. Projects with nothing new get no anchor.
    """
    written = 0
    for project in Project.objects.order_by("pk"):
        if _anchor_project(project):
            written += 1
    return written


def _anchor_project(project: Project) -> bool:
    with transaction.atomic():
        # One anchor writer per project at a time; numbers stay contiguous.
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext('footprint.anchor'), %s)", [project.pk])
            cur.execute(
                """
                SELECT r.run_id, r.chain_length, e.hash FROM ledger_run r
                JOIN ledger_runevent e ON e.run_id = r.id AND e.period = r.period AND e.position = r.chain_length - 1
                WHERE r.project_id = %s AND r.chain_length > COALESCE(
                    (SELECT max(h.chain_length) FROM ledger_anchoredhead h
                     WHERE h.project_id = r.project_id AND h.run_id = r.run_id), 0)
                """,
                [project.pk],
            )
            heads = [(run_id, length, bytes(head)) for run_id, length, head in cur.fetchall()]
        if not heads:
            return False
        previous = ChainAnchor.objects.filter(project=project).order_by("-number").first()
        number = previous.number + 1 if previous else 1
        prev_digest = bytes(previous.digest) if previous else GENESIS
        digest = anchors.anchor_digest(project_slug=project.slug, number=number, prev_digest=prev_digest, heads=heads)
        anchor = ChainAnchor.objects.create(
            project=project,
            number=number,
            prev_digest=prev_digest,
            digest=digest,
            signature=anchors.sign(digest),
            run_count=len(heads),
            digest_format=anchors.DIGEST_FORMAT,
        )
        AnchoredHead.objects.bulk_create(
            AnchoredHead(anchor=anchor, project=project, run_id=run_id, chain_length=length, head_hash=head)
            for run_id, length, head in heads
        )
    logger.info("anchored %d chain heads of project %s as anchor %d", len(heads), project.slug, number)
    return True
