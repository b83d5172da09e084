"""The Python client's tests: the package is imported from its source directory (so `make test`
needs no install step; `pip install ./clients/python` installs the same module), against a real
server with a key of every scope."""

import sys
from pathlib import Path
from typing import Any

import pytest

from tenancy.models import AgentKey, Project
from tenancy.services import agent_key_create

CLIENT_SOURCE = Path(__file__).resolve().parent.parent.parent / "clients" / "python"
if str(CLIENT_SOURCE) not in sys.path:
    sys.path.insert(0, str(CLIENT_SOURCE))

from footprint_client import Client  # noqa: E402

SCOPE = {"tenant": "acme-eu", "principal": "user-7", "conversationId": "conv-1"}


@pytest.fixture
def secret(project: Project) -> str:
    return agent_key_create(project=project, scopes=list(AgentKey.Scope.values))[1]


@pytest.fixture
def client(live_server: Any, secret: str) -> Client:
    return Client(live_server.url, secret, timeout=30, retries=2, backoff=0.05)
