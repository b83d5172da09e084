"""The bulk sweeper (spec §12.4): expired metadata deleted in batches with a tombstone each, expired
payload partitions dropped whole, holds respected, and reads never disturbed.

Every test commits for real (transaction=True): the sweeper detaches partitions CONCURRENTLY, which
PostgreSQL refuses inside a transaction block, and the concurrency tests need several connections.
"""

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, connections

from artifacts import partitions
from artifacts.models import Artifact, ArtifactHold, SweepRun, Tombstone
from artifacts.services import artifact_hold_place, artifact_hold_release, artifacts_sweep, store_for_project
from tests.artifacts.conftest import StoreClient, orm_put, orm_put_many, sha256_digest

pytestmark = pytest.mark.django_db(transaction=True)

HOUR_MS = 3_600_000


def _table_exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        return bool(cursor.fetchone()[0])


def _droppable_partitions() -> int:
    """How many existing daily partitions a sweep now would drop (day end + 1 h grace is past)."""
    now = int(time.time() * 1000)
    return sum(
        1
        for day in partitions.existing_partitions()
        if int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000) + 86_400_000 + HOUR_MS <= now
    )


def _put_expiring(
    store: StoreClient, kit: Any, scope: dict[str, Any], count: int, **extra: Any
) -> list[dict[str, Any]]:
    expires_at = kit.now(store) + 1_000
    return [
        store.put(
            scope, kind=f"scratch/{i}", media_type="text/plain", data="x" * (i + 1), expires_at=expires_at, **extra
        )[0]
        for i in range(count)
    ]


def _mint_expired(store: StoreClient, scope: dict[str, Any], count: int) -> list[Artifact]:
    now = int(time.time() * 1000)
    rows = [
        {"kind": "bulk/expired", "body": f"expired {i}".encode(), "created_at": now - 60_000, "expires_at": now - 1_000}
        for i in range(count)
    ]
    return orm_put_many(store_for_project(project=store.project), scope, rows)


def test_sweep_deletes_expired_metadata_and_leaves_one_tombstone_each(harness, kit):
    store = harness.create_store()
    s = kit.scope("sweep")
    expired = _put_expiring(store, kit, s, 3, digest="sha-256")
    live, _ = store.put(s, kind="live", media_type="text/plain", data="stays")
    later, _ = store.put(s, kind="later", media_type="text/plain", data="later", expires_at=kit.now(store) + HOUR_MS)
    kit.advance(store, 1_001)

    run = artifacts_sweep()

    assert run.metadata_rows == 3
    assert not Artifact.objects.filter(ref__in=[m["ref"] for m in expired]).exists()
    for meta in expired:
        (tombstone,) = Tombstone.objects.filter(ref=meta["ref"])
        assert tombstone.store_id == store.model.pk
        assert (tombstone.kind, tombstone.bytes, tombstone.digest, tombstone.expired_at, tombstone.reason) == (
            meta["kind"],
            meta["bytes"],
            meta["digest"],
            meta["expiresAt"],
            "ttl",
        )
    assert store.get(s, live["ref"]) is not None
    assert store.get(s, later["ref"]) is not None
    assert not Tombstone.objects.filter(ref__in=[live["ref"], later["ref"]]).exists()


def test_sweep_expired_artifacts_are_invisible_before_any_sweep(harness, kit):
    store = harness.create_store()
    s = kit.scope("invisible")
    (brief,) = _put_expiring(store, kit, s, 1)
    brief_ref = brief["ref"]
    kit.advance(store, 1_001)

    assert Artifact.objects.filter(ref=brief_ref).exists()  # nothing has swept it
    assert store.head(s, brief_ref) is None
    assert store.get(s, brief_ref) is None
    assert store.list(s) == {"artifacts": []}
    result = store.resolve(s, "t", {"d": brief["kind"]}, {"d": brief_ref})
    assert result["refusals"][0]["reason"] == "missing-or-expired"
    assert result["refusals"][0]["detail"].endswith(
        f"No live '{brief['kind']}' artifacts were in this run's scope when that call was refused — produce one "
        f"first (a tool that stores '{brief['kind']}', or re-run the step that minted it)."
    )
    parent = store.put_raw(
        s,
        {"kind": "c", "mediaType": "text/plain", "payload": {"shape": "text", "value": "c"}, "parentRefs": [brief_ref]},
    )
    assert parent.status_code == 422
    assert parent.json()["code"] == "ERR_UNKNOWN_PARENT_REF"
    before = store.get_raw(s, brief_ref).content

    artifacts_sweep()

    assert not Artifact.objects.filter(ref=brief_ref).exists()
    assert store.get_raw(s, brief_ref).content == before  # one answer before and after the sweep


def test_sweep_never_removes_a_held_artifact_and_records_hold_and_release(harness, kit, django_user_model):
    store = harness.create_store()
    s = kit.scope("held")
    (evidence,) = _put_expiring(store, kit, s, 1)
    placer = django_user_model.objects.create_user(username="auditor-place", password="pw")
    releaser = django_user_model.objects.create_user(username="auditor-release", password="pw")
    hold = artifact_hold_place(store=store.model, ref=evidence["ref"], user=placer, reason="litigation hold")
    kit.advance(store, 1_001)

    first = artifacts_sweep()
    second = artifacts_sweep()

    assert first.metadata_rows == 0
    assert second.metadata_rows == 0
    artifact = Artifact.objects.get(ref=evidence["ref"])
    assert artifact.held is True
    assert artifact.expiry_bucket == partitions.FAR_BUCKET  # moved out of reach of partition drops
    with connection.cursor() as cursor:
        cursor.execute("SELECT body FROM artifacts_payload_far WHERE artifact_id = %s", [artifact.pk])
        assert bytes(cursor.fetchone()[0]) == b"x"
    recorded = ArtifactHold.objects.get(pk=hold.pk)
    assert (recorded.artifact_ref, recorded.reason, recorded.placed_by, recorded.released_at) == (
        evidence["ref"],
        "litigation hold",
        placer,
        None,
    )
    assert store.head(s, evidence["ref"]) is None  # held, but still expired for agents

    released = artifact_hold_release(hold=hold, user=releaser)

    assert released.released_by == releaser
    assert released.released_at is not None
    assert Artifact.objects.get(ref=evidence["ref"]).held is False
    after = artifacts_sweep()
    assert after.metadata_rows == 1
    assert Tombstone.objects.get(ref=evidence["ref"]).reason == "ttl"
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM artifacts_payload_far WHERE artifact_id = %s", [artifact.pk])
        assert cursor.fetchone()[0] == 0
    assert ArtifactHold.objects.filter(pk=hold.pk).exists()  # the record of the hold outlives the artifact


def test_sweep_keeps_a_held_artifact_an_agent_deleted_until_the_hold_ends(harness, kit, django_user_model):
    store = harness.create_store()
    s = kit.scope("held-deleted")
    meta, _ = store.put(s, kind="evidence", media_type="text/plain", data="keep")
    auditor = django_user_model.objects.create_user(username="auditor-del", password="pw")
    hold = artifact_hold_place(store=store.model, ref=meta["ref"], user=auditor, reason="audit")
    store.delete(s, meta["ref"])

    assert store.head(s, meta["ref"]) is None  # hidden from agents at once
    assert artifacts_sweep().metadata_rows == 0
    assert Artifact.objects.filter(ref=meta["ref"]).exists()

    artifact_hold_release(hold=hold, user=auditor)
    assert artifacts_sweep().metadata_rows == 1
    assert Tombstone.objects.get(ref=meta["ref"]).reason == "deleted"


def test_put_leaves_a_deleted_artifact_whose_hold_ended_to_the_sweeper(harness, kit, django_user_model):
    """A put's `swept` become `expired` facts (§4.7): an artifact the agent deleted is no expiry,
    even once its hold ends and its expiresAt passes; the sweeper removes it as deleted."""
    store = harness.create_store()
    s = kit.scope("deleted-then-released")
    meta, _ = store.put(s, kind="k", media_type="text/plain", data="a", expires_at=kit.now(store) + 60_000)
    auditor = django_user_model.objects.create_user("auditor-released", password="pw")
    hold = artifact_hold_place(store=store.model, ref=meta["ref"], user=auditor, reason="evidence")
    store.delete(s, meta["ref"])
    artifact_hold_release(hold=hold, user=auditor)
    kit.advance(store, 60_001)

    _, swept = store.put(s, kind="k", media_type="text/plain", data="b")

    assert swept == []
    assert not Tombstone.objects.filter(ref=meta["ref"]).exists()
    artifacts_sweep()
    assert Tombstone.objects.get(ref=meta["ref"]).reason == "deleted"


def test_sweep_twice_is_safe(harness, kit):
    store = harness.create_store()
    s = kit.scope("twice")
    expired = _put_expiring(store, kit, s, 5)
    kit.advance(store, 1_001)

    first = artifacts_sweep()
    second = artifacts_sweep()

    assert (first.metadata_rows, second.metadata_rows) == (5, 0)
    assert Tombstone.objects.filter(ref__in=[m["ref"] for m in expired]).count() == 5
    assert SweepRun.objects.count() == 2


def test_sweep_two_concurrent_sweeps_delete_each_row_once(harness, kit):
    store = harness.create_store()
    minted = _mint_expired(store, kit.scope("race"), 300)
    runs: list[SweepRun] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(2, timeout=30)

    def sweeper() -> None:
        try:
            barrier.wait()
            runs.append(artifacts_sweep(batch_size=20))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sweeper) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert errors == []
    assert len(runs) == 2
    assert sum(run.metadata_rows for run in runs) == 300
    refs = list(Tombstone.objects.filter(store=store.model, reason="ttl").values_list("ref", flat=True))
    assert len(refs) == len(set(refs)) == 300
    assert set(refs) == {a.ref for a in minted}
    assert not Artifact.objects.filter(store=store.model).exists()


def test_sweep_run_records_its_figures(harness, kit):
    store = harness.create_store()
    expired = _put_expiring(store, kit, kit.scope("figures"), 4)
    kit.advance(store, 1_001)
    droppable = _droppable_partitions()

    run = artifacts_sweep()

    recorded = SweepRun.objects.get(pk=run.pk)
    assert recorded.metadata_rows == 4
    assert recorded.partitions_dropped == droppable
    # Their payloads stay in today's partition until it is dropped whole: bytes count when reclaimed.
    if droppable == 0:
        assert recorded.payload_bytes == 0
    assert {t.ref for t in Tombstone.objects.filter(store=store.model, reason="ttl")} == {m["ref"] for m in expired}
    assert recorded.started_at <= recorded.finished_at
    assert recorded.duration_ms >= 0


def test_sweep_reads_of_a_live_artifact_all_succeed_while_a_sweep_runs(harness, kit):
    store = harness.create_store()
    s = kit.scope("reads")
    live, _ = store.put(s, kind="live", media_type="application/json", data={"still": "here"}, digest="sha-256")
    _mint_expired(store, kit.scope("bulk"), 400)
    past = datetime.now(tz=UTC).date() - timedelta(days=12)
    _expired_in_partition(store, kit.scope("old-day"), past, count=20)  # so a partition is detached meanwhile

    statuses: list[int] = []
    wrong: list[Any] = []
    stop = threading.Event()
    started = threading.Event()

    def reader() -> None:
        client = store.clone()
        try:
            while not stop.is_set():
                response = client.get_raw(s, live["ref"])
                statuses.append(response.status_code)
                if response.status_code != 200 or response.json()["payload"]["value"] != '{"still":"here"}':
                    wrong.append(response.content)
                started.set()
        finally:
            connections.close_all()

    thread = threading.Thread(target=reader)
    thread.start()
    assert started.wait(timeout=30)
    reads_before = len(statuses)
    run = artifacts_sweep(batch_size=25)
    reads_during = len(statuses) - reads_before
    time.sleep(0.05)
    stop.set()
    thread.join(timeout=60)

    assert run.metadata_rows == 420
    assert run.partitions_dropped >= 1
    assert wrong == []
    assert statuses
    assert set(statuses) == {200}
    assert reads_during >= 1


def _expired_in_partition(store: StoreClient, scope: dict[str, Any], day: Any, count: int = 1) -> list[Artifact]:
    """Create the daily payload partition of a past `day` and artifacts that expired on it."""
    with connection.cursor() as cursor:
        cursor.execute(partitions.ensure_partitions_sql(existing=set(), today=day)[0])
    expires_at = int(datetime(day.year, day.month, day.day, 12, tzinfo=UTC).timestamp() * 1000)
    model = store_for_project(project=store.project)
    return [
        orm_put(
            model,
            scope,
            kind="old/day",
            body=f"old bytes {i}".encode(),
            digest=True,
            created_at=expires_at - 60_000,
            expires_at=expires_at,
            bucket=day,
        )
        for i in range(count)
    ]


def test_sweep_drops_an_expired_payload_partition_and_tombstones_its_metadata(harness, kit):
    store = harness.create_store()
    past = datetime.now(tz=UTC).date() - timedelta(days=10)
    name = partitions.partition_name(past)
    (old,) = _expired_in_partition(store, kit.scope("old"), past)
    assert _table_exists(name)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT body FROM {name} WHERE artifact_id = %s", [old.pk])  # noqa: S608 - our own partition name
        assert bytes(cursor.fetchone()[0]) == b"old bytes 0"

    run = artifacts_sweep()

    assert not _table_exists(name)
    assert past not in partitions.existing_partitions()
    assert run.partitions_dropped >= 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM artifacts_payload WHERE artifact_id = %s", [old.pk])
        assert cursor.fetchone()[0] == 0
    assert not Artifact.objects.filter(pk=old.pk).exists()
    tombstone = Tombstone.objects.get(ref=old.ref)
    assert (tombstone.reason, tombstone.expired_at, tombstone.digest, tombstone.bytes) == (
        "ttl",
        old.expires_at,
        sha256_digest(b"old bytes 0"),
        len(b"old bytes 0"),
    )


def test_sweep_creates_partitions_ahead_and_keeps_todays(harness):
    today = datetime.now(tz=UTC).date()
    ahead = today + timedelta(days=partitions.DAYS_AHEAD)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {partitions.partition_name(ahead)}")
    assert not _table_exists(partitions.partition_name(ahead))

    artifacts_sweep()

    existing = partitions.existing_partitions()
    assert {today + timedelta(days=n) for n in range(partitions.DAYS_AHEAD + 1)} <= existing
    assert _table_exists(partitions.partition_name(today))
