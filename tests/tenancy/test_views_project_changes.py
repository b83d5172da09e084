"""The page of a project's admin changes: its admins and superusers read it; members without the
admin role are refused, and people outside the project are told it does not exist."""

from http import HTTPStatus
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from artifacts.models import ArtifactStore
from artifacts.services import store_update_retention
from tenancy.models import AdminChange, Project
from tenancy.services import Actor, agent_key_create, membership_grant
from tenancy.views import PER_PAGE

pytestmark = pytest.mark.django_db


def _url(project: Project, **query: str) -> str:
    url = reverse("tenancy:project-changes", args=[project.slug])
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def _fill(project: Project, count: int) -> None:
    AdminChange.objects.bulk_create(
        AdminChange(
            project=project,
            actor_label="seeded",
            action=AdminChange.Action.ROLE_CHANGED,
            target_type="membership",
            target_id=str(i),
            target_label=f"user-{i:03d}",
            before={"role": "auditor"},
            after={"role": "approver"},
        )
        for i in range(count)
    )


def test_changes_page_sends_anonymous_people_to_sign_in(client: Client, project: Project) -> None:
    response = client.get(_url(project))
    assert response.status_code == HTTPStatus.FOUND
    assert "/accounts/login/" in response["Location"]


def test_changes_page_is_404_for_an_outsider(outsider_client: Client, project: Project) -> None:
    agent_key_create(project=project, scopes=["read"], name="acme-secret-name")
    response = outsider_client.get(_url(project))
    assert response.status_code == HTTPStatus.NOT_FOUND
    assert b"acme-secret-name" not in response.content


def test_changes_page_is_403_for_an_auditor(auditor_client: Client, project: Project) -> None:
    response = auditor_client.get(_url(project))
    assert response.status_code == HTTPStatus.FORBIDDEN
    assert b"Only admins" in response.content


def test_changes_page_refuses_posts(admin_client: Client, project: Project) -> None:
    assert admin_client.post(_url(project)).status_code == HTTPStatus.METHOD_NOT_ALLOWED


def test_changes_page_lists_changes_newest_first_readably(
    admin_client: Client, admin_user: Any, project: Project, store: ArtifactStore, django_user_model: Any
) -> None:
    agent_key_create(project=project, scopes=["read", "ingest"], name="ci", actor=Actor.command("create_agent_key"))
    store_update_retention(
        store=store,
        user=admin_user,
        ttl_ms=60_000,
        max_ttl_ms=store.max_ttl_ms,
        max_bytes_per_scope=None,
        max_count_per_scope=None,
    )
    response = admin_client.get(_url(project))

    assert response.status_code == HTTPStatus.OK
    body = response.content.decode()
    assert body.count('class="change-row"') == 3  # the admin's own grant, the key, the retention
    retention, key, grant = (
        body.index(text) for text in ("Artifact retention changed", "Agent key minted", "Role granted")
    )
    assert retention < key < grant
    assert "ttl (ms): none → 60000" in body
    assert "scopes: — → ingest, read" in body
    assert "role: — → admin" in body
    assert "command line (manage.py create_agent_key)" in body
    assert 'title="20' in body
    assert "now</time>" in body  # relative to the reader: the changes were just made
    assert "{&quot;" not in body  # no raw JSON for simple values


def test_changes_page_for_a_superuser_who_is_no_member(superuser_client: Client, project: Project) -> None:
    agent_key_create(project=project, scopes=["read"])
    response = superuser_client.get(_url(project))
    assert response.status_code == HTTPStatus.OK
    assert response.content.count(b'class="change-row"') == 1


def test_changes_page_shows_only_this_projects_changes(
    admin_client: Client, project: Project, other_project: Project
) -> None:
    agent_key_create(project=other_project, scopes=["read"], name="globex-key")
    response = admin_client.get(_url(project))
    assert b"globex-key" not in response.content


def test_changes_page_empty_state_says_why(superuser_client: Client, project: Project) -> None:
    response = superuser_client.get(_url(project))
    assert response.status_code == HTTPStatus.OK
    assert b"No admin changes yet" in response.content
    assert b'class="change-row"' not in response.content


def test_changes_page_pages_by_keyset_and_htmx_gets_only_rows(
    admin_client: Client, project: Project, django_assert_max_num_queries: Any
) -> None:
    _fill(project, PER_PAGE + 5)  # and the admin's own grant: PER_PAGE + 6 in all
    with django_assert_max_num_queries(8):
        first = admin_client.get(_url(project))
    assert first.content.count(b'class="change-row"') == PER_PAGE
    cursor = first.context["next_cursor"]
    assert cursor

    with django_assert_max_num_queries(8):
        second = admin_client.get(_url(project, cursor=cursor), headers={"HX-Request": "true"})
    assert second.status_code == HTTPStatus.OK
    assert b"<html" not in second.content
    assert second.content.count(b'class="change-row"') == 6
    assert b"Older changes" not in second.content
    assert b"Role granted" in second.content  # the oldest row is on the last page
    # Newest first, no row on both pages: user-054 … user-005, then user-004 … user-000.
    assert b"user-005" in first.content
    assert b"user-005" not in second.content
    assert b"user-004" in second.content
    assert b"user-004" not in first.content
    assert "HX-Request" in second["Vary"]


def test_changes_page_past_the_oldest_says_the_record_begins_there(admin_client: Client, project: Project) -> None:
    oldest = AdminChange.objects.filter(project=project).order_by("pk").first()
    assert oldest is not None
    from footprint_site.pagination import encode_cursor

    response = admin_client.get(_url(project, cursor=encode_cursor(oldest.pk)))
    assert b"No older changes" in response.content


def test_changes_page_ignores_an_undecodable_cursor(admin_client: Client, project: Project) -> None:
    response = admin_client.get(_url(project, cursor="%%%not-a-cursor"))
    assert response.status_code == HTTPStatus.OK
    assert response.content.count(b'class="change-row"') == 1


def test_changes_page_query_count_does_not_grow_with_rows(
    admin_client: Client, project: Project, django_assert_max_num_queries: Any
) -> None:
    _fill(project, 3)
    with django_assert_max_num_queries(8):
        assert admin_client.get(_url(project)).status_code == HTTPStatus.OK
    _fill(project, 40)
    with django_assert_max_num_queries(8):
        assert admin_client.get(_url(project)).status_code == HTTPStatus.OK


def test_the_artifacts_page_links_admins_to_the_changes_and_no_one_else(
    admin_client: Client, auditor_client: Client, project: Project
) -> None:
    link = _url(project).encode()
    assert link in admin_client.get(f"/projects/{project.slug}/artifacts/").content
    assert link not in auditor_client.get(f"/projects/{project.slug}/artifacts/").content


def test_a_role_changed_on_the_page_side_appears_for_the_new_admin(
    project: Project, auditor: Any, auditor_client: Client, superuser: Any
) -> None:
    membership_grant(user=auditor, project=project, role="admin", actor=Actor.of_user(superuser))
    response = auditor_client.get(_url(project))
    assert response.status_code == HTTPStatus.OK
    assert "role: auditor → admin" in response.content.decode()
    assert b"root" in response.content
