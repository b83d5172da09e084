"""Each service that changes keys, roles, artifact retention or holds writes exactly one AdminChange
in its own transaction; a change that fails, or changes nothing, writes none."""

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction

from artifacts.models import Artifact, ArtifactHold, ArtifactStore
from artifacts.services import artifact_hold_place, artifact_hold_release, store_update_retention
from tenancy import services
from tenancy.models import AdminChange, AgentKey, Membership, Project
from tenancy.services import (
    Actor,
    admin_change_record,
    agent_key_create,
    agent_key_revoke,
    membership_grant,
    membership_remove,
    project_get_or_create,
)
from tests.tenancy.conftest import changes, put_artifact

pytestmark = pytest.mark.django_db

Action = AdminChange.Action


def _database_clock() -> tuple[Any, Any]:
    """This transaction's start and this statement's time, both by the database's clock."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now(), statement_timestamp()")
        return cursor.fetchone()


# agent keys


def test_agent_key_create_records_the_mint_with_its_actor(project: Project, admin_user: Any) -> None:
    before = len(changes(project))  # the admin's own grant
    key, _ = agent_key_create(project=project, scopes=["read", "ingest"], name="ci", actor=Actor.of_user(admin_user))
    (change,) = changes(project)[before:]
    assert change.action == Action.KEY_MINTED
    assert (change.actor, change.actor_label) == (admin_user, "ada")
    assert (change.target_type, change.target_id) == ("agent key", str(key.pk))
    assert change.target_label == f"key {key.prefix}… (ci)"
    assert change.before is None
    assert change.after == {"name": "ci", "scopes": ["ingest", "read"]}
    began, later = _database_clock()
    assert began <= change.created_at <= later  # stamped by the database, inside this transaction


def test_agent_key_create_refused_records_nothing(project: Project) -> None:
    with pytest.raises(ValueError, match="scopes"):
        agent_key_create(project=project, scopes=["everything"])
    with pytest.raises(ValueError, match="name"):
        agent_key_create(project=project, scopes=["read"], name="x" * 201)
    assert changes() == []


def test_agent_key_create_failing_on_a_constraint_records_nothing(project: Project, monkeypatch: Any) -> None:
    agent_key_create(project=project, scopes=["read"])
    monkeypatch.setattr(services, "_random_text", lambda length: "A" * length)
    agent_key_create(project=project, scopes=["read"])
    with pytest.raises(IntegrityError):  # the same prefix and secret again: unique constraints
        agent_key_create(project=project, scopes=["read"])
    assert [c.action for c in changes()] == [Action.KEY_MINTED, Action.KEY_MINTED]
    assert AgentKey.objects.count() == 2


def test_agent_key_revoke_records_once_and_is_idempotent(project: Project) -> None:
    key, _ = agent_key_create(project=project, scopes=["read"])
    actor = Actor.command("revoke_agent_key")
    revoked = agent_key_revoke(key=key, actor=actor)
    first_time = revoked.revoked_at
    again = agent_key_revoke(key=AgentKey.objects.get(pk=key.pk), actor=actor)

    assert first_time is not None
    assert again.revoked_at == first_time
    _minted, change = changes(project)
    assert change.action == Action.KEY_REVOKED
    assert (change.actor, change.actor_label) == (None, "command line (manage.py revoke_agent_key)")
    assert change.before == {"revoked_at": None}
    assert change.after == {"revoked_at": first_time.isoformat()}


def test_agent_key_create_without_an_actor_is_recorded_as_unnamed(project: Project) -> None:
    agent_key_create(project=project, scopes=["read"])
    (change,) = changes()
    assert change.actor_label == "unnamed caller"


# roles


def test_membership_grant_records_granted_then_changed_and_nothing_for_the_same_role(
    project: Project, django_user_model: Any, superuser: Any
) -> None:
    user = django_user_model.objects.create_user(username="dora")
    actor = Actor.of_user(superuser)
    membership_grant(user=user, project=project, role=Membership.Role.AUDITOR, actor=actor)
    membership_grant(user=user, project=project, role=Membership.Role.ADMIN, actor=actor)
    membership_grant(user=user, project=project, role=Membership.Role.ADMIN, actor=actor)

    granted, changed = changes(project)
    assert (granted.action, granted.before, granted.after) == (Action.ROLE_GRANTED, None, {"role": "auditor"})
    assert (changed.action, changed.before, changed.after) == (
        Action.ROLE_CHANGED,
        {"role": "auditor"},
        {"role": "admin"},
    )
    assert granted.target_label == changed.target_label == "dora"
    assert Membership.objects.get(user=user, project=project).role == "admin"


def test_membership_grant_refused_records_nothing(project: Project, django_user_model: Any) -> None:
    user = django_user_model.objects.create_user(username="dora")
    with pytest.raises(ValueError, match="role must be one of"):
        membership_grant(user=user, project=project, role="owner")
    assert changes() == []


def test_membership_remove_records_the_role_taken_away_once(project: Project, auditor: Any) -> None:
    membership = Membership.objects.get(user=auditor, project=project)
    membership_remove(membership=membership, actor=Actor.command("test"))
    membership_remove(membership=membership, actor=Actor.command("test"))

    _, removed = changes(project)
    assert (removed.action, removed.before, removed.after) == (Action.ROLE_REMOVED, {"role": "auditor"}, None)
    assert removed.target_label == "alice"
    assert not Membership.objects.filter(pk=membership.pk).exists()


# artifact retention and holds


def _dials(**changed: int | None) -> dict[str, int | None]:
    return {
        "ttl_ms": None,
        "max_ttl_ms": 2_592_000_000,
        "max_bytes_per_scope": None,
        "max_count_per_scope": None,
    } | changed


def test_store_update_retention_records_only_the_dials_that_changed(
    project: Project, store: ArtifactStore, admin_user: Any
) -> None:
    start = len(changes(project))
    store_update_retention(store=store, user=admin_user, **_dials(ttl_ms=60_000, max_count_per_scope=5))
    store_update_retention(store=store, user=admin_user, **_dials(ttl_ms=60_000, max_count_per_scope=5))

    (change,) = changes(project)[start:]
    assert change.action == Action.RETENTION_CHANGED
    assert change.before == {"ttl_ms": None, "max_count_per_scope": None}
    assert change.after == {"ttl_ms": 60_000, "max_count_per_scope": 5}
    assert change.actor == admin_user


def test_store_update_retention_records_what_the_database_held_not_what_a_form_set(
    project: Project, store: ArtifactStore, admin_user: Any
) -> None:
    """The retention form writes its values onto the store instance before the service runs."""
    start = len(changes(project))
    store.ttl_ms = 9_000
    store_update_retention(store=store, user=admin_user, **_dials(ttl_ms=9_000))
    (change,) = changes(project)[start:]
    assert change.before == {"ttl_ms": None}


def test_store_update_retention_refused_records_nothing(
    project: Project, store: ArtifactStore, admin_user: Any
) -> None:
    start = len(changes(project))
    with pytest.raises(ValidationError):
        store_update_retention(store=store, user=admin_user, **_dials(ttl_ms=0))
    assert changes(project)[start:] == []
    assert ArtifactStore.objects.get(pk=store.pk).ttl_ms is None


def test_hold_place_and_release_record_one_change_each(project: Project, store: ArtifactStore, auditor: Any) -> None:
    ref = put_artifact(store)
    start = len(changes(project))
    hold = artifact_hold_place(store=store, ref=ref, user=auditor, reason="litigation")
    artifact_hold_release(hold=hold, user=auditor)
    artifact_hold_release(hold=ArtifactHold.objects.get(pk=hold.pk), user=auditor)

    placed, released = changes(project)[start:]
    assert (placed.action, placed.before, placed.after) == (Action.HOLD_PLACED, None, {"reason": "litigation"})
    assert (released.action, released.before, released.after) == (Action.HOLD_RELEASED, {"reason": "litigation"}, None)
    assert placed.target_label == f"hold on {ref}"
    assert placed.target_id == released.target_id == str(hold.pk)
    assert placed.actor_label == "alice"


def test_hold_on_an_unknown_ref_records_nothing(project: Project, store: ArtifactStore, auditor: Any) -> None:
    from artifacts.exceptions import ArtifactNotFound

    start = len(changes(project))
    with pytest.raises(ArtifactNotFound):
        artifact_hold_place(store=store, ref="art_0000000000000000000000", user=auditor, reason="x")
    assert changes(project)[start:] == []


# the record itself


def test_admin_changes_are_append_only(project: Project) -> None:
    agent_key_create(project=project, scopes=["read"])
    (change,) = changes()
    change.actor_label = "someone else"
    with pytest.raises(TypeError, match="append-only"):
        change.save()
    with pytest.raises(TypeError, match="append-only"):
        change.delete()
    with pytest.raises(TypeError, match="append-only"):
        AdminChange.objects.filter(pk=change.pk).update(actor_label="someone else")
    with pytest.raises(TypeError, match="append-only"):
        AdminChange.objects.all().delete()
    assert AdminChange.objects.get(pk=change.pk).actor_label == "unnamed caller"


def test_the_changes_of_one_project_are_not_the_others(project: Project, other_project: Project) -> None:
    agent_key_create(project=other_project, scopes=["read"])
    assert changes(project) == []
    assert len(changes(other_project)) == 1


# the same transaction (committed for real: the test database's own transaction would hide it)


@pytest.mark.django_db(transaction=True)
def test_a_change_rolled_back_takes_its_record_with_it() -> None:
    project = project_get_or_create(slug="rollback")

    class Abandoned(Exception):
        pass

    def mint_then_fail() -> None:
        with transaction.atomic():
            agent_key_create(project=project, scopes=["read"])
            raise Abandoned

    with pytest.raises(Abandoned):
        mint_then_fail()

    assert not AgentKey.objects.exists()
    assert not AdminChange.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_hold_failing_its_constraints_at_commit_records_nothing(django_user_model: Any) -> None:
    """Foreign keys are checked at commit: a hold placed by a user row that does not exist fails
    there, after the record was written, and neither the hold nor its record remains."""
    project = project_get_or_create(slug="deferred")
    store = ArtifactStore.objects.create(project=project)
    ref = put_artifact(store)
    ghost = django_user_model(pk=987_654, username="ghost")

    with pytest.raises(IntegrityError):
        artifact_hold_place(store=store, ref=ref, user=ghost, reason="never")

    assert not ArtifactHold.objects.exists()
    assert not Artifact.objects.get(ref=ref).held
    assert not AdminChange.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_record_outside_a_transaction_is_refused() -> None:
    project = project_get_or_create(slug="autocommit")
    with pytest.raises(RuntimeError, match="in the transaction of the change"):
        admin_change_record(
            actor=Actor.command("test"),
            action=Action.KEY_MINTED,
            project=project,
            target_type="agent key",
            target_id=1,
            target_label="key",
            before=None,
            after=None,
        )
    assert not AdminChange.objects.exists()
