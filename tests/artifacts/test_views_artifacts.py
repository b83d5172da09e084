"""Pages of a project's artifacts: access per persona, escaping, digest status, holds, retention."""

import re

import pytest
from django.db import connection
from django.test import Client

from artifacts.models import Artifact, ArtifactHold, ArtifactStore
from artifacts.scopes import Scope
from artifacts.services import PutInput, artifact_put, store_for_project
from tenancy.models import Membership
from tenancy.services import membership_grant

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert(1)</script><img src=x onerror="alert(2)">'


def _put(project, value: str, *, shape: str = "text", kind: str = "note", **extra) -> str:
    spec = PutInput(
        kind=kind,
        media_type="text/html",
        payload={"shape": shape, "value": value},
        present={"digest"},
        digest="sha-256",
        **extra,
    )
    meta, _ = artifact_put(store=store_for_project(project=project), scope=Scope("t", "p", "c1"), spec=spec)
    return meta["ref"]


@pytest.fixture
def admin_client(django_user_model, project) -> Client:
    user = django_user_model.objects.create_user(username="ada", password="pw-ada")
    membership_grant(user=user, project=project, role=Membership.Role.ADMIN)
    client = Client()
    client.force_login(user)
    return client


def test_artifact_list_anonymous_is_sent_to_login(client, project):
    response = client.get(f"/projects/{project.slug}/artifacts/")
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]


def test_artifact_pages_are_404_for_an_outsider(outsider_client, project):
    ref = _put(project, "secret of acme")
    assert outsider_client.get(f"/projects/{project.slug}/artifacts/").status_code == 404
    response = outsider_client.get(f"/projects/{project.slug}/artifacts/{ref}/")
    assert response.status_code == 404
    assert b"secret of acme" not in response.content


def test_artifact_list_shows_rows_and_htmx_gets_only_rows(auditor_client, project, django_assert_max_num_queries):
    for i in range(3):
        _put(project, f"v{i}")
    with django_assert_max_num_queries(10):
        response = auditor_client.get(f"/projects/{project.slug}/artifacts/")
    assert response.content.count(b'class="artifact-row"') == 3
    partial = auditor_client.get(f"/projects/{project.slug}/artifacts/?kind=note", headers={"HX-Request": "true"})
    assert b"<html" not in partial.content
    assert partial.content.count(b'class="artifact-row"') == 3


def test_artifact_list_filters_by_kind_and_state(auditor_client, project):
    _put(project, "a", kind="note")
    _put(project, "{}", shape="json", kind="chart/spec")
    html = auditor_client.get(f"/projects/{project.slug}/artifacts/?kind=chart/spec").content
    assert html.count(b'class="artifact-row"') == 1
    expired = auditor_client.get(f"/projects/{project.slug}/artifacts/?state=expired").content
    assert expired.count(b'class="artifact-row"') == 0


def test_the_older_artifacts_link_keeps_the_filters(auditor_client, project, monkeypatch):
    monkeypatch.setattr("artifacts.views.PER_PAGE", 2)
    for i in range(3):
        _put(project, f"n{i}", kind="note")
    _put(project, "{}", shape="json", kind="chart/spec")
    url = f"/projects/{project.slug}/artifacts/"

    first = auditor_client.get(url, {"kind": "note"}).content.decode()
    (href,) = set(re.findall(r'href="(\?[^"]*cursor=[^"]*)"', first))
    second = auditor_client.get(url + href.replace("&amp;", "&"), headers={"HX-Request": "true"}).content

    assert "Older artifacts" in first
    assert second.count(b'class="artifact-row"') == 1  # the third note, not the chart
    assert b"Older artifacts" not in second


def test_artifact_detail_renders_hostile_payload_inert(auditor_client, project):
    ref = _put(project, HOSTILE)
    response = auditor_client.get(f"/projects/{project.slug}/artifacts/{ref}/")
    assert response.status_code == 200
    assert b"<script>alert(1)" not in response.content
    assert b"onerror=" not in response.content.replace(b"onerror=&quot;", b"")
    assert b"&lt;script&gt;alert(1)&lt;/script&gt;" in response.content
    assert b"bytes match" in response.content
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_artifact_detail_shows_a_digest_mismatch_and_never_the_bytes(auditor_client, project):
    ref = _put(project, "true bytes")
    artifact = Artifact.objects.get(ref=ref)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE artifacts_payload SET body = %s WHERE expiry_bucket = %s AND artifact_id = %s",
            [b"forged bytes", artifact.expiry_bucket, artifact.pk],
        )
    response = auditor_client.get(f"/projects/{project.slug}/artifacts/{ref}/")
    assert b"no longer match" in response.content
    assert b"forged bytes" not in response.content


def test_artifact_detail_pretty_prints_json_and_links_parents_and_children(auditor_client, project):
    parent = _put(project, '{"rows":[1,2]}', shape="json", kind="dataset/rows")
    child = _put(project, "{}", shape="json", kind="chart/spec", parent_refs=[parent])
    parent_page = auditor_client.get(f"/projects/{project.slug}/artifacts/{parent}/").content.decode()
    assert "&quot;rows&quot;: [" in parent_page
    assert f"/artifacts/{child}/" in parent_page
    assert (
        f"/artifacts/{parent}/" in auditor_client.get(f"/projects/{project.slug}/artifacts/{child}/").content.decode()
    )


def test_binary_artifact_downloads_as_an_attachment(auditor_client, project):
    ref = _put(project, "AAEC+v8=", shape="binary", kind="blob")
    page = auditor_client.get(f"/projects/{project.slug}/artifacts/{ref}/").content
    assert b"Download" in page
    response = auditor_client.get(f"/projects/{project.slug}/artifacts/{ref}/download/")
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Disposition"].startswith("attachment")
    assert response.content == bytes([0, 1, 2, 250, 255])


def test_auditor_holds_and_releases_an_artifact_and_both_are_recorded(auditor_client, auditor, project):
    ref = _put(project, "evidence")
    response = auditor_client.post(
        f"/projects/{project.slug}/artifacts/{ref}/hold/", {"reason": "case 7"}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    assert b'id="hold-panel"' in response.content
    assert b"<html" not in response.content
    assert Artifact.objects.get(ref=ref).held
    hold = ArtifactHold.objects.get(artifact_ref=ref)
    auditor_client.post(f"/projects/{project.slug}/artifacts/{ref}/holds/{hold.pk}/release/")
    hold.refresh_from_db()
    assert hold.released_by == auditor
    assert not Artifact.objects.get(ref=ref).held


def test_hold_without_a_role_that_may_hold_is_refused(django_user_model, project):
    user = django_user_model.objects.create_user(username="bob", password="pw-bob")
    membership_grant(user=user, project=project, role=Membership.Role.APPROVER)
    client = Client()
    client.force_login(user)
    ref = _put(project, "x")
    assert client.post(f"/projects/{project.slug}/artifacts/{ref}/hold/", {"reason": "r"}).status_code == 403
    assert not Artifact.objects.get(ref=ref).held


def test_retention_is_editable_by_admins_only(admin_client, auditor_client, project):
    url = f"/projects/{project.slug}/artifacts/retention/"
    assert auditor_client.get(url).status_code == 403
    response = admin_client.post(
        url, {"ttl_ms": "60000", "max_ttl_ms": "", "max_bytes_per_scope": "1024", "max_count_per_scope": ""}
    )
    assert response.status_code == 302
    store = ArtifactStore.objects.get(project=project)
    assert (store.ttl_ms, store.max_ttl_ms, store.max_bytes_per_scope) == (60000, None, 1024)
    refused = admin_client.post(
        url, {"ttl_ms": "-5", "max_ttl_ms": "", "max_bytes_per_scope": "", "max_count_per_scope": ""}
    )
    assert refused.status_code == 422
    assert b"greater than 0" in refused.content


def test_a_deleted_ref_shows_its_tombstone(auditor_client, project, agent_client):
    ref = _put(project, "short-lived")
    from artifacts.services import artifact_delete

    artifact_delete(store=store_for_project(project=project), scope=Scope("t", "p", "c1"), ref=ref)
    response = auditor_client.get(f"/projects/{project.slug}/artifacts/{ref}/")
    assert response.status_code == 200
    assert b'id="tombstone"' in response.content
