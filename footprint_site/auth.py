"""Agent keys on the API: `Authorization: Bearer <key>`, never a session cookie (so no CSRF)."""

from django.http import HttpRequest
from ninja.security import HttpBearer

from ledger.models import AgentKey, Project
from ledger.selectors import agent_key_get_by_secret


class ScopeMissing(Exception):
    def __init__(self, scope: str) -> None:
        super().__init__(scope)
        self.scope = scope


class AgentKeyAuth(HttpBearer):
    """Authenticates an agent key that carries `scope`; `request.auth` is the AgentKey."""

    def __init__(self, scope: str) -> None:
        super().__init__()
        self.scope = scope

    def authenticate(self, request: HttpRequest, token: str) -> AgentKey | None:
        key = agent_key_get_by_secret(secret=token)
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
