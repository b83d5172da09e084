"""An approver hears of an ask by email (a real SMTP server), follows the message's link, signs in
and approves; the waiting agent gets the decision."""

import re
from collections.abc import Callable
from typing import Any

import pytest

from ledger.asks import notifications
from ledger.models import Ask
from tenancy.models import Membership, Project
from tests.conftest import person
from tests.e2e.test_inbox import _api, _post_ask
from tests.smtp_server import smtp_server

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_emailed_approver_follows_the_link_and_approves(
    live_server: Any, new_page: Callable[[], Any], django_user_model: Any, project: Project, settings: Any
) -> None:
    from playwright.sync_api import expect

    from tenancy.services import agent_key_create

    approver = person(django_user_model, "bob", project, Membership.Role.APPROVER)
    approver.email = "bob@example.com"
    approver.save()
    notifications.notification_preference_set(
        user=approver, project=project, on_new_ask=True, on_deadline=False, on_escalation=False
    )
    secret = agent_key_create(project=project, scopes=["asks", "ingest", "read"])[1]
    with smtp_server() as (mailbox, port):
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
        settings.FOOTPRINT_PUBLIC_URL = live_server.url
        ask_id = _post_ask(live_server.url, secret, "e2e-mail", "Approve a transfer of 2500 EUR to ACC-902?")
        assert notifications.notifications_send_due() == 1  # the worker's sweep
        (message,) = mailbox.messages
    body = message.get_content()
    assert "Approve a transfer of 2500 EUR to ACC-902?" in body
    link = re.search(r"Decide on its page \(signed in\): (\S+)", body).group(1)  # type: ignore[union-attr]
    assert link == f"{live_server.url}/asks/{ask_id}/"

    page = new_page()
    page.goto(link)
    assert "/accounts/login/" in page.url
    page.fill("input[name=username]", "bob")
    page.fill("input[name=password]", "pw-bob")
    page.click("button:has-text('Sign in')")
    page.wait_for_url(re.compile(re.escape(link) + r"$"))
    page.click("button[value=approve]")
    expect(page.locator("#decision-panel")).to_contain_text("Approved by bob")

    status, decision = _api(live_server.url, secret, "GET", f"/api/v1/asks/{ask_id}/decision?wait=0")
    assert (status, decision["status"], decision["decision"]["approved"]) == (200, "decided", True)
    assert Ask.objects.get(pk=ask_id).decided_by_label == "bob"
