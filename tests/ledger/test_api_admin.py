"""/api/v1/admin/…: a project admin's own key changes who is told and who decides, with the pages'
refusals; a key that acts for nobody who is still an admin gets 403, another project's objects 404."""

import json
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from ledger.asks import notifications
from ledger.asks.approvers import approval_rule_create
from ledger.models import ApprovalRule, ApproverGroup, DeadlineRule, NotificationChannel
from tenancy.models import AdminChange, AgentKey, Membership, Project
from tenancy.services import Actor, agent_key_create, membership_grant
from tests.conftest import ApiClient, _key
from tests.ledger.approver_helpers import people, transfer_ask, treasury

pytestmark = pytest.mark.django_db


def admin_client(project: Project, user: User) -> ApiClient:
    return ApiClient(agent_key_create(project=project, scopes=[AgentKey.Scope.ADMIN], actor=Actor.of_user(user))[1])


def send(client: ApiClient, method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body) if body is not None else None
    return getattr(client, method)(path, data, content_type="application/json")


@pytest.fixture
def ada(project: Project, django_user_model: Any) -> User:
    (user,) = people(django_user_model, project, "ada", role=Membership.Role.ADMIN)
    return user


@pytest.fixture
def admin(project: Project, ada: User) -> ApiClient:
    return admin_client(project, ada)


def refused(response: Any, status: int, code: str, *words: str) -> str:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code, body
    for word in words:
        assert word in body["error"], body["error"]
    return str(body["error"])


def test_channels_are_set_listed_and_deleted_and_each_change_names_the_person(project: Project, admin: ApiClient):
    path = "/api/v1/admin/notification-channels/on-call"
    response = send(admin, "put", path, {"kind": "email", "target": "oncall@example.com"})
    assert response.status_code == 200, response.content
    assert response.json() == {
        "name": "on-call",
        "kind": "email",
        "target": "oncall@example.com",
        "onNewAsk": True,
        "onDeadline": True,
        "includePayload": False,
        "active": True,
    }
    response = send(admin, "put", path, {"kind": "email", "target": "ops@example.com", "onDeadline": False})
    assert response.json()["target"] == "ops@example.com"
    listed = admin.get("/api/v1/admin/notification-channels").json()["channels"]
    assert [(c["name"], c["onDeadline"]) for c in listed] == [("on-call", False)]
    assert "secret" not in json.dumps(listed)
    assert admin.delete(path).status_code == 204
    assert not NotificationChannel.objects.exists()
    refused(admin.delete(path), 404, "ERR_NOT_FOUND", "No such notification channel")
    actors = set(AdminChange.objects.filter(target_type="notification_channel").values_list("actor_label", flat=True))
    assert actors == {"ada (API)"}


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"kind": "slack", "target": "http://hooks.example/T1"}, "target: a webhook channel's URL must be https"),
        ({"kind": "email", "target": "not-an-address"}, "target: 'not-an-address' is not an email address."),
        ({"kind": "pager", "target": "https://hooks.example/x"}, "kind: one of email, slack, webhook"),
    ],
)
def test_a_channel_is_refused_with_the_pages_sentence_and_nothing_written(
    project: Project, admin: ApiClient, body: dict[str, Any], words: str
):
    response = send(admin, "put", "/api/v1/admin/notification-channels/chat", body)
    refused(response, 422, "ERR_INVALID_NOTIFICATION", words)
    assert not NotificationChannel.objects.exists()
    assert not AdminChange.objects.filter(target_type="notification_channel").exists()


def test_http_is_taken_only_for_a_host_the_administrator_allows(project: Project, admin: ApiClient, settings: Any):
    settings.FOOTPRINT_NOTIFY_HTTP_HOSTS = ["127.0.0.1"]
    response = send(
        admin, "put", "/api/v1/admin/notification-channels/chat", {"kind": "slack", "target": "http://127.0.0.1:9/h"}
    )
    assert response.status_code == 200, response.content


def test_a_body_with_a_field_it_does_not_name_is_refused(project: Project, admin: ApiClient):
    response = send(
        admin, "put", "/api/v1/admin/notification-channels/chat", {"kind": "email", "target": "a@b.example", "x": 1}
    )
    refused(response, 422, "ERR_INVALID_ADMIN_BODY", "x (not a field of this body)")
    refused(send(admin, "post", "/api/v1/admin/approver-groups", ["treasury"]), 422, "ERR_INVALID_ADMIN_BODY")


def test_deadline_rules_refuse_unknown_tools_and_circular_escalations(project: Project, admin: ApiClient):
    transfer_ask(project)  # the project's runs now know transfer_funds
    for name in ("on-call", "treasury"):
        notifications.notification_channel_set(project=project, name=name, kind="email", target=f"{name}@example.com")
    path = "/api/v1/admin/deadline-rules"
    unknown = send(admin, "post", path, {"toolName": "wire_money", "deadlineMinutes": 30})
    refused(unknown, 422, "ERR_INVALID_DEADLINE_RULE", "tool_name: no run of this project", "wire_money")
    circular = [
        {"afterMinutes": 5, "notify": "on-call"},
        {"afterMinutes": 10, "notify": "treasury"},
        {"afterMinutes": 15, "notify": "on-call"},
    ]
    response = send(admin, "post", path, {"toolName": "transfer_funds", "deadlineMinutes": 30, "escalation": circular})
    refused(response, 422, "ERR_INVALID_DEADLINE_RULE", "escalation, step 3", "circular")
    assert not DeadlineRule.objects.exists()

    steps = circular[:2]
    response = send(admin, "post", path, {"toolName": "transfer_funds", "deadlineMinutes": 30, "escalation": steps})
    assert response.status_code == 200, response.content
    rule = response.json()
    assert (rule["toolName"], rule["deadlineMinutes"], rule["onTimeout"], rule["escalation"]) == (
        "transfer_funds",
        30,
        "decline",
        steps,
    )
    assert "middleware" not in rule
    assert admin.get(path).json()["rules"] == [rule]
    assert admin.delete(f"{path}/{rule['id']}").status_code == 204
    refused(admin.delete(f"{path}/{rule['id']}"), 404, "ERR_NOT_FOUND")


def test_groups_members_and_rules(project: Project, admin: ApiClient, django_user_model: Any):
    transfer_ask(project)
    _, ben = people(django_user_model, project, "ann", "ben")
    response = send(admin, "post", "/api/v1/admin/approver-groups", {"name": "treasury"})
    assert response.status_code == 201, response.content
    group = response.json()
    assert group["members"] == []
    members = f"/api/v1/admin/approver-groups/{group['id']}/members"
    for name in ("ann", "ben"):
        assert send(admin, "post", members, {"username": name}).status_code == 200
    refused(
        send(admin, "post", "/api/v1/admin/approver-groups", {"name": "treasury"}), 422, "ERR_INVALID_APPROVER_RULE"
    )
    rules = "/api/v1/admin/approval-rules"
    too_many = {"toolName": "transfer_funds", "group": "treasury", "quorum": 3}
    refused(send(admin, "post", rules, too_many), 422, "ERR_INVALID_APPROVER_RULE", "quorum: group treasury has 2")
    unknown = {"toolName": "wire_money", "group": "treasury", "quorum": 1}
    refused(send(admin, "post", rules, unknown), 422, "ERR_INVALID_APPROVER_RULE", "tool_name:")
    impossible = {"toolName": "transfer_funds", "group": "treasury", "conditions": "amount > 10\namount < 5"}
    refused(send(admin, "post", rules, impossible), 422, "ERR_INVALID_APPROVER_RULE")
    assert not ApprovalRule.objects.exists()

    good = {"toolName": "transfer_funds", "group": "treasury", "quorum": 2, "conditions": "amount > 1000"}
    response = send(admin, "post", rules, good)
    assert response.status_code == 201, response.content
    rule = response.json()
    assert (rule["group"], rule["quorum"], rule["conditions"]) == ("treasury", 2, "amount > 1000")
    assert admin.get(rules).json()["rules"] == [rule]
    listed = admin.get("/api/v1/admin/approver-groups").json()["groups"]
    assert [m["username"] for m in listed[0]["members"]] == ["ann", "ben"]
    response = admin.delete(f"{members}/{ben.pk}")
    assert [m["username"] for m in response.json()["members"]] == ["ann"]
    assert admin.delete(f"{rules}/{rule['id']}").status_code == 204
    assert not ApprovalRule.objects.exists()


def test_a_key_acting_for_someone_no_longer_an_admin_or_for_nobody_is_refused(
    project: Project, ada: User, django_user_model: Any
):
    (ann,) = people(django_user_model, project, "ann")
    for client, words in (
        (admin_client(project, ann), "ann, who minted this key, is not an admin of project acme"),
        (ApiClient(_key(project, [AgentKey.Scope.ADMIN])), "names no person"),
    ):
        refused(client.get("/api/v1/admin/approval-rules"), 403, "ERR_NOT_ADMIN", words)
        response = send(client, "post", "/api/v1/admin/approver-groups", {"name": "treasury"})
        refused(response, 403, "ERR_NOT_ADMIN")
    assert not ApproverGroup.objects.exists()

    demoted = admin_client(project, ada)
    assert demoted.get("/api/v1/admin/approval-rules").status_code == 200
    membership_grant(user=ada, project=project, role=Membership.Role.APPROVER)
    refused(demoted.get("/api/v1/admin/approval-rules"), 403, "ERR_NOT_ADMIN", "ada")
    refused(ApiClient(_key(project, ["read"])).get("/api/v1/admin/approval-rules"), 403, "ERR_SCOPE", "'admin'")


def test_another_projects_objects_are_not_found(project: Project, other_project: Project, django_user_model: Any):
    transfer_ask(other_project)
    (gil,) = people(django_user_model, other_project, "gil", role=Membership.Role.ADMIN)
    (ann,) = people(django_user_model, other_project, "ann")
    group = treasury(other_project, ann)
    rule = approval_rule_create(
        project=other_project, tool_name="transfer_funds", group_name="treasury", quorum=1, conditions=""
    )
    notifications.notification_channel_set(project=other_project, name="on-call", kind="email", target="o@example.com")
    (ada,) = people(django_user_model, project, "ada", role=Membership.Role.ADMIN)
    acme = admin_client(project, ada)
    assert acme.get("/api/v1/admin/approver-groups").json() == {"groups": []}
    assert acme.get("/api/v1/admin/approval-rules").json() == {"rules": []}
    assert acme.get("/api/v1/admin/notification-channels").json() == {"channels": []}
    refused(acme.delete(f"/api/v1/admin/approval-rules/{rule.pk}"), 404, "ERR_NOT_FOUND")
    refused(acme.delete(f"/api/v1/admin/approver-groups/{group.pk}/members/{ann.pk}"), 404, "ERR_NOT_FOUND")
    response = send(acme, "post", f"/api/v1/admin/approver-groups/{group.pk}/members", {"username": "ada"})
    refused(response, 404, "ERR_NOT_FOUND")
    refused(acme.delete("/api/v1/admin/notification-channels/on-call"), 404, "ERR_NOT_FOUND")
    assert ApprovalRule.objects.filter(pk=rule.pk).exists()
    assert list(group.members.all()) == [ann]
    assert NotificationChannel.objects.filter(project=other_project).exists()
    assert admin_client(other_project, gil).get("/api/v1/admin/approval-rules").json()["rules"][0]["id"] == rule.pk


def test_create_agent_key_mints_an_admin_key_only_for_a_named_admin(
    project: Project, ada: User, django_user_model: Any
):
    people(django_user_model, project, "ann")
    with pytest.raises(CommandError, match="--person"):
        call_command("create_agent_key", "--project", "acme", "--scopes", "admin", stdout=StringIO())
    with pytest.raises(CommandError, match="'ann' is not an admin of project acme"):
        call_command("create_agent_key", "--project", "acme", "--scopes", "admin", "--person", "ann", stdout=StringIO())
    out = StringIO()
    call_command(
        "create_agent_key", "--project", "acme", "--scopes", "admin", "--person", "ada", stdout=out, stderr=StringIO()
    )
    client = ApiClient(out.getvalue().split()[-1])
    assert client.get("/api/v1/admin/approval-rules").status_code == 200
