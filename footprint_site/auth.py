"""Agent keys on the API (`Authorization: Bearer <key>`, never a session cookie, so no CSRF), and the
throttle of failed key checks that sign-ins share."""

import functools
import threading
import time
from collections import defaultdict, deque

from django.conf import settings
from django.http import HttpRequest
from ninja.security import HttpBearer

from tenancy.models import AgentKey, Project
from tenancy.selectors import agent_key_get_by_secret


class ScopeMissing(Exception):
    def __init__(self, scopes: tuple[str, ...]) -> None:
        super().__init__(scopes)
        self.scopes = scopes


class AuthThrottled(Exception):
    """Too many failed key checks from one client: answered 429 with Retry-After."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(retry_after)
        self.retry_after = retry_after


# Failed key checks and sign-ins per client address, per process (each web worker counts its own):
# enough to stop a flood of guesses from reaching the database; the keys' 190 random bits do the
# rest, and people's passwords get the same 30 tries a minute.
FAILURE_WINDOW_SECONDS = 60
MAX_FAILURES_PER_WINDOW = 30
_failures: dict[str, deque[float]] = defaultdict(deque)
_failures_lock = threading.Lock()


def _recent_failures(client: str, now: float) -> deque[float]:
    failures = _failures[client]
    while failures and now - failures[0] > FAILURE_WINDOW_SECONDS:
        failures.popleft()
    return failures


def refuse_if_throttled(client: str) -> None:
    """Raises AuthThrottled, with the seconds to wait, once `client` failed too often."""
    now = time.monotonic()
    with _failures_lock:
        failures = _recent_failures(client, now)
        if len(failures) >= MAX_FAILURES_PER_WINDOW:
            raise AuthThrottled(int(FAILURE_WINDOW_SECONDS - (now - failures[0])) + 1)


def record_failure(client: str) -> None:
    now = time.monotonic()
    with _failures_lock:
        _recent_failures(client, now).append(now)
        if len(_failures) > 10_000:  # a spray from many addresses must not grow this forever
            _failures.clear()


def client_address(request: HttpRequest) -> str:
    """The address failures are counted against. Behind a proxy named in FOOTPRINT_TRUSTED_PROXIES
    every request comes from the proxy: then it is the nearest address in X-Forwarded-For that is
    not a trusted proxy (the ones further left are the client's own word)."""
    address = str(request.META.get("REMOTE_ADDR") or "unknown")
    trusted = settings.FOOTPRINT_TRUSTED_PROXIES
    if address not in trusted:
        return address
    for hop in reversed(request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")):
        hop = hop.strip()
        if hop and hop not in trusted:
            return hop
    return address


# A short per-process memory of verified keys saves a query on every ingestion request; a revoked
# key therefore stops working within KEY_CACHE_SECONDS.
KEY_CACHE_SECONDS = 5.0
_verified: dict[str, tuple[float, AgentKey]] = {}


def verified_key(secret: str, client: str) -> AgentKey | None:
    """The live key with this secret, or None; AuthThrottled once `client` failed too often."""
    now = time.monotonic()
    cached = _verified.get(secret)
    if cached is not None and now - cached[0] < KEY_CACHE_SECONDS:
        return cached[1]
    refuse_if_throttled(client)
    key = agent_key_get_by_secret(secret=secret)
    if key is None:
        _verified.pop(secret, None)
        record_failure(client)
        return None
    if len(_verified) > 1000:
        _verified.clear()
    _verified[secret] = (now, key)
    return key


class AgentKeyAuth(HttpBearer):
    """Authenticates an agent key that carries one of `scopes`; `request.auth` is the AgentKey."""

    def __new__(cls, *scopes: str) -> "AgentKeyAuth":
        # ninja names an operation's OpenAPI security scheme after its auth's class: a class per
        # scope makes the docs say which scope each operation's key needs.
        return super().__new__(_auth_class_for(scopes))

    def __init__(self, *scopes: str) -> None:
        super().__init__()
        self.scopes = scopes

    def authenticate(self, request: HttpRequest, token: str) -> AgentKey | None:
        # RFC 7235 allows several spaces after the scheme; /v1/traces reads the header the same way.
        key = verified_key(token.strip(), client_address(request))
        if key is None:
            return None
        if not any(scope in key.scopes for scope in self.scopes):
            raise ScopeMissing(self.scopes)
        return key


def agent_key_of(request: HttpRequest) -> AgentKey:
    """The key an AgentKeyAuth operation authenticated (ninja sets `request.auth`)."""
    key = getattr(request, "auth", None)
    assert isinstance(key, AgentKey)
    return key


def project_of(request: HttpRequest) -> Project:
    return agent_key_of(request).project


@functools.cache
def _auth_class_for(scopes: tuple[str, ...]) -> type[AgentKeyAuth]:
    named = " or ".join(f"`{scope}`" for scope in scopes)
    description = (
        f"An agent key with scope {named}, sent as `Authorization: Bearer afk_…`; "
        f"`manage.py create_agent_key --project <slug> --scopes {scopes[0]}` mints one."
    )
    return type(f"AgentKey_{'_or_'.join(scopes)}", (AgentKeyAuth,), {"openapi_description": description})
