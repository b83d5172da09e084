"""The overview's rollups: every stored record counted once, whatever passes run and when."""

import math
import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.db.models import F, Sum
from django.utils import timezone

from ledger.models import ActivityCount, AgentDayUsage, Ask, Refusal, Run, ToolCall
from ledger.overview import services
from tests.conftest import fixture_events

pytestmark = pytest.mark.django_db

FIXTURES = ("a-run-recording/events.json", "b-middleware/events-declined.json", "d-artifacts/events.json")


def _cost_ticks(run_id: str, estimates: list[float], first_seq: int = 0) -> list[dict[str, object]]:
    meta = {"runId": run_id, "wallClockMs": 1_700_000_000_000, "runOffsetMs": 0}
    return [
        {
            "type": "agentfootprint.cost.tick",
            "seq": first_seq + i,
            "meta": meta,
            "payload": {"scope": "iteration", "estimatedUsd": 0.01, "cumulative": {"estimatedUsd": usd}},
        }
        for i, usd in enumerate(estimates)
    ]


@pytest.fixture
def stored(agent_client):
    for name in FIXTURES:
        assert agent_client.ingest(fixture_events(name)).status_code == 200
    assert agent_client.ingest(_cost_ticks("run-cost", [0.01, 0.03])).status_code == 200


def _counted(kind: str) -> int:
    return ActivityCount.objects.filter(kind=kind).aggregate(total=Sum("count"))["total"] or 0


def _snapshot() -> list[tuple[object, ...]]:
    counts = list(
        ActivityCount.objects.order_by("project", "minute", "kind", "key").values_list(
            "project", "minute", "kind", "key", "count"
        )
    )
    usage = list(
        AgentDayUsage.objects.order_by("project", "day", "agent").values_list(
            "project", "day", "agent", "tokens_in", "tokens_out", "cost_usd"
        )
    )
    return counts + usage


def test_a_fold_counts_what_the_ledger_holds(stored):
    result = services.rollups_fold_pending()

    runs = Run.objects.all()
    assert result.records == sum(run.chain_length for run in runs)
    assert _counted("events") == result.records
    assert _counted("run-started") == runs.count()
    assert _counted("refusal-category") == Refusal.objects.count() > 0
    assert _counted("tool-error") == ToolCall.objects.filter(error=True, tool_name__isnull=False).count() > 0
    endings = dict(ActivityCount.objects.filter(kind="run-ended").values_list("key").annotate(Sum("count")))
    assert endings.get("completed", 0) >= runs.filter(status="completed").count() > 0
    usage = AgentDayUsage.objects.aggregate(i=Sum("tokens_in"), o=Sum("tokens_out"), c=Sum("cost_usd"))
    totals = runs.aggregate(i=Sum("tokens_in"), o=Sum("tokens_out"))
    assert (usage["i"], usage["o"]) == (totals["i"], totals["o"])
    assert usage["c"] == pytest.approx(0.03)  # the run's cumulative estimate, not the ticks' sum
    assert not Run.objects.filter(rolled_up__lt=F("chain_length")).exists()


def test_a_second_fold_counts_nothing_again(stored):
    services.rollups_fold_pending()
    before = _snapshot()
    assert services.rollups_fold_pending().records == 0
    assert _snapshot() == before


def test_only_what_a_run_grew_by_is_counted_later(stored, agent_client):
    services.rollups_fold_pending()
    assert agent_client.ingest(_cost_ticks("run-cost", [0.05], first_seq=2)).status_code == 200
    assert services.rollups_fold_pending().records == 1
    assert AgentDayUsage.objects.aggregate(c=Sum("cost_usd"))["c"] == pytest.approx(0.05)
    assert _counted("run-started") == Run.objects.count()  # a run is started once


def test_folding_in_small_transactions_counts_the_same(stored, monkeypatch):
    monkeypatch.setattr(services, "RECORDS_PER_TRANSACTION", 1)
    monkeypatch.setattr(services, "RECORDS_PER_PASS", 2)
    services.rollups_fold_pending()
    alone = _snapshot()
    ActivityCount.objects.all().delete()
    AgentDayUsage.objects.all().delete()
    with connection.cursor() as cur:
        cur.execute("DELETE FROM ledger_rollupruncost")
    Run.objects.update(rolled_up=0)
    Ask.objects.update(rolled_up=0)
    monkeypatch.setattr(services, "RECORDS_PER_TRANSACTION", 10**6)
    monkeypatch.setattr(services, "RECORDS_PER_PASS", 10**6)
    services.rollups_fold_pending()
    assert _snapshot() == alone


def test_ranges_another_fold_counted_are_not_counted_again(stored):
    run = Run.objects.order_by("id").first()
    assert services.fold_ranges([(run.pk, 0, run.chain_length)]) == run.chain_length
    before = _snapshot()
    assert services.fold_ranges([(run.pk, 0, run.chain_length)]) == 0
    assert _snapshot() == before


def test_a_pass_finding_another_under_way_does_nothing(stored):
    other = connections.create_connection("default")
    try:
        with other.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(hashtext(%s))", [services.LOCK])
        assert services.rollups_fold_pending() == services.FoldResult(records=0, locked_out=True)
        assert not ActivityCount.objects.exists()
        with other.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(hashtext(%s))", [services.LOCK])
    finally:
        other.close()
    assert services.rollups_fold_pending().records > 0


@pytest.mark.django_db(transaction=True)
def test_two_workers_folding_at_once_count_every_record_once(stored, monkeypatch):
    monkeypatch.setattr(services, "RECORDS_PER_TRANSACTION", 3)  # many transactions: room to interleave
    total = sum(Run.objects.values_list("chain_length", flat=True))
    start = threading.Barrier(2)
    results: list[services.FoldResult] = []

    def worker(fold: object) -> None:
        try:
            start.wait()
            results.append(fold())  # type: ignore[operator]
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(services.rollups_fold_pending,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(result.records for result in results) == total
    assert _counted("events") == total


@pytest.mark.django_db(transaction=True)
def test_two_folds_of_the_same_ranges_keep_one(stored):
    """Without the pass's lock (an older worker, say), the marks still let one fold count a range."""
    ranges = list(Run.objects.values_list("pk", "rolled_up", "chain_length"))
    start = threading.Barrier(2)
    folded: list[int] = []

    def worker() -> None:
        try:
            start.wait()
            folded.append(services.fold_ranges(ranges))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(folded) == [0, sum(stop for _, _, stop in ranges)]
    assert _counted("events") == sum(stop for _, _, stop in ranges)


def test_the_hours_and_days_hold_the_minutes_summed(stored, agent_client):
    """Folded in one pass and then in another as the run grows, hour by hour the figures agree."""
    from django.db.models.functions import Trunc

    from ledger.models import ActivityDayCount, ActivityHourCount

    services.rollups_fold_pending()
    assert agent_client.ingest(_cost_ticks("run-cost", [0.05], first_seq=2)).status_code == 200
    services.rollups_fold_pending()
    from_minutes = {
        (row["project"], row["hour"], row["kind"], row["key"]): row["total"]
        for row in ActivityCount.objects.annotate(hour=Trunc("minute", "hour"))
        .values("project", "hour", "kind", "key")
        .annotate(total=Sum("count"))
    }
    hours = {(row.project_id, row.hour, row.kind, row.key): row.count for row in ActivityHourCount.objects.all()}
    assert hours == from_minutes
    by_day = {
        (row["project"], row["day"], row["kind"], row["key"]): row["total"]
        for row in ActivityCount.objects.annotate(day=Trunc("minute", "day"))
        .values("project", "day", "kind", "key")
        .annotate(total=Sum("count"))
    }
    assert {(r.project_id, r.day, r.kind, r.key): r.count for r in ActivityDayCount.objects.all()} == by_day
    assert sum(count for (_, _, kind, _), count in hours.items() if kind == "events") == sum(
        Run.objects.values_list("chain_length", flat=True)
    )


def _decided_ask(project, call_id: str, *, opened_ago: timedelta, decided_after: timedelta) -> Ask:
    """An ask opened `opened_ago` before now and decided by a person `decided_after` it opened:
    the row the asks' services leave."""
    opened = timezone.now() - opened_ago
    return Ask.objects.create(
        project=project, run_id="run-asks", tool_call_id=call_id, kind=Ask.Kind.PLAIN, pause_data={},
        created_at=opened, status=Ask.Status.DECIDED, decided_at=opened + decided_after,
        decided_via=Ask.Via.PAGE, approved=True,
    )  # fmt: skip


def test_an_asks_opening_and_its_decision_are_each_counted_once(agent_client, integration_client, project):
    from ledger.asks.services import asks_apply_deadlines
    from tests.ledger.ask_helpers import decide, open_ask, plain_body

    asked = open_ask(agent_client, plain_body("q1", "run-a"))
    assert services.rollups_fold_pending().asks == 1
    assert (_counted("ask-opened"), _counted("ask-decided")) == (1, 0)
    assert services.rollups_fold_pending().asks == 0

    assert decide(integration_client, asked["id"], approved=True, by="carol", value="EU").status_code == 200
    past = timezone.now() - timedelta(minutes=1)
    open_ask(agent_client, {**plain_body("q2", "run-b"), "deadline": past.isoformat()})
    assert asks_apply_deadlines() == 1
    assert services.rollups_fold_pending().asks == 2
    assert services.rollups_fold_pending().asks == 0
    counted = {kind: _counted(kind) for kind in ("ask-opened", "ask-decided", "ask-timed-out", "ask-decision-time")}
    # The deadline's closing is counted as such, and has no time to decision.
    assert counted == {"ask-opened": 2, "ask-decided": 1, "ask-timed-out": 1, "ask-decision-time": 1}
    assert set(Ask.objects.values_list("rolled_up", flat=True)) == {2}


def test_time_to_decision_read_from_its_buckets_is_the_decision_at_that_rank_within_4_percent(project):
    from ledger.overview.selectors import WINDOWS, overview_get

    # 301 decisions from 0.2 s to about 3 hours, log-uniform, and out of order.
    seconds = sorted((0.2 * 1.033**i for i in range(301)), key=lambda s: (s * 7919) % 1)
    for n, wait in enumerate(seconds):
        _decided_ask(project, f"c{n}", opened_ago=timedelta(hours=4), decided_after=timedelta(seconds=wait))
    services.rollups_fold_pending()
    figures = overview_get(projects=[project], window=WINDOWS["day"]).asks
    assert figures.decided_total == len(seconds)
    ordered = sorted(seconds)
    for fraction, found in ((0.5, figures.decision_p50), (0.9, figures.decision_p90)):
        rank = fraction * (len(ordered) - 1)
        low, high = ordered[math.floor(rank)], ordered[math.ceil(rank)]
        assert low / 1.045 <= found.total_seconds() <= high * 1.045, (fraction, found, low, high)


@pytest.mark.django_db(transaction=True)
def test_an_ask_being_decided_while_the_fold_runs_is_counted_by_the_next_pass(project):
    ask = _decided_ask(project, "q1", opened_ago=timedelta(minutes=2), decided_after=timedelta(seconds=30))
    deciding = connections.create_connection("default")
    try:
        deciding.set_autocommit(False)
        with deciding.cursor() as cur:
            cur.execute("SELECT id FROM ledger_ask WHERE id = %s FOR UPDATE", [ask.pk])
        assert services.rollups_fold_pending().asks == 0  # left to the next pass, not waited for
        deciding.rollback()
    finally:
        deciding.close()
    assert services.rollups_fold_pending().asks == 1
    assert (_counted("ask-opened"), _counted("ask-decided"), _counted("ask-decision-time")) == (1, 1, 1)


def test_asks_stored_before_the_counters_existed_are_counted_by_the_first_passes(project, monkeypatch):
    """Asks start at nothing counted (migration 0039), so a fold counts those already kept, a
    transaction per ASKS_PER_TRANSACTION."""
    monkeypatch.setattr(services, "ASKS_PER_TRANSACTION", 3)
    for n in range(7):
        _decided_ask(project, f"old-{n}", opened_ago=timedelta(days=3), decided_after=timedelta(minutes=n))
    assert services.rollups_fold_pending().asks == 7
    assert (_counted("ask-opened"), _counted("ask-decided")) == (7, 7)
