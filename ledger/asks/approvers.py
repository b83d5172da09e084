"""Writes of who may decide: approver groups and their members, approval rules, the limits of
standing approvals (each an admin's change, recorded as an `AdminChange` in its transaction), and
the gate every person's decision passes (`decision_gate`) with the quorum's approvals before the
decision itself (`quorum_approval_add`).
"""

import re
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import IntegrityError, transaction
from django.db.models import Q

from ledger.asks.approver_rules import conditions_parse, conditions_text
from ledger.asks.approver_selectors import (
    approval_rule_for_ask,
    group_has_member,
    person_minted_asking_key,
    project_tool_names,
    quorum_approvals_counted,
)
from ledger.exceptions import ApproverRuleInvalid, AskInvalid, AskNotPermitted, AskOwnDecision
from ledger.models import ApprovalRule, ApproverGroup, Ask, QuorumApproval, StandingApprovalLimits
from tenancy.models import DECIDING_ROLES, AdminChange, Project
from tenancy.services import UNNAMED, Actor, admin_change_record

GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
MAX_QUORUM = 10
# An hour a day for a week is the widest a project may allow: beyond it, a rule says it better.
MAX_STANDING_MINUTES = 7 * 24 * 60


@transaction.atomic
def approver_group_create(*, project: Project, name: str, actor: Actor = UNNAMED) -> ApproverGroup:
    name = name.strip()
    if not GROUP_NAME.match(name):
        raise ApproverRuleInvalid(
            "name must be 1 to 64 letters, digits, '-' or '_', starting with a letter or digit: for example 'treasury'."
        )
    try:
        with transaction.atomic():
            group = ApproverGroup.objects.create(project=project, name=name)
    except IntegrityError:
        raise ApproverRuleInvalid(f"name: project {project.slug} already has a group named {name!r}.") from None
    admin_change_record(
        actor=actor,
        action=AdminChange.Action.APPROVER_GROUP_CREATED,
        project=project,
        target_type="approver group",
        target_id=group.pk,
        target_label=name,
        before=None,
        after={"name": name},
    )
    return group


@transaction.atomic
def approver_group_member_add(*, group: ApproverGroup, username: str, actor: Actor = UNNAMED) -> User:
    """Add a person who may decide in the group's project (an approver or admin of it)."""
    username = username.strip()
    member = User.objects.filter(
        username=username, membership__project_id=group.project_id, membership__role__in=DECIDING_ROLES
    ).first()
    if member is None:
        raise ApproverRuleInvalid(
            f"username: {username[:150]!r} is not an approver or admin of this project; only they may join a group."
        )
    if group.members.filter(pk=member.pk).exists():
        return member
    group.members.add(member)
    admin_change_record(
        actor=actor,
        action=AdminChange.Action.APPROVER_ADDED,
        project=group.project,
        target_type="approver group",
        target_id=group.pk,
        target_label=f"{member.get_username()} in {group.name}",
        before=None,
        after={"group": group.name, "member": member.get_username()},
    )
    return member


@transaction.atomic
def approver_group_member_remove(*, group: ApproverGroup, user_id: int, actor: Actor = UNNAMED) -> None:
    """Take a person out of a group; one not in it is a quiet no-op that writes nothing. Their
    approvals toward quorums not yet met no longer count (`quorum_approval_add` reads the group
    under the same row lock, so a quorum is never completed by someone removed meanwhile)."""
    ApproverGroup.objects.select_for_update().filter(pk=group.pk).first()
    member = group.members.filter(pk=user_id).first()
    if member is None:
        return
    group.members.remove(member)
    admin_change_record(
        actor=actor,
        action=AdminChange.Action.APPROVER_REMOVED,
        project=group.project,
        target_type="approver group",
        target_id=group.pk,
        target_label=f"{member.get_username()} in {group.name}",
        before={"group": group.name, "member": member.get_username()},
        after=None,
    )


@transaction.atomic
def approval_rule_create(
    *, project: Project, tool_name: str, group_name: str, quorum: int, conditions: str, actor: Actor = UNNAMED
) -> ApprovalRule:
    """A rule: calls of `tool_name` (those whose arguments meet `conditions`, written one a line)
    need `quorum` different people of the group. Refused, naming the field, for a tool the
    project's runs never called, a group it lacks, a quorum larger than the group or out of range,
    and conditions no call could meet."""
    tool_name = tool_name.strip()
    if not tool_name:
        raise ApproverRuleInvalid("tool_name: name the tool whose calls the rule governs, e.g. transfer_funds.")
    if tool_name not in project_tool_names(project=project):
        raise ApproverRuleInvalid(
            f"tool_name: no run of project {project.slug} has called a tool named {tool_name[:100]!r}; "
            "a rule names a tool its runs use."
        )
    group = ApproverGroup.objects.filter(project=project, name=group_name.strip()).first()
    if group is None:
        raise ApproverRuleInvalid(f"group: project {project.slug} has no approver group named {group_name[:64]!r}.")
    if not 1 <= quorum <= MAX_QUORUM:
        raise ApproverRuleInvalid(f"quorum must be from 1 to {MAX_QUORUM} different people.")
    members = group.members.count()
    if quorum > members:
        raise ApproverRuleInvalid(
            f"quorum: group {group.name} has {members} member{'s' if members != 1 else ''}, "
            f"so a quorum of {quorum} could never be met."
        )
    parsed = conditions_parse(conditions)
    rule = ApprovalRule.objects.create(
        project=project, tool_name=tool_name, group=group, quorum=quorum, conditions=parsed
    )
    admin_change_record(
        actor=actor,
        action=AdminChange.Action.APPROVAL_RULE_ADDED,
        project=project,
        target_type="approval rule",
        target_id=rule.pk,
        target_label=_rule_label(rule),
        before=None,
        after={"tool": tool_name, "group": group.name, "quorum": quorum, "conditions": parsed},
    )
    return rule


def _rule_label(rule: ApprovalRule) -> str:
    where = f" where {conditions_text(rule.conditions)}" if rule.conditions else ""
    return f"{rule.tool_name}{where}: {rule.quorum} of {rule.group.name}"


@transaction.atomic
def approval_rule_remove(*, rule: ApprovalRule, actor: Actor = UNNAMED) -> None:
    label = _rule_label(rule)
    before = {"tool": rule.tool_name, "group": rule.group.name, "quorum": rule.quorum, "conditions": rule.conditions}
    if not ApprovalRule.objects.filter(pk=rule.pk).delete()[0]:
        return
    admin_change_record(
        actor=actor,
        action=AdminChange.Action.APPROVAL_RULE_REMOVED,
        project=rule.project,
        target_type="approval rule",
        target_id=rule.pk,
        target_label=label,
        before=before,
        after=None,
    )


@transaction.atomic
def standing_limits_set(
    *, project: Project, max_minutes: int, allow_any_agent: bool, actor: Actor = UNNAMED
) -> StandingApprovalLimits:
    """How long a standing approval may last (0 turns them off) and whether it may cover any agent."""
    if not 0 <= max_minutes <= MAX_STANDING_MINUTES:
        raise ApproverRuleInvalid(f"max_minutes must be from 0 (off) to {MAX_STANDING_MINUTES} (a week).")
    limits, created = StandingApprovalLimits.objects.select_for_update().get_or_create(project=project)
    before = None if created else {"max_minutes": limits.max_minutes, "allow_any_agent": limits.allow_any_agent}
    after = {"max_minutes": max_minutes, "allow_any_agent": allow_any_agent}
    if before == after:
        return limits
    limits.max_minutes, limits.allow_any_agent = max_minutes, allow_any_agent
    limits.save()
    admin_change_record(
        actor=actor,
        action=AdminChange.Action.STANDING_LIMITS_CHANGED,
        project=project,
        target_type="standing limits",
        target_id=project.pk,
        target_label=f"standing approvals of {project.slug}",
        before=before,
        after=after,
    )
    return limits


# --- the gate of every decision ---------------------------------------------------------------------


def decision_gate(
    *, ask: Ask, approved: bool, via: str, user: AbstractBaseUser | AnonymousUser | None, has_key: bool
) -> ApprovalRule | None:
    """Refuse a decision the ask's rule does not allow, before anything is written; return the
    rule when its quorum needs more than one person (the approval is then counted first).

    A rule's group decides its calls, either way; an integration's free-text `by` names nobody the
    server can tell apart, so a rule's calls are decided by signed-in people. Nobody approves what
    an agent key they minted asked."""
    if via in (Ask.Via.DEADLINE, Ask.Via.RUN, Ask.Via.STANDING):
        return None
    if approved and user is not None and person_minted_asking_key(user=user, ask=ask):
        raise AskOwnDecision(
            "You minted the agent key that asked this, so you may not approve it: someone else decides it."
        )
    rule = approval_rule_for_ask(ask=ask)
    if rule is None:
        return None
    if user is None or has_key:
        raise AskNotPermitted(
            f"Calls of {rule.tool_name} need {rule.quorum} of group {rule.group.name}, signed in: "
            "an integration's key cannot decide them."
        )
    if not group_has_member(group=rule.group, user=user):
        raise AskNotPermitted(f"Only members of group {rule.group.name} may decide calls of {rule.tool_name}.")
    return rule if rule.quorum > 1 and approved else None


def quorum_approval_add(
    *, ask_id: int, rule: ApprovalRule, user: User, by_label: str, note: str | None, in_time: Q
) -> list[QuorumApproval] | None:
    """Count one person's approval toward the quorum, under the run's lock. The approvals so far
    (this one last), or None when the ask is no longer open and in time (the caller's claim then
    says why). A person who already approved is refused: one person fills one place."""
    if not Ask.objects.filter(in_time, pk=ask_id, status=Ask.Status.OPEN).exists():
        return None
    ApproverGroup.objects.select_for_update().filter(pk=rule.group_id).first()  # its members stay put meanwhile
    try:
        with transaction.atomic():
            QuorumApproval.objects.create(ask_id=ask_id, rule=rule, user=user, by_label=by_label, note=note)
    except IntegrityError:
        raise AskInvalid(
            f"You already approved this; it needs {rule.quorum} different people of group {rule.group.name}, "
            "and one person fills one place."
        ) from None
    # Only the approvals of people still in the group count: one taken out before the quorum was
    # met no longer stands for the group.
    return quorum_approvals_counted(ask_id=ask_id, group=rule.group)


def quorum_record(approvals: list[QuorumApproval]) -> list[dict[str, Any]]:
    """The approvals as the chained decision names them."""
    return [{"by": a.by_label, "at": int(a.at.timestamp() * 1000)} for a in approvals if a.at is not None]
