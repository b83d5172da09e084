"""Pages for being told of asks: a project's channels and deadline rules (its admins), and each
person's own notification settings."""

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from footprint_site.pages import HtmxHttpRequest, project_for_admin, signed_in_user
from ledger.asks import deadline_rules, notification_selectors, notifications
from ledger.asks.deadline_rules import DeadlineRuleInvalid
from ledger.asks.notifications import NotificationInvalid
from ledger.forms import DeadlineRuleForm, NotificationChannelForm
from tenancy.models import Project
from tenancy.services import Actor

CHOICES = ("on_new_ask", "on_deadline", "on_escalation")
ONLY_ADMINS = "Only admins of this project may change its notification channels and deadline rules."


def _page(
    request: HtmxHttpRequest,
    project: Project,
    channel_form: NotificationChannelForm | None = None,
    rule_form: DeadlineRuleForm | None = None,
    status: int = 200,
) -> HttpResponse:
    rules = list(notification_selectors.deadline_rules_of(project=project))
    for rule in rules:
        rule.escalation_text = deadline_rules.escalation_text(rule.escalation)  # type: ignore[attr-defined]
    context: dict[str, Any] = {
        "project": project,
        "channels": notification_selectors.notification_channels_with_health(project=project),
        "rules": rules,
        "channel_form": channel_form or NotificationChannelForm(),
        "rule_form": rule_form or DeadlineRuleForm(),
    }
    return render(request, "asks/project_notifications.html", context, status=status)


@require_http_methods(["GET", "POST"])
@login_required
def project_notifications(request: HtmxHttpRequest, project_slug: str) -> HttpResponse:
    """GET: the channels (a failing one says so) and rules. POST (`action`): set or delete one."""
    project = project_for_admin(request, project_slug, ONLY_ADMINS)
    if request.method == "GET":
        return _page(request, project)
    action = request.POST.get("action")
    actor = Actor.of_user(signed_in_user(request))
    if action == "channel-delete":
        notifications.notification_channel_delete(project=project, name=request.POST.get("name", ""), actor=actor)
    elif action == "rule-delete":
        rule_id = request.POST.get("rule", "")
        if rule_id.isdigit():
            deadline_rules.deadline_rule_delete(project=project, rule_id=int(rule_id), actor=actor)
    elif action == "channel-set":
        channel_form = NotificationChannelForm(request.POST)
        if not channel_form.is_valid():
            return _page(request, project, channel_form=channel_form, status=422)
        try:
            notifications.notification_channel_set(project=project, actor=actor, **channel_form.cleaned_data)
        except NotificationInvalid as exc:
            channel_form.add_error(None, exc.message)
            return _page(request, project, channel_form=channel_form, status=422)
    elif action == "rule-set":
        rule_form = DeadlineRuleForm(request.POST)
        if not rule_form.is_valid():
            return _page(request, project, rule_form=rule_form, status=422)
        data = rule_form.cleaned_data
        try:
            deadline_rules.deadline_rule_set(
                project=project,
                tool_name=data["tool_name"],
                middleware=data["middleware"],
                deadline_minutes=data["deadline_minutes"],
                on_timeout=data["on_timeout"],
                note=data["note"],
                escalation=deadline_rules.escalation_parse(data["escalation"]),
                actor=actor,
            )
        except DeadlineRuleInvalid as exc:
            rule_form.add_error(None, exc.message)
            return _page(request, project, rule_form=rule_form, status=422)
    else:
        return HttpResponse("action: one of channel-set, channel-delete, rule-set, rule-delete.", status=400)
    return redirect("asks:project-notifications", project_slug=project.slug)


@require_http_methods(["GET", "POST"])
@login_required
def notification_settings(request: HtmxHttpRequest) -> HttpResponse:
    """A person's own choices: which projects' new asks, deadlines and escalations to be emailed."""
    user = signed_in_user(request)
    choices = notification_selectors.notification_choices_of(user=user)
    problem = None
    if request.method == "POST":
        for choice in choices:
            prefix = f"p{choice.project.pk}-"
            wanted = {
                name: f"{prefix}{name}" in request.POST for name in ("on_new_ask", "on_deadline", "on_escalation")
            }
            if not any(wanted.values()) and not any((choice.on_new_ask, choice.on_deadline, choice.on_escalation)):
                continue
            try:
                notifications.notification_preference_set(user=user, project=choice.project, **wanted)
            except NotificationInvalid as exc:
                problem = exc.message
                break
        if problem is None:
            return redirect("asks:notification-settings")
    context = {"choices": choices, "problem": problem, "email": user.email}
    return render(request, "asks/notification_settings.html", context, status=422 if problem else 200)
