"""The operator's commands record their changes as made from the command line."""

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tenancy.models import AdminChange, AgentKey, Membership, Project
from tests.tenancy.conftest import changes

pytestmark = pytest.mark.django_db

Action = AdminChange.Action


def _call(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_agent_key_records_the_mint_from_the_command_line() -> None:
    out, _ = _call("create_agent_key", "--project", "p", "--scopes", "ingest", "--name", "ci")
    (change,) = changes()
    key = AgentKey.objects.get()
    assert change.project.slug == "p"
    assert change.action == Action.KEY_MINTED
    assert (change.actor, change.actor_label) == (None, "command line (manage.py create_agent_key)")
    assert change.after == {"name": "ci", "scopes": ["ingest"]}
    assert change.target_id == str(key.pk)
    assert out.splitlines()[-1] not in str(change.after)  # the secret is never recorded


def test_create_agent_key_refused_records_nothing() -> None:
    with pytest.raises(CommandError):
        _call("create_agent_key", "--project", "p", "--name", "x" * 201)
    assert changes() == []
    assert not Project.objects.filter(slug="p").exists()


def test_grant_role_records_a_grant_then_a_change(project: Project, django_user_model: Any) -> None:
    django_user_model.objects.create_user(username="dora")
    _call("grant_role", "--user", "dora", "--project", "acme", "--role", "auditor")
    _call("grant_role", "--user", "dora", "--project", "acme", "--role", "admin")
    _call("grant_role", "--user", "dora", "--project", "acme", "--role", "admin")
    granted, changed = changes(project)
    assert (granted.action, changed.action) == (Action.ROLE_GRANTED, Action.ROLE_CHANGED)
    assert changed.before == {"role": "auditor"}
    assert granted.actor_label == "command line (manage.py grant_role)"
    assert Membership.objects.get(user__username="dora").role == "admin"


def test_revoke_agent_key_records_once_and_says_when_it_was_already_revoked(project: Project) -> None:
    _call("create_agent_key", "--project", "acme", "--scopes", "read")
    key = AgentKey.objects.get()
    first, _ = _call("revoke_agent_key", "--prefix", key.prefix)
    second, _ = _call("revoke_agent_key", "--prefix", f"afk_{key.prefix}_secretpart")

    assert "is revoked" in first
    assert "was already revoked" in second
    assert "secretpart" not in second
    _, revoked = changes(project)
    assert revoked.action == Action.KEY_REVOKED
    assert revoked.actor_label == "command line (manage.py revoke_agent_key)"


def test_revoke_agent_key_names_an_unknown_prefix(project: Project) -> None:
    with pytest.raises(CommandError, match="No agent key with prefix 'nosuch'"):
        _call("revoke_agent_key", "--prefix", "nosuch")
    assert changes() == []


def test_seed_demo_records_its_grant_and_key_once(settings: Any, tmp_path: Any) -> None:
    settings.DATA_DIR = tmp_path
    _call("seed_demo")
    _call("seed_demo")
    assert sorted(c.action for c in changes()) == [Action.KEY_MINTED, Action.ROLE_GRANTED]
    assert {c.actor_label for c in changes()} == {"command line (manage.py seed_demo)"}
