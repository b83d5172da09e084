"""Notifications of asks: channels, people's choices, messages read back from a real SMTP server
and webhook receiver, and the outbox's retries when the mail server is down."""

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger.asks import notifications, webhooks
from ledger.asks.notifications import NotificationInvalid
from ledger.models import Ask, NotificationChannel, Run, WebhookAttempt, WebhookDelivery
from tenancy.models import AdminChange, Membership, Project
from tests.conftest import ApiClient, person
from tests.http_receiver import url_of, webhook_receiver
from tests.ledger.ask_helpers import open_ask, plain_body
from tests.smtp_server import free_port, smtp_server

pytestmark = pytest.mark.django_db


@pytest.fixture
def smtp(settings: Any) -> Any:
    with smtp_server() as (mailbox, port):
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
        settings.FOOTPRINT_PUBLIC_URL = "https://ledger.example"
        yield mailbox


def _notifications(ask_id: int) -> Any:
    return WebhookDelivery.objects.filter(ask_id=ask_id, kind=WebhookDelivery.Kind.NOTIFICATION)


@pytest.mark.parametrize(
    ("kind", "target", "field"),
    [
        ("email", "not-an-address", "target: 'not-an-address' is not an email address."),
        ("email", "", "target: an email channel needs at least one address"),
        ("slack", "http://hooks.example/T1", "target: a webhook channel's URL must be https; plain http"),
        ("webhook", "ftp://hooks.example/x", "target: a webhook channel's URL must be https with a host"),
        ("pager", "https://hooks.example/x", "kind: one of email, slack, webhook"),
    ],
)
def test_channel_set_refuses_bad_input_naming_the_field(project: Project, kind: str, target: str, field: str) -> None:
    with pytest.raises(NotificationInvalid) as refused:
        notifications.notification_channel_set(project=project, name="on-call", kind=kind, target=target)
    assert field in refused.value.message
    assert not NotificationChannel.objects.exists()


def test_channel_set_refuses_a_name_steps_could_not_name(project: Project) -> None:
    with pytest.raises(NotificationInvalid, match=r"^name: "):
        notifications.notification_channel_set(project=project, name="On Call!", kind="email", target="a@b.example")


def test_channel_set_allows_http_only_to_a_host_the_administrator_lists(project: Project, settings: Any) -> None:
    settings.FOOTPRINT_NOTIFY_HTTP_HOSTS = ["127.0.0.1"]
    channel = notifications.notification_channel_set(
        project=project, name="chat", kind="slack", target="http://127.0.0.1:9/hook"
    )
    assert channel.target == "http://127.0.0.1:9/hook"
    with pytest.raises(NotificationInvalid, match="must be https"):
        notifications.notification_channel_set(project=project, name="chat2", kind="slack", target="http://x.example/")


def test_a_new_ask_is_emailed_with_agent_tool_question_and_link_and_no_decision(
    project: Project, agent_client: ApiClient, smtp: Any
) -> None:
    notifications.notification_channel_set(project=project, name="on-call", kind="email", target="oncall@example.com")
    ask = open_ask(agent_client, plain_body())
    assert _notifications(ask["id"]).count() == 1
    assert notifications.notifications_send_for_ask(ask_id=ask["id"]) == 1
    (message,) = smtp.messages
    body = message.get_content()
    assert message["To"] == "oncall@example.com"
    assert "ask_user" in message["Subject"]
    assert "Question: Region?" in body
    assert "Tool: ask_user" in body
    assert f"https://ledger.example/asks/{ask['id']}/" in body
    assert "/decide" not in body
    assert "Arguments" not in body
    delivery = _notifications(ask["id"]).get()
    assert delivery.status == WebhookDelivery.Status.DELIVERED
    assert delivery.attempt_log.get().error == ""


def test_a_message_names_the_agent_of_the_asks_run_in_its_own_project(
    project: Project, other_project: Project, agent_client: ApiClient, smtp: Any
) -> None:
    Run.objects.create(project=other_project, run_id="run-q", agent_id="someone-elses-agent")
    Run.objects.create(project=project, run_id="run-q", agent_id="billing-bot")
    notifications.notification_channel_set(project=project, name="on-call", kind="email", target="oncall@example.com")
    ask = open_ask(agent_client, plain_body())
    notifications.notifications_send_for_ask(ask_id=ask["id"])
    (message,) = smtp.messages
    assert "Agent: billing-bot (run run-q)" in message.get_content()


def test_a_person_who_chose_new_asks_is_emailed_and_an_auditor_may_not_choose(
    project: Project, agent_client: ApiClient, django_user_model: Any, smtp: Any
) -> None:
    approver = person(django_user_model, "dora", project, Membership.Role.APPROVER)
    approver.email = "dora@example.com"
    approver.save()
    auditor = person(django_user_model, "erin", project, Membership.Role.AUDITOR)
    auditor.email = "erin@example.com"
    auditor.save()
    notifications.notification_preference_set(
        user=approver, project=project, on_new_ask=True, on_deadline=False, on_escalation=False
    )
    with pytest.raises(NotificationInvalid, match=r"^project: "):
        notifications.notification_preference_set(
            user=auditor, project=project, on_new_ask=True, on_deadline=True, on_escalation=True
        )
    ask = open_ask(agent_client, plain_body())
    notifications.notifications_send_for_ask(ask_id=ask["id"])
    assert [m["To"] for m in smtp.messages] == ["dora@example.com"]


def test_mail_server_down_the_message_waits_in_the_outbox_and_is_delivered_later(
    project: Project, agent_client: ApiClient, settings: Any
) -> None:
    port = free_port()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    notifications.notification_channel_set(project=project, name="on-call", kind="email", target="oncall@example.com")
    ask = open_ask(agent_client, plain_body())
    assert notifications.notifications_send_for_ask(ask_id=ask["id"]) == 0
    delivery = _notifications(ask["id"]).get()
    assert delivery.status == WebhookDelivery.Status.FAILED
    assert "mail server" in delivery.attempt_log.get().error
    # Before its backoff has passed the sweep leaves it alone.
    assert notifications.notifications_send_due() == 0
    with smtp_server(port) as (mailbox, _):
        WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
        assert notifications.notifications_send_due() == 1
        assert len(mailbox.messages) == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (WebhookDelivery.Status.DELIVERED, 2)
    assert WebhookAttempt.objects.filter(delivery=delivery).count() == 2


def test_slack_and_generic_channels_get_signed_json_and_payload_only_where_allowed(
    project: Project, agent_client: ApiClient, settings: Any
) -> None:
    settings.FOOTPRINT_NOTIFY_HTTP_HOSTS = ["127.0.0.1"]
    with webhook_receiver() as receiver:
        slack = notifications.notification_channel_set(
            project=project, name="chat", kind="slack", target=url_of(receiver, "/slack")
        )
        generic = notifications.notification_channel_set(
            project=project, name="ops", kind="webhook", target=url_of(receiver, "/generic"), include_payload=True
        )
        ask = open_ask(agent_client, plain_body())
        assert notifications.notifications_send_for_ask(ask_id=ask["id"]) == 2
    by_path = {path: (headers, body) for path, headers, body in receiver.received}
    headers, body = by_path["/slack"]
    assert headers["X-Footprint-Signature"] == webhooks.signature(slack.secret, body)
    text = orjson.loads(body)["text"]
    assert "Region?" in text
    assert "ask_user" in text
    headers, body = by_path["/generic"]
    assert headers["X-Footprint-Signature"] == webhooks.signature(generic.secret, body)
    fields = orjson.loads(body)
    assert fields["event"] == "ask_opened"
    assert fields["question"] == "Region?"
    assert "args" in fields


def test_the_decisions_webhook_sweep_leaves_notifications_to_their_own(
    project: Project, agent_client: ApiClient, settings: Any
) -> None:
    settings.FOOTPRINT_NOTIFY_HTTP_HOSTS = ["127.0.0.1"]
    with webhook_receiver() as receiver:
        webhooks.webhook_endpoint_set(project=project, url=url_of(receiver))
        notifications.notification_channel_set(project=project, name="chat", kind="slack", target=url_of(receiver))
        ask = open_ask(agent_client, plain_body())
        assert webhooks.webhooks_send_due() == 0
        assert receiver.received == []
    assert Ask.objects.get(pk=ask["id"]).status == Ask.Status.OPEN


def test_queued_twice_a_message_is_written_once(project: Project, agent_client: ApiClient) -> None:
    notifications.notification_channel_set(project=project, name="on-call", kind="email", target="oncall@example.com")
    ask = open_ask(agent_client, plain_body())
    notifications.notifications_queue(ask=Ask.objects.get(pk=ask["id"]), event=WebhookDelivery.Event.ASK_OPENED)
    assert _notifications(ask["id"]).count() == 1


def test_channel_changes_are_recorded_as_admin_changes_without_the_secret(project: Project) -> None:
    notifications.notification_channel_set(project=project, name="on-call", kind="email", target="a@example.com")
    notifications.notification_channel_set(project=project, name="on-call", kind="email", target="b@example.com")
    notifications.notification_channel_delete(project=project, name="on-call")
    assert not notifications.notification_channel_delete(project=project, name="on-call")
    changes = AdminChange.objects.filter(project=project, target_type="notification_channel").order_by("id")
    assert [c.action for c in changes] == [
        AdminChange.Action.CHANNEL_SET,
        AdminChange.Action.CHANNEL_SET,
        AdminChange.Action.CHANNEL_REMOVED,
    ]
    assert (changes[1].before["target"], changes[1].after["target"]) == ("a@example.com", "b@example.com")
    assert all("secret" not in str(c.after) for c in changes)


def test_opening_an_ask_queues_its_messages_first_attempt_after_the_commit(
    project: Project, django_capture_on_commit_callbacks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from footprint_site.celery import app
    from ledger.asks.services import ask_open

    notifications.notification_channel_set(project=project, name="on-call", kind="email", target="oncall@example.com")
    sent: list[tuple[str, Any]] = []
    monkeypatch.setattr(app, "send_task", lambda name, args: sent.append((name, args)))
    with django_capture_on_commit_callbacks(execute=True):
        ask, _ = ask_open(
            project=project,
            key=None,
            run_id="run-queued",
            session_id=None,
            pause_data={"toolCallId": "t1", "toolName": "ask_user", "question": "Region?"},
            checkpoint=None,
            deadline=None,
            on_timeout="decline",
        )
    assert sent == [("ledger.tasks.notifications_send_for_ask", (ask.pk,))]
    assert _notifications(ask.pk).get().status == WebhookDelivery.Status.PENDING


def test_a_sweep_sends_its_batch_over_one_mail_connection_and_records_every_attempt(
    project: Project, agent_client: ApiClient, smtp: Any
) -> None:
    notifications.notification_channel_set(project=project, name="on-call", kind="email", target="oncall@example.com")
    asks = [open_ask(agent_client, plain_body(f"q{n}", f"run-q{n}"))["id"] for n in range(5)]
    assert notifications.notifications_send_due() == 5
    assert len(smtp.messages) == 5
    assert len(smtp.peers) == 1
    for ask_id in asks:
        delivery = _notifications(ask_id).get()
        assert (delivery.status, delivery.attempts, delivery.lease_until) == (WebhookDelivery.Status.DELIVERED, 1, None)
        assert delivery.attempt_log.get().error == ""
    assert notifications.notifications_send_due() == 0


def test_a_batch_goes_to_the_database_as_often_for_four_messages_as_for_one(
    project: Project, agent_client: ApiClient, smtp: Any
) -> None:
    """Each message's ask, project, channel and run's agent come with the claim's read-back: no
    field is read one message at a time."""
    notifications.notification_channel_set(project=project, name="on-call", kind="email", target="oncall@example.com")
    Run.objects.create(project=project, run_id="run-q0", agent_id="billing-bot")
    open_ask(agent_client, plain_body("q0", "run-q0"))
    with CaptureQueriesContext(connection) as one:
        assert notifications.notifications_send_due() == 1
    for n in range(1, 5):
        open_ask(agent_client, plain_body(f"q{n}", f"run-q{n}"))
    with CaptureQueriesContext(connection) as four:
        assert notifications.notifications_send_due() == 4
    assert len(four) == len(one)
    assert "Agent: billing-bot (run run-q0)" in smtp.messages[0].get_content()


def test_mail_server_unreachable_the_whole_batch_fails_at_once_each_attempt_recorded(
    project: Project, agent_client: ApiClient, settings: Any
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()
    notifications.notification_channel_set(project=project, name="on-call", kind="email", target="oncall@example.com")
    asks = [open_ask(agent_client, plain_body(f"q{n}", f"run-q{n}"))["id"] for n in range(3)]
    assert notifications.notifications_send_due() == 0
    for ask_id in asks:
        delivery = _notifications(ask_id).get()
        assert (delivery.status, delivery.attempts, delivery.lease_until) == (WebhookDelivery.Status.FAILED, 1, None)
        assert delivery.next_attempt_at > timezone.now()
        assert "mail server" in delivery.attempt_log.get().error


def test_messages_a_batch_cannot_reach_before_its_lease_are_handed_back_unsent(
    project: Project, agent_client: ApiClient, smtp: Any, monkeypatch: Any
) -> None:
    notifications.notification_channel_set(project=project, name="on-call", kind="email", target="oncall@example.com")
    ask = open_ask(agent_client, plain_body())
    # A lease no longer than one send's timeout leaves the batch no time to send anything.
    monkeypatch.setattr(notifications, "LEASE_SECONDS", notifications.TIMEOUT_SECONDS)
    assert notifications.notifications_send_for_ask(ask_id=ask["id"]) == 0
    assert smtp.messages == []
    delivery = _notifications(ask["id"]).get()
    assert (delivery.status, delivery.attempts, delivery.lease_until) == (WebhookDelivery.Status.PENDING, 0, None)
    assert not delivery.attempt_log.exists()  # never attempted, so no attempt is logged
    monkeypatch.undo()
    assert notifications.notifications_send_for_ask(ask_id=ask["id"]) == 1
    assert len(smtp.messages) == 1


def test_a_sweep_spaces_its_emails_at_its_pace_and_a_slow_one_is_not_made_up_in_a_burst(
    project: Project, agent_client: ApiClient, mailoutbox: list[Any], settings: Any, monkeypatch: Any
) -> None:
    settings.FOOTPRINT_NOTIFICATIONS_PER_SECOND = 10
    monkeypatch.setattr(notifications, "BATCH", 2)  # the pace holds across batches too
    notifications.notification_channel_set(project=project, name="on-call", kind="email", target="oncall@example.com")
    for n in range(4):
        open_ask(agent_client, plain_body(f"q{n}", f"run-q{n}"))
    # The sweep's own clock, moved by its rests and by a send that takes half a second: when each
    # email went out.
    clock = {"now": 0.0}
    sent_at: list[float] = []
    monkeypatch.setattr(
        notifications,
        "time",
        SimpleNamespace(monotonic=lambda: clock["now"], sleep=lambda s: clock.update(now=clock["now"] + s)),
    )
    send = notifications._MailConnection.send

    def send_and_note(self: Any, message: Any, to: list[str]) -> Any:
        sent_at.append(clock["now"])
        if len(sent_at) == 2:
            clock["now"] += 0.5
        return send(self, message, to)

    monkeypatch.setattr(notifications._MailConnection, "send", send_and_note)
    assert notifications.notifications_send_due() == 4
    assert len(mailoutbox) == 4
    assert sent_at == pytest.approx([0.0, 0.1, 0.6, 0.7])
