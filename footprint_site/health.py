from collections.abc import Callable

from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe

from footprint_site.celery import app as celery_app
from footprint_site.responses import json_response


def _database_state() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # any failure is the answer here, not an error of this view
        return f"unreachable: {type(exc).__name__}"


def _broker_state() -> str:
    try:
        with celery_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return "ok"
    except Exception as exc:
        return f"unreachable: {type(exc).__name__}"


@require_safe  # GET, and HEAD for probes that ask so
def healthz(request: HttpRequest) -> HttpResponse:
    """200 while the database answers (the broker only delays background work); 503 otherwise."""
    database, broker = _database_state(), _broker_state()
    return json_response(
        {
            "status": "ok" if database == broker == "ok" else "degraded",
            "database": database,
            "broker": broker,
        },
        status=200 if database == "ok" else 503,
    )


class HealthzFirstMiddleware:
    """/healthz answered before host validation and the https redirect: a container's or a load
    balancer's probe asks by IP over plain HTTP, which ALLOWED_HOSTS and SECURE_SSL_REDIRECT refuse,
    and a healthy server would look down."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path == "/healthz":
            return healthz(request)
        return self.get_response(request)
