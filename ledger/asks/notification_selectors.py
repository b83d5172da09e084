"""Reads for notifications and deadline rules: a project's channels with how their latest message
went, its rules, a person's choices. Scoped by the project the caller already resolved."""

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db.models import OuterRef, QuerySet, Subquery

from ledger.models import DeadlineRule, NotificationChannel, NotificationPreference, WebhookAttempt, WebhookDelivery
from tenancy.models import Project
from tenancy.selectors import approver_projects


def notification_channels_with_health(*, project: Project) -> QuerySet[NotificationChannel]:
    """The project's channels by name, each with its latest message's status and that message's
    latest attempt's error (`last_status`, `last_error`): a failing channel shows on the page."""
    latest = WebhookDelivery.objects.filter(channel=OuterRef("pk")).order_by("-id")
    # Within the attempts' subquery the channel is two levels out.
    latest_of_channel = WebhookDelivery.objects.filter(channel=OuterRef(OuterRef("pk"))).order_by("-id")
    latest_error = WebhookAttempt.objects.filter(delivery=Subquery(latest_of_channel.values("pk")[:1])).order_by("-id")
    return (
        NotificationChannel.objects.filter(project=project)
        .annotate(
            last_status=Subquery(latest.values("status")[:1]),
            last_attempts=Subquery(latest.values("attempts")[:1]),
            last_error=Subquery(latest_error.values("error")[:1]),
        )
        .order_by("name")
    )


def deadline_rules_of(*, project: Project) -> QuerySet[DeadlineRule]:
    return DeadlineRule.objects.filter(project=project).order_by("tool_name", "middleware")


@dataclass(frozen=True)
class ProjectChoice:
    project: Project
    on_new_ask: bool
    on_deadline: bool
    on_escalation: bool


def notification_choices_of(*, user: User) -> list[ProjectChoice]:
    """Each project whose asks the person may decide, with what they chose to be emailed."""
    chosen = {p.project_id: p for p in NotificationPreference.objects.filter(user=user)}
    choices = []
    for project in approver_projects(user).order_by("slug"):
        preference = chosen.get(project.pk)
        choices.append(
            ProjectChoice(
                project=project,
                on_new_ask=bool(preference and preference.on_new_ask),
                on_deadline=bool(preference and preference.on_deadline),
                on_escalation=bool(preference and preference.on_escalation),
            )
        )
    return choices
