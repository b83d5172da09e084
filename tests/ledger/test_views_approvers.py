"""The pages of who may decide: an answer confirmed before it is sent, a quorum's approvals on the
ask's page, the admins' page of groups, rules and limits, standing approvals granted from an ask's
page, listed and revoked; 403 for people without the role."""

from typing import Any

import pytest
from django.test import Client

from ledger.asks.approvers import approval_rule_create, standing_limits_set
from ledger.asks.services import ask_open
from ledger.models import ApproverGroup, Ask, StandingApproval
from tenancy.models import AdminChange, Membership, Project
from tests.conftest import signed_in_client
from tests.ledger.approver_helpers import TOOL, people, transfer_ask, treasury

pytestmark = pytest.mark.django_db


def _html(response: Any, status: int = 200) -> str:
    assert response.status_code == status, response.content[:800]
    return response.content.decode()


def _question(project: Project) -> Ask:
    ask, _ = ask_open(
        project=project,
        key=None,
        run_id="run-q",
        session_id=None,
        pause_data={"toolCallId": "q1", "toolName": "ask_user", "question": "Which region?"},
        checkpoint=None,
        deadline=None,
        on_timeout="decline",
    )
    return ask


def test_an_answer_is_shown_back_and_sent_only_once_confirmed(approver_client: Client, project: Project):
    ask = _question(project)
    url = f"/asks/{ask.pk}/decide/"
    page = _html(approver_client.post(url, {"decision": "answer", "value": "eu-west-1"}))
    assert "Send this answer to the run?" in page
    assert '<pre class="answer-preview">eu-west-1</pre>' in page
    assert Ask.objects.get(pk=ask.pk).status == Ask.Status.OPEN

    edit = _html(
        approver_client.post(url, {"decision": "answer", "value": "eu-west-1", "confirmed": "on", "edit": "1"})
    )
    assert "Send this answer to the run?" not in edit
    assert "eu-west-1</textarea>" in edit
    assert Ask.objects.get(pk=ask.pk).status == Ask.Status.OPEN

    sent = approver_client.post(url, {"decision": "answer", "value": "eu-west-1", "confirmed": "on"})
    assert sent.status_code == 302
    assert Ask.objects.get(pk=ask.pk).decision()["answer"] == "eu-west-1"


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_answer_is_refused_naming_the_field(approver_client: Client, project: Project, value: str):
    ask = _question(project)
    page = _html(
        approver_client.post(f"/asks/{ask.pk}/decide/", {"decision": "answer", "value": value, "confirmed": "on"}),
        status=422,
    )
    assert "The answer cannot be empty" in page
    assert Ask.objects.get(pk=ask.pk).status == Ask.Status.OPEN


def test_the_ask_page_shows_the_first_approval_of_a_quorum(project: Project, django_user_model: Any):
    ann, ben, dan = people(django_user_model, project, "ann", "ben", "dan")
    treasury(project, ann, ben)
    transfer_ask(project, amount=1)
    approval_rule_create(project=project, tool_name=TOOL, group_name="treasury", quorum=2, conditions="amount > 1000")
    ask = transfer_ask(project, amount=5000)
    url = f"/asks/{ask.pk}/decide/"

    assert signed_in_client(ann).post(url, {"decision": "approve"}).status_code == 302
    page = _html(signed_in_client(ben).get(f"/asks/{ask.pk}/"))
    assert "Approving needs <strong>2</strong> different people of group <strong>treasury</strong>" in page
    assert '<strong class="quorum-approval">ann</strong>' in page
    assert "waiting for 1 more" in page

    refused = signed_in_client(dan).post(url, {"decision": "approve"})
    assert refused.status_code == 403
    assert "Only members of group treasury" in refused.content.decode()

    assert signed_in_client(ben).post(url, {"decision": "approve"}).status_code == 302
    ask.refresh_from_db()
    assert ask.status == Ask.Status.DECIDED
    assert ask.decided_by_label == "ann and ben"


def test_admins_manage_groups_and_rules_and_bad_input_writes_nothing(project: Project, django_user_model: Any):
    (boss,) = people(django_user_model, project, "boss", role=Membership.Role.ADMIN)
    (ann,) = people(django_user_model, project, "ann")
    transfer_ask(project, amount=1)
    admin = signed_in_client(boss)
    base = f"/projects/{project.slug}/approvers/"

    assert "No groups yet: every approver decides alone." in _html(admin.get(base))
    assert admin.post(base + "groups/", {"name": "treasury"}).status_code == 302
    group = ApproverGroup.objects.get(project=project)
    assert admin.post(base + f"groups/{group.pk}/members/", {"username": "ann"}).status_code == 302
    assert admin.post(base + f"groups/{group.pk}/members/", {"username": "ghost"}).status_code == 422
    page = _html(
        admin.post(base + "rules/", {"tool_name": TOOL, "group": "treasury", "quorum": "1", "conditions": "amount >"}),
        status=422,
    )
    assert "conditions, line 1: write an argument" in page
    before = AdminChange.objects.count()
    page = _html(
        admin.post(base + "rules/", {"tool_name": "nope", "group": "treasury", "quorum": "1", "conditions": ""}),
        status=422,
    )
    assert "tool_name: no run of project acme has called a tool named" in page
    assert AdminChange.objects.count() == before
    rule = {"tool_name": TOOL, "group": "treasury", "quorum": "1", "conditions": "amount > 1000"}
    assert admin.post(base + "rules/", rule).status_code == 302
    assert admin.post(base + "standing-limits/", {"max_minutes": "30"}).status_code == 302
    page = _html(admin.get(base))
    assert "where amount &gt; 1000" in page
    assert "up to 30 minutes" in page
    assert admin.post(base + f"groups/{group.pk}/members/{ann.pk}/remove/").status_code == 302
    assert not group.members.exists()


def test_people_without_the_role_get_403_everywhere(project: Project, django_user_model: Any):
    (ann,) = people(django_user_model, project, "ann")
    (aud,) = people(django_user_model, project, "aud", role=Membership.Role.AUDITOR)
    base = f"/projects/{project.slug}/"
    for user, calls in (
        (
            ann,
            [
                ("get", base + "approvers/"),
                ("post", base + "approvers/groups/"),
                ("post", base + "approvers/rules/"),
                ("post", base + "approvers/standing-limits/"),
            ],
        ),
        (aud, [("get", base + "standing-approvals/"), ("post", base + "standing-approvals/1/revoke/")]),
    ):
        client = signed_in_client(user)
        for method, url in calls:
            response = getattr(client, method)(url, {"name": "x"} if method == "post" else None)
            assert response.status_code == 403, (user, url)
            assert "Only" in response.content.decode()


def test_a_standing_approval_from_the_ask_page_decides_the_next_ask_and_is_revoked(
    project: Project, django_user_model: Any
):
    standing_limits_set(project=project, max_minutes=60, allow_any_agent=True)
    (ann,) = people(django_user_model, project, "ann")
    client = signed_in_client(ann)
    ask = transfer_ask(project, amount=500)
    page = _html(client.get(f"/asks/{ask.pk}/"))
    assert "Approve this and the same calls for a while" in page

    wide = {"minutes": "30", "pattern": '{"amount": 500, "to": "ACC-900", "memo": "x"}', "agent": "any"}
    page = _html(client.post(f"/asks/{ask.pk}/standing/", wide), status=422)
    assert "pattern names arguments the ask did not show: memo" in page
    assert not StandingApproval.objects.exists()

    grant = {"minutes": "30", "pattern": '{"amount": {"min": 0, "max": 1000}, "to": "ACC-900"}', "agent": "any"}
    assert client.post(f"/asks/{ask.pk}/standing/", grant).status_code == 302
    later = transfer_ask(project, amount=700, run_id="run-next")
    assert later.decided_via == Ask.Via.STANDING
    listed = _html(client.get(f"/projects/{project.slug}/standing-approvals/"))
    assert "amount from 0 to 1000" in listed
    assert "Decided 1 ask since" in listed

    standing = StandingApproval.objects.get()
    assert client.post(f"/projects/{project.slug}/standing-approvals/{standing.pk}/revoke/").status_code == 302
    assert "None in force" in _html(client.get(f"/projects/{project.slug}/standing-approvals/"))
    assert transfer_ask(project, amount=700, run_id="run-after").status == Ask.Status.OPEN


def test_the_ask_and_rules_pages_say_when_a_shrunken_group_can_no_longer_meet_the_quorum(
    project: Project, django_user_model: Any
):
    (admin,) = people(django_user_model, project, "ada", role=Membership.Role.ADMIN)
    ann, ben = people(django_user_model, project, "ann", "ben")
    group = treasury(project, ann, ben)
    transfer_ask(project, amount=1)
    approval_rule_create(project=project, tool_name=TOOL, group_name="treasury", quorum=2, conditions="")
    ask = transfer_ask(project, amount=5000)
    assert signed_in_client(ann).post(f"/asks/{ask.pk}/decide/", {"decision": "approve"}).status_code == 302
    rules = _html(signed_in_client(admin).get(f"/projects/{project.slug}/approvers/"))
    assert "Cannot be met" not in rules

    removed = signed_in_client(admin).post(
        f"/projects/{project.slug}/approvers/groups/{group.pk}/members/{ann.pk}/remove/"
    )
    assert removed.status_code == 302
    page = _html(signed_in_client(ben).get(f"/asks/{ask.pk}/"))
    assert "No longer counted:" in page
    assert "<strong>ann</strong>" in page
    assert "This quorum cannot be met: group" in page
    assert "has 1 member," in page
    rules = _html(signed_in_client(admin).get(f"/projects/{project.slug}/approvers/"))
    assert "Cannot be met: treasury has 1 member." in rules
