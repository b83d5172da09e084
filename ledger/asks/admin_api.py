"""Who is told and who decides, over the API: a project's notification channels, deadline rules,
approver groups and approval rules, for its admins' own scripts.

A key with scope `admin` acts for the project admin who minted it (its `key_minted` admin change
names them, `create_agent_key --person`), and only while that person is still an admin of the
key's project: otherwise 403 `ERR_NOT_ADMIN`. Each operation calls the service the pages call,
so a refusal is the same sentence, naming the field, on both; each change is recorded as an
admin change naming the person. Another project's objects are answered 404, like ones that
never existed.
"""

from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja import Router, Status

from footprint_site.auth import AgentKeyAuth, agent_key_of
from footprint_site.http import body_within
from footprint_site.lib.jsonbody import parse_json
from footprint_site.schemas import ERRORS, body_fields, json_body
from ledger.asks import approver_selectors, approvers, deadline_rules, notification_selectors, notifications
from ledger.asks.approver_rules import conditions_text
from ledger.exceptions import AdminBodyInvalid, AdminObjectNotFound, AdminOnly
from ledger.models import ApprovalRule, ApproverGroup, DeadlineRule, NotificationChannel
from ledger.schemas import (
    AdminApprovalRuleIn,
    AdminApprovalRuleListOut,
    AdminApprovalRuleOut,
    AdminChannelIn,
    AdminChannelListOut,
    AdminChannelOut,
    AdminDeadlineRuleIn,
    AdminDeadlineRuleListOut,
    AdminDeadlineRuleOut,
    AdminGroupIn,
    AdminGroupListOut,
    AdminGroupOut,
    AdminMemberIn,
)
from tenancy.models import Membership, Project
from tenancy.selectors import agent_key_person, role_of
from tenancy.services import Actor

router = Router(tags=["admin"])
ADMIN_KEY = AgentKeyAuth("admin")


def _admin(request: HttpRequest) -> tuple[Project, Actor]:
    """The key's project and the admin it acts for; AdminOnly when it names nobody who still is one."""
    key = agent_key_of(request)
    person = agent_key_person(key=key)
    if person is None:
        raise AdminOnly(
            "This key names no person: a key with scope 'admin' is minted for a project admin "
            "(manage.py create_agent_key --scopes admin --person <username>)."
        )
    if role_of(user=person, project=key.project) != Membership.Role.ADMIN:
        raise AdminOnly(
            f"{person.get_username()}, who minted this key, is not an admin of project {key.project.slug}: "
            "only its admins change who is told and who decides."
        )
    return key.project, Actor.of_user(person, place="API")


def _body(request: HttpRequest, schema: Any) -> Any:
    document = parse_json(body_within(request, settings.FOOTPRINT_MAX_REQUEST_BYTES))
    if not isinstance(document, dict):
        raise AdminBodyInvalid("The body is a JSON object of the fields this operation names.")
    return body_fields(schema, document, code=AdminBodyInvalid.code)


# --- notification channels ----------------------------------------------------------------------


def _channel_json(channel: NotificationChannel) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": channel.name,
        "kind": channel.kind,
        "target": channel.target,
        "onNewAsk": channel.on_new_ask,
        "onDeadline": channel.on_deadline,
        "includePayload": channel.include_payload,
        "active": channel.active,
    }
    last_status = getattr(channel, "last_status", None)
    if last_status is not None:
        out["lastStatus"] = last_status
        if last_status == "failed":
            out["lastError"] = getattr(channel, "last_error", None) or ""
    return out


@router.get(
    "/admin/notification-channels",
    response={200: AdminChannelListOut, **ERRORS},
    auth=ADMIN_KEY,
    exclude_unset=True,
)
def list_notification_channels(request: HttpRequest) -> dict[str, Any]:
    """The project's channels by name, each with how its latest message went (`lastStatus`;
    `lastError` when it failed). Never a webhook channel's signing secret."""
    project, _ = _admin(request)
    channels = notification_selectors.notification_channels_with_health(project=project)
    return {"channels": [_channel_json(channel) for channel in channels]}


@router.put(
    "/admin/notification-channels/{name}",
    response={200: AdminChannelOut, **ERRORS},
    auth=ADMIN_KEY,
    openapi_extra=json_body(AdminChannelIn.model_json_schema()),
    exclude_unset=True,
)
def set_notification_channel(request: HttpRequest, name: str) -> dict[str, Any]:
    """Create or change the channel `name`: an email list, or an https webhook URL (http only to a
    host FOOTPRINT_NOTIFY_HTTP_HOSTS lists). 422 naming the field otherwise."""
    project, actor = _admin(request)
    fields = _body(request, AdminChannelIn)
    channel = notifications.notification_channel_set(
        project=project,
        name=name,
        kind=fields.kind,
        target=fields.target,
        on_new_ask=fields.onNewAsk,
        on_deadline=fields.onDeadline,
        include_payload=fields.includePayload,
        actor=actor,
    )
    return _channel_json(channel)


@router.delete("/admin/notification-channels/{name}", response={204: None, **ERRORS}, auth=ADMIN_KEY)
def delete_notification_channel(request: HttpRequest, name: str) -> Status[None]:
    """Remove the channel and the messages still waiting for it."""
    project, actor = _admin(request)
    if not notifications.notification_channel_delete(project=project, name=name, actor=actor):
        raise AdminObjectNotFound("No such notification channel in this project.")
    return Status(204, None)


# --- deadline rules -------------------------------------------------------------------------------


def _deadline_rule_json(rule: DeadlineRule) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": rule.pk,
        "deadlineMinutes": rule.deadline_minutes,
        "onTimeout": rule.on_timeout,
        "note": rule.note,
        "escalation": rule.escalation,
    }
    if rule.tool_name:
        out["toolName"] = rule.tool_name
    if rule.middleware:
        out["middleware"] = rule.middleware
    return out


@router.get(
    "/admin/deadline-rules", response={200: AdminDeadlineRuleListOut, **ERRORS}, auth=ADMIN_KEY, exclude_unset=True
)
def list_deadline_rules(request: HttpRequest) -> dict[str, Any]:
    """The project's deadline rules, by tool then middleware."""
    project, _ = _admin(request)
    return {"rules": [_deadline_rule_json(rule) for rule in notification_selectors.deadline_rules_of(project=project)]}


@router.post(
    "/admin/deadline-rules",
    response={200: AdminDeadlineRuleOut, **ERRORS},
    auth=ADMIN_KEY,
    openapi_extra=json_body(AdminDeadlineRuleIn.model_json_schema()),
    exclude_unset=True,
)
def set_deadline_rule(request: HttpRequest) -> dict[str, Any]:
    """Create or replace the rule of one tool (`toolName`) or one middleware: its deadline, the
    default applied then, and escalation steps (`[{afterMinutes, notify}]`, in order, each to a
    channel of the project, none twice). Unknown tools, steps after the deadline or circular
    escalations are refused, naming the field."""
    project, actor = _admin(request)
    fields = _body(request, AdminDeadlineRuleIn)
    rule = deadline_rules.deadline_rule_set(
        project=project,
        tool_name=fields.toolName,
        middleware=fields.middleware,
        deadline_minutes=fields.deadlineMinutes,
        on_timeout=fields.onTimeout,
        note=fields.note,
        escalation=fields.escalation,
        actor=actor,
    )
    return _deadline_rule_json(rule)


@router.delete("/admin/deadline-rules/{rule_id}", response={204: None, **ERRORS}, auth=ADMIN_KEY)
def delete_deadline_rule(request: HttpRequest, rule_id: int) -> Status[None]:
    """Remove the rule; asks already opened under it keep it."""
    project, actor = _admin(request)
    if not deadline_rules.deadline_rule_delete(project=project, rule_id=rule_id, actor=actor):
        raise AdminObjectNotFound("No such deadline rule in this project.")
    return Status(204, None)


# --- approver groups --------------------------------------------------------------------------------


def _group_json(group: ApproverGroup) -> dict[str, Any]:
    members = sorted(group.members.all(), key=lambda user: user.get_username())
    return {
        "id": group.pk,
        "name": group.name,
        "members": [{"id": u.pk, "username": u.get_username()} for u in members],
    }


def _group(project: Project, group_id: int) -> ApproverGroup:
    group = approver_selectors.approver_group_list(project=project).filter(pk=group_id).first()
    if group is None:
        raise AdminObjectNotFound("No such approver group in this project.")
    return group


@router.get("/admin/approver-groups", response={200: AdminGroupListOut, **ERRORS}, auth=ADMIN_KEY)
def list_approver_groups(request: HttpRequest) -> dict[str, Any]:
    """The project's approver groups by name, with their members."""
    project, _ = _admin(request)
    return {"groups": [_group_json(group) for group in approver_selectors.approver_group_list(project=project)]}


@router.post(
    "/admin/approver-groups",
    response={201: AdminGroupOut, **ERRORS},
    auth=ADMIN_KEY,
    openapi_extra=json_body(AdminGroupIn.model_json_schema()),
)
def create_approver_group(request: HttpRequest) -> Status[dict[str, Any]]:
    """A new, empty group; its name is unique in the project."""
    project, actor = _admin(request)
    fields = _body(request, AdminGroupIn)
    group = approvers.approver_group_create(project=project, name=fields.name, actor=actor)
    return Status(201, _group_json(_group(project, group.pk)))


@router.post(
    "/admin/approver-groups/{group_id}/members",
    response={200: AdminGroupOut, **ERRORS},
    auth=ADMIN_KEY,
    openapi_extra=json_body(AdminMemberIn.model_json_schema()),
)
def add_approver_group_member(request: HttpRequest, group_id: int) -> dict[str, Any]:
    """Add an approver or admin of the project to the group, by username."""
    project, actor = _admin(request)
    group = _group(project, group_id)
    fields = _body(request, AdminMemberIn)
    approvers.approver_group_member_add(group=group, username=fields.username, actor=actor)
    return _group_json(_group(project, group_id))


@router.delete(
    "/admin/approver-groups/{group_id}/members/{user_id}", response={200: AdminGroupOut, **ERRORS}, auth=ADMIN_KEY
)
def remove_approver_group_member(request: HttpRequest, group_id: int, user_id: int) -> dict[str, Any]:
    """Take a person out of the group."""
    project, actor = _admin(request)
    group = _group(project, group_id)
    if not group.members.filter(pk=user_id).exists():
        raise AdminObjectNotFound("No such member of this group.")
    approvers.approver_group_member_remove(group=group, user_id=user_id, actor=actor)
    return _group_json(_group(project, group_id))


# --- approval rules ---------------------------------------------------------------------------------


def _approval_rule_json(rule: ApprovalRule) -> dict[str, Any]:
    return {
        "id": rule.pk,
        "toolName": rule.tool_name,
        "group": rule.group.name,
        "quorum": rule.quorum,
        "conditions": conditions_text(rule.conditions),
    }


@router.get("/admin/approval-rules", response={200: AdminApprovalRuleListOut, **ERRORS}, auth=ADMIN_KEY)
def list_approval_rules(request: HttpRequest) -> dict[str, Any]:
    """The project's approval rules, by tool."""
    project, _ = _admin(request)
    return {"rules": [_approval_rule_json(rule) for rule in approver_selectors.approval_rule_list(project=project)]}


@router.post(
    "/admin/approval-rules",
    response={201: AdminApprovalRuleOut, **ERRORS},
    auth=ADMIN_KEY,
    openapi_extra=json_body(AdminApprovalRuleIn.model_json_schema()),
)
def create_approval_rule(request: HttpRequest) -> Status[dict[str, Any]]:
    """Calls of `toolName` (those whose arguments meet `conditions`, one a line, as on the page:
    `amount > 1000`) need `quorum` different people of `group`. A tool the project's runs never
    called, an unknown group, a quorum larger than the group or conditions no call could meet are
    refused, naming the field."""
    project, actor = _admin(request)
    fields = _body(request, AdminApprovalRuleIn)
    rule = approvers.approval_rule_create(
        project=project,
        tool_name=fields.toolName,
        group_name=fields.group,
        quorum=fields.quorum,
        conditions=fields.conditions,
        actor=actor,
    )
    return Status(201, _approval_rule_json(rule))


@router.delete("/admin/approval-rules/{rule_id}", response={204: None, **ERRORS}, auth=ADMIN_KEY)
def delete_approval_rule(request: HttpRequest, rule_id: int) -> Status[None]:
    project, actor = _admin(request)
    rule = approver_selectors.approval_rule_list(project=project).filter(pk=rule_id).first()
    if rule is None:
        raise AdminObjectNotFound("No such approval rule in this project.")
    approvers.approval_rule_remove(rule=rule, actor=actor)
    return Status(204, None)
