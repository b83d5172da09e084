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

import functools
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
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
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
    ToolCall,
    WebhookDelivery,
    ask_run_agent,
)
from tenancy.models import DECIDING_ROLES, AdminChange, Membership, Project
from tenancy.selectors import approver_projects
from tenancy.services import UNNAMED, Actor, admin_change_record

logger = logging.getLogger(__name__)

TIMEOUT_SECONDS = 10
# A batch's lease: long enough for many messages, and a batch stops sending TIMEOUT_SECONDS before
# it ends, so no attempt outlives it. A worker killed mid-batch delays its messages by this much.
LEASE_SECONDS = 30
# A batch's claim and its record are bursts of a few milliseconds (Python and PostgreSQL) however
# small it is, and an ingestion request that meets one waits for it: beside the sending, on a
# 2-CPU machine, ingestion's p99 rose by a fifth at 25 a batch (two bursts a second at the default
# pace) and by a seventh at 100 (one every 2 s). The sweep still sends its emails one at a time.
BATCH = 100
CHANNEL_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,59}")
MAX_ADDRESSES = 20
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
    """The people told of a project's asks: the ones who may decide them, and who asked to be told."""
    return NotificationPreference.objects.filter(
        project_id=project_id, **{_PERSON_FLAG[event]: True}, user__is_active=True
    ).filter(
        Q(Exists(Membership.objects.filter(user=OuterRef("user"), project_id=project_id, role__in=DECIDING_ROLES)))
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
    not in flight); a no-op otherwise. True when the message was delivered."""
    return _deliver_batch(_sendable(timezone.now()).filter(pk=delivery_id), limit=1) == 1


def notifications_send_for_ask(*, ask_id: int) -> int:
    """The fast path: attempt every due message about one ask. Returns how many were delivered."""
    return _deliver_batch(_sendable(timezone.now()).filter(ask_id=ask_id), limit=BATCH)


def notifications_send_due(*, limit: int = 200) -> int:
    """The outbox sweep for messages: attempt up to `limit` due ones, a batch at a time. Returns
    how many were delivered. It sends no more than FOOTPRINT_NOTIFICATIONS_PER_SECOND, one email
    every 1/FOOTPRINT_NOTIFICATIONS_PER_SECOND s: a backlog drains at a steady pace instead of
    taking a core from ingestion for as long as it lasts."""
    pace = _Pace(settings.FOOTPRINT_NOTIFICATIONS_PER_SECOND)
    # Sent at that pace, a batch must still end well within its lease.
    most = max(1, min(BATCH, int((LEASE_SECONDS - TIMEOUT_SECONDS) / 2 / pace.interval))) if pace.interval else BATCH
    delivered = 0
    # One SMTP connection for the whole sweep, kept open while it rests between batches: a
    # connection's greeting, EHLO and QUIT cost about as much CPU (here and in the mail server)
    # as the batch's emails themselves.
    mail = _MailConnection()
    try:
        while limit > 0:
            batch = min(limit, most)
            claimed, delivered_now = _deliver_batch_counted(
                _sendable(timezone.now()), limit=batch, mail=mail, pace=pace
            )
            delivered += delivered_now
            if claimed < batch:
                break
            limit -= claimed
    finally:
        mail.close()
    return delivered


def _deliver_batch(due: QuerySet[WebhookDelivery], *, limit: int) -> int:
    mail = _MailConnection()
    try:
        return _deliver_batch_counted(due, limit=limit, mail=mail, pace=_Pace(0))[1]
    finally:
        mail.close()


class _Pace:
    """One email every 1/`per_second` s (0: no pace), for a whole sweep. The pace holds for each
    email, not for each batch: a batch sent at once takes the CPU in bursts of tens of
    milliseconds, and an ingestion request that meets one waits it out; spread out, a request
    meets at most an email's millisecond or so. Each email is spaced from the one before, not
    put on a schedule: a sender held up (descheduled, a slow send, stopped) does not catch up in
    a burst; and a batch's claim falls within the wait for its first email."""

    def __init__(self, per_second: int) -> None:
        self.interval = 1 / per_second if per_second > 0 else 0.0
        self._previous: float | None = None

    def wait(self) -> None:
        if self.interval and self._previous is not None:
            time.sleep(max(0.0, self._previous + self.interval - time.monotonic()))

    def sending(self) -> float:
        """Note that an email is being sent now; the time, by the same clock."""
        self._previous = time.monotonic()
        return self._previous


def _deliver_batch_counted(
    due: QuerySet[WebhookDelivery], *, limit: int, mail: "_MailConnection", pace: _Pace
) -> tuple[int, int]:
    """Claim up to `limit` due messages, send them at `pace`, record how each attempt ended:
    (claimed, delivered).

    Ingestion shares the database and the CPU, so a batch goes to the database three times
    whatever its size: the claim, one statement (rows another sweep holds are skipped, not
    waited for; each attempt is counted and logged before anything is sent, so a worker killed
    mid-batch leaves its trace and the lease lets the rows be claimed again) with the claimed
    rows read back in its transaction; the sending with no transaction open (emails over `mail`,
    one SMTP connection); and the outcomes, one statement. Messages the batch could not
    reach before its lease would run out are handed back untouched: not sent, not counted as an
    attempt."""
    claimed = _claim_batch(due, limit=limit)
    if not claimed:
        return 0, 0
    outcomes = _send_batch(claimed, mail, pace)
    _record_batch(claimed, outcomes)
    return len(claimed), sum(1 for outcome in outcomes.values() if outcome is not None and not outcome[1])


@dataclass
class _Claimed:
    delivery: WebhookDelivery
    attempt_id: int
    agent: str | None  # the agent of the ask's run, which the message names
    duration_ms: int = 0


# The claim in one statement (atomic on its own): lease the due rows the caller's query picks
# (FOR UPDATE SKIP LOCKED), count the attempt and log it before anything is sent, so a worker
# killed mid-batch leaves its trace. The ORM would take four round trips and build four queries
# for it; on a small machine that CPU is taken from ingestion.
_CLAIM = """
WITH due (id) AS ({due}),
claimed AS (
    UPDATE ledger_webhookdelivery d SET lease_until = %s, attempts = d.attempts + 1
    FROM due WHERE d.id = due.id
    RETURNING d.id, d.url
)
INSERT INTO ledger_webhookattempt (delivery_id, url, error, duration_ms)
SELECT id, url, %s, 0 FROM claimed
RETURNING delivery_id, id
"""


# What a message reads of its delivery, ask, project and channel. An ask's checkpoint and JSON
# columns (kilobytes each) stay in the database: the call's arguments, for a channel that allows
# them, are read on their own.
_MESSAGE_READS = (
    *("url", "attempts", "event", "step"),
    *("ask__project__slug", "ask__project__name"),
    *("ask__run_id", "ask__tool_call_id", "ask__tool_name", "ask__middleware", "ask__kind", "ask__question"),
    *("ask__deadline", "ask__on_timeout"),
    *("channel__kind", "channel__target", "channel__secret", "channel__include_payload", "channel__active"),
)


def _claim_batch(due: QuerySet[WebhookDelivery], *, limit: int) -> list[_Claimed]:
    lease_until = timezone.now() + timedelta(seconds=LEASE_SECONDS)
    with transaction.atomic():
        # SKIP LOCKED: two sweeps (or a sweep and a fast path) split the due rows instead of
        # queueing on each other's locks. `_sendable` reads only the delivery's own columns, so
        # the lock is on those rows alone. (Compiled inside the transaction: Django refuses to
        # compile a FOR UPDATE outside one.)
        picked = due.order_by("next_attempt_at", "pk").select_for_update(skip_locked=True).values("pk")[:limit]
        due_sql, due_params = picked.query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(_CLAIM.format(due=due_sql), [*due_params, lease_until, NO_ANSWER])
            attempt_of = dict(cursor.fetchall())
        if not attempt_of:
            return []
        deliveries = (
            WebhookDelivery.objects.filter(pk__in=attempt_of)
            .select_related("ask__project", "channel")
            .only(*_MESSAGE_READS)
            .annotate(run_agent=ask_run_agent("ask__"))
            .order_by("pk")
        )
        return [_Claimed(delivery, attempt_of[delivery.pk], delivery.run_agent) for delivery in deliveries]


# An outcome: (status code, error) of an attempt made; None for a message left unsent.
_Outcome = tuple[int | None, str] | None


def _send_batch(claimed: list[_Claimed], mail: "_MailConnection", pace: _Pace) -> dict[int, _Outcome]:
    """Send each claimed message once, at `pace`, emails over `mail`. Stops before the batch's
    lease could run out (each send may take up to TIMEOUT_SECONDS): the rest are left unsent."""
    outcomes: dict[int, _Outcome] = {}
    budget_ends = time.monotonic() + LEASE_SECONDS - TIMEOUT_SECONDS
    for item in claimed:
        delivery = item.delivery
        pace.wait()
        if time.monotonic() >= budget_ends:
            outcomes[delivery.pk] = None
            continue
        started = pace.sending()
        try:
            outcomes[delivery.pk] = _send(delivery, item.agent, mail)
        except Exception as exc:
            logger.exception("notification %s: the attempt failed before it got an answer", delivery.pk)
            outcomes[delivery.pk] = (None, f"{type(exc).__name__} in the server before an answer (see its log)")
        item.duration_ms = int((time.monotonic() - started) * 1000)
    return outcomes


# Every attempt's end and every message's state in one statement, whatever the batch's size
# (Django's bulk_update builds a CASE per row and field: it cost about as much CPU as the sending).
# A message delivered is marked so; one failed waits out its backoff; one left unsent is handed
# back, its attempt uncounted and its log row removed. A failed or unsent message that a later
# attempt holds (its lease ran out, another sweep claimed it) is left to that attempt.
_RECORD = """
WITH outcome AS (
    SELECT * FROM unnest(%(delivery)s::bigint[], %(attempt)s::bigint[], %(attempts)s::int[], %(made)s::bool[],
                         %(status_code)s::int[], %(error)s::text[], %(duration_ms)s::int[],
                         %(retry_at)s::timestamptz[])
        AS o (delivery_id, attempt_id, attempts, made, status_code, error, duration_ms, retry_at)
),
logged AS (
    UPDATE ledger_webhookattempt a SET status_code = o.status_code, error = o.error, duration_ms = o.duration_ms
    FROM outcome o WHERE a.id = o.attempt_id AND o.made
),
unmade AS (
    DELETE FROM ledger_webhookattempt a USING outcome o WHERE a.id = o.attempt_id AND NOT o.made
)
UPDATE ledger_webhookdelivery d SET
    status = CASE WHEN NOT o.made THEN d.status WHEN o.error = '' THEN %(delivered)s ELSE %(failed)s END,
    delivered_at = CASE WHEN o.made AND o.error = '' THEN %(done)s ELSE d.delivered_at END,
    next_attempt_at = CASE WHEN o.made AND o.error <> '' THEN o.retry_at ELSE d.next_attempt_at END,
    attempts = CASE WHEN o.made THEN d.attempts ELSE d.attempts - 1 END,
    lease_until = NULL
FROM outcome o
WHERE d.id = o.delivery_id AND d.status <> %(delivered)s
  AND (d.attempts = o.attempts OR (o.made AND o.error = ''))
"""


def _record_batch(claimed: list[_Claimed], outcomes: dict[int, _Outcome]) -> None:
    """Each attempt's end on its log row, and each message's state: delivered, failed (next attempt
    after its backoff, unless a later attempt holds it), or handed back unsent."""
    done = timezone.now()
    rows = [(item, outcomes[item.delivery.pk]) for item in claimed]
    with connection.cursor() as cursor:
        cursor.execute(
            _RECORD,
            {
                "delivery": [item.delivery.pk for item, _ in rows],
                "attempt": [item.attempt_id for item, _ in rows],
                "attempts": [item.delivery.attempts for item, _ in rows],
                "made": [outcome is not None for _, outcome in rows],
                "status_code": [outcome and outcome[0] for _, outcome in rows],
                "error": [outcome and outcome[1] for _, outcome in rows],
                "duration_ms": [item.duration_ms for item, _ in rows],
                "retry_at": [
                    done + outbox_backoff(item.delivery.attempts) if outcome and outcome[1] else None
                    for item, outcome in rows
                ],
                "done": done,
                "delivered": WebhookDelivery.Status.DELIVERED,
                "failed": WebhookDelivery.Status.FAILED,
            },
        )
    for item, outcome in rows:
        if outcome is not None and outcome[1]:
            logger.log(
                logging.ERROR if item.delivery.attempts >= MAX_ATTEMPTS else logging.WARNING,
                "notification %s to %s, attempt %s of %s: %s",
                item.delivery.pk,
                item.delivery.url,
                item.delivery.attempts,
                MAX_ATTEMPTS,
                outcome[1],
            )


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


@functools.cache
def _ask_path_around() -> tuple[str, str]:
    marker = "987654321"
    before, after = reverse("asks:ask-detail", args=[int(marker)]).split(marker)
    return before, after


def ask_path(ask_id: int) -> str:
    """The ask page's path. Reversed once per process: a batch's messages each link to one, and
    `reverse` took more of a message's time than anything else but the SMTP round trip."""
    before, after = _ask_path_around()
    return f"{before}{ask_id}{after}"


def message_of(delivery: WebhookDelivery, agent: str | None) -> Message:
    """What a message says: project, agent (of the ask's run), tool, question, deadline and the
    ask page's link; the call's arguments only for a channel that allows them."""
    ask = delivery.ask
    project = ask.project
    link = settings.FOOTPRINT_PUBLIC_URL.rstrip("/") + ask_path(ask.pk)
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


def _send(delivery: WebhookDelivery, agent: str | None, mail: "_MailConnection") -> tuple[int | None, str]:
    """Send the message once: the receiver's status code (if any) and what went wrong ("" for
    nothing). A channel deleted since is gone with its rows; a channel turned off is an error."""
    channel = delivery.channel
    if channel is not None and not channel.active:
        return None, "the channel is turned off"
    message = message_of(delivery, agent)
    if channel is None or channel.kind == NotificationChannel.Kind.EMAIL:
        if channel is not None:
            to = [part.strip() for part in channel.target.split(",")]
        else:
            to = [delivery.url.removeprefix("mailto:")]
        return mail.send(message, to)
    if channel.kind == NotificationChannel.Kind.SLACK:
        body = orjson.dumps({"text": message.subject + "\n" + message.text})
    else:
        body = orjson.dumps(message.fields)
    return _post(delivery, channel, body)


class _MailConnection:
    """One SMTP connection for a sweep's or a batch's emails (Django's email backend, opened at the
    first email): one connect, greeting and login instead of one per message. After an error the
    connection is dropped and the next email opens a new one; when the server cannot be reached,
    the rest of the emails fail with the same error at once instead of each waiting out its own
    timeout."""

    def __init__(self) -> None:
        self._backend: Any = None
        self._unreachable: str | None = None

    def send(self, message: Message, to: list[str]) -> tuple[int | None, str]:
        if self._unreachable is not None:
            return None, self._unreachable
        email = EmailMessage(subject=message.subject, body=message.text, from_email=settings.DEFAULT_FROM_EMAIL, to=to)
        try:
            if self._backend is None:
                backend = get_connection(timeout=TIMEOUT_SECONDS)
                backend.open()
                self._backend = backend
            self._backend.send_messages([email])
        except smtplib.SMTPResponseException as exc:
            self.close()
            return exc.smtp_code, f"SMTP {exc.smtp_code}"
        except (TimeoutError, smtplib.SMTPException, OSError) as exc:
            error = f"{type(exc).__name__} from the mail server"
            if self._backend is None:  # it could not be opened: nor will it for the next email
                self._unreachable = error
            self.close()
            return None, error
        return None, ""

    def close(self) -> None:
        if self._backend is not None:
            backend, self._backend = self._backend, None
            backend.close()  # Django's SMTP backend closes quietly when the server has gone


def _post(delivery: WebhookDelivery, channel: NotificationChannel, body: bytes) -> tuple[int | None, str]:
    return signed_post(channel.target, channel.secret, body, delivery_id=delivery.pk)
