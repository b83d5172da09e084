import io

import pytest
from django.core.management import CommandError, call_command

from ledger.asks.services import ask_decide, ask_open
from ledger.models import Ask, WebhookAttempt, WebhookDelivery, WebhookEndpoint
from tenancy.models import Membership
from tenancy.services import membership_grant

pytestmark = pytest.mark.django_db


def test_set_webhook_stores_the_url_and_prints_the_secret_last(project):
    out = io.StringIO()
    call_command("set_webhook", "--project", project.slug, "--url", "https://agents.example/decisions", stdout=out)
    endpoint = WebhookEndpoint.objects.get(project=project)
    assert out.getvalue().strip().splitlines()[-1] == endpoint.secret
    assert endpoint.active


def test_set_webhook_off_stops_deliveries(project):
    call_command("set_webhook", "--project", project.slug, "--url", "https://a.example/", stdout=io.StringIO())
    call_command("set_webhook", "--project", project.slug, "--off", stdout=io.StringIO())
    assert not WebhookEndpoint.objects.get(project=project).active


def test_set_webhook_refuses_a_bad_url_and_an_unknown_project(project):
    with pytest.raises(CommandError, match="http"):
        call_command("set_webhook", "--project", project.slug, "--url", "ftp://x")
    with pytest.raises(CommandError, match="No project"):
        call_command("set_webhook", "--project", "nope", "--url", "https://x.example/")


def test_ask_page_shows_every_delivery_attempt(project, auditor_client, auditor):
    membership_grant(user=auditor, project=project, role=Membership.Role.APPROVER)
    ask, _ = ask_open(
        project=project,
        key=None,
        run_id="r1",
        session_id=None,
        checkpoint=None,
        deadline=None,
        on_timeout="decline",
        pause_data={"toolCallId": "t1", "toolName": "pay", "ask": {"question": "Pay?", "middleware": "m"}},
    )
    WebhookEndpoint.objects.create(project=project, url="https://agents.example/d", secret="s")
    ask_decide(ask_id=ask.pk, approved=True, via=Ask.Via.API, by_label="bot")
    delivery = WebhookDelivery.objects.get(ask=ask)
    WebhookAttempt.objects.create(delivery=delivery, status_code=503, duration_ms=12)
    page = auditor_client.get(f"/asks/{ask.pk}/").content.decode()
    assert "Webhook deliveries" in page
    assert "HTTP 503" in page
