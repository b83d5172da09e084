"""Where a signed-out browser is sent to sign in, so that it comes back to a page that works.

Django's `login_required` redirects to the login page with `next` set to the URL asked for. Two
kinds of request need more: an htmx request, whose XHR would follow the redirect silently and swap
the whole login page into a fragment, and a POST to a POST-only URL, which the browser would GET
after signing in, to be answered 405.
"""

from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import resolve_url
from django.urls import reverse
from django_htmx.http import HttpResponseClientRedirect

from footprint_site.pages import HtmxHttpRequest

View = Callable[..., HttpResponse]


def login_required_returning_to(page: str, *page_kwargs: str) -> Callable[[View], View]:
    """`login_required` for a POST-only view: a signed-out user signs in and lands on `page`, the
    object's page holding the form that posts here, reversed from the view's URL arguments named
    in `page_kwargs`. Nothing is read from the database, so the redirect tells nobody whether the
    object exists."""

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.user.is_authenticated:
                return view(request, *args, **kwargs)
            return redirect_to_login(reverse(page, kwargs={name: kwargs[name] for name in page_kwargs}))

        return wrapper

    return decorator


class HtmxLoginRedirectMiddleware:
    """An htmx request answered with a redirect to the login page (the session ended while the
    inbox polled, say) gets `HX-Redirect` to it instead, so htmx loads the login page as the page.
    `next` is the page the browser shows (HX-Current-URL), not the fragment URL it asked for; the
    redirect's own `next` when that header is missing or names another origin."""

    def __init__(self, get_response: Callable[[HtmxHttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HtmxHttpRequest) -> HttpResponse:
        response = self.get_response(request)
        redirected_to = response.headers.get("Location")
        if not request.htmx or redirected_to is None or not 300 <= response.status_code < 400:
            return response
        location = urlsplit(redirected_to)
        if location.path != resolve_url(settings.LOGIN_URL):
            return response
        next_url = request.htmx.current_url_abs_path or parse_qs(location.query).get("next", [""])[0]
        return HttpResponseClientRedirect(redirect_to_login(next_url).url if next_url else location.path)
