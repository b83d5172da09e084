"""Deliver decisions to the agent host: POST the decision, HMAC-SHA256 signed, every attempt logged.

Deliveries are an outbox. Deciding writes the delivery row in the decision's transaction; a
queued task sends it at once, and a periodic sweep sends whatever is due, so a message lost with
the broker or a killed worker delays a delivery but never drops it. Delivery is at least once:
every attempt carries the same `X-Footprint-Delivery` id for receivers to deduplicate by.
"""

import hashlib
import hmac
import http.client
import time
import urllib.error
import urllib.request
from datetime import timedelta

import orjson
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from ledger.models import WebhookAttempt, WebhookDelivery

TIMEOUT_SECONDS = 10
LEASE_SECONDS = TIMEOUT_SECONDS + 5  # an attempt whose worker died is retried after this
MAX_ATTEMPTS = 12
SIGNATURE_HEADER = "X-Footprint-Signature"
DELIVERY_HEADER = "X-Footprint-Delivery"
NO_ANSWER = "no answer recorded (the attempt was cut short)"


class WebhookFailed(Exception):
    """Raised so the Celery task retries with backoff."""


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def backoff(attempts: int) -> timedelta:
    return timedelta(seconds=min(600, 2**attempts))


def webhook_deliver(*, delivery_id: int) -> None:
    """Attempt one delivery; a no-op once delivered or while another attempt holds it.

    The attempt is claimed and logged (committed) before the POST, and no transaction is held
    open across it. Raises WebhookFailed so the task retries.
    """
    claimed = _claim(delivery_id)
    if claimed is None:
        return
    delivery, attempt = claimed
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
    request = urllib.request.Request(  # noqa: S310 - the URL is the project admin's own https/http endpoint
        delivery.url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(ask.project.webhook.secret, body),
            DELIVERY_HEADER: str(delivery.pk),
        },
    )
    started = time.monotonic()
    status_code, error = None, ""
    try:
        with NO_REDIRECTS.open(request, timeout=TIMEOUT_SECONDS) as response:
            status_code = response.status
    except urllib.error.HTTPError as exc:
        status_code, error = exc.code, f"HTTP {exc.code}"
        if 300 <= exc.code < 400:
            error += f" redirect to {exc.headers.get('Location', '?')[:200]} not followed: configure that URL"
    except (urllib.error.URLError, TimeoutError, OSError, http.client.HTTPException, ValueError) as exc:
        error = type(exc).__name__  # ValueError: an answer urllib cannot parse (a bad status line, say)
    delivered = status_code is not None and 200 <= status_code < 300
    WebhookAttempt.objects.filter(pk=attempt.pk).update(
        status_code=status_code, error=error, duration_ms=int((time.monotonic() - started) * 1000)
    )
    now = timezone.now()
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=WebhookDelivery.Status.DELIVERED if delivered else WebhookDelivery.Status.FAILED,
        delivered_at=now if delivered else None,
        lease_until=None,
        next_attempt_at=now + backoff(delivery.attempts),
    )
    if not delivered:
        raise WebhookFailed(f"delivery {delivery_id} failed: {error or status_code}")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """urllib follows a 301/302/303 with a GET and no body: the receiver would answer 200 to a
    request that never carried the decision. A redirect is a failed attempt, named as such."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


NO_REDIRECTS = urllib.request.build_opener(_NoRedirects)


def _claim(delivery_id: int) -> tuple[WebhookDelivery, WebhookAttempt] | None:
    now = timezone.now()
    with transaction.atomic():
        claimed = (
            WebhookDelivery.objects.filter(pk=delivery_id)
            .exclude(status=WebhookDelivery.Status.DELIVERED)
            .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
            .update(lease_until=now + timedelta(seconds=LEASE_SECONDS), attempts=F("attempts") + 1)
        )
        if not claimed:
            return None
        delivery = WebhookDelivery.objects.select_related("ask__project__webhook").get(pk=delivery_id)
        attempt = WebhookAttempt.objects.create(delivery=delivery, error=NO_ANSWER)
    return delivery, attempt


def webhooks_send_due(*, limit: int = 50) -> int:
    """The outbox sweep: attempt every delivery that is due and not in flight. Returns how many
    were delivered."""
    now = timezone.now()
    due = list(
        WebhookDelivery.objects.exclude(status=WebhookDelivery.Status.DELIVERED)
        .filter(next_attempt_at__lte=now, attempts__lt=MAX_ATTEMPTS)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
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
