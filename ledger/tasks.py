"""Thin Celery wrappers over services."""

from celery import shared_task
from django.db import connection

from ledger.services import asks, integrity, search, webhooks


@shared_task
def ping() -> str:
    """Proves a worker can reach the database."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return "pong"


@shared_task(
    acks_late=True,
    autoretry_for=(webhooks.WebhookFailed,),
    retry_backoff=2,
    retry_backoff_max=600,
    max_retries=12,
    retry_jitter=True,
)
def ask_deliver_webhook(delivery_id: int) -> None:
    webhooks.webhook_deliver(delivery_id=delivery_id)


@shared_task(acks_late=True)
def webhooks_send_due() -> int:
    return webhooks.webhooks_send_due()


@shared_task(acks_late=True)
def asks_apply_deadlines() -> int:
    return asks.asks_apply_deadlines()


@shared_task(acks_late=True)
def integrity_check(check_id: int) -> None:
    integrity.integrity_check_run(check_id=check_id)


@shared_task(acks_late=True)
def chain_anchors_write() -> int:
    return integrity.chain_anchors_write()


@shared_task(acks_late=True)
def search_index_pending() -> int:
    return search.search_index_pending()
