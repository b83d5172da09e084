"""Helpers shared by the human pages of every app."""

from collections.abc import Collection, Iterable

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest
from django.views.decorators.vary import vary_on_headers
from django_htmx.middleware import HtmxDetails

from tenancy.models import Membership, Project
from tenancy.selectors import project_get_for_user


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


def project_for_role(request: HttpRequest, slug: str, roles: Collection[str], refusal: str) -> Project:
    """The project `slug` for a page only some of its people may use: 404 for a person who is not
    one of its members (as if it did not exist), 403 with `refusal` for one whose role is not in
    `roles`. Every such page asks through here, so the two answers cannot drift apart."""
    found = project_get_for_user(user=signed_in_user(request), slug=slug)
    if found is None:
        raise Http404("No such project.")
    project, role = found
    if role not in roles:
        raise PermissionDenied(refusal)
    return project


def project_for_admin(request: HttpRequest, slug: str, refusal: str) -> Project:
    """`project_for_role` for the pages only a project's admins may use."""
    return project_for_role(request, slug, (Membership.Role.ADMIN,), refusal)
