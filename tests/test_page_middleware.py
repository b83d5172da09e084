"""footprint_site.page_middleware: sessions, the signed-in user, messages and htmx serve pages; a
request to the API passes through them, keeps every security header, and is freed as soon as it
is answered."""

import gc
import io
import weakref
from typing import Any

import orjson
import pytest
from django.core.handlers import wsgi

from tenancy.models import Project
from tenancy.services import agent_key_create


@pytest.mark.parametrize("path", ["/api/v1/runs", "/api/v1/docs"])
def test_the_api_passes_by_the_page_middleware_and_keeps_the_security_headers(agent_client, path):
    """Its answers, its HTML docs included, carry every security header and set no cookie."""
    response = agent_client.get(path)

    assert response.status_code == 200
    assert "script-src 'self'" in response["Content-Security-Policy"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["X-Frame-Options"] == "DENY"
    assert not response.cookies
    request = response.wsgi_request
    assert not any(hasattr(request, name) for name in ("session", "user", "_messages", "htmx"))


def test_pages_still_get_their_session_user_messages_and_htmx(client):
    request = client.get("/accounts/login/").wsgi_request
    assert all(hasattr(request, name) for name in ("session", "user", "_messages", "htmx"))


@pytest.mark.django_db(transaction=True)  # the batch commits, as on the server
def test_an_ingestion_request_is_freed_as_soon_as_it_is_answered(project: Project, monkeypatch: Any) -> None:
    """The lazy user, the message storage and htmx's details each refer back to their request: a
    reference cycle, which kept an API request and its body (330 KB for 500 events) alive until
    the cyclic collector ran, rarely in the web workers (gunicorn.conf.py raises its threshold):
    35 MB more per worker under ingestion (bench/ingest.py)."""
    requests: list[weakref.ref[wsgi.WSGIRequest]] = []
    init = wsgi.WSGIRequest.__init__

    def remembered(self: wsgi.WSGIRequest, environ: dict[str, Any]) -> None:
        init(self, environ)
        requests.append(weakref.ref(self))

    monkeypatch.setattr(wsgi.WSGIRequest, "__init__", remembered)
    body = orjson.dumps({"events": [{"seq": 0, "type": "t", "payload": {}, "meta": {"runId": "freed"}}]})
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/api/v1/events",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "HTTP_HOST": "testserver",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json",
        "HTTP_AUTHORIZATION": f"Bearer {agent_key_create(project=project, scopes=['ingest'])[1]}",
    }
    statuses: list[str] = []
    gc.disable()
    try:
        b"".join(wsgi.WSGIHandler()(environ, lambda status, headers, exc_info=None: statuses.append(status)))
        (request,) = requests
        assert statuses == ["200 OK"]
        assert request() is None, "the request outlived its answer: something on it refers back to it"
    finally:
        gc.enable()
