"""A project's deadline rules: the deadline an ask gets when its agent set none, the escalation
steps before it, and the default the deadline applies.

A rule names one tool (or one middleware, for the asks a middleware raises), a deadline in
minutes, escalation steps ("after 10 min notify channel on-call") and the default: decline with
the rule's note, or approve only where the rule says so. An ask opened under a rule keeps the
rule as it was then (`AskEscalation`); the deadline pass (`asks_apply_deadlines`) applies the
default like any deadline, recorded as decided by the deadline with the rule's note, and the
escalation pass here notifies each step once, claimed with a conditional UPDATE in the
transaction that writes its messages: a worker killed mid-step leaves the step to the next pass.
"""

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from footprint_site.lib.db import session_connection
from ledger.asks import notifications
from ledger.exceptions import LedgerError
from ledger.models import (
    Ask,
    AskEscalation,
    DeadlineRule,
    NotificationChannel,
    NotificationPreference,
    ToolCall,
    WebhookDelivery,
)
from tenancy.models import AdminChange, Project
from tenancy.services import UNNAMED, Actor, admin_change_record

MAX_DEADLINE_MINUTES = 7 * 24 * 60
MAX_STEPS = 10
MAX_NOTE_LENGTH = 2000
STEP_LINE = re.compile(r"\s*(?:after\s+)?(\d+)\s*(?:min(?:utes?)?)?\s*(?:notify\s+)?([a-z0-9][a-z0-9_-]*)\s*")


class DeadlineRuleInvalid(LedgerError):
    status = 422
    code = "ERR_INVALID_DEADLINE_RULE"


@dataclass(frozen=True)
class Step:
    after_minutes: int
    notify: str


def escalation_parse(text: str) -> list[dict[str, Any]]:
    """The form's escalation box, one step a line ("10 on-call" or "after 10 min notify on-call"),
    as the rule stores it. Raises DeadlineRuleInvalid naming the line it cannot read."""
    steps = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = STEP_LINE.fullmatch(line.lower())
        if match is None:
            raise DeadlineRuleInvalid(
                f"escalation, line {number}: write a step as 'after 10 min notify on-call' "
                f"(minutes, then a channel's name); got {line.strip()[:80]!r}."
            )
        steps.append({"afterMinutes": int(match[1]), "notify": match[2]})
    return steps


def escalation_text(steps: list[dict[str, Any]]) -> str:
    return "\n".join(f"after {step['afterMinutes']} min notify {step['notify']}" for step in steps)


def _known_tools(project: Project) -> set[str]:
    """The tools the project's runs have called or asked about: a rule for any other never fires."""
    called = ToolCall.objects.filter(run__project=project).values_list("tool_name", flat=True).distinct()
    asked = Ask.objects.filter(project=project).values_list("tool_name", flat=True).distinct()
    return {name for name in (*called, *asked) if name}


def _known_middlewares(project: Project) -> set[str]:
    asked = Ask.objects.filter(project=project).values_list("middleware", flat=True).distinct()
    return {name for name in asked if name}


def _check_steps(project: Project, steps: Any, deadline_minutes: int) -> list[dict[str, Any]]:
    if not isinstance(steps, list) or len(steps) > MAX_STEPS:
        raise DeadlineRuleInvalid(f"escalation: a list of at most {MAX_STEPS} steps.")
    channels = set(NotificationChannel.objects.filter(project=project).values_list("name", flat=True))
    seen: dict[str, int] = {}
    previous = 0
    for number, step in enumerate(steps, start=1):
        if not isinstance(step, dict) or set(step) != {"afterMinutes", "notify"}:
            raise DeadlineRuleInvalid(f"escalation, step {number}: give afterMinutes and notify, nothing else.")
        after, target = step["afterMinutes"], step["notify"]
        if not isinstance(after, int) or isinstance(after, bool) or after < 1:
            raise DeadlineRuleInvalid(
                f"escalation, step {number}: afterMinutes is a whole number of minutes, 1 or more."
            )
        if after <= previous:
            raise DeadlineRuleInvalid(
                f"escalation, step {number}: after {after} min comes no later than the step before it "
                f"({previous} min); steps go in order of time."
            )
        if after >= deadline_minutes:
            raise DeadlineRuleInvalid(
                f"escalation, step {number}: after {after} min is not before the deadline ({deadline_minutes} min), "
                "when the default is applied, so it could never notify anyone."
            )
        if not isinstance(target, str) or target not in channels:
            raise DeadlineRuleInvalid(
                f"escalation, step {number}: no notification channel named {str(target)[:60]!r} in this project"
                + (f" (it has: {', '.join(sorted(channels))})." if channels else "; add one first.")
            )
        if target in seen:
            raise DeadlineRuleInvalid(
                f"escalation, step {number}: {target!r} was already notified at step {seen[target]}; an "
                "escalation that comes back to whom it left is circular: each step goes to someone new."
            )
        seen[target] = number
        previous = after
    return steps


def deadline_rule_set(
    *,
    project: Project,
    tool_name: str = "",
    middleware: str = "",
    deadline_minutes: int,
    on_timeout: str = Ask.OnTimeout.DECLINE,
    note: str = "",
    escalation: Any = (),
    actor: Actor = UNNAMED,
) -> DeadlineRule:
    """Create or replace the project's rule for one tool or one middleware. Raises
    DeadlineRuleInvalid, naming the field, for a tool or middleware the project has never seen,
    both or neither, a deadline out of range, an approve default without saying so, or steps
    that are out of order, after the deadline, to unknown channels or circular. The change is
    recorded as an AdminChange in its transaction."""
    tool_name, middleware = tool_name.strip(), middleware.strip()
    if bool(tool_name) == bool(middleware):
        raise DeadlineRuleInvalid("tool_name: name either a tool or a middleware (one of the two) for the rule.")
    if tool_name and tool_name not in _known_tools(project):
        known = sorted(_known_tools(project))
        raise DeadlineRuleInvalid(
            f"tool_name: no run of this project has called or asked about a tool named {tool_name[:80]!r}"
            + (f" (known: {', '.join(known[:20])})." if known else "; a rule names a tool the project's agents use.")
        )
    if middleware and middleware not in _known_middlewares(project):
        raise DeadlineRuleInvalid(
            f"middleware: no ask of this project came from a middleware named {middleware[:80]!r}."
        )
    if (
        isinstance(deadline_minutes, bool)
        or not isinstance(deadline_minutes, int)
        or not (1 <= deadline_minutes <= MAX_DEADLINE_MINUTES)
    ):
        raise DeadlineRuleInvalid(f"deadline_minutes: a whole number from 1 to {MAX_DEADLINE_MINUTES} (a week).")
    if on_timeout not in Ask.OnTimeout.values:
        raise DeadlineRuleInvalid("on_timeout: 'decline' or 'approve'.")
    if len(note) > MAX_NOTE_LENGTH:
        raise DeadlineRuleInvalid(f"note: at most {MAX_NOTE_LENGTH} characters.")
    if on_timeout == Ask.OnTimeout.DECLINE and not note.strip():
        note = "declined by the project's deadline rule: nobody decided in time"
    steps = _check_steps(project, list(escalation), deadline_minutes)
    with transaction.atomic():
        existing = (
            DeadlineRule.objects.select_for_update()
            .filter(project=project, tool_name=tool_name, middleware=middleware)
            .first()
        )
        before = None if existing is None else _recorded(existing)
        rule, _ = DeadlineRule.objects.update_or_create(
            project=project,
            tool_name=tool_name,
            middleware=middleware,
            defaults={
                "deadline_minutes": deadline_minutes,
                "on_timeout": on_timeout,
                "note": note.strip(),
                "escalation": steps,
            },
        )
        after = _recorded(rule)
        if before != after:
            _record_change(actor, AdminChange.Action.DEADLINE_RULE_SET, rule, before, after)
    return rule


def deadline_rule_delete(*, project: Project, rule_id: int, actor: Actor = UNNAMED) -> bool:
    """Remove the rule (asks already opened under it keep it), recorded as an AdminChange."""
    with transaction.atomic():
        rule = DeadlineRule.objects.select_for_update().filter(project=project, pk=rule_id).first()
        if rule is None:
            return False
        _record_change(actor, AdminChange.Action.DEADLINE_RULE_REMOVED, rule, _recorded(rule), None)
        rule.delete()
    return True


def _recorded(rule: DeadlineRule) -> dict[str, Any]:
    return {
        "deadlineMinutes": rule.deadline_minutes,
        "onTimeout": rule.on_timeout,
        "note": rule.note,
        "escalation": rule.escalation,
    }


def _record_change(
    actor: Actor, action: str, rule: DeadlineRule, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> None:
    target = f"tool {rule.tool_name}" if rule.tool_name else f"middleware {rule.middleware}"
    admin_change_record(
        actor=actor,
        action=action,
        project=rule.project,
        target_type="deadline_rule",
        target_id=rule.pk,
        target_label=f"deadline rule for {target}"[:200],
        before=before,
        after=after,
    )


def ask_opened(ask: Ask) -> None:
    """What an ask's opening sets off, in its transaction: the project's deadline rule for its
    tool (or middleware), when the agent set no deadline of its own, and the notification of a
    new ask. Runs once, on the ask's creation."""
    if ask.status != Ask.Status.OPEN:
        return
    matches = Q()
    if ask.tool_name:
        matches |= Q(tool_name=ask.tool_name)
    if ask.middleware:
        matches |= Q(middleware=ask.middleware)
    rule = (
        DeadlineRule.objects.filter(matches, project_id=ask.project_id).order_by("-tool_name").first()  # a tool's first
        if matches
        else None
    )
    if rule is not None:
        opened = timezone.now()
        if ask.deadline is None:
            ask.deadline = opened + timedelta(minutes=rule.deadline_minutes)
            ask.on_timeout = rule.on_timeout
            Ask.objects.filter(pk=ask.pk).update(deadline=ask.deadline, on_timeout=ask.on_timeout)
        steps = rule.escalation
        AskEscalation.objects.create(
            ask=ask,
            rule=rule,
            note=rule.note,
            steps=steps,
            next_at=opened + timedelta(minutes=steps[0]["afterMinutes"]) if steps else None,
        )
    notifications.notifications_queue(ask=ask, event=WebhookDelivery.Event.ASK_OPENED)


def deadline_note(ask: Ask) -> str | None:
    """The note the rule an ask was opened under gives its deadline's default, if any."""
    return AskEscalation.objects.filter(ask=ask).exclude(note="").values_list("note", flat=True).first()


def _escalate(escalation_id: int, now: datetime) -> bool:
    with transaction.atomic():
        escalation = (
            AskEscalation.objects.select_for_update(skip_locked=True)
            .select_related("ask")
            .filter(pk=escalation_id, next_at__lte=now)
            .first()
        )
        if escalation is None:
            return False
        ask = escalation.ask
        number = escalation.next_step
        step = escalation.steps[number]
        following = number + 1
        opened = ask.created_at
        escalation.next_step = following
        escalation.next_at = (
            opened + timedelta(minutes=escalation.steps[following]["afterMinutes"])
            if following < len(escalation.steps)
            else None
        )
        escalation.save(update_fields=["next_step", "next_at"])
        if ask.status == Ask.Status.OPEN and (ask.deadline is None or ask.deadline > now):
            notifications.notifications_queue(
                ask=ask, event=WebhookDelivery.Event.ESCALATION, step=following, channel_names=[step["notify"]]
            )
    return True


def _warn_deadlines(now: datetime, limit: int) -> int:
    """Queue the approaching-deadline message of open asks whose deadline falls within the
    warning window, once each (a unique key), in projects where someone wants it."""
    window = now + timedelta(minutes=settings.FOOTPRINT_DEADLINE_WARNING_MINUTES)
    wanted = Q(
        Exists(NotificationChannel.objects.filter(project=OuterRef("project"), active=True, on_deadline=True))
    ) | Q(Exists(NotificationPreference.objects.filter(project=OuterRef("project"), on_deadline=True)))
    warned = WebhookDelivery.objects.filter(ask=OuterRef("pk"), event=WebhookDelivery.Event.DEADLINE_NEAR)
    asks = (
        Ask.objects.filter(status=Ask.Status.OPEN, deadline__gt=now, deadline__lte=window)
        .filter(wanted)
        .filter(~Exists(warned))
        .select_related("project")
        .defer("checkpoint", "pause_data")
    )
    queued = 0
    for ask in asks.order_by("deadline")[:limit]:
        with transaction.atomic():
            queued += notifications.notifications_queue(ask=ask, event=WebhookDelivery.Event.DEADLINE_NEAR)
    return queued


def escalations_run(*, now: datetime | None = None, limit: int = 500) -> int:
    """The escalation pass: every escalation step that is due notifies its channel (and the people
    who chose escalations), once; asks whose deadline is near are announced. One pass at a time
    (an advisory lock); returns how many steps were taken."""
    now = now or timezone.now()
    with session_connection().cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(hashtext('footprint.ask-escalations'))")
        (locked,) = cur.fetchone()  # type: ignore[misc]
    if not locked:
        return 0
    try:
        due = AskEscalation.objects.filter(next_at__lte=now).order_by("next_at").values_list("pk", flat=True)
        taken = sum(_escalate(pk, now) for pk in list(due[:limit]))
        _warn_deadlines(now, limit)
    finally:
        with session_connection().cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(hashtext('footprint.ask-escalations'))")
    return taken
