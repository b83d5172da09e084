"""Audit bundles in the browser: verify an upload, see the broken record, browse what is stored."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from ledger.models import AuditBundle
from tests.conftest import DATA, person

pytestmark = pytest.mark.django_db
URL = "/audit-bundles/"


def upload(client, project, name: str, body: bytes | None = None):
    data = body if body is not None else (DATA / "f-audit" / name).read_bytes()
    return client.post(URL, {"project": project.pk, "bundle": SimpleUploadedFile(name, data)})


@pytest.fixture
def admin_client(client, django_user_model, project):
    client.force_login(person(django_user_model, "ada", project, "admin"))
    return client


def test_an_admin_upload_is_verified_and_stored(admin_client, project):
    html = upload(admin_client, project, "bundle.json").content.decode()
    assert "Verified:</strong> 52 records" in html
    bundle = AuditBundle.objects.get()
    assert f"/audit-bundles/{bundle.pk}/" in html
    assert bytes(bundle.body) == (DATA / "f-audit/bundle.json").read_bytes()


def test_a_tampered_bundle_shows_the_broken_record(admin_client, project):
    html = upload(admin_client, project, "bundle-tampered-byte.json").content.decode()
    assert "Broken at record 14:" in html
    assert "hash mismatch" in html
    assert "agentfootprint.stream.tool_start" in html  # the record the byte flip landed in
    detail = admin_client.get(f"/audit-bundles/{AuditBundle.objects.get().pk}/").content.decode()
    assert "Broken at record 14:" in detail


def test_an_auditor_verifies_without_storing(auditor_client, project):
    html = upload(auditor_client, project, "bundle.json").content.decode()
    assert "Verified:</strong> 52 records" in html
    assert "not stored" in html
    assert not AuditBundle.objects.exists()


def test_a_file_that_is_not_a_bundle_is_refused_by_name(auditor_client, project):
    response = upload(auditor_client, project, "x.json", b'{"hello": 1}')
    assert response.status_code == 422
    assert "agentfootprint.audit/1 bundle" in response.content.decode()
    response = upload(auditor_client, project, "x.json", b"{not json")
    assert response.status_code == 422


def test_another_projects_bundle_is_404_and_cannot_be_targeted(admin_client, outsider_client, project):
    upload(admin_client, project, "bundle.json")
    bundle = AuditBundle.objects.get()
    assert outsider_client.get(f"/audit-bundles/{bundle.pk}/").status_code == 404
    assert 'class="bundle-row"' not in outsider_client.get(URL).content.decode()
    response = upload(outsider_client, project, "bundle.json")
    assert response.status_code == 422  # the project is not a choice the outsider has
    assert AuditBundle.objects.count() == 1
