"""Management commands an operator runs: minting agent keys, granting roles, seeding the demo."""

import hashlib
import re
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from ledger.exceptions import RunNotFound
from ledger.explorer import selectors
from ledger.models import Ask, Recording, Run, RunEvent
from tenancy.models import AgentKey, Membership, Project
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db

KEY_SHAPE = re.compile(r"afk_[A-Za-z0-9]{8}_[A-Za-z0-9]{32}")
MINIMAL_EVENT = {"seq": 0, "type": "agentfootprint.agent.turn_start", "payload": {}, "meta": {"runId": "r1"}}


def _call(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _agentkey_rows_as_text() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT k::text FROM ledger_agentkey k")
        return [row[0] for row in cursor.fetchall()]


# create_agent_key


def test_create_agent_key_creates_project_and_prints_key_last() -> None:
    out, err = _call("create_agent_key", "--project", "p", "--scopes", "ingest", "read")
    secret = out.splitlines()[-1]
    assert KEY_SHAPE.fullmatch(secret)
    assert secret not in err
    project = Project.objects.get(slug="p")
    (key,) = AgentKey.objects.filter(project=project)
    assert key.scopes == ["ingest", "read"]
    assert secret.startswith(f"afk_{key.prefix}_")
    assert f"Key {key.prefix}" in err
    assert "'p'" in err


def test_create_agent_key_key_works_on_api() -> None:
    out, _ = _call("create_agent_key", "--project", "p", "--scopes", "ingest", "read")
    client = ApiClient(out.splitlines()[-1])
    response = client.ingest([MINIMAL_EVENT])
    assert response.status_code == 200, response.content
    assert response.json()["runs"][0]["runId"] == "r1"
    assert Run.objects.get(run_id="r1").project.slug == "p"
    assert client.get("/api/v1/runs/r1").status_code == 200


def test_create_agent_key_scopes_limit_the_key() -> None:
    out, _ = _call("create_agent_key", "--project", "p", "--scopes", "read")
    response = ApiClient(out.splitlines()[-1]).ingest([MINIMAL_EVENT])
    assert response.status_code == 403
    assert not Run.objects.exists()


def test_create_agent_key_stores_only_the_hash() -> None:
    out, _ = _call("create_agent_key", "--project", "p", "--scopes", "ingest", "read")
    secret = out.splitlines()[-1]
    key = AgentKey.objects.get()
    assert bytes(key.secret_hash) == hashlib.sha256(secret.encode()).digest()
    (row,) = _agentkey_rows_as_text()
    assert secret not in row
    assert secret[len("afk_") + len(key.prefix) + 1 :] not in row  # nor its random part
    assert secret.encode().hex() not in row  # nor its bytes in a bytea column


def test_create_agent_key_defaults_to_every_agent_scope_and_reuses_project(project: Project) -> None:
    _call("create_agent_key", "--project", "acme", "--name", "ci")
    key = AgentKey.objects.get()
    assert key.project == project
    assert key.name == "ci"
    assert key.scopes == ["artifacts", "asks", "ingest", "read"]  # not `decide`: an agent never approves itself
    assert Project.objects.count() == 1


def test_create_agent_key_for_an_integration_that_decides_asks(project: Project) -> None:
    _call("create_agent_key", "--project", "acme", "--scopes", "decide", "--name", "slack")
    assert AgentKey.objects.get().scopes == ["decide"]


def test_create_agent_key_each_call_mints_a_new_key() -> None:
    first, _ = _call("create_agent_key", "--project", "p")
    second, _ = _call("create_agent_key", "--project", "p")
    assert first.splitlines()[-1] != second.splitlines()[-1]
    assert AgentKey.objects.count() == 2


def test_create_agent_key_rejects_unknown_scope() -> None:
    with pytest.raises(CommandError, match="invalid choice: 'superuser'"):
        _call("create_agent_key", "--project", "p", "--scopes", "ingest", "superuser")
    assert not AgentKey.objects.exists()


def test_create_agent_key_refuses_an_admin_key_that_names_no_admin() -> None:
    with pytest.raises(CommandError, match="name them with --person"):
        _call("create_agent_key", "--project", "p", "--scopes", "ingest", "admin")
    assert not AgentKey.objects.exists()
    assert not Project.objects.filter(slug="p").exists()


def test_create_agent_key_requires_project() -> None:
    with pytest.raises(CommandError, match="--project"):
        _call("create_agent_key")


# grant_role


@pytest.fixture
def bob(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user(username="bob", password="pw-bob")


def test_grant_role_gives_role(bob: Any, project: Project) -> None:
    out, _ = _call("grant_role", "--user", "bob", "--project", "acme", "--role", "auditor")
    assert out.strip() == "bob is now auditor of acme."
    membership = Membership.objects.get(user=bob)
    assert (membership.project, membership.role) == (project, "auditor")


def test_grant_role_replaces_earlier_role(bob: Any, project: Project) -> None:
    _call("grant_role", "--user", "bob", "--project", "acme", "--role", "admin")
    _call("grant_role", "--user", "bob", "--project", "acme", "--role", "auditor")
    assert list(Membership.objects.filter(user=bob).values_list("role", flat=True)) == ["auditor"]


def test_grant_role_lets_the_user_read_the_project(bob: Any, agent_client: ApiClient) -> None:
    assert agent_client.ingest([MINIMAL_EVENT]).status_code == 200
    with pytest.raises(RunNotFound):
        selectors.run_get_for_user(user=bob, project_slug="acme", run_id="r1")
    _call("grant_role", "--user", "bob", "--project", "acme", "--role", "auditor")
    assert selectors.run_get_for_user(user=bob, project_slug="acme", run_id="r1").run_id == "r1"


def test_grant_role_unknown_user_fails(project: Project) -> None:
    with pytest.raises(CommandError, match="No user 'ghost'"):
        _call("grant_role", "--user", "ghost", "--project", "acme", "--role", "auditor")
    assert not Membership.objects.exists()


def test_grant_role_unknown_project_fails(bob: Any) -> None:
    with pytest.raises(CommandError, match="No project 'nowhere'"):
        _call("grant_role", "--user", "bob", "--project", "nowhere", "--role", "auditor")
    assert not Membership.objects.exists()
    assert not Project.objects.filter(slug="nowhere").exists()


def test_grant_role_unknown_role_fails(bob: Any, project: Project) -> None:
    with pytest.raises(CommandError, match="invalid choice: 'owner'"):
        _call("grant_role", "--user", "bob", "--project", "acme", "--role", "owner")
    assert not Membership.objects.exists()


# seed_demo


def _demo_counts() -> dict[str, int]:
    return {
        "projects": Project.objects.count(),
        "runs": Run.objects.count(),
        "events": RunEvent.objects.count(),
        "recordings": Recording.objects.count(),
        "keys": AgentKey.objects.count(),
        "memberships": Membership.objects.count(),
        "users": get_user_model().objects.count(),
    }


def test_seed_demo_is_idempotent(settings: Any, tmp_path: Any) -> None:
    settings.DATA_DIR = tmp_path
    first_out, _ = _call("seed_demo")
    first = _demo_counts()
    second_out, _ = _call("seed_demo")

    assert _demo_counts() == first
    assert first["runs"] > 0
    assert first["events"] > 0
    assert first["keys"] == 1
    assert first["projects"] == 1
    (admin,) = get_user_model().objects.filter(username="admin")
    assert admin.is_superuser
    assert second_out == first_out  # the same login and key are printed again


def test_seed_demo_login_and_key_work(settings: Any, tmp_path: Any, client: Any) -> None:
    settings.DATA_DIR = tmp_path
    out, _ = _call("seed_demo")
    password = re.search(r"^login: admin / (\S+)$", out, re.M).group(1)  # type: ignore[union-attr]
    key = re.search(r"^agent key: (\S+)$", out, re.M).group(1)  # type: ignore[union-attr]
    assert (tmp_path / "admin-password").read_text() == password
    assert (tmp_path / "demo-agent-key").read_text() == key
    assert client.login(username="admin", password=password)
    response = ApiClient(key).get("/api/v1/runs")
    assert response.status_code == 200
    assert len(response.json()["runs"]) == Run.objects.filter(project__slug="demo").count() > 0


def test_seed_demo_leaves_one_ask_waiting_and_the_declined_one_closed(settings: Any, tmp_path: Any) -> None:
    """The inbox is not empty: a run paused at its four-eyes ask waits for a person; the declined
    run's ask is closed by what its resume reported (omar's verdict row)."""
    settings.DATA_DIR = tmp_path
    _call("seed_demo")

    asks = {ask.run_id: ask for ask in Ask.objects.filter(project__slug="demo")}
    assert asks["run-1796043009084-1"].status == Ask.Status.OPEN
    assert Run.objects.get(run_id="run-1796043009084-1").status == Run.Status.PAUSED
    declined = asks["run-1796043009968-3"]
    assert (declined.status, declined.approved, declined.decided_by_label) == (
        Ask.Status.DECIDED,
        False,
        "omar@treasury",
    )


def test_seed_demo_mints_a_new_key_when_the_stored_one_is_unknown(settings: Any, tmp_path: Any) -> None:
    settings.DATA_DIR = tmp_path
    (tmp_path / "demo-agent-key").write_text("afk_stale000_" + "x" * 32)
    out, _ = _call("seed_demo")
    key = re.search(r"^agent key: (\S+)$", out, re.M).group(1)  # type: ignore[union-attr]
    assert key != "afk_stale000_" + "x" * 32
    assert ApiClient(key).get("/api/v1/runs").status_code == 200
