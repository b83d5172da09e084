"""Telling people of asks: a new ask, a deadline drawing near, an escalation.

A project's channels (an email list, a Slack-compatible incoming webhook, a generic signed JSON
webhook) and each person's own choices (their settings page) say who is told of what. Every
message is a row of the decisions' outbox (`WebhookDelivery`, kind `notification`), written in
the transaction of what it tells of: the same backoff, lease and logged attempts as a decision's
webhook, so a broker or worker restart delays a message and never loses it. A queued task makes
the first attempt at once; this module's sweep makes every later one.

A message names the project, the agent, the tool and the question, and links to the ask's page.
It carries no way to decide (a person decides on the page, signed in) and none of the call's
arguments unless the channel's admin allowed them. Sending happens in the worker, never while a
decision is made, so a slow receiver delays nobody's decision.
"""

import logging
import re
import secrets
import smtplib
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage, get_connection
from django.core.validators import URLValidator, validate_email
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from footprint_site.celery import task_send_on_commit
from ledger.asks.webhooks import MAX_ATTEMPTS, NO_ANSWER, signed_post
from ledger.asks.webhooks import backoff as outbox_backoff
from ledger.exceptions import LedgerError
from ledger.models import (
    Ask,
    NotificationChannel,
    NotificationPreference,
    Run,
    ToolCall,
    WebhookAttempt,
    WebhookDelivery,
)
from tenancy.models import AdminChange, Membership, Project
from tenancy.selectors import approver_projects
from tenancy.services import UNNAMED, Actor, admin_change_record

logger = logging.getLogger(__name__)

TIMEOUT_SECONDS = 10
LEASE_SECONDS = TIMEOUT_SECONDS + 5
CHANNEL_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,59}")
MAX_ADDRESSES = 20
# People told of a project's asks are the ones who may decide them.
DECIDERS = (Membership.Role.APPROVER, Membership.Role.ADMIN)
Event = WebhookDelivery.Event
NOTIFICATION = WebhookDelivery.Kind.NOTIFICATION


class NotificationInvalid(LedgerError):
    """A channel or a setting refused, with a sentence naming the field."""

    status = 422
    code = "ERR_INVALID_NOTIFICATION"


def _check_url(url: str) -> None:
    try:
        URLValidator(schemes=["http", "https"])(url)
    except ValidationError:
        raise NotificationInvalid(
            f"target: a webhook channel's URL must be https with a host, e.g. https://hooks.example/T1; "
            f"got {url[:80]!r}."
        ) from None
    parts = urllib.parse.urlsplit(url)
    allowed = [host.lower() for host in settings.FOOTPRINT_NOTIFY_HTTP_HOSTS]
    if parts.scheme == "http" and (parts.hostname or "").lower() not in allowed:
        raise NotificationInvalid(
            f"target: a webhook channel's URL must be https; plain http to {parts.hostname} is allowed only "
            "when the server's administrator lists that host in FOOTPRINT_NOTIFY_HTTP_HOSTS."
        )
    if len(url) > WebhookDelivery._meta.get_field("url").max_length:  # type: ignore[operator]
        raise NotificationInvalid("target: the URL is at most 500 characters.")


def _check_addresses(target: str) -> str:
    addresses = [part.strip() for part in target.split(",") if part.strip()]
    if not addresses:
        raise NotificationInvalid("target: an email channel needs at least one address, e.g. oncall@example.com.")
    if len(addresses) > MAX_ADDRESSES:
        raise NotificationInvalid(f"target: an email channel holds at most {MAX_ADDRESSES} addresses.")
    for address in addresses:
        try:
            validate_email(address)
        except ValidationError:
            raise NotificationInvalid(f"target: {address[:80]!r} is not an email address.") from None
    return ", ".join(addresses)


def notification_channel_set(
    *,
    project: Project,
    name: str,
    kind: str,
    target: str,
    on_new_ask: bool = True,
    on_deadline: bool = True,
    include_payload: bool = False,
    actor: Actor = UNNAMED,
) -> NotificationChannel:
    """Create or change the project's channel `name`, recorded as an AdminChange (its target,
    never its secret). A webhook channel gets a new signing secret when it is created or its URL
    changes. Raises NotificationInvalid naming the field."""
    name = name.strip()
    if not CHANNEL_NAME.fullmatch(name):
        raise NotificationInvalid(
            "name: a channel's name is 1 to 60 lowercase letters, digits, '-' or '_', starting with a letter "
            "or digit (escalation steps notify it by that name)."
        )
    if kind not in NotificationChannel.Kind.values:
        raise NotificationInvalid(f"kind: one of {', '.join(NotificationChannel.Kind.values)}; got {kind[:40]!r}.")
    target = target.strip()
    if kind == NotificationChannel.Kind.EMAIL:
        target = _check_addresses(target)
    else:
        _check_url(target)
    with transaction.atomic():
        channel = NotificationChannel.objects.select_for_update().filter(project=project, name=name).first()
        before = None if channel is None else _recorded(channel)
        if channel is None:
            channel = NotificationChannel(project=project, name=name, secret=secrets.token_hex(32))
        elif channel.target != target or channel.kind != kind:
            channel.secret = secrets.token_hex(32)
        channel.kind, channel.target = kind, target
        channel.on_new_ask, channel.on_deadline, channel.include_payload = on_new_ask, on_deadline, include_payload
        channel.active = True
        channel.save()
        _record_change(actor, AdminChange.Action.CHANNEL_SET, channel, before, _recorded(channel))
    return channel


def notification_channel_delete(*, project: Project, name: str, actor: Actor = UNNAMED) -> bool:
    """Remove the channel and the messages still waiting for it, recorded as an AdminChange.
    False, and nothing recorded, when there was none."""
    with transaction.atomic():
        channel = NotificationChannel.objects.select_for_update().filter(project=project, name=name).first()
        if channel is None:
            return False
        before = _recorded(channel)
        _record_change(actor, AdminChange.Action.CHANNEL_REMOVED, channel, before, None)
        channel.delete()
    return True


def _recorded(channel: NotificationChannel) -> dict[str, Any]:
    return {
        "kind": channel.kind,
        "target": channel.target,
        "onNewAsk": channel.on_new_ask,
        "onDeadline": channel.on_deadline,
        "includePayload": channel.include_payload,
    }


def _record_change(
    actor: Actor, action: str, channel: NotificationChannel, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> None:
    if before != after:
        admin_change_record(
            actor=actor,
            action=action,
            project=channel.project,
            target_type="notification_channel",
            target_id=channel.name,
            target_label=f"notification channel {channel.name}",
            before=before,
            after=after,
        )


def notification_preference_set(
    *, user: User, project: Project, on_new_ask: bool, on_deadline: bool, on_escalation: bool
) -> NotificationPreference:
    """What `user` wants emailed about `project`'s asks. Only a person who may decide them is told
    of them: anyone else is refused (the page offers them no such project)."""
    if not approver_projects(user).filter(pk=project.pk).exists():
        raise NotificationInvalid("project: only the project's approvers and admins are told of its asks.")
    if (on_new_ask or on_deadline or on_escalation) and not user.email:
        raise NotificationInvalid("email: your account has no email address to send to; an admin can set one.")
    preference, _ = NotificationPreference.objects.update_or_create(
        user=user,
        project=project,
        defaults={"on_new_ask": on_new_ask, "on_deadline": on_deadline, "on_escalation": on_escalation},
    )
    return preference


_PERSON_FLAG: dict[str, str] = {
    Event.ASK_OPENED: "on_new_ask",
    Event.DEADLINE_NEAR: "on_deadline",
    Event.ESCALATION: "on_escalation",
}
_CHANNEL_FLAG: dict[str, str] = {Event.ASK_OPENED: "on_new_ask", Event.DEADLINE_NEAR: "on_deadline"}


def _people(project_id: int, event: str) -> QuerySet[NotificationPreference]:
    return NotificationPreference.objects.filter(
        project_id=project_id, **{_PERSON_FLAG[event]: True}, user__is_active=True
    ).filter(
        Q(Exists(Membership.objects.filter(user=OuterRef("user"), project_id=project_id, role__in=DECIDERS)))
        | Q(user__is_superuser=True),
        ~Q(user__email=""),
    )


def notifications_queue(*, ask: Ask, event: str, step: int = 0, channel_names: list[str] | None = None) -> int:
    """Write the outbox rows telling of `event` on `ask`, once per recipient (a unique key: queued
    twice, written once), and queue the first attempt for after the commit. The recipients are the
    project's active channels that take `event` and the people who chose it; for an escalation,
    the channels its step names and the people who chose escalations. Returns how many were new."""
    channels = NotificationChannel.objects.filter(project_id=ask.project_id, active=True)
    if channel_names is not None:
        channels = channels.filter(name__in=channel_names)
    else:
        channels = channels.filter(**{_CHANNEL_FLAG[event]: True})
    rows = [
        WebhookDelivery(ask=ask, kind=NOTIFICATION, event=event, step=step, channel=channel, url=_url_of(channel))
        for channel in channels
    ]
    rows += [
        WebhookDelivery(ask=ask, kind=NOTIFICATION, event=event, step=step, recipient_id=user_id, url=f"mailto:{email}")
        for user_id, email in _people(ask.project_id, event).values_list("user_id", "user__email")
    ]
    if not rows:
        return 0
    created = WebhookDelivery.objects.bulk_create(rows, ignore_conflicts=True)
    task_send_on_commit("ledger.tasks.notifications_send_for_ask", ask.pk)
    return len(created)


def _url_of(channel: NotificationChannel) -> str:
    if channel.kind == NotificationChannel.Kind.EMAIL:
        return "mailto:" + channel.target.split(",")[0].strip()
    return channel.target


# --- sending -------------------------------------------------------------------------------


def _sendable(now: datetime) -> QuerySet[WebhookDelivery]:
    return (
        WebhookDelivery.objects.filter(kind=NOTIFICATION)
        .exclude(status=WebhookDelivery.Status.DELIVERED)
        .filter(next_attempt_at__lte=now, attempts__lt=MAX_ATTEMPTS)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
    )


def notification_deliver(*, delivery_id: int) -> bool:
    """Make one attempt at a message if it is due (not delivered, past its backoff, under the cap,
    not in flight); a no-op otherwise. The attempt is claimed and logged (committed) before it is
    sent, and whatever it ends in is recorded on it. True when the message was delivered."""
    now = timezone.now()
    with transaction.atomic():
        claimed = (
            _sendable(now)
            .filter(pk=delivery_id)
            .update(lease_until=now + timedelta(seconds=LEASE_SECONDS), attempts=F("attempts") + 1)
        )
        if not claimed:
            return False
        delivery = WebhookDelivery.objects.select_related("ask__project", "channel", "recipient").get(pk=delivery_id)
        attempt = WebhookAttempt.objects.create(delivery=delivery, url=delivery.url, error=NO_ANSWER)
    started = time.monotonic()
    try:
        status_code, error = _send(delivery)
    except Exception as exc:
        logger.exception("notification %s: the attempt failed before it got an answer", delivery_id)
        status_code, error = None, f"{type(exc).__name__} in the server before an answer (see its log)"
    delivered = not error
    WebhookAttempt.objects.filter(pk=attempt.pk).update(
        status_code=status_code, error=error, duration_ms=int((time.monotonic() - started) * 1000)
    )
    done = timezone.now()
    mine = WebhookDelivery.objects.filter(pk=delivery.pk).exclude(status=WebhookDelivery.Status.DELIVERED)
    if delivered:
        mine.update(status=WebhookDelivery.Status.DELIVERED, delivered_at=done, lease_until=None)
    else:
        mine.filter(attempts=delivery.attempts).update(
            status=WebhookDelivery.Status.FAILED,
            next_attempt_at=done + outbox_backoff(delivery.attempts),
            lease_until=None,
        )
        logger.log(
            logging.ERROR if delivery.attempts >= MAX_ATTEMPTS else logging.WARNING,
            "notification %s to %s, attempt %s of %s: %s",
            delivery_id,
            delivery.url,
            delivery.attempts,
            MAX_ATTEMPTS,
            error,
        )
    return delivered


def notifications_send_for_ask(*, ask_id: int) -> int:
    """The fast path: attempt every due message about one ask. Returns how many were delivered."""
    due = _sendable(timezone.now()).filter(ask_id=ask_id).values_list("pk", flat=True)
    return sum(notification_deliver(delivery_id=pk) for pk in list(due))


def notifications_send_due(*, limit: int = 200) -> int:
    """The outbox sweep for messages: attempt every one that is due. Returns how many were delivered."""
    due = list(_sendable(timezone.now()).order_by("next_attempt_at").values_list("pk", flat=True)[:limit])
    return sum(notification_deliver(delivery_id=pk) for pk in due)


# --- the message ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    subject: str
    text: str
    fields: dict[str, object]


_HEADLINE: dict[str, str] = {
    Event.ASK_OPENED: "waits for a decision",
    Event.DEADLINE_NEAR: "reaches its deadline soon",
    Event.ESCALATION: "is escalated to you: nobody has decided it yet",
}


def message_of(delivery: WebhookDelivery) -> Message:
    """What a message says: project, agent, tool, question, deadline and the ask page's link;
    the call's arguments only for a channel that allows them."""
    ask = delivery.ask
    project = ask.project
    agent = Run.objects.filter(project=project, run_id=ask.run_id).values_list("agent_id", flat=True).first()
    link = settings.FOOTPRINT_PUBLIC_URL.rstrip("/") + reverse("asks:ask-detail", args=[ask.pk])
    tool = ask.tool_name or ask.middleware or "(no tool named)"
    question = ask.question or "(no question given)"
    subject = f"[{project.slug}] {ask.get_kind_display()} on {tool} {_HEADLINE[delivery.event]}"
    lines = [
        f"Project: {project.name} ({project.slug})",
        f"Agent: {agent or '(not named by its run)'} (run {ask.run_id})",
        f"Tool: {tool}",
        f"Question: {question}",
    ]
    if ask.deadline:
        lines.append(f"Deadline: {ask.deadline:%Y-%m-%d %H:%M} UTC, then it is {ask.on_timeout}d by the deadline")
    if delivery.event == Event.ESCALATION:
        lines.append(f"Escalation step {delivery.step}")
    fields: dict[str, object] = {
        "event": delivery.event,
        "project": project.slug,
        "askId": ask.pk,
        "runId": ask.run_id,
        "agent": agent,
        "tool": tool,
        "kind": ask.kind,
        "question": ask.question,
        "deadline": ask.deadline.isoformat() if ask.deadline else None,
        "escalationStep": delivery.step or None,
        "url": link,
    }
    if delivery.channel is not None and delivery.channel.include_payload:
        call = (
            ToolCall.objects.with_args_and_result()
            .filter(run__project=project, run__run_id=ask.run_id, tool_call_id=ask.tool_call_id)
            .first()
        )
        args = call.args if call is not None else (ask.pause_data or {}).get("args")
        fields["args"] = args
        lines.append("Arguments: " + orjson.dumps(args).decode()[:4000])
    lines += ["", f"Decide on its page (signed in): {link}"]
    return Message(subject=subject, text="\n".join(lines), fields=fields)


def _send(delivery: WebhookDelivery) -> tuple[int | None, str]:
    """Send the message once: the receiver's status code (if any) and what went wrong ("" for
    nothing). A channel deleted since is gone with its rows; a channel turned off is an error."""
    channel = delivery.channel
    if channel is not None and not channel.active:
        return None, "the channel is turned off"
    message = message_of(delivery)
    if channel is None or channel.kind == NotificationChannel.Kind.EMAIL:
        if channel is not None:
            to = [part.strip() for part in channel.target.split(",")]
        else:
            to = [delivery.url.removeprefix("mailto:")]
        return _send_email(message, to)
    if channel.kind == NotificationChannel.Kind.SLACK:
        body = orjson.dumps({"text": message.subject + "\n" + message.text})
    else:
        body = orjson.dumps(message.fields)
    return _post(delivery, channel, body)


def _send_email(message: Message, to: list[str]) -> tuple[int | None, str]:
    email = EmailMessage(
        subject=message.subject,
        body=message.text,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=to,
        connection=get_connection(timeout=TIMEOUT_SECONDS),
    )
    try:
        email.send()
    except smtplib.SMTPResponseException as exc:
        return exc.smtp_code, f"SMTP {exc.smtp_code}"
    except (TimeoutError, smtplib.SMTPException, OSError) as exc:
        return None, f"{type(exc).__name__} from the mail server"
    return None, ""


def _post(delivery: WebhookDelivery, channel: NotificationChannel, body: bytes) -> tuple[int | None, str]:
    return signed_post(channel.target, channel.secret, body, delivery_id=delivery.pk)
