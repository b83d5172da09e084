"""The liveness endpoint load balancers and `make run` poll."""

import pytest
from django.conf import settings
from django.test import Client

pytestmark = pytest.mark.django_db


def test_healthz_reports_database_and_broker_ok(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"status": "ok", "database": "ok", "broker": "ok"}


def test_healthz_broker_is_redis_or_filesystem() -> None:
    # CI sets CELERY_BROKER_URL (redis); without it the file-system transport needs no server.
    assert settings.CELERY_BROKER_URL.split("://")[0] in {"redis", "filesystem"}


def test_healthz_needs_no_login(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200


def test_healthz_refuses_post(client: Client) -> None:
    assert client.post("/healthz").status_code == 405
