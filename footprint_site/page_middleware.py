"""The middleware that serves people's browsers, for their pages only.

Sessions, the signed-in user, flash messages and htmx belong to pages; the API and the OTLP
endpoint are called with agent keys and read none of them. Each class here is Django's (or ours)
with one change: a request to the API passes straight through it.

Not only their own work: the lazy user, the message storage and htmx's details each refer back
to their request, a reference cycle, so every API request and its body (330 KB for a batch of
500 events) lived until the cyclic collector ran, which gunicorn.conf.py makes rare in the web
workers. Under ingestion that was 35 MB more per worker and memory the caches kept losing; now
each request is freed when answered (bench/ingest.py: peak RSS 137 → 93 MiB a worker, web CPU
per event about 5% less). What guards every response stays on for all: SecurityMiddleware's
headers, CSRF (Django's own class, which `check --deploy` looks for by name; the API's views are
csrf_exempt), X-Frame-Options and the Content-Security-Policy.
"""

from typing import Any

from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.http import HttpRequest
from django_htmx import middleware as htmx

from footprint_site import login_redirects
from footprint_site.errors import is_api_request


class PagesOnly:
    """Put first among a middleware's bases: the API's requests skip the rest of it."""

    get_response: Any

    def __call__(self, request: HttpRequest) -> Any:
        if is_api_request(request):
            return self.get_response(request)
        return super().__call__(request)  # type: ignore[misc]


class SessionMiddleware(PagesOnly, sessions.SessionMiddleware):
    pass


class AuthenticationMiddleware(PagesOnly, auth.AuthenticationMiddleware):
    pass


class MessageMiddleware(PagesOnly, messages.MessageMiddleware):
    pass


class HtmxMiddleware(PagesOnly, htmx.HtmxMiddleware):
    pass


class HtmxLoginRedirectMiddleware(PagesOnly, login_redirects.HtmxLoginRedirectMiddleware):
    pass
