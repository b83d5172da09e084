"""Agent keys on the API: `Authorization: Bearer <key>`, never a session cookie (so no CSRF)."""

import time

from django.http import HttpRequest
from ninja.security import HttpBearer

from ledger.models import AgentKey, Project
from ledger.selectors import agent_key_get_by_secret


class ScopeMissing(Exception):
    def __init__(self, scope: str) -> None:
        super().__init__(scope)
        self.scope = scope


# A short per-process memory of verified keys saves a query on every ingestion request; a revoked
# key therefore stops working within KEY_CACHE_SECONDS.
KEY_CACHE_SECONDS = 5.0
_verified: dict[str, tuple[float, AgentKey]] = {}


def _key_for(secret: str) -> AgentKey | None:
    now = time.monotonic()
    cached = _verified.get(secret)
    if cached is not None and now - cached[0] < KEY_CACHE_SECONDS:
        return cached[1]
    key = agent_key_get_by_secret(secret=secret)
    if key is None:
        _verified.pop(secret, None)
        return None
    if len(_verified) > 1000:
        _verified.clear()
    _verified[secret] = (now, key)
    return key


class AgentKeyAuth(HttpBearer):
    """Authenticates an agent key that carries `scope`; `request.auth` is the AgentKey."""

    def __init__(self, scope: str) -> None:
        super().__init__()
        self.scope = scope

    def authenticate(self, request: HttpRequest, token: str) -> AgentKey | None:
        key = _key_for(token)
        if key is None:
            return None
        if self.scope not in key.scopes:
            raise ScopeMissing(self.scope)
        return key


def agent_key_of(request: HttpRequest) -> AgentKey:
    """The key an AgentKeyAuth operation authenticated (ninja sets `request.auth`)."""
    key = getattr(request, "auth", None)
    assert isinstance(key, AgentKey)
    return key


def project_of(request: HttpRequest) -> Project:
    return agent_key_of(request).project
