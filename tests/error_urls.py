"""The site's URLs plus views that fail on purpose, for tests/test_error_pages.py only (its tests
point ROOT_URLCONF here)."""

from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.urls import path

from footprint_site import urls as site
from tests.servers import free_port

handler400 = site.handler400
handler403 = site.handler403
handler404 = site.handler404
handler500 = site.handler500


class Broken(Exception):
    """A bug in a view (not a database error, which the middleware answers 503)."""


def fails(request: HttpRequest) -> HttpResponse:
    raise Broken("a bug")


def fails_for_a_member(request: HttpRequest) -> HttpResponse:
    assert request.user.is_authenticated  # loaded, as a login_required page loads it
    raise Broken("a bug")


def refuses(request: HttpRequest) -> HttpResponse:
    raise PermissionDenied("Only the project's admins may open this.")


def fails_with_the_database_gone(request: HttpRequest) -> HttpResponse:
    """The signed-in user is loaded, as a page's own view loads it, then the database becomes
    unreachable (its connection closed and pointed at a port nothing listens on) before the bug."""
    assert request.user.is_authenticated
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=free_port())
    raise Broken("a bug, with the database gone")


urlpatterns = [
    path("failing/", fails),
    path("failing/member/", fails_for_a_member),
    path("failing/refused/", refuses),
    path("failing/without-database/", fails_with_the_database_gone),
    path("api/v1/failing", fails),
    path("api/v1/failing/refused", refuses),
    path("v1/failing", fails),
    *site.urlpatterns,
]
