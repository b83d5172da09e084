"""Pages of who may decide: a project's approver groups, rules and standing-approval limits (its
admins), its standing approvals in force and their revocation, and granting one from an ask's
page (its approvers and admins)."""

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from footprint_site.login_redirects import login_required_returning_to
from footprint_site.pages import HtmxHttpRequest, project_for_admin, project_for_role, signed_in_user
from ledger.asks import approver_selectors, approvers, standing
from ledger.asks import views as ask_views
from ledger.exceptions import ApproverRuleInvalid, LedgerError
from ledger.forms import (
    ApprovalRuleForm,
    ApproverGroupForm,
    ApproverMemberForm,
    StandingGrantForm,
    StandingLimitsForm,
)
from ledger.models import ApprovalRule, ApproverGroup, StandingApproval
from tenancy.models import DECIDING_ROLES, Project
from tenancy.services import Actor

ADMIN_ONLY = "Only admins of this project may change who decides its asks."
DECIDERS_ONLY = "Only approvers and admins of this project may see and change its standing approvals."


def _actor(request: HtmxHttpRequest) -> Actor:
    return Actor.of_user(signed_in_user(request))


def _approvers_page(
    request: HtmxHttpRequest, project: Project, *, problem: str | None = None, forms: dict[str, Any] | None = None
) -> HttpResponse:
    limits = approver_selectors.standing_limits_of(project=project)
    context = {
        "project": project,
        "groups": approver_selectors.approver_group_list(project=project),
        "rules": approver_selectors.approval_rule_list(project=project),
        "limits": limits,
        "problem": problem,
        "group_form": ApproverGroupForm(),
        "member_form": ApproverMemberForm(),
        "rule_form": ApprovalRuleForm(),
        "limits_form": StandingLimitsForm(
            initial={"max_minutes": limits.max_minutes, "allow_any_agent": limits.allow_any_agent}
        ),
        **(forms or {}),
    }
    return render(request, "asks/approvers.html", context, status=422 if problem else 200)


@require_GET
@login_required
def approvers_page(request: HtmxHttpRequest, project_slug: str) -> HttpResponse:
    return _approvers_page(request, project_for_admin(request, project_slug, ADMIN_ONLY))


def _form_problem(form: Any) -> str:
    """The first error of a bound form, as one sentence naming its field."""
    for field, errors in form.errors.items():
        label = "" if field == "__all__" else f"{field}: "
        return f"{label}{errors[0]}"
    return "The form is incomplete."


@require_POST
@login_required_returning_to("asks:approvers", "project_slug")
def approver_group_create(request: HtmxHttpRequest, project_slug: str) -> HttpResponse:
    project = project_for_admin(request, project_slug, ADMIN_ONLY)
    form = ApproverGroupForm(request.POST)
    try:
        if not form.is_valid():
            raise ApproverRuleInvalid(_form_problem(form))
        approvers.approver_group_create(project=project, name=form.cleaned_data["name"], actor=_actor(request))
    except ApproverRuleInvalid as exc:
        return _approvers_page(request, project, problem=exc.message, forms={"group_form": form})
    return redirect("asks:approvers", project_slug=project.slug)


def _group(project: Project, group_id: int) -> ApproverGroup:
    group = ApproverGroup.objects.filter(project=project, pk=group_id).select_related("project").first()
    if group is None:
        raise Http404("No such approver group in this project.")
    return group


@require_POST
@login_required_returning_to("asks:approvers", "project_slug")
def approver_member_add(request: HtmxHttpRequest, project_slug: str, group_id: int) -> HttpResponse:
    project = project_for_admin(request, project_slug, ADMIN_ONLY)
    group = _group(project, group_id)
    form = ApproverMemberForm(request.POST)
    try:
        if not form.is_valid():
            raise ApproverRuleInvalid(_form_problem(form))
        approvers.approver_group_member_add(group=group, username=form.cleaned_data["username"], actor=_actor(request))
    except ApproverRuleInvalid as exc:
        return _approvers_page(request, project, problem=exc.message)
    return redirect("asks:approvers", project_slug=project.slug)


@require_POST
@login_required_returning_to("asks:approvers", "project_slug")
def approver_member_remove(request: HtmxHttpRequest, project_slug: str, group_id: int, user_id: int) -> HttpResponse:
    project = project_for_admin(request, project_slug, ADMIN_ONLY)
    group = _group(project, group_id)
    if not group.members.filter(pk=user_id).exists():
        raise Http404("No such member of this group.")
    approvers.approver_group_member_remove(group=group, user_id=user_id, actor=_actor(request))
    return redirect("asks:approvers", project_slug=project.slug)


@require_POST
@login_required_returning_to("asks:approvers", "project_slug")
def approval_rule_create(request: HtmxHttpRequest, project_slug: str) -> HttpResponse:
    project = project_for_admin(request, project_slug, ADMIN_ONLY)
    form = ApprovalRuleForm(request.POST)
    try:
        if not form.is_valid():
            raise ApproverRuleInvalid(_form_problem(form))
        data = form.cleaned_data
        approvers.approval_rule_create(
            project=project,
            tool_name=data["tool_name"],
            group_name=data["group"],
            quorum=data["quorum"],
            conditions=data["conditions"],
            actor=_actor(request),
        )
    except ApproverRuleInvalid as exc:
        return _approvers_page(request, project, problem=exc.message, forms={"rule_form": form})
    return redirect("asks:approvers", project_slug=project.slug)


@require_POST
@login_required_returning_to("asks:approvers", "project_slug")
def approval_rule_remove(request: HtmxHttpRequest, project_slug: str, rule_id: int) -> HttpResponse:
    project = project_for_admin(request, project_slug, ADMIN_ONLY)
    rule = ApprovalRule.objects.filter(project=project, pk=rule_id).select_related("group", "project").first()
    if rule is None:
        raise Http404("No such approval rule in this project.")
    approvers.approval_rule_remove(rule=rule, actor=_actor(request))
    return redirect("asks:approvers", project_slug=project.slug)


@require_POST
@login_required_returning_to("asks:approvers", "project_slug")
def standing_limits(request: HtmxHttpRequest, project_slug: str) -> HttpResponse:
    project = project_for_admin(request, project_slug, ADMIN_ONLY)
    form = StandingLimitsForm(request.POST)
    try:
        if not form.is_valid():
            raise ApproverRuleInvalid(_form_problem(form))
        approvers.standing_limits_set(
            project=project,
            max_minutes=form.cleaned_data["max_minutes"],
            allow_any_agent=form.cleaned_data["allow_any_agent"],
            actor=_actor(request),
        )
    except ApproverRuleInvalid as exc:
        return _approvers_page(request, project, problem=exc.message, forms={"limits_form": form})
    return redirect("asks:approvers", project_slug=project.slug)


# --- standing approvals ------------------------------------------------------------------------------


def _standing_page(request: HtmxHttpRequest, project: Project, problem: str | None = None) -> HttpResponse:
    in_force = [
        (s, decided, approver_selectors.standing_approval_decisions(standing=s, limit=5))
        for s, decided in approver_selectors.standing_approvals_in_force_counted(project=project)
    ]
    context = {"project": project, "in_force": in_force, "problem": problem}
    return render(request, "asks/standing_approvals.html", context, status=422 if problem else 200)


@require_GET
@login_required
def standing_approvals(request: HtmxHttpRequest, project_slug: str) -> HttpResponse:
    return _standing_page(request, project_for_role(request, project_slug, DECIDING_ROLES, DECIDERS_ONLY))


@require_POST
@login_required_returning_to("asks:standing-approvals", "project_slug")
def standing_revoke(request: HtmxHttpRequest, project_slug: str, standing_id: int) -> HttpResponse:
    project = project_for_role(request, project_slug, DECIDING_ROLES, DECIDERS_ONLY)
    found = StandingApproval.objects.filter(project=project, pk=standing_id).select_related("source_ask").first()
    if found is None:
        raise Http404("No such standing approval in this project.")
    try:
        standing.standing_approval_revoke(standing=found, user=signed_in_user(request))
    except LedgerError as exc:
        return _standing_page(request, project, problem=exc.message)
    return redirect("asks:standing-approvals", project_slug=project.slug)


@require_POST
@login_required_returning_to("asks:ask-detail", "ask_id")
def standing_grant(request: HtmxHttpRequest, ask_id: int) -> HttpResponse:
    """Approve the ask and the same calls to come; a refusal is the ask's page with the sentence."""
    ask = ask_views.ask_to_decide(request, ask_id)
    form = StandingGrantForm(request.POST)
    try:
        if not form.is_valid():
            raise ApproverRuleInvalid(_form_problem(form))
        data = form.cleaned_data
        standing.standing_approval_grant(
            ask_id=ask.pk,
            user=signed_in_user(request),
            minutes=data["minutes"],
            pattern=data["pattern"],
            any_agent=data["agent"] == "any",
            note=data["note"] or None,
        )
    except LedgerError as exc:
        return ask_views.ask_page_with_problem(request, ask_id, standing_form=form, problem=exc.message)
    return redirect("asks:ask-detail", ask_id=ask.pk)
