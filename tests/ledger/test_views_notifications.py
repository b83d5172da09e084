"""The notification pages: a project's channels and deadline rules (its admins only), a person's
own settings, and the navigation's live count."""

import re
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from ledger.asks import notifications
from ledger.models import Ask, DeadlineRule, NotificationChannel, NotificationPreference, WebhookDelivery
from tenancy.models import Membership, Project
from tests.conftest import ApiClient, person, signed_in_client
from tests.ledger.ask_helpers import open_ask, plain_body

pytestmark = pytest.mark.django_db

PAGE = "/projects/acme/notifications/"
SETTINGS = "/settings/notifications/"


@pytest.fixture
def admin_client(django_user_model: Any, project: Project) -> Client:
    return signed_in_client(person(django_user_model, "ada", project, Membership.Role.ADMIN))


def test_the_page_takes_the_admin_role(
    client: Client, approver_client: Client, outsider_client: Client, admin_client: Client
) -> None:
    assert client.get(PAGE).status_code == 302
    refused = approver_client.get(PAGE)
    assert refused.status_code == 403
    assert "Only admins of this project" in refused.content.decode()
    assert approver_client.post(PAGE, {"action": "channel-delete", "name": "x"}).status_code == 403
    assert outsider_client.get(PAGE).status_code == 404
    page = admin_client.get(PAGE).content.decode()
    assert "No channel yet" in page
    assert "No rule yet" in page


def test_a_bad_channel_is_refused_with_the_field_and_nothing_written(admin_client: Client) -> None:
    response = admin_client.post(
        PAGE, {"action": "channel-set", "name": "chat", "kind": "slack", "target": "http://hooks.example/x"}
    )
    assert response.status_code == 422
    assert "target: a webhook channel&#x27;s URL must be https" in response.content.decode()
    assert not NotificationChannel.objects.exists()


def test_a_channel_is_added_and_a_failing_one_says_so(admin_client: Client, project: Project) -> None:
    response = admin_client.post(
        PAGE,
        {
            "action": "channel-set",
            "name": "on-call",
            "kind": "email",
            "target": "oncall@example.com",
            "on_new_ask": "on",
        },
    )
    assert response.status_code == 302
    channel = NotificationChannel.objects.get(project=project)
    assert (channel.on_new_ask, channel.on_deadline, channel.include_payload) == (True, False, False)
    ask = Ask.objects.create(project=project, run_id="r1", tool_call_id="c1", kind="plain", pause_data={})
    for apart in range(3):  # the ids of attempts and of deliveries differ, as they do in use
        WebhookDelivery.objects.create(ask=ask, url="https://x.example/", kind="notification", step=apart + 5)
    delivery = WebhookDelivery.objects.create(
        ask=ask, kind="notification", event="ask_opened", channel=channel, url="mailto:x", status="failed", attempts=3
    )
    delivery.attempt_log.create(url="mailto:x", error="ConnectionRefusedError from the mail server")
    page = admin_client.get(PAGE).content.decode()
    assert re.search(r'class="channel-row failing"', page)
    assert "failing</span> after 3 attempts: ConnectionRefusedError from the mail server" in page


def test_a_rule_is_refused_naming_the_field_then_saved(
    admin_client: Client, project: Project, agent_client: ApiClient
) -> None:
    refused = admin_client.post(
        PAGE, {"action": "rule-set", "tool_name": "transfer_funds", "deadline_minutes": "30", "on_timeout": "decline"}
    )
    assert refused.status_code == 422
    assert "tool_name: no run of this project has called or asked about a tool named" in refused.content.decode()
    open_ask(agent_client, plain_body())
    notifications.notification_channel_set(project=project, name="on-call", kind="email", target="a@example.com")
    bad_line = admin_client.post(
        PAGE,
        {"action": "rule-set", "tool_name": "ask_user", "deadline_minutes": "30", "on_timeout": "decline",
         "escalation": "after 10 min notify on-call\nsoon-ish"},
    )  # fmt: skip
    assert bad_line.status_code == 422
    assert "escalation, line 2" in bad_line.content.decode()
    saved = admin_client.post(
        PAGE,
        {"action": "rule-set", "tool_name": "ask_user", "deadline_minutes": "30", "on_timeout": "decline",
         "note": "Declined: nobody answered.", "escalation": "after 10 min notify on-call"},
    )  # fmt: skip
    assert saved.status_code == 302
    rule = DeadlineRule.objects.get(project=project)
    assert rule.escalation == [{"afterMinutes": 10, "notify": "on-call"}]
    assert "after 10 min notify on-call" in admin_client.get(PAGE).content.decode()


def test_a_person_chooses_what_they_are_emailed(approver: Any, approver_client: Client, project: Project) -> None:
    page = approver_client.get(SETTINGS).content.decode()
    assert "acme" in page
    assert "no email address" in page
    refused = approver_client.post(SETTINGS, {f"p{project.pk}-on_new_ask": "on"})
    assert refused.status_code == 422
    assert "email: your account has no email address" in refused.content.decode()
    approver.email = "bob@example.com"
    approver.save()
    assert approver_client.post(SETTINGS, {f"p{project.pk}-on_new_ask": "on"}).status_code == 302
    choice = NotificationPreference.objects.get(user=approver, project=project)
    assert (choice.on_new_ask, choice.on_deadline, choice.on_escalation) == (True, False, False)


def test_an_auditor_has_no_project_to_choose(auditor_client: Client) -> None:
    page = auditor_client.get(SETTINGS).content.decode()
    assert "You approve in no project" in page


def test_the_navigation_count_polls_its_own_partial(approver_client: Client, project: Project) -> None:
    Ask.objects.create(project=project, run_id="r1", tool_call_id="c1", kind="plain", pause_data={})
    Ask.objects.create(
        project=project, run_id="r2", tool_call_id="c2", kind="plain", pause_data={}, deadline=timezone.now()
    )  # overdue: the deadline's to decide, not counted
    page = approver_client.get("/inbox/").content.decode()
    assert 'hx-get="/inbox/count/" hx-trigger="every 15s"' in page
    badge = approver_client.get("/inbox/count/").content.decode().strip()
    assert badge == '<span id="inbox-count" class="badge">1</span>'
