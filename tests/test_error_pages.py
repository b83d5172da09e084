"""What an unknown address, a refusal or a failure answers: the API's `{error, code}` under /api/
(a google.rpc.Status under /v1/, where OpenTelemetry exporters call), pages with the site's
navigation for people, the 500 page even with the database gone."""

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from footprint_site.errors import with_method_errors
from ledger.otlp import wire

FAILING_URLS = "tests.error_urls"


@pytest.fixture
def failing_site(settings: Any) -> None:
    """The site's URLs plus views that raise (tests/error_urls.py)."""
    settings.ROOT_URLCONF = FAILING_URLS


def _lenient(client: Client) -> Client:
    """Answers a view's exception with the 500 handler's page, as a server does, instead of raising."""
    client.raise_request_exception = False
    return client


def _api_error(response: Any, status: int, code: str) -> str:
    """The API's one error shape: exactly a sentence and a stable code, as JSON."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = orjson.loads(response.content)
    assert set(body) == {"error", "code"}, body
    assert body["code"] == code
    assert isinstance(body["error"], str)
    assert body["error"].endswith(".")
    return str(body["error"])


def _page(response: Any, status: int) -> str:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert '<link rel="stylesheet" href="/static/css/app.css' in html  # it extends base.html
    assert 'class="problem"' in html
    return html


def _has_the_members_navigation(html: str, username: str) -> None:
    assert "<nav>" in html
    for name in ("ledger:run-list", "refusals:refusal-list", "audits:bundle-list", "asks:inbox"):
        assert f'href="{reverse(name)}"' in html, name
    assert f"Sign out {username}" in html
    assert "Back to the runs" in html


def _is_signed_out(html: str) -> None:
    assert "<nav>" not in html
    assert f'href="{reverse("login")}"' in html


# --- the API -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/api/v1/nope", "/api/v1/runs/x/y/z", "/api/nothing", "/api/", "/api/v1/", "/api/v1/runs/"]
)
@pytest.mark.parametrize("method", ["get", "post", "delete"])
def test_an_unknown_api_path_is_a_json_404(db: None, path: str, method: str) -> None:
    """For every method, and before any CSRF check: a program never gets an HTML page."""
    client = Client(enforce_csrf_checks=True)
    response = getattr(client, method)(path)

    error = _api_error(response, 404, "ERR_NOT_FOUND")
    assert f"No API operation at {path}:" in error
    assert "/api/v1/docs" in error


def test_an_unknown_api_path_is_a_404_with_a_key_too(agent_client: Any) -> None:
    _api_error(agent_client.get("/api/v1/runz"), 404, "ERR_NOT_FOUND")


def test_a_long_unknown_path_is_shown_shortened(db: None) -> None:
    error = _api_error(Client().get("/api/v1/" + "x" * 5000), 404, "ERR_NOT_FOUND")
    assert len(error) < 400


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("delete", "/api/v1/runs", "GET"),
        ("get", "/api/v1/events", "POST"),
        ("put", "/api/v1/asks/1/decision", "GET, POST"),
        ("patch", "/api/v1/artifacts/some-ref", "DELETE, GET"),
    ],
)
def test_a_known_api_path_with_another_method_is_a_json_405(
    agent_client: Any, method: str, path: str, allowed: str
) -> None:
    response = getattr(agent_client, method)(path)

    error = _api_error(response, 405, "ERR_METHOD_NOT_ALLOWED")
    assert error == f"{method.upper()} is not allowed at {path}; it takes {allowed}."
    assert response["Allow"] == allowed


def test_405_keeps_the_allow_header_for_any_method(db: None) -> None:
    """Even a method nobody serves, without a key: the Allow header still lists what the path takes."""
    response = Client().generic("PROPFIND", "/api/v1/runs")
    _api_error(response, 405, "ERR_METHOD_NOT_ALLOWED")
    assert response["Allow"] == "GET"


@pytest.mark.parametrize("path", ["/api/v1/openapi.json", "/api/v1/docs"])
def test_the_api_description_takes_get_only(db: None, path: str) -> None:
    client = Client(enforce_csrf_checks=True)
    assert client.get(path).status_code == 200

    response = client.post(path)

    _api_error(response, 405, "ERR_METHOD_NOT_ALLOWED")
    assert response["Allow"] == "GET, HEAD"


def test_every_api_view_keeps_its_name_and_is_csrf_exempt() -> None:
    from footprint_site.api import api

    patterns, app_name, namespace = api.urls
    wrapped, wrapped_app, wrapped_namespace = with_method_errors(api.urls)
    assert (wrapped_app, wrapped_namespace) == (app_name, namespace)
    assert [(str(p.pattern), p.name) for p in wrapped] == [(str(p.pattern), p.name) for p in patterns]
    assert all(getattr(p.callback, "csrf_exempt", False) for p in wrapped)


def test_a_csrf_refusal_under_the_api_is_json(db: None, failing_site: None) -> None:
    """Only a view of this server's own under /api/ that is no operation could meet the check."""
    error = _api_error(Client(enforce_csrf_checks=True).post("/api/v1/failing"), 403, "ERR_CSRF")
    assert error == (
        "Refused by the CSRF check (CSRF cookie not set.): API operations are called with an agent key, "
        "and /api/v1/failing is not one."
    )


def test_a_permission_check_on_the_api_is_a_json_403(db: None, failing_site: None) -> None:
    error = _api_error(Client().get("/api/v1/failing/refused"), 403, "ERR_FORBIDDEN")
    assert error == "Only the project's admins may open this."


def test_a_failure_on_the_api_is_a_json_500(db: None, failing_site: None) -> None:
    error = _api_error(_lenient(Client()).get("/api/v1/failing"), 500, "ERR_INTERNAL")
    assert "logged" in error
    assert "bug" not in error  # what failed stays in the log


# --- OTLP: OpenTelemetry exporters read a google.rpc.Status in their own encoding ----------------


def test_otlp_get_is_a_405_status(agent_client: Any) -> None:
    response = agent_client.get(reverse("otlp-traces"))

    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert response["Content-Type"] == wire.JSON
    status = orjson.loads(response.content)
    assert status["message"] == "GET is not allowed at /v1/traces; it takes POST."


@pytest.mark.parametrize("path", ["/v1/metrics", "/v1/logs"])
def test_an_exporter_sending_what_is_not_taken_gets_a_404_status(agent_client: Any, path: str) -> None:
    """An SDK configured with one endpoint for all signals posts metrics and logs here too."""
    response = agent_client.post(path, b"\x0a\x00", content_type=wire.PROTOBUF)

    assert response.status_code == 404
    assert response["Content-Type"] == wire.PROTOBUF
    message = wire.RpcStatus.FromString(response.content).message
    assert message == f"Nothing is served at {path}: this server receives OTLP traces at /v1/traces."


def test_a_failure_on_the_otlp_paths_is_a_500_status(db: None, failing_site: None) -> None:
    response = _lenient(Client()).post("/v1/failing", b"{}", content_type=wire.JSON)

    assert response.status_code == 500
    assert response["Content-Type"] == wire.JSON
    assert "logged" in orjson.loads(response.content)["message"]


# --- pages ---------------------------------------------------------------------------------------


def test_an_unknown_page_is_a_styled_404_with_a_way_to_sign_in(db: None) -> None:
    html = _page(Client().get("/no-such-page/"), 404)

    assert "There is no such page." in html
    _is_signed_out(html)


def test_an_unknown_page_for_a_member_has_the_navigation(auditor_client: Any) -> None:
    html = _page(auditor_client.get("/no-such-page/"), 404)

    assert "There is no such page, or it shows a run, ask or bundle of a project you are not a member of." in html
    _has_the_members_navigation(html, "alice")


def test_a_404_echoes_neither_the_address_nor_the_identifier_asked_for(auditor_client: Any) -> None:
    """An object of another project answers exactly as one that never existed (tests/isolation_cases.py)."""
    html = _page(auditor_client.get("/audit-bundles/987654/"), 404)

    assert "987654" not in html
    assert "alert" not in _page(auditor_client.get("/<script>alert(1)</script>/"), 404)


def test_a_permission_check_is_a_styled_403(auditor_client: Any, failing_site: None) -> None:
    html = _page(auditor_client.get("/failing/refused/"), 403)

    assert "Only the project&#x27;s admins may open this." in html
    _has_the_members_navigation(html, "alice")


def test_a_form_without_its_csrf_cookie_is_a_styled_403(auditor: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(auditor)

    html = _page(client.post(reverse("logout")), 403)

    assert "did not carry a valid security token" in html
    assert "allow cookies for this site" in html
    assert "CSRF cookie not set." in html
    _has_the_members_navigation(html, "alice")


def test_a_form_with_a_stale_token_is_a_styled_403_to_reload(db: None) -> None:
    client = Client(enforce_csrf_checks=True)
    client.get(reverse("login"))  # the cookie, as a browser has it

    form = {"username": "a", "password": "b", "csrfmiddlewaretoken": "x" * 64}
    html = _page(client.post(reverse("login"), form), 403)

    assert "reload it and send the form again" in html
    _is_signed_out(html)


def test_a_failing_page_is_a_styled_500(db: None, failing_site: None) -> None:
    html = _page(_lenient(Client()).get("/failing/"), 500)

    assert "The server failed to show this page." in html
    assert "bug" not in html
    _is_signed_out(html)


def test_a_failing_page_for_a_member_has_the_navigation(auditor_client: Any, failing_site: None) -> None:
    html = _page(_lenient(auditor_client).get("/failing/member/"), 500)

    _has_the_members_navigation(html, "alice")


@pytest.fixture
def database_restored() -> Iterator[None]:
    """tests/error_urls.py points the connection at a closed port; it is pointed back afterwards."""
    saved = dict(connection.settings_dict)
    yield
    connection.close()
    connection.settings_dict.update(HOST=saved["HOST"], PORT=saved["PORT"])


@pytest.mark.django_db(transaction=True)  # the connection is closed mid-test: no test transaction to lose
def test_the_500_page_renders_with_the_database_unreachable(
    django_user_model: Any, failing_site: None, database_restored: None
) -> None:
    client = _lenient(Client())
    client.force_login(django_user_model.objects.create_user(username="dora", password="pw-dora"))

    response = client.get("/failing/without-database/")

    html = _page(response, 500)  # not the plain-text answer of a 500 page that failed to render
    assert "The server failed to show this page." in html
    _has_the_members_navigation(html, "dora")
    assert '<span id="inbox-count" class="badge"></span>' in html  # its count needs the database
    assert connection.connection is None  # nothing tried to reconnect


# --- DEBUG=True keeps Django's pages for developers ---------------------------------------------


def test_debug_keeps_djangos_404_and_csrf_pages(db: None, settings: Any) -> None:
    settings.DEBUG = True

    assert "Using the URLconf defined in" in Client().get("/no-such-page/").content.decode()
    csrf_page = Client(enforce_csrf_checks=True).post(reverse("login")).content.decode()
    assert "CSRF verification failed" in csrf_page
    assert "Reason given for failure" in csrf_page  # its help for developers
