"""Deliver decisions to the agent host: POST the decision, HMAC-SHA256 signed, every attempt logged.

Deliveries are an outbox, and its `next_attempt_at` is the only retry schedule. Deciding writes
the delivery row in the decision's transaction; a queued task makes the first attempt at once,
and a periodic sweep makes every later one when its backoff has passed, so a message lost with
the broker or a killed worker delays a delivery but never drops it. Delivery is at least once:
every attempt carries the same `X-Footprint-Delivery` id for receivers to deduplicate by.

Each attempt goes to the project's endpoint as it is configured then (URL and secret), and only
while that endpoint is active: a delivery whose webhook is off or deleted waits in the outbox,
untouched, and is sent once the webhook is set again.
"""

import hashlib
import hmac
import http.client
import logging
import secrets
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta

import orjson
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from ledger.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from tenancy.models import Project

logger = logging.getLogger(__name__)

TIMEOUT_SECONDS = 10
LEASE_SECONDS = TIMEOUT_SECONDS + 5  # an attempt whose worker died is retried after this
MAX_ATTEMPTS = 12
SIGNATURE_HEADER = "X-Footprint-Signature"
DELIVERY_HEADER = "X-Footprint-Delivery"
NO_ANSWER = "no answer recorded (the attempt was cut short)"


class WebhookFailed(Exception):
    """An attempt failed; it is logged, and the outbox has scheduled the next one."""


def webhook_endpoint_set(*, project: Project, url: str) -> WebhookEndpoint:
    """Point the project's decision webhook at `url`, on, with a new signing secret; deliveries
    waiting in the outbox go there too. ValueError, with a sentence, for a URL it cannot be."""
    max_length = WebhookEndpoint._meta.get_field("url").max_length or 0
    try:
        URLValidator(schemes=["http", "https"])(url)
    except ValidationError:
        raise ValueError(
            f"The URL must be http(s) with a host, e.g. https://agents.example/decisions; got {url[:80]!r}."
        ) from None
    if len(url) > max_length:
        raise ValueError(f"The URL is at most {max_length} characters; this one has {len(url)}.")
    endpoint, _ = WebhookEndpoint.objects.update_or_create(
        project=project, defaults={"url": url, "secret": secrets.token_hex(32), "active": True}
    )
    return endpoint


def webhook_endpoint_turn_off(*, project: Project) -> None:
    """Stop delivering; what is waiting stays in the outbox until the webhook is set again."""
    WebhookEndpoint.objects.filter(project=project).update(active=False)


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def backoff(attempts: int) -> timedelta:
    return timedelta(seconds=min(600, 2**attempts))


def webhook_deliver(*, delivery_id: int) -> None:
    """Attempt one delivery if it is due; a no-op once delivered, while another attempt holds it,
    before its backoff has passed, after MAX_ATTEMPTS, or while the project's webhook is off.

    The attempt is claimed and logged (committed) before the POST, and no transaction is held
    open across it. Whatever the attempt ends in is logged on it and the delivery released, so
    one delivery cannot stop the sweep or keep its lease. A failure is logged (one line: a warning,
    an error for the last attempt) and raises WebhookFailed (the next attempt is already scheduled).
    """
    claimed = _claim(delivery_id)
    if claimed is None:
        return
    delivery, endpoint, attempt = claimed
    started = time.monotonic()
    try:
        status_code, error = _post(delivery, endpoint)
    except Exception as exc:
        # Not the receiver's answer but a fault here: recorded as a failed attempt all the same,
        # with its traceback in the worker's log.
        logger.exception("webhook delivery %s: the attempt failed before it got an answer", delivery_id)
        status_code, error = None, f"{type(exc).__name__} in the server before an answer (see its log)"
    delivered = status_code is not None and 200 <= status_code < 300
    WebhookAttempt.objects.filter(pk=attempt.pk).update(
        status_code=status_code, error=error, duration_ms=int((time.monotonic() - started) * 1000)
    )
    _settle(delivery, delivered)
    if not delivered:
        # The receiver's answer, not a fault here: one line, no traceback; an error once no
        # attempt is left, since the agent host then never gets the decision.
        last = delivery.attempts >= MAX_ATTEMPTS
        logger.log(
            logging.ERROR if last else logging.WARNING,
            "webhook delivery %s, attempt %s of %s: %s; %s",
            delivery_id,
            delivery.attempts,
            MAX_ATTEMPTS,
            error or f"HTTP {status_code}",
            "no attempt is left" if last else "the outbox tries again after its backoff",
        )
        raise WebhookFailed(f"delivery {delivery_id} failed: {error or status_code}")


def _settle(delivery: WebhookDelivery, delivered: bool) -> None:
    """Record how the attempt ended on its delivery. The timeout bounds each socket operation, not
    the attempt, so a receiver that answers slowly enough outlasts the lease and the sweep claims
    the delivery again: a success then stands whichever attempt ends last, and a failure, or the
    lease's release, is recorded only while no later attempt holds the delivery."""
    now = timezone.now()
    this_attempt_last = WebhookDelivery.objects.filter(pk=delivery.pk, attempts=delivery.attempts)
    undelivered = WebhookDelivery.objects.exclude(status=WebhookDelivery.Status.DELIVERED)
    if delivered:
        undelivered.filter(pk=delivery.pk).update(status=WebhookDelivery.Status.DELIVERED, delivered_at=now)
    else:
        undelivered.filter(pk=delivery.pk, attempts=delivery.attempts).update(
            status=WebhookDelivery.Status.FAILED, next_attempt_at=now + backoff(delivery.attempts)
        )
    this_attempt_last.update(lease_until=None)


def _post(delivery: WebhookDelivery, endpoint: WebhookEndpoint) -> tuple[int | None, str]:
    """POST the decision once; the receiver's status code (None without one) and what went wrong."""
    ask = delivery.ask
    body = orjson.dumps(
        {
            "askId": ask.pk,
            "runId": ask.run_id,
            "toolCallId": ask.tool_call_id,
            "kind": ask.kind,
            "decision": ask.decision(),
        }
    )
    return signed_post(endpoint.url, endpoint.secret, body, delivery_id=delivery.pk)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """urllib follows a 301/302/303 with a GET and no body: the receiver would answer 200 to a
    request that never carried the decision. A redirect is a failed attempt, named as such."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


NO_REDIRECTS = urllib.request.build_opener(_NoRedirects)


def _sendable(now: datetime) -> QuerySet[WebhookDelivery]:
    """Deliveries an attempt may be made on at `now`: not delivered, due, under the cap, and not
    in flight. Only the delivery's own columns: see `_claim`."""
    return (
        WebhookDelivery.objects.exclude(status=WebhookDelivery.Status.DELIVERED)
        .filter(kind=WebhookDelivery.Kind.DECISION)  # notifications have their own sweep
        .filter(next_attempt_at__lte=now, attempts__lt=MAX_ATTEMPTS)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
    )


def _claim(delivery_id: int) -> tuple[WebhookDelivery, WebhookEndpoint, WebhookAttempt] | None:
    now = timezone.now()
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.filter(project__asks__deliveries=delivery_id, active=True).first()
        if endpoint is None:
            return None
        # The claim re-checks everything the sweep's listing did: a sweep sends its list one by
        # one, and another pass may have attempted (and rescheduled) a delivery meanwhile. No
        # join in this UPDATE: Django would turn one into `WHERE id IN (SELECT …)`, which
        # PostgreSQL does not re-check once a concurrent claim's row lock is released.
        claimed = (
            _sendable(now)
            .filter(pk=delivery_id)
            .update(url=endpoint.url, lease_until=now + timedelta(seconds=LEASE_SECONDS), attempts=F("attempts") + 1)
        )
        if not claimed:
            return None
        delivery = WebhookDelivery.objects.select_related("ask").get(pk=delivery_id)
        attempt = WebhookAttempt.objects.create(delivery=delivery, url=endpoint.url, error=NO_ANSWER)
    return delivery, endpoint, attempt


def webhooks_send_due(*, limit: int = 50) -> int:
    """The outbox sweep: attempt every delivery that is due, not in flight and whose project's
    webhook is on. Returns how many were delivered."""
    due = list(
        _sendable(timezone.now())
        # Deliveries waiting for a webhook that is off would otherwise fill every batch.
        .filter(ask__project__webhook__active=True)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )
    delivered = 0
    for delivery_id in due:
        try:
            webhook_deliver(delivery_id=delivery_id)
        except WebhookFailed:
            continue
        delivered += WebhookDelivery.objects.filter(pk=delivery_id, status=WebhookDelivery.Status.DELIVERED).count()
    return delivered


def signed_post(url: str, secret: str, body: bytes, *, delivery_id: int) -> tuple[int | None, str]:
    """POST a signed JSON body once (no redirects followed); the receiver's status code (None
    without one) and what went wrong. The decision webhook and the notification channels both
    send through it."""
    request = urllib.request.Request(  # noqa: S310 - an admin's https URL (http only where allowed)
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(secret, body),
            DELIVERY_HEADER: str(delivery_id),
        },
    )
    try:
        with NO_REDIRECTS.open(request, timeout=TIMEOUT_SECONDS) as response:
            return response.status, ""
    except urllib.error.HTTPError as exc:
        error = f"HTTP {exc.code}"
        if 300 <= exc.code < 400:
            error += f" redirect to {exc.headers.get('Location', '?')[:200]} not followed: configure that URL"
        return exc.code, error
    except (urllib.error.URLError, TimeoutError, OSError, http.client.HTTPException, ValueError) as exc:
        return None, type(exc).__name__  # ValueError: an answer urllib cannot parse (a bad status line, say)
