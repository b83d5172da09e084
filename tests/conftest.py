"""Shared fixtures: personas, agent keys, API clients and the framework's own fixture files."""

import collections
import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from ledger.asks.services import ask_open
from ledger.models import Ask
from tenancy.models import AGENT_SCOPES, AgentKey, Membership, Project
from tenancy.services import agent_key_create, membership_grant, project_get_or_create

DATA = Path(__file__).parent / "data"


def load_fixture(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def numbered_per_run(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fixture files number events across the whole capture; agents number them per run."""
    counters: collections.Counter[str] = collections.Counter()
    numbered = []
    for event in events:
        run_id = event["meta"]["runId"]
        numbered.append({**event, "seq": counters[run_id]})
        counters[run_id] += 1
    return numbered


def fixture_events(name: str) -> list[dict[str, Any]]:
    return numbered_per_run(load_fixture(name)["events"])


class ApiClient(Client):
    """A Django test client that sends an agent key and JSON bodies."""

    def __init__(self, secret: str | None) -> None:
        headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"} if secret else {}
        super().__init__(**headers)

    def post_json(self, path: str, data: Any) -> Any:
        body = data if isinstance(data, bytes | str) else json.dumps(data)
        return self.post(path, body, content_type="application/json")

    def ingest(self, events: list[dict[str, Any]]) -> Any:
        return self.post_json("/api/v1/events", {"events": events})


@pytest.fixture(autouse=True)
def _fast_hasher(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_auth_counters() -> Any:
    """Every test client calls from 127.0.0.1: one test's failed keys must not throttle the next."""
    from footprint_site import auth

    auth._failures.clear()
    yield
    auth._failures.clear()


@pytest.fixture
def project(db: None) -> Project:
    return project_get_or_create(slug="acme")


@pytest.fixture
def other_project(db: None) -> Project:
    return project_get_or_create(slug="globex")


def _key(project: Project, scopes: list[str]) -> str:
    return agent_key_create(project=project, scopes=scopes)[1]


@pytest.fixture
def agent_client(project: Project) -> ApiClient:
    """An agent of `project` whose key carries every agent scope (all but `decide`)."""
    return ApiClient(_key(project, AGENT_SCOPES))


@pytest.fixture
def other_agent_client(other_project: Project) -> ApiClient:
    return ApiClient(_key(other_project, AGENT_SCOPES))


@pytest.fixture
def integration_client(project: Project) -> ApiClient:
    """An integration of `project` (a chat bot) that decides asks over the API."""
    return ApiClient(_key(project, [AgentKey.Scope.DECIDE]))


@pytest.fixture
def ingest_only_client(project: Project) -> ApiClient:
    return ApiClient(_key(project, ["ingest"]))


@pytest.fixture
def anonymous_api_client() -> ApiClient:
    return ApiClient(None)


def person(django_user_model: Any, username: str, project: Project | None, role: str | None) -> Any:
    user = django_user_model.objects.create_user(username=username, password="pw-" + username)
    if project is not None and role is not None:
        membership_grant(user=user, project=project, role=role)
    return user


def signed_in_client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def auditor(django_user_model: Any, project: Project) -> Any:
    return person(django_user_model, "alice", project, Membership.Role.AUDITOR)


@pytest.fixture
def approver(django_user_model: Any, project: Project) -> Any:
    return person(django_user_model, "bob", project, Membership.Role.APPROVER)


@pytest.fixture
def approver_client(approver: Any) -> Client:
    return signed_in_client(approver)


@pytest.fixture
def outsider(django_user_model: Any, other_project: Project) -> Any:
    return person(django_user_model, "charlie", other_project, Membership.Role.ADMIN)


@pytest.fixture
def auditor_client(auditor: Any) -> Client:
    return signed_in_client(auditor)


@pytest.fixture
def outsider_client(outsider: Any) -> Client:
    return signed_in_client(outsider)


@pytest.fixture(autouse=True, scope="session")
def _stop_decision_listener(django_db_setup: None, django_db_blocker: Any) -> Any:
    """The long-poll's LISTEN connection must close before pytest drops the test database
    (depending on django_db_setup makes this teardown run first)."""
    yield
    from ledger.asks.waits import ask_decisions

    ask_decisions.stop()


@pytest.fixture(autouse=True)
def _stop_embedded_postgresql_under_tmp_path(request: pytest.FixtureRequest) -> Any:
    """Subprocesses given FOOTPRINT_DATA_DIR in a test's tmp_path and no DATABASE_URL start an
    embedded PostgreSQL there, which outlives them: each would stay running after the suite."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    tmp_path: Path = request.getfixturevalue("tmp_path")  # now: it is gone by this teardown
    yield
    for pid_file in [*tmp_path.glob("postgres/postmaster.pid"), *tmp_path.glob("*/postgres/postmaster.pid")]:
        from footprint_site.embedded_postgres import postmaster_running, stop

        if postmaster_running(pid_file.parent):
            stop(pid_file.parent)


def pay_ask_open(project: Project, *, run_id: str) -> Ask:
    """An ask of a payment for an agent to wait on, declined at its deadline."""
    ask, _ = ask_open(
        project=project,
        key=None,
        run_id=run_id,
        session_id=None,
        pause_data={"toolCallId": "t3", "toolName": "pay", "ask": {"question": "Pay 40 EUR?"}},
        checkpoint=None,
        deadline=None,
        on_timeout="decline",
    )
    return ask
