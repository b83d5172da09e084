"""Thin Celery wrappers over services. The ledger's own periodic work arrives with later issues."""

from celery import shared_task
from django.db import connection


@shared_task
def ping() -> str:
    """Proves a worker can reach the database (used by the health smoke test and `make run`)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return "pong"
