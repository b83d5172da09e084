"""Reads of who may decide: a project's approver groups, approval rules and standing approvals;
the rule an ask falls under, the approvals its quorum has so far, and the standing approval in
force that covers it (the fast path at every ask's opening)."""

from dataclasses import dataclass
from typing import Any

import orjson
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, Q, QuerySet
from django.db.models.functions import Now

from ledger.asks.approver_rules import conditions_match, pattern_match
from ledger.models import (
    ApprovalRule,
    ApproverGroup,
    Ask,
    QuorumApproval,
    Run,
    StandingApproval,
    StandingApprovalLimits,
    ToolCall,
)
from tenancy.models import AdminChange, Project

# The kinds a standing approval may decide: a tool call waiting for approval. A question's answer,
# a takeover and a consent are each a person's own act, every time.
STANDING_KINDS = (Ask.Kind.ASK, Ask.Kind.CHECK_IN)


def ask_arguments(ask: Ask) -> Any:
    """The arguments the paused call would run with: the check-in's, the checkpoint's paused ones,
    else the call's as the model sent them (None when none of these is known yet)."""
    if ask.check_in and isinstance(ask.check_in.get("args"), dict):
        return ask.check_in["args"]
    if "checkpoint" not in ask.get_deferred_fields():  # an ask just opened holds it already
        checkpoint = ask.checkpoint
    else:
        checkpoint = Ask.objects.filter(pk=ask.pk).values_list("checkpoint", flat=True).first()
    if checkpoint is not None:
        # A checkpoint is opaque to the server (the framework's own fixtures carry a string): read
        # the paused args only from the shape that has them.
        document = orjson.loads(bytes(checkpoint))
        state = document.get("sharedState") if isinstance(document, dict) else None
        if isinstance(state, dict) and state.get("pausedAskArgs") is not None:
            return state["pausedAskArgs"]
    call = (
        ToolCall.objects.with_args_and_result()
        .filter(run__project_id=ask.project_id, run__run_id=ask.run_id, tool_call_id=ask.tool_call_id)
        .first()
    )
    return call.args if call else None


def ask_agent_id(ask: Ask) -> str | None:
    """The agent of the ask's run, as its events name it."""
    return Run.objects.filter(project_id=ask.project_id, run_id=ask.run_id).values_list("agent_id", flat=True).first()


def approval_rule_for_ask(*, ask: Ask, args: Any = None) -> ApprovalRule | None:
    """The strictest rule the ask's call falls under (the largest quorum), or None: then any
    approver of the project decides it alone."""
    if not ask.tool_name:
        return None
    rules = list(
        ApprovalRule.objects.filter(project_id=ask.project_id, tool_name=ask.tool_name).select_related("group")
    )
    if not rules:
        return None
    if args is None:
        args = ask_arguments(ask)
    matching = [rule for rule in rules if conditions_match(rule.conditions, args)]
    return max(matching, key=lambda rule: (rule.quorum, -rule.pk), default=None)


def group_has_member(*, group: ApproverGroup, user: AbstractBaseUser | AnonymousUser) -> bool:
    return user.pk is not None and group.members.filter(pk=int(user.pk)).exists()


def person_minted_asking_key(*, user: AbstractBaseUser | AnonymousUser, ask: Ask) -> bool:
    """Whether one of the agent keys that opened or reported the ask was minted by this person:
    their own agent is asking, and they may not approve it."""
    if not user.pk or not ask.reporting_key_ids:
        return False
    return AdminChange.objects.filter(
        project_id=ask.project_id,
        action=AdminChange.Action.KEY_MINTED,
        actor_id=user.pk,
        target_id__in=[str(key_id) for key_id in ask.reporting_key_ids],
    ).exists()


@dataclass(frozen=True)
class QuorumState:
    rule: ApprovalRule
    approvals: list[QuorumApproval]  # by people still in the rule's group: these count
    lapsed: list[QuorumApproval]  # by people taken out of the group since: these no longer count
    members: int

    @property
    def remaining(self) -> int:
        return max(0, self.rule.quorum - len(self.approvals))

    @property
    def unfulfillable(self) -> bool:
        """Fewer people are left in the group than could ever meet the quorum."""
        return self.members < self.rule.quorum


def quorum_approvals_counted(*, ask_id: int, group: ApproverGroup) -> list[QuorumApproval]:
    """The approvals that count toward an ask's quorum, oldest first: those of people still in the
    rule's group. One taken out of the group before the quorum was met no longer counts."""
    return list(QuorumApproval.objects.filter(ask_id=ask_id, user__approver_groups=group).order_by("at", "pk"))


def quorum_state(*, ask: Ask) -> QuorumState | None:
    """The rule the ask needs a quorum of, the approvals that count toward it and those that lapsed
    (their author left the group), and whether the group can still meet it; None when no rule asks
    for more than one person."""
    rule = approval_rule_for_ask(ask=ask)
    recorded = list(ask.quorum_approvals.order_by("at", "pk")) if ask.pk else []
    if rule is None or (rule.quorum < 2 and not recorded):
        return None
    member_ids = set(rule.group.members.values_list("pk", flat=True))
    counted = [a for a in recorded if a.user_id in member_ids]
    lapsed = [a for a in recorded if a.user_id not in member_ids]
    return QuorumState(rule, counted, lapsed, len(member_ids))


def standing_approval_covering(*, ask: Ask) -> StandingApproval | None:
    """The standing approval in force that decides `ask` at once, if one does: same project and
    tool, arguments within its pattern, its agent (or any), granted by a person who may still
    approve this call alone (no quorum of several is filled by one standing approval, and a
    group's rule needs its grantor still in the group), nor whose own key asked."""
    if ask.kind not in STANDING_KINDS or not ask.tool_name:
        return None
    # The partial index `standing_in_force` answers this; almost always with nothing.
    candidates = list(
        StandingApproval.objects.filter(
            project_id=ask.project_id, tool_name=ask.tool_name, revoked_at__isnull=True, expires_at__gt=Now()
        )
        .select_related("granted_by")
        .order_by("expires_at")[:20]
    )
    if not candidates:
        return None
    args = ask_arguments(ask)
    agent_id = ask_agent_id(ask)
    rule = approval_rule_for_ask(ask=ask, args=args)
    if rule is not None and rule.quorum > 1:
        return None
    for standing in candidates:
        if standing.agent_id is not None and standing.agent_id != agent_id:
            continue
        if not pattern_match(standing.pattern, args):
            continue
        if rule is not None and not group_has_member(group=rule.group, user=standing.granted_by):
            continue
        if person_minted_asking_key(user=standing.granted_by, ask=ask):
            continue
        return standing
    return None


def standing_limits_of(*, project: Project) -> StandingApprovalLimits:
    """The project's limits; standing approvals are off (0 minutes) until its admins set them."""
    return StandingApprovalLimits.objects.filter(project=project).first() or StandingApprovalLimits(project=project)


def standing_approval_list(*, project: Project, in_force: bool = True) -> QuerySet[StandingApproval]:
    """The project's standing approvals, soonest to expire first (in force), or newest first (all)."""
    standing = StandingApproval.objects.filter(project=project).select_related("source_ask")
    if in_force:
        return standing.filter(revoked_at__isnull=True, expires_at__gt=Now()).order_by("expires_at", "pk")
    return standing.order_by("-pk")


MAX_IN_FORCE_LISTED = 200


def standing_approvals_in_force_counted(*, project: Project) -> list[tuple[StandingApproval, int]]:
    """The standing approvals in force (at most MAX_IN_FORCE_LISTED), each with the number of asks
    it decided since it was granted."""
    standing = list(
        standing_approval_list(project=project).annotate(
            decided=Count("asks", filter=Q(asks__decided_via=Ask.Via.STANDING))
        )[:MAX_IN_FORCE_LISTED]
    )
    return [(s, s.decided) for s in standing]  # type: ignore[attr-defined]


def standing_approval_decisions(*, standing: StandingApproval, limit: int = 20) -> list[Ask]:
    """The asks a standing approval decided (its own ask aside), newest first."""
    return list(
        Ask.objects.filter(standing_approval=standing, decided_via=Ask.Via.STANDING)
        .defer("checkpoint", "pause_data", "check_in")
        .order_by("-pk")[:limit]
    )


def approver_group_list(*, project: Project) -> QuerySet[ApproverGroup]:
    return ApproverGroup.objects.filter(project=project).prefetch_related("members").order_by("name")


def approval_rule_list(*, project: Project) -> QuerySet[ApprovalRule]:
    """The project's rules by tool, each with its group's size (`members`): a rule whose group is
    smaller than its quorum can never be met, and the page says so."""
    return (
        ApprovalRule.objects.filter(project=project)
        .select_related("group")
        .annotate(members=Count("group__members", distinct=True))
        .order_by("tool_name", "pk")
    )


def project_tool_names(*, project: Project) -> set[str]:
    """The tools the project's runs called or paused on: what a rule may name."""
    called = ToolCall.objects.filter(run__project=project, tool_name__isnull=False).values_list("tool_name", flat=True)
    asked = Ask.objects.filter(project=project, tool_name__isnull=False).values_list("tool_name", flat=True)
    return {name for name in (*called.distinct()[:1000], *asked.distinct()[:1000]) if name is not None}
