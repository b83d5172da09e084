"""Retention's reads: tombstones, holds, and an archive checked against its tombstone."""

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from django.contrib.auth.models import AnonymousUser, User
from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import OuterRef, Subquery
from django.db.models.functions import JSONObject

from footprint_site.lib.ids import is_run_id
from ledger.audits.verify import verify_bundles
from ledger.models import LedgerRetention, Run, RunHold, RunTombstone
from tenancy.models import Membership, Project
from tenancy.selectors import projects_for_user


def tombstone_latest(*, project: Project, run_id: str) -> RunTombstone | None:
    if not is_run_id(run_id):  # what no run may be called (a NUL, say) was never removed either
        return None
    return RunTombstone.objects.filter(project=project, run_id=run_id).order_by("-removed_at", "-pk").first()


def run_holds_in_force(*, project: Project, run_id: str) -> list[RunHold]:
    return list(RunHold.objects.filter(project=project, run_id=run_id, released_at__isnull=True).order_by("pk"))


def run_retention_days(*, project: Project) -> int | None:
    return LedgerRetention.objects.filter(project=project).values_list("keep_days", flat=True).first()


@dataclass(frozen=True)
class ArchiveCheck:
    """An archive held against its tombstone: the same bytes (SHA-256), a bundle the framework's
    verifier accepts, of the run and the record count the tombstone names."""

    digest_matches: bool
    verdict: dict[str, Any] | None  # verifyAuditBundle's answer, when the bytes are a bundle
    run_matches: bool
    records_match: bool
    problems: list[str]

    @property
    def valid(self) -> bool:
        return not self.problems


def archive_check(*, tombstone: RunTombstone, body: bytes) -> ArchiveCheck:
    problems: list[str] = []
    digest = hashlib.sha256(body).hexdigest()
    digest_matches = digest == tombstone.archive_sha256
    if not digest_matches:
        problems.append(
            f"Its SHA-256 is {digest}; the tombstone recorded {tombstone.archive_sha256}: "
            "these are not the archived bytes."
        )
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        problems.append("It is not JSON, so not an audit bundle.")
        return ArchiveCheck(digest_matches, None, False, False, problems)
    verdict = verify_bundles(document)
    if not verdict["valid"]:
        problems.append(f"The framework's verifier refuses it: {verdict.get('reason')}")
    records = document.get("records") if isinstance(document, dict) else None
    genesis = records[0] if isinstance(records, list) and records and isinstance(records[0], dict) else {}
    run_matches = (genesis.get("payload") or {}).get("runId") == tombstone.run_id
    if not run_matches:
        problems.append(f"It is the bundle of another run, not of {tombstone.run_id!r}.")
    # The bundle holds a genesis record, then the run's records.
    records_match = isinstance(records, list) and len(records) == tombstone.chain_length + 1
    if not records_match:
        held = len(records) - 1 if isinstance(records, list) else 0
        problems.append(f"It holds {held} records of the run; the tombstone recorded {tombstone.chain_length}.")
    return ArchiveCheck(digest_matches, verdict, run_matches, records_match, problems)


def tombstone_for_user(*, user: User | AnonymousUser, project_slug: str, run_id: str) -> RunTombstone | None:
    project = projects_for_user(user).filter(slug=project_slug).first()
    return None if project is None else tombstone_latest(project=project, run_id=run_id)


def run_exists(*, project: Project, run_id: str) -> bool:
    return is_run_id(run_id) and Run.objects.filter(project=project, run_id=run_id).exists()


def run_hold_panel(*, user: User | AnonymousUser, project: Project, run_id: str) -> dict[str, Any]:
    """What the run page's hold line shows, and whether this person may hold or release: one
    question, since the run page counts its queries."""
    member = user.pk or 0  # an anonymous person (pk None) is nobody's member
    holds = RunHold.objects.filter(project=OuterRef("pk"), run_id=run_id, released_at__isnull=True).order_by("pk")
    row = (
        Project.objects.filter(pk=project.pk)
        .annotate(
            member_role=Subquery(Membership.objects.filter(project=OuterRef("pk"), user_id=member).values("role")[:1]),
            keep_days=Subquery(LedgerRetention.objects.filter(project=OuterRef("pk")).values("keep_days")[:1]),
            holds=ArraySubquery(
                holds.values(json=JSONObject(pk="pk", reason="reason", placed_by="placed_by", placed_at="placed_at"))
            ),
        )
        .values("member_role", "keep_days", "holds")
        .get()
    )
    role = Membership.Role.ADMIN if user.is_superuser else row["member_role"]
    return {
        "holds": [
            RunHold(project=project, run_id=run_id, **{**hold, "placed_at": datetime.fromisoformat(hold["placed_at"])})
            for hold in row["holds"]
        ],
        "may_hold": role in (Membership.Role.AUDITOR, Membership.Role.ADMIN),
        "retention_days": row["keep_days"],
    }
