"""The Django admin changes keys and roles only through the services, so each change is recorded;
the record itself can be read there, never added, edited or deleted."""

from typing import Any

import pytest
from django.test import Client

from tenancy.models import AdminChange, AgentKey, Membership, Project
from tenancy.services import agent_key_create
from tests.tenancy.conftest import changes

pytestmark = pytest.mark.django_db

Action = AdminChange.Action


def _new(project: Project) -> list[AdminChange]:
    return [c for c in changes(project) if c.actor_label.endswith("(admin site)")]


def test_admin_revoking_a_key_records_it_once(superuser_client: Client, project: Project) -> None:
    key, _ = agent_key_create(project=project, scopes=["read"])
    url = f"/admin/tenancy/agentkey/{key.pk}/change/"
    assert superuser_client.post(url, {"revoke": "on"}).status_code == 302
    assert superuser_client.post(url, {"revoke": "on"}).status_code == 302

    (change,) = _new(project)
    assert change.action == Action.KEY_REVOKED
    assert change.actor_label == "root (admin site)"
    assert AgentKey.objects.get(pk=key.pk).revoked_at is not None


def test_admin_saving_a_key_without_revoke_changes_and_records_nothing(
    superuser_client: Client, project: Project
) -> None:
    key, _ = agent_key_create(project=project, scopes=["read"], name="kept")
    url = f"/admin/tenancy/agentkey/{key.pk}/change/"
    # Fields other than `revoke` are read-only: a posted name or revocation time is ignored.
    response = superuser_client.post(url, {"name": "renamed", "revoked_at_0": "2020-01-01", "revoked_at_1": "00:00"})
    assert response.status_code == 302
    key.refresh_from_db()
    assert (key.name, key.revoked_at) == ("kept", None)
    assert _new(project) == []


def test_admin_revoke_action_records_one_change_per_key_still_live(superuser_client: Client, project: Project) -> None:
    keys = [agent_key_create(project=project, scopes=["read"])[0] for _ in range(3)]
    superuser_client.post(
        f"/admin/tenancy/agentkey/{keys[0].pk}/change/", {"revoke": "on"}
    )  # already revoked before the action
    response = superuser_client.post(
        "/admin/tenancy/agentkey/",
        {"action": "revoke_selected", "_selected_action": [k.pk for k in keys]},
    )
    assert response.status_code == 302
    assert [c.target_id for c in _new(project)] == [str(k.pk) for k in keys]
    assert not AgentKey.objects.filter(revoked_at__isnull=True).exists()


def test_admin_cannot_delete_or_add_a_key(superuser_client: Client, project: Project) -> None:
    key, _ = agent_key_create(project=project, scopes=["read"])
    assert superuser_client.post(f"/admin/tenancy/agentkey/{key.pk}/delete/", {"post": "yes"}).status_code == 403
    assert superuser_client.get("/admin/tenancy/agentkey/add/").status_code == 403
    assert AgentKey.objects.filter(pk=key.pk).exists()


def test_admin_membership_add_change_and_delete_are_recorded(
    superuser_client: Client, project: Project, django_user_model: Any
) -> None:
    user = django_user_model.objects.create_user(username="dora")
    response = superuser_client.post(
        "/admin/tenancy/membership/add/", {"user": user.pk, "project": project.pk, "role": "auditor"}
    )
    assert response.status_code == 302, response.content
    membership = Membership.objects.get(user=user, project=project)

    url = f"/admin/tenancy/membership/{membership.pk}/change/"
    assert superuser_client.post(url, {"role": "approver"}).status_code == 302
    assert superuser_client.post(url, {"role": "approver"}).status_code == 302  # unchanged: no record
    assert (
        superuser_client.post(f"/admin/tenancy/membership/{membership.pk}/delete/", {"post": "yes"}).status_code == 302
    )

    granted, changed, removed = _new(project)
    assert (granted.action, granted.after) == (Action.ROLE_GRANTED, {"role": "auditor"})
    assert (changed.action, changed.before, changed.after) == (
        Action.ROLE_CHANGED,
        {"role": "auditor"},
        {"role": "approver"},
    )
    assert (removed.action, removed.before) == (Action.ROLE_REMOVED, {"role": "approver"})
    assert {c.target_label for c in (granted, changed, removed)} == {"dora"}
    assert not Membership.objects.filter(pk=membership.pk).exists()


def test_admin_membership_change_cannot_move_the_role_to_another_user(
    superuser_client: Client, project: Project, other_project: Project, auditor: Any, approver: Any
) -> None:
    membership = Membership.objects.get(user=auditor, project=project)
    url = f"/admin/tenancy/membership/{membership.pk}/change/"
    response = superuser_client.post(url, {"user": approver.pk, "project": other_project.pk, "role": "auditor"})
    assert response.status_code == 302
    membership.refresh_from_db()
    assert (membership.user, membership.project) == (auditor, project)


def test_admin_bulk_delete_of_memberships_records_each(
    superuser_client: Client, project: Project, auditor: Any, approver: Any
) -> None:
    ids = list(Membership.objects.filter(project=project).values_list("pk", flat=True))
    response = superuser_client.post(
        "/admin/tenancy/membership/", {"action": "delete_selected", "_selected_action": ids, "post": "yes"}
    )
    assert response.status_code == 302
    assert sorted(c.target_label for c in _new(project)) == ["alice", "bob"]
    assert {c.action for c in _new(project)} == {Action.ROLE_REMOVED}
    assert not Membership.objects.filter(project=project).exists()


def test_admin_shows_the_record_read_only(superuser_client: Client, project: Project) -> None:
    agent_key_create(project=project, scopes=["read"])
    (change,) = changes(project)
    assert superuser_client.get("/admin/tenancy/adminchange/").status_code == 200
    assert superuser_client.get(f"/admin/tenancy/adminchange/{change.pk}/change/").status_code == 200
    assert superuser_client.get("/admin/tenancy/adminchange/add/").status_code == 403
    assert (
        superuser_client.post(f"/admin/tenancy/adminchange/{change.pk}/change/", {"actor_label": "x"}).status_code
        == 403
    )
    assert superuser_client.post(f"/admin/tenancy/adminchange/{change.pk}/delete/", {"post": "yes"}).status_code == 403
    assert AdminChange.objects.get(pk=change.pk).actor_label == "unnamed caller"


def test_admin_forms_render(superuser_client: Client, project: Project, auditor: Any) -> None:
    key, _ = agent_key_create(project=project, scopes=["read"])
    membership = Membership.objects.get(user=auditor)
    key_page = superuser_client.get(f"/admin/tenancy/agentkey/{key.pk}/change/")
    assert key_page.status_code == 200
    assert b'name="revoke"' in key_page.content
    assert b'name="scopes"' not in key_page.content  # read-only: fixed at mint
    assert superuser_client.get("/admin/tenancy/membership/add/").status_code == 200
    role_page = superuser_client.get(f"/admin/tenancy/membership/{membership.pk}/change/")
    assert role_page.status_code == 200
    assert b'name="role"' in role_page.content
    assert b'name="user"' not in role_page.content
