"""Thin Celery wrappers over services."""

import contextlib

from celery import shared_task
from django.db import connection

from ledger import partitions
from ledger.asks import deadline_rules, notifications, webhooks
from ledger.asks import services as asks
from ledger.audits import integrity
from ledger.explorer import search, span_index
from ledger.overview import services as overview
from ledger.retention import services as retention


@shared_task
def ping() -> str:
    """Proves a worker can reach the database."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return "pong"


# No autoretry: the outbox's `next_attempt_at` is the one retry schedule (the sweep follows it),
# so the attempts stay within MAX_ATTEMPTS and backoff whichever process makes them.
@shared_task(acks_late=True)
def ask_deliver_webhook(delivery_id: int) -> None:
    """The fast path: the first attempt, as soon as the decision commits. A failed attempt is
    logged by the service and retried by the outbox's sweep: not a failure of this task."""
    with contextlib.suppress(webhooks.WebhookFailed):
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


@shared_task(acks_late=True)
def run_spans_index_pending() -> int:
    return span_index.run_spans_index_pending()


@shared_task(acks_late=True)
def ledger_partitions_ensure() -> int:
    return partitions.partitions_ensure()


@shared_task(acks_late=True)
def runs_retention_pass() -> int:
    return retention.runs_retention_pass().removed


@shared_task(acks_late=True)
def rollups_fold_pending() -> int:
    return overview.rollups_fold_pending().records


@shared_task(acks_late=True)
def notifications_send_for_ask(ask_id: int) -> int:
    """The fast path of an ask's messages; the sweep retries what fails."""
    return notifications.notifications_send_for_ask(ask_id=ask_id)


@shared_task(acks_late=True)
def notifications_send_due() -> int:
    return notifications.notifications_send_due()


@shared_task(acks_late=True)
def escalations_run() -> int:
    return deadline_rules.escalations_run()
