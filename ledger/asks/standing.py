"""Standing approvals: "approve this and the same calls for the next N minutes", granted from an
ask's page within the limits the project's admins set, and revoked at any time.

Granting one is approving its ask: the decision appended to the run's chain carries the standing
approval (its author, tool, argument pattern, agent and expiry). Every later ask it covers is
decided at once when it opens (`services._decide_if_standing`), each decision naming it. A
revocation is appended to the chain of the run whose ask granted it.
"""

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from ledger.asks.approver_rules import pattern_check
from ledger.asks.approver_selectors import (
    STANDING_KINDS,
    approval_rule_for_ask,
    ask_agent_id,
    ask_arguments,
    standing_limits_of,
)
from ledger.asks.services import ask_decide
from ledger.exceptions import AskNotFound, StandingApprovalInvalid
from ledger.ingest.runs import run_append_server_event
from ledger.models import Ask, StandingApproval

REVOKED_EVENT = "ledger.standing_approval_revoked"
MAX_NOTE_LENGTH = 2000


@transaction.atomic
def standing_approval_grant(
    *,
    ask_id: int,
    user: User,
    minutes: int,
    pattern: Any,
    any_agent: bool,
    note: str | None = None,
) -> StandingApproval:
    """Approve the ask and the same calls to come for `minutes`: its tool, arguments matching
    `pattern` (no wider than what the ask showed: `approver_rules.pattern_check`), its run's agent
    or, where the project allows it, any agent. Refused with a sentence naming the field when the
    project's limits, the ask's kind or its rule do not allow it; nothing is written then."""
    ask = Ask.objects.select_related("project").filter(pk=ask_id).first()
    if ask is None:
        raise AskNotFound("No such ask.")
    if ask.status != Ask.Status.OPEN or ask.is_overdue:
        raise StandingApprovalInvalid("This ask is no longer open, so it cannot start a standing approval.")
    if ask.kind not in STANDING_KINDS or not ask.tool_name:
        raise StandingApprovalInvalid(
            "Only a tool call waiting for approval can start a standing approval; a question, a takeover "
            "or a consent is decided each time."
        )
    limits = standing_limits_of(project=ask.project)
    if limits.max_minutes == 0:
        raise StandingApprovalInvalid(
            f"Standing approvals are off in project {ask.project.slug}: its admins set how long one may last."
        )
    if not 1 <= minutes <= limits.max_minutes:
        raise StandingApprovalInvalid(
            f"minutes must be from 1 to {limits.max_minutes}, the longest project {ask.project.slug} allows."
        )
    agent_id = ask_agent_id(ask)
    if any_agent and not limits.allow_any_agent:
        raise StandingApprovalInvalid(
            f"agent: project {ask.project.slug} allows standing approvals for the asking agent only."
        )
    if not any_agent and agent_id is None:
        raise StandingApprovalInvalid("agent: this run names no agent, so 'the same agent' cannot be told apart.")
    rule = approval_rule_for_ask(ask=ask)
    if rule is not None and rule.quorum > 1:
        raise StandingApprovalInvalid(
            f"Calls like this need {rule.quorum} different people of group {rule.group.name}; "
            "one person's standing approval cannot stand for them."
        )
    if note is not None and len(note) > MAX_NOTE_LENGTH:
        raise StandingApprovalInvalid(f"note must be at most {MAX_NOTE_LENGTH} characters.")
    checked = pattern_check(pattern, ask_arguments(ask))
    standing = StandingApproval.objects.create(
        project=ask.project,
        tool_name=ask.tool_name,
        pattern=checked,
        agent_id=None if any_agent else agent_id,
        source_ask=ask,
        granted_by=user,
        granted_by_label=user.get_username(),
        note=note or None,
        expires_at=timezone.now() + timedelta(minutes=minutes),
    )
    ask_decide(
        ask_id=ask.pk,
        approved=True,
        via=Ask.Via.PAGE,
        by_label=user.get_username(),
        user=user,
        note=note or f"and the same calls for {minutes} min (standing approval {standing.pk})",
        standing=standing,
    )
    return standing


@transaction.atomic
def standing_approval_revoke(*, standing: StandingApproval, user: User) -> StandingApproval:
    """End a standing approval now; the revocation is chained to the run whose ask granted it.
    One that has ended already (revoked, or expired) is refused, saying when."""
    claimed = StandingApproval.objects.filter(
        pk=standing.pk, revoked_at__isnull=True, expires_at__gt=timezone.now()
    ).update(revoked_at=timezone.now(), revoked_by=user, revoked_by_label=user.get_username())
    standing.refresh_from_db()
    if not claimed:
        if standing.revoked_at is not None:
            raise StandingApprovalInvalid(
                f"This standing approval was revoked by {standing.revoked_by_label} at "
                f"{standing.revoked_at:%Y-%m-%d %H:%M:%S} UTC."
            )
        raise StandingApprovalInvalid(f"This standing approval expired at {standing.expires_at:%Y-%m-%d %H:%M:%S} UTC.")
    source = standing.source_ask
    run_append_server_event(
        project=standing.project,
        run_id=source.run_id,
        type_=REVOKED_EVENT,
        payload={
            "standingApprovalId": standing.pk,
            "askId": source.pk,
            "toolName": standing.tool_name,
            "revokedBy": standing.revoked_by_label,
            "revokedAt": int(standing.revoked_at.timestamp() * 1000) if standing.revoked_at else None,
        },
    )
    return standing
