"""What a wrong address, a refusal or a failure answers: programs under /api/ and /v1/ get the API's
`{error, code}` (a google.rpc.Status on the OTLP paths, as exporters expect), people get a page with
the site's navigation and a way back.

Django calls these handlers for every URL (handler400/403/404/500 in urls.py, CSRF_FAILURE_VIEW), so
the API's unknown paths are answered here once, by prefix, not by each router. The one refusal that
no handler sees is a 405: ninja and require_POST return it as a response, so `with_method_errors`
wraps the API's views.
"""

import logging
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse, HttpResponseServerError
from django.middleware.csrf import REASON_NO_CSRF_COOKIE, get_token
from django.shortcuts import render
from django.template import loader
from django.urls import URLPattern
from django.views import csrf, defaults
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

from footprint_site.responses import json_response
from ledger.otlp.views import error_response as otlp_error_response

logger = logging.getLogger(__name__)

SHOWN_PATH_CHARS = 200


def is_api_request(request: HttpRequest) -> bool:
    """A call to the JSON API or the OTLP endpoint: its callers send keys, not cookies."""
    return request.path.startswith(("/api/", "/v1/"))


def api_error(request: HttpRequest, status: int, code: str, message: str) -> HttpResponse:
    """The API's error shape; on /v1/ the google.rpc.Status OTLP/HTTP requires of every 4xx and 5xx."""
    if request.path.startswith("/v1/"):
        return otlp_error_response(request, status, message)
    return json_response({"error": message, "code": code}, status=status)


def _shown(path: str) -> str:
    return path if len(path) <= SHOWN_PATH_CHARS else path[:SHOWN_PATH_CHARS] + "…"


def _message_of(exception: Exception | None) -> str:
    """A sentence the view put in its Http404 or PermissionDenied (Resolver404 carries a dict)."""
    message = exception.args[0] if exception is not None and exception.args else ""
    return message if isinstance(message, str) else ""


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api_request(request):
        return api_error(request, 400, "ERR_BAD_REQUEST", "The request could not be read.")
    return defaults.bad_request(request, exception)  # pages keep Django's own


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api_request(request):
        if request.path.startswith("/v1/"):
            message = f"Nothing is served at {_shown(request.path)}: this server receives OTLP traces at /v1/traces."
        else:
            message = f"No API operation at {_shown(request.path)}: the operations are listed at /api/v1/docs."
        return api_error(request, 404, "ERR_NOT_FOUND", message)
    return render(request, "404.html", status=404)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api_request(request):
        message = _message_of(exception) or "This request is not allowed."
        return api_error(request, 403, "ERR_FORBIDDEN", message)
    return render(request, "403.html", {"message": _message_of(exception)}, status=403)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    if settings.DEBUG:
        return csrf.csrf_failure(request, reason)  # Django's page, with its help for developers
    if is_api_request(request):
        message = (
            f"Refused by the CSRF check ({reason}): API operations are called with an agent key, "
            f"and {_shown(request.path)} is not one."
        )
        return api_error(request, 403, "ERR_CSRF", message)
    context = {"csrf_failure": True, "no_cookie": reason == REASON_NO_CSRF_COOKIE, "reason": reason}
    return render(request, "403.html", context, status=403)


def server_error(request: HttpRequest) -> HttpResponse:
    if is_api_request(request):
        message = "The server failed to answer this request; the failure is logged."
        return api_error(request, 500, "ERR_INTERNAL", message)
    try:
        return HttpResponseServerError(loader.render_to_string("500.html", _context_without_database(request)))
    except Exception:
        # A page that cannot render (a template or static file missing) must still answer.
        logger.exception("the 500 page failed to render")
        return HttpResponseServerError(
            "The server failed to show this page; the failure is logged.", content_type="text/plain; charset=utf-8"
        )


def _context_without_database(request: HttpRequest) -> dict[str, Any]:
    """What base.html needs, without the context processors: the signed-in user and the inbox badge
    are read from the database, which may be what failed. The user shows only if the request had
    loaded it already (django.contrib.auth caches it as `_cached_user`); the badge stays empty."""
    user = getattr(request, "_cached_user", None) or AnonymousUser()
    return {"request": request, "user": user, "csrf_token": get_token(request)}


def with_method_errors(urls: tuple[list[Any], str, str]) -> tuple[list[URLPattern], str, str]:
    """An include() triple (ninja's `api.urls`) with each view's 405 in the API's shape.

    ninja's own views (the OpenAPI document, its docs page, and the root it reverses paths from,
    which answers 404) change nothing: exempt from CSRF like the operations, so a POST there meets
    the 404 or 405 an operation's would, not a CSRF refusal.
    """
    patterns, app_name, namespace = urls
    wrapped = []
    for pattern in patterns:
        assert isinstance(pattern, URLPattern), "ninja's urls are flat"
        view = pattern.callback
        if not getattr(view, "csrf_exempt", False):
            view = csrf_exempt(view if pattern.name == "api-root" else require_safe(view))
        wrapped.append(URLPattern(pattern.pattern, method_errors(view), pattern.default_args, pattern.name))
    return wrapped, app_name, namespace


def method_errors(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """ninja's 405 is HTML ("Method not allowed"), require_POST's is empty: answer both as the API
    does, keeping their Allow header."""

    @wraps(view)  # keeps csrf_exempt, which ninja and the OTLP view set on their views
    def answered(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if response.status_code != 405:
            return response
        allowed = sorted(m.strip() for m in response.get("Allow", "").split(",") if m.strip())
        message = f"{request.method} is not allowed at {_shown(request.path)}"
        message += f"; it takes {', '.join(allowed)}." if allowed else "."
        answer = api_error(request, 405, "ERR_METHOD_NOT_ALLOWED", message)
        answer["Allow"] = ", ".join(allowed)
        return answer

    return answered
