"""Retention's archives in an S3-compatible bucket (ARCHIVE_URL=s3://bucket/prefix): written whole,
read back and checked before anything is removed, fetched from the bucket by the removed run's
page; a bucket that is missing or unreachable removes nothing. The store is a real S3-compatible
server on loopback (moto's), spoken to over HTTP by boto3 as a deployment's bucket would be."""

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from django.utils import timezone
from moto.server import ThreadedMotoServer

from ledger.models import Run, RunTombstone
from ledger.retention import archive, services
from ledger.retention.selectors import archive_check
from tenancy.services import UNNAMED
from tests.conftest import fixture_events
from tests.servers import free_port

RUN_ID = "run-1796043007829-1"  # a-run-recording: 76 events
BUCKET = "footprint-archive"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, settings: Any) -> Iterator[Any]:
    for name, value in {
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "archive-writer",
        "AWS_SECRET_ACCESS_KEY": "archive-writer-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    archive._bucket_client.cache_clear()  # the client is made once per process, from these
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    settings.ARCHIVE_URL = f"s3://{BUCKET}/ledger/archives"
    yield client
    for listed in client.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        client.delete_object(Bucket=BUCKET, Key=listed["Key"])
    client.delete_bucket(Bucket=BUCKET)
    archive._bucket_client.cache_clear()


@pytest.fixture
def old_run(agent_client: Any, project: Any) -> Run:
    assert agent_client.ingest(fixture_events("a-run-recording/events.json")).status_code == 200
    Run.objects.filter(run_id=RUN_ID).update(last_event_at=timezone.now() - timedelta(days=40))
    services.run_retention_set(project=project, keep_days=30, actor=UNNAMED)
    return Run.objects.get(project=project, run_id=RUN_ID)


@pytest.mark.django_db(transaction=True)
def test_a_run_is_archived_to_the_bucket_checked_and_removed(old_run: Run, bucket: Any) -> None:
    outcome = services.runs_retention_pass()

    assert (outcome.removed, outcome.failed) == (1, 0)
    tombstone = RunTombstone.objects.get(run_id=RUN_ID)
    assert tombstone.archive_location.startswith(f"s3://{BUCKET}/ledger/archives/acme/")
    key = tombstone.archive_location.removeprefix(f"s3://{BUCKET}/")
    stored = bucket.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    assert stored == archive.archive_get(tombstone.archive_location)
    assert archive_check(tombstone=tombstone, body=stored).valid


@pytest.mark.django_db(transaction=True)
def test_the_removed_runs_page_checks_the_archive_fetched_from_the_bucket(
    old_run: Run, bucket: Any, auditor_client: Any
) -> None:
    services.runs_retention_pass()

    checked = auditor_client.post(f"/projects/acme/runs/{RUN_ID}/removed/", HTTP_HX_REQUEST="true").content.decode()

    assert "is this run's archive, unedited" in checked


@pytest.mark.django_db(transaction=True)
def test_a_missing_bucket_removes_nothing_and_says_why(old_run: Run, bucket: Any, settings: Any) -> None:
    settings.ARCHIVE_URL = "s3://no-such-bucket/archives"

    outcome = services.runs_retention_pass()

    assert (outcome.removed, outcome.failed) == (0, 1)
    assert Run.objects.filter(pk=old_run.pk).exists()
    assert not RunTombstone.objects.exists()
    with pytest.raises(
        archive.ArchiveUnavailable,
        match=r"^The archive s3://no-such-bucket/archives/x could not be written: .*NoSuchBucket",
    ):
        archive.archive_put("x", b"{}")


def test_an_archive_outside_the_configured_bucket_is_never_fetched(bucket: Any) -> None:
    for elsewhere in ("s3://another-bucket/ledger/archives/acme/x", f"s3://{BUCKET}/other/x", "file:///etc/passwd"):
        with pytest.raises(archive.ArchiveUnavailable, match=r"is not in the configured store"):
            archive.archive_get(elsewhere)


@pytest.mark.parametrize("url", ["s3:///no-bucket", "https://example.com/archive", "file://host/archive"])
def test_an_archive_url_of_no_known_store_is_refused_with_what_to_give(settings: Any, url: str) -> None:
    settings.ARCHIVE_URL = url
    with pytest.raises(Exception, match=r"give a directory as file:///absolute/path or a bucket as s3://bucket"):
        archive.archive_put("x", b"{}")
