"""Deliver decisions to the agent host: POST the decision, HMAC-SHA256 signed, every attempt logged."""

import hashlib
import hmac
import time
import urllib.error
import urllib.request

import orjson
from django.db import transaction
from django.utils import timezone

from ledger.models import WebhookAttempt, WebhookDelivery

TIMEOUT_SECONDS = 10
SIGNATURE_HEADER = "X-Footprint-Signature"


class WebhookFailed(Exception):
    """Raised so the Celery task retries with backoff."""


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def webhook_deliver(*, delivery_id: int) -> None:
    """Attempt one delivery; a no-op once delivered (safe to run twice). Raises WebhookFailed to retry."""
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("ask__project__webhook")
            .filter(pk=delivery_id)
            .first()
        )
        if delivery is None or delivery.status == WebhookDelivery.Status.DELIVERED:
            return  # delivered, or another worker holds it right now
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
            headers={"Content-Type": "application/json", SIGNATURE_HEADER: signature(ask.project.webhook.secret, body)},
        )
        started = time.monotonic()
        status_code, error = None, ""
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310
                status_code = response.status
        except urllib.error.HTTPError as exc:
            status_code, error = exc.code, f"HTTP {exc.code}"
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            error = type(exc).__name__
        delivered = status_code is not None and 200 <= status_code < 300
        WebhookAttempt.objects.create(
            delivery=delivery,
            status_code=status_code,
            error=error,
            duration_ms=int((time.monotonic() - started) * 1000),
        )
        delivery.attempts += 1
        delivery.status = WebhookDelivery.Status.DELIVERED if delivered else WebhookDelivery.Status.FAILED
        delivery.delivered_at = timezone.now() if delivered else None
        delivery.save(update_fields=["attempts", "status", "delivered_at"])
    if not delivered:
        raise WebhookFailed(f"delivery {delivery_id} failed: {error or status_code}")
