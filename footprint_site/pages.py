"""Helpers shared by the human pages of every app."""

from collections.abc import Iterable

from django.contrib.auth.models import User
from django.http import HttpRequest
from django.views.decorators.vary import vary_on_headers
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails  # set by django-htmx's middleware on every request


def int_param(request: HttpRequest, name: str, default: int) -> int:
    try:
        return int(request.GET.get(name, default))
    except ValueError:
        return default


def filtered_by(request: HttpRequest, names: Iterable[str]) -> bool:
    """Whether the query string sets any of the filters `names`: an empty list then says that
    nothing matches them (with a way to clear them), not that there is nothing at all."""
    return any(request.GET.get(name, "").strip() for name in names)


def wants_partial(request: HtmxHttpRequest) -> bool:
    """An htmx request gets the partial; a history restore always gets the whole page."""
    return bool(request.htmx) and not request.htmx.history_restore_request


# The headers `wants_partial` reads. A view that answers a partial and the page at one URL varies
# on both, or a cache (the browser's, a proxy) serves the fragment as the page or, to a history
# restore (sent with HX-Request too), the fragment it asked not to get.
HTMX_HEADERS = ("HX-Request", "HX-History-Restore-Request")
varies_with_htmx = vary_on_headers(*HTMX_HEADERS)


def signed_in_user(request: HttpRequest) -> User:
    """The user of a `login_required` view (never anonymous there)."""
    assert isinstance(request.user, User)
    return request.user
