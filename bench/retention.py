"""bench/retention.py: what retention costs, and what a read replica gives the pages.

On a private PostgreSQL primary and its streaming standby (started from the machine's own
binaries, as the replication tests do; both with fsync off, so the figures are CPU, not disk):

- **Archive rate.** BENCH_RETENTION_RUNS (200) runs of 500 events each are stored through the
  ingest service, then exported one by one through the export API (GET
  /api/v1/runs/{id}/audit-bundle, the baseline: the same bundle, built and sent), then archived
  and removed by the retention pass (the bundle built, written to a directory store, read back
  and its digest checked, every row of the run deleted and its tombstone written). Printed: runs
  and events per second of each, and the ratio archive ÷ export.
- **Pages on the replica.** The run page and the run list, BENCH_REQUESTS (100) times each, read
  from the replica (DATABASE_REPLICA_URL set, within its lag bound) and from the primary (the
  same server with the bound below any lag), in alternating blocks so machine noise lands on
  both; p50 and p99 and the ratio replica ÷ primary.

- **Dropping a month.** Next month's partitions (created ahead) are filled with
  BENCH_DROP_EVENTS (10,000,000) events of runs already archived and tombstoned, written by SQL
  in runs of 500 (ingesting them through the service would take this machine an hour), plus
  BENCH_DROP_RUNS (20) runs of 500 events ingested and moved there that the drop must archive
  first; then the month is dropped (ledger.retention.periods.period_drop: archive each run, read
  back, check, tombstone, then detach CONCURRENTLY and drop every table's partition). Printed: the
  drop's time, split into archiving and detach-and-drop. Meanwhile another process ingests
  500-event runs through the service back to back: the p99 of those requests during the drop
  beside their p99 in the QUIET_SECONDS before it.

A benchmark, not a test: nothing asserts on time; every page's status is checked, every run must
be removed and the month's partitions must be gone. Writes bench/results/retention.json.
"""

import json
import logging
import os
import secrets
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the project first: bench/artifacts.py would shadow the app

import common  # noqa: E402  (bench/ is on sys.path when bench/retention.py runs)
import django  # noqa: E402
import orjson  # noqa: E402
from ingest import EVENTS_PER_RUN, run_events  # noqa: E402

from tests.replication import StreamingPair  # noqa: E402

RUNS = int(os.environ.get("BENCH_RETENTION_RUNS", "200"))
DROP_EVENTS = int(os.environ.get("BENCH_DROP_EVENTS", "10000000"))
DROP_RUNS = int(os.environ.get("BENCH_DROP_RUNS", "20"))
QUIET_SECONDS = 10.0
FILL_ROWS_PER_STATEMENT = 500_000
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "100"))
BLOCK = 10  # requests per alternating block of the page timings
INGEST_RUNS_PER_CALL = 10


def percentile(times: list[float], cut: int) -> float:
    if len(times) < 2:  # a drop shorter than two requests: its one request is its p99
        return round(max(times) * 1000, 2)
    return round(statistics.quantiles(times, n=100, method="inclusive")[cut - 1] * 1000, 2)


def seed(project: object) -> list[str]:
    from ledger.ingest.envelopes import check_events
    from ledger.ingest.services import events_ingest

    tag = f"retention-{int(time.time())}"
    run_ids = [f"{tag}-{n:04d}" for n in range(RUNS)]
    for first in range(0, RUNS, INGEST_RUNS_PER_CALL):
        batch = [e for run_id in run_ids[first : first + INGEST_RUNS_PER_CALL] for e in run_events(run_id, "s-1")]
        events_ingest(project=project, events=check_events(batch))
    return run_ids


def export_all(client: object, key: str, run_ids: list[str]) -> float:
    started = time.perf_counter()
    for run_id in run_ids:
        answer = client.get(f"/api/v1/runs/{run_id}/audit-bundle", HTTP_AUTHORIZATION=f"Bearer {key}")
        if answer.status_code != 200:
            raise RuntimeError(f"export of {run_id} answered {answer.status_code}: {answer.content[:200]!r}")
    return time.perf_counter() - started


def archive_all(project: object) -> float:
    from django.utils import timezone

    from ledger.models import Run
    from ledger.retention import services
    from tenancy.services import UNNAMED

    services.run_retention_set(project=project, keep_days=1, actor=UNNAMED)
    Run.objects.filter(project=project).update(last_event_at=timezone.now() - timedelta(days=2))
    started = time.perf_counter()
    outcome = services.runs_retention_pass(limit=RUNS, budget_seconds=3600)
    seconds = time.perf_counter() - started
    if outcome.removed != RUNS or Run.objects.filter(project=project).exists():
        raise RuntimeError(f"the retention pass removed {outcome.removed} of {RUNS} runs: {outcome}")
    return seconds


def fill_month(period: int, events: int) -> float:
    """`events` rows in the month's events partition, of runs archived and tombstoned already (no
    run rows): bodies of bench/ingest.py's size, a chain position each, in runs of 500."""
    from django.db import connection

    body = orjson.dumps(run_events("bench-drop-filler", "s-1")[5], option=orjson.OPT_SORT_KEYS).decode()
    started = time.perf_counter()
    with connection.cursor() as cur:
        for first in range(0, events, FILL_ROWS_PER_STATEMENT):
            cur.execute(
                "INSERT INTO ledger_runevent (run_id, period, seq, position, type, body, doc, prev_hash, hash)"
                " SELECT 1000000000 + g / %(per)s, %(period)s, g %% %(per)s, g %% %(per)s,"
                " 'agentfootprint.stream.tool_start', %(body)s, %(body)s::jsonb, %(hash)s, %(hash)s"
                " FROM generate_series(%(first)s, %(last)s) AS g",
                {"per": EVENTS_PER_RUN, "period": period, "body": body, "hash": bytes(32), "first": first,
                 "last": min(first + FILL_ROWS_PER_STATEMENT, events) - 1},
            )  # fmt: skip
    return time.perf_counter() - started


def ingest_meanwhile(project: object, stop: object, out: object) -> None:
    """In a process of its own: ingest 500-event runs back to back until `stop` is set; sends
    (start, seconds) of each request to `out`."""
    from ledger.ingest.envelopes import check_events
    from ledger.ingest.services import events_ingest

    timings = []
    number = 0
    while not stop.is_set():
        events = check_events(run_events(f"drop-load-{os.getpid()}-{number:05d}", "s-1"))
        started = time.time()
        events_ingest(project=project, events=events)
        timings.append((started, time.time() - started))
        number += 1
    out.put(timings)


def drop_a_month(project: object) -> dict[str, object]:
    import multiprocessing

    from django.db import connection, connections
    from django.utils import timezone

    from ledger import partitions
    from ledger.ingest.envelopes import check_events
    from ledger.ingest.services import events_ingest
    from ledger.models import Run
    from ledger.retention import periods, services

    month = partitions.next_period(partitions.current_period())
    print(f"Filling month {month} with {DROP_EVENTS:,} events…", flush=True)
    fill_s = fill_month(month, DROP_EVENTS)
    for n in range(DROP_RUNS):
        run_id = f"drop-{n:03d}"
        events_ingest(project=project, events=check_events(run_events(run_id, "s-1")))
        periods.run_rehome(run_pk=Run.objects.get(run_id=run_id).pk, period=month)
    # Past the project's retention (one day, set by archive_all), so the drop archives them.
    Run.objects.filter(period=month).update(last_event_at=timezone.now() - timedelta(days=2))
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE ledger_runevent")
        cur.execute("SELECT pg_total_relation_size(%s)", [partitions.partition_name("ledger_runevent", month)])
        month_bytes = cur.fetchone()[0]

    archiving: list[float] = []
    dropping: list[float] = []

    def archive_run(**kwargs: object) -> object:
        started = time.perf_counter()
        try:
            return services.run_archive_and_remove(**kwargs)
        finally:
            archiving.append(time.perf_counter() - started)

    detach_and_drop = periods.partition_detach_and_drop

    def timed_detach_and_drop(cursor: object, table: str, name: str) -> None:
        started = time.perf_counter()
        detach_and_drop(cursor, table, name)
        dropping.append(time.perf_counter() - started)

    periods.partition_detach_and_drop = timed_detach_and_drop
    connections.close_all()  # the ingesting process opens its own
    context = multiprocessing.get_context("fork")
    stop, out = context.Event(), context.Queue()
    load = context.Process(target=ingest_meanwhile, args=(project, stop, out))
    load.start()
    time.sleep(QUIET_SECONDS)
    print(f"Dropping month {month} while another process ingests…", flush=True)
    drop_started = time.time()
    outcome = periods.period_drop(period=month, now=timezone.now(), archive_run=archive_run)
    drop_ended = time.time()
    time.sleep(1.0)
    stop.set()
    timings = out.get()
    load.join()
    if not outcome.dropped or outcome.archived != DROP_RUNS:
        raise RuntimeError(f"the month was not dropped whole: {outcome}")
    if partitions.partition_name("ledger_runevent", month) in partitions.existing_partitions():
        raise RuntimeError("the month's events partition is still there")
    quiet = [s for started, s in timings if drop_started - QUIET_SECONDS <= started and started + s < drop_started]
    during = [s for started, s in timings if started < drop_ended and started + s > drop_started]
    drop_s = drop_ended - drop_started
    return {
        "events": DROP_EVENTS + DROP_RUNS * EVENTS_PER_RUN, "runs_archived": DROP_RUNS, "fill_s": round(fill_s, 1),
        "events_partition_bytes": month_bytes, "drop_s": round(drop_s, 2),
        "archive_s": round(sum(archiving), 2), "detach_and_drop_s": round(sum(dropping), 3),
        "ingest_quiet": {"requests": len(quiet), "p50_ms": percentile(quiet, 50), "p99_ms": percentile(quiet, 99)},
        "ingest_during": {"requests": len(during), "p50_ms": percentile(during, 50), "p99_ms": percentile(during, 99)},
        "during_over_quiet_p99": round(percentile(during, 99) / percentile(quiet, 99), 2),
    }  # fmt: skip


def time_pages(client: object, pages: dict[str, str]) -> dict[str, dict[str, list[float]]]:
    from django.test import override_settings

    from footprint_site import replicas

    times: dict[str, dict[str, list[float]]] = {page: {"replica": [], "primary": []} for page in pages}
    # A bound below any lag sends every page to the primary; each switch re-measures the lag
    # once, as a process does every REPLICA_CHECK_SECONDS.
    bounds = {"replica": 3600.0, "primary": -1.0}
    for block in range(2 * REQUESTS // BLOCK):
        source = "replica" if block % 2 == 0 else "primary"
        with override_settings(DATABASE_REPLICA_MAX_LAG=bounds[source]):
            replicas._state.checked_at = float("-inf")
            for page, url in pages.items():
                for _ in range(BLOCK):
                    started = time.perf_counter()
                    answer = client.get(url)
                    elapsed = time.perf_counter() - started
                    if answer.status_code != 200 or answer["X-Footprint-Read-From"] != source:
                        raise RuntimeError(
                            f"{url} answered {answer.status_code} from {answer.get('X-Footprint-Read-From')}"
                        )
                    times[page][source].append(elapsed)
    return times


def figures_tables() -> tuple[str, ...]:
    from ledger import partitions

    return partitions.TABLES


def main() -> None:
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    pair = StreamingPair()
    print("Starting a private PostgreSQL primary and its streaming standby…", flush=True)
    pair.start()
    try:
        archive_dir = Path(tempfile.mkdtemp(prefix="footprint-bench-archive-"))
        os.environ.update(
            DATABASE_URL=pair.primary.url, DATABASE_REPLICA_URL=pair.standby.url, DJANGO_DEBUG="0",
            DJANGO_HTTPS="0", ARCHIVE_URL=archive_dir.as_uri(),
        )  # fmt: skip
        common.DATABASE_URL = pair.primary.url  # what common.machine() reads the server's version from
        os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "footprint_site.settings")
        django.setup()
        logging.getLogger("ledger.retention").setLevel(logging.WARNING)  # not a line per run removed
        from django.contrib.auth.models import User
        from django.core.management import call_command
        from django.test import Client
        from django.urls import reverse

        from tenancy.services import agent_key_create, project_get_or_create

        call_command("migrate", verbosity=0, interactive=False)
        project = project_get_or_create(slug="bench")
        _, key = agent_key_create(project=project, scopes=["ingest", "read"])
        print(f"Storing {RUNS} runs of {EVENTS_PER_RUN} events…", flush=True)
        run_ids = seed(project)
        pair.wait_caught_up(timeout=300)

        client = Client(HTTP_HOST="127.0.0.1")
        client.force_login(User.objects.create_superuser("bench", "bench@example.com", secrets.token_urlsafe(20)))
        pages = {
            "run page": reverse("ledger:run-detail", args=["bench", run_ids[0]]),
            "run list": reverse("ledger:run-list"),
        }
        print(f"Timing {', '.join(pages)} {REQUESTS} times each on the replica and on the primary…", flush=True)
        page_times = time_pages(client, pages)

        events = RUNS * EVENTS_PER_RUN
        print(f"Exporting {RUNS} runs through the API, then archiving and removing them…", flush=True)
        export_s = export_all(Client(HTTP_HOST="127.0.0.1"), key, run_ids)
        archive_s = archive_all(project)
        drop = drop_a_month(project)
        machine = common.machine()
    finally:
        pair.stop()

    def page_figures(by_source: dict[str, list[float]]) -> dict[str, object]:
        figures: dict[str, object] = {
            source: {"p50_ms": percentile(t, 50), "p99_ms": percentile(t, 99)} for source, t in by_source.items()
        }
        ratio = statistics.median(by_source["replica"]) / statistics.median(by_source["primary"])
        return figures | {"replica_over_primary_p50": round(ratio, 2)}

    export, archive = (
        {"runs_per_s": round(RUNS / seconds, 1), "events_per_s": round(events / seconds)}
        for seconds in (export_s, archive_s)
    )
    figures = {
        "runs": RUNS, "events": events, "requests": REQUESTS, "export": export, "archive": archive,
        "archive_over_export": round(export_s / archive_s, 3),
        "pages": {page: page_figures(by_source) for page, by_source in page_times.items()},
        "period_drop": drop, "machine": machine,
    }  # fmt: skip
    (common.RESULTS / "retention.json").write_text(json.dumps(figures, indent=2) + "\n")
    lines = [
        f"\n  export API      {export['runs_per_s']:>8} runs/s, {export['events_per_s']:>8,} events/s",
        f"  archive+remove  {archive['runs_per_s']:>8} runs/s, {archive['events_per_s']:>8,} events/s"
        f"  (ratio {figures['archive_over_export']:.2f} of the export API's rate)",
    ]
    for page, by_source in figures["pages"].items():
        replica, primary = by_source["replica"], by_source["primary"]
        lines.append(
            f"  {page:<15} replica p50 {replica['p50_ms']} ms, p99 {replica['p99_ms']} ms;"
            f" primary p50 {primary['p50_ms']} ms, p99 {primary['p99_ms']} ms"
            f" (ratio {by_source['replica_over_primary_p50']:.2f})"
        )
    quiet, during = drop["ingest_quiet"], drop["ingest_during"]
    lines += [
        f"  month drop      {drop['events']:,} events ({drop['events_partition_bytes'] / 2**30:.1f} GiB of events"
        f" partition), {drop['runs_archived']} runs archived first: {drop['drop_s']} s"
        f" (archiving {drop['archive_s']} s, detach and drop of {len(figures_tables())} partitions"
        f" {drop['detach_and_drop_s']} s)",
        f"  ingest p99      quiet {quiet['p99_ms']} ms ({quiet['requests']} requests), during the drop"
        f" {during['p99_ms']} ms ({during['requests']} requests): ratio {drop['during_over_quiet_p99']:.2f}",
        f"  machine         {figures['machine']} (the pair: fsync off)",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
