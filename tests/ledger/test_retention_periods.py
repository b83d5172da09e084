"""Removing a whole expired month is dropping its partitions: every run in it archived (written,
read back, digest checked) and tombstoned first, a run created late in the month with events in
the next archived whole, held runs moved to the kept partition and still verifiable, and a pass
stopped anywhere leaves the month in place or everything archived and tombstoned."""

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from ledger import partitions
from ledger.models import Run, RunTombstone
from ledger.retention import archive, periods, services
from ledger.retention.selectors import archive_check
from tenancy.services import UNNAMED
from tests.conftest import fixture_events

RUN_ID = "run-1796043007829-1"  # a-run-recording: 76 events


# The month the tests drop: next month, whose partitions the beat created ahead, seen from a
# clock in the month after (the retention pass takes its clock as an argument). A database created
# partitioned has no partitions of past months: its legacy partition covers them.
OLD = partitions.next_period(partitions.current_period())
NEXT = partitions.next_period(OLD)
NOW = partitions.period_start(NEXT) + timedelta(days=10)
KEEP_DAYS = 7


@pytest.fixture(autouse=True)
def archive_dir(settings: Any, tmp_path: Path) -> Path:
    settings.ARCHIVE_URL = (tmp_path / "archive").as_uri()
    return tmp_path / "archive"


@pytest.fixture
def old_month(agent_client: Any) -> Iterator[int]:
    """OLD, with this month kept busy by a run whose last event is at NOW, so only OLD is due."""
    assert agent_client.ingest(_events("this-month")).status_code == 200
    Run.objects.filter(run_id="this-month").update(last_event_at=NOW)
    yield OLD
    partitions.partitions_ensure()  # the months a test dropped, back for the tests that follow


def _partitions_holding(run_pk: int) -> dict[str, int]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT tableoid::regclass::text, count(*) FROM ledger_runevent WHERE run_id = %s GROUP BY 1", [run_pk]
        )
        return dict(cur.fetchall())


def _month_exists(period: int) -> list[bool]:
    names = partitions.existing_partitions()
    return [partitions.partition_name(table, period) in names for table in partitions.TABLES]


def _events(run_id: str) -> list[dict[str, Any]]:
    return [dict(e, meta={**e["meta"], "runId": run_id}) for e in fixture_events("a-run-recording/events.json")]


def _run_created_in_old_month(
    agent_client: Any, run_id: str, *, first: int = 76, total: int = 76, last_event_days: int = 0
) -> Run:
    """A run created late in OLD: its first `first` events then, the rest written in the next month."""
    events = _events(run_id)[:total]
    assert agent_client.ingest(events[:first]).status_code == 200
    run = Run.objects.get(run_id=run_id)
    periods.run_rehome(run_pk=run.pk, period=OLD)  # where ingestion put it when it was created
    if first < len(events):
        assert agent_client.ingest(events[first:]).status_code == 200
    created = partitions.period_start(NEXT) - timedelta(minutes=10)
    Run.objects.filter(pk=run.pk).update(
        created_at=created, last_event_at=partitions.period_start(NEXT) + timedelta(minutes=20, days=last_event_days)
    )
    return Run.objects.get(pk=run.pk)


def _verify(agent_client: Any, run_id: str) -> bool:
    return bool(agent_client.get(f"/api/v1/runs/{run_id}/verify").json()["valid"])


@pytest.mark.django_db(transaction=True)
def test_a_month_past_retention_is_dropped_whole_after_its_straddling_run_is_archived_and_its_held_run_kept(
    agent_client: Any, project: Any, old_month: int
) -> None:
    services.run_retention_set(project=project, keep_days=KEEP_DAYS, actor=UNNAMED)
    straddler = _run_created_in_old_month(agent_client, RUN_ID, first=40)
    # Created in OLD, events written in the next month: all of them in OLD's partition.
    assert (straddler.period, straddler.chain_length) == (OLD, 76)
    assert _partitions_holding(straddler.pk) == {f"ledger_runevent_p{OLD}": 76}
    # Small: a month is dropped when what it must keep is at most MAX_KEPT_SHARE of its records.
    held = _run_created_in_old_month(agent_client, "held-run", total=10)
    services.run_hold_place(project=project, run_id="held-run", reason="case 4411", actor=UNNAMED)
    going_on = _run_created_in_old_month(agent_client, "going-on", total=5, last_event_days=20)  # 20 days left
    head = bytes(straddler.head_hash)
    outcome = services.runs_retention_pass(now=NOW)

    assert outcome.periods_dropped == 1
    assert _month_exists(OLD) == [False] * len(partitions.TABLES)
    assert not Run.objects.filter(pk=straddler.pk).exists()
    tombstone = RunTombstone.objects.get(run_id=RUN_ID)
    assert (bytes(tombstone.head_hash), tombstone.chain_length) == (head, 76)
    assert archive_check(tombstone=tombstone, body=archive.archive_get(tombstone.archive_location)).valid
    # The held run moved to the kept partition whole, and still verifies.
    kept = Run.objects.get(pk=held.pk)
    assert kept.period == partitions.KEPT_PERIOD
    assert _partitions_holding(kept.pk) == {"ledger_runevent_kept": kept.chain_length}
    assert _verify(agent_client, "held-run")
    assert not RunTombstone.objects.filter(run_id="held-run").exists()
    # So did the run still within its retention: retention removes it row by row when its time comes.
    assert Run.objects.get(pk=going_on.pk).period == partitions.KEPT_PERIOD
    assert _partitions_holding(going_on.pk) == {"ledger_runevent_kept": 5}
    assert _verify(agent_client, "going-on")


@pytest.mark.django_db(transaction=True)
def test_a_month_whose_runs_still_within_retention_hold_much_of_it_stays_whole(
    agent_client: Any, project: Any, old_month: int
) -> None:
    services.run_retention_set(project=project, keep_days=KEEP_DAYS, actor=UNNAMED)
    _run_created_in_old_month(agent_client, RUN_ID)
    late = _run_created_in_old_month(agent_client, "late-run", last_event_days=20)  # 20 days left

    outcome = services.runs_retention_pass(now=NOW)

    assert outcome.periods_dropped == 0
    assert _month_exists(OLD) == [True] * len(partitions.TABLES)
    # The expired run went row by row, as before; the other stays, whole and verifiable.
    assert outcome.removed == 1
    assert _partitions_holding(late.pk) == {f"ledger_runevent_p{OLD}": late.chain_length}
    assert _verify(agent_client, "late-run")


@pytest.mark.django_db(transaction=True)
def test_a_pass_killed_mid_month_leaves_the_partitions_and_every_run_it_had_not_reached(
    agent_client: Any, project: Any, old_month: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    services.run_retention_set(project=project, keep_days=KEEP_DAYS, actor=UNNAMED)
    first = _run_created_in_old_month(agent_client, "run-a")
    second = _run_created_in_old_month(agent_client, "run-b")
    archive_one = services.run_archive_and_remove
    calls: list[int] = []

    def killed_on_the_second(**kwargs: Any) -> Any:
        calls.append(kwargs["run_pk"])
        if len(calls) == 2:
            raise SystemExit("worker killed")
        return archive_one(**kwargs)

    with pytest.raises(SystemExit):
        periods.period_drop(period=OLD, now=NOW, archive_run=killed_on_the_second)

    assert _month_exists(OLD) == [True] * len(partitions.TABLES)
    done, left = (first, second) if calls[0] == first.pk else (second, first)
    assert RunTombstone.objects.filter(run_id=done.run_id).exists()
    assert not Run.objects.filter(pk=done.pk).exists()
    assert Run.objects.filter(pk=left.pk).exists()
    assert _verify(agent_client, left.run_id)

    # Killed after every run was archived, before the drop: the next pass drops the month.
    def killed_before_the_drop(cursor: Any, table: str, name: str) -> None:
        raise SystemExit("worker killed")

    with monkeypatch.context() as patched:
        patched.setattr(periods, "partition_detach_and_drop", killed_before_the_drop)
        with pytest.raises(SystemExit):
            periods.period_drop(period=OLD, now=NOW, archive_run=services.run_archive_and_remove)
    assert _month_exists(OLD) == [True] * len(partitions.TABLES)
    assert set(RunTombstone.objects.values_list("run_id", flat=True)) == {"run-a", "run-b"}

    assert services.runs_retention_pass(now=NOW).periods_dropped == 1
    assert _month_exists(OLD) == [False] * len(partitions.TABLES)


@pytest.mark.django_db(transaction=True)
def test_an_archive_store_that_cannot_be_written_leaves_the_month_in_place(
    agent_client: Any, project: Any, old_month: int, settings: Any, tmp_path: Path
) -> None:
    services.run_retention_set(project=project, keep_days=KEEP_DAYS, actor=UNNAMED)
    run = _run_created_in_old_month(agent_client, RUN_ID)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the archive directory should be")
    settings.ARCHIVE_URL = blocker.as_uri()

    outcome = services.runs_retention_pass(now=NOW)

    assert outcome.periods_dropped == 0
    assert _month_exists(OLD) == [True] * len(partitions.TABLES)
    assert Run.objects.filter(pk=run.pk).exists()
    assert not RunTombstone.objects.exists()
    assert _verify(agent_client, RUN_ID)
