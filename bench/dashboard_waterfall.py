"""bench/dashboard_waterfall.py: the run waterfall's server time and answer size at 1,000, 10,000 and
100,000 events.

Times, in-process (Django's test Client, a signed-in superuser, production settings), for each run:

- first render: GET `ledger:run-detail` (the whole run page, the waterfall its default tab, the
  whole run in the window);
- zoom: GET the waterfall tab with `?from=&to=` and HX-Target: waterfall (the chart alone, as the
  zoom links fetch it), for a window of a quarter of the run and one of a fiftieth, in its middle;
- the worker's cost: one rebuild of the run's span index (`run_spans_build`), timed once.

Baseline: the bare SQL of the timeline's first page (the first 101 events by seq, with their
gists) on the same run, on one psycopg connection; figures are p50/p99 wall time, ratios to that
baseline, and the ratio between the 100,000- and the 1,000-event run (a flat cost is near 1).
Requests are repeated BENCH_REQUESTS times (default 40) round-robin over every case, so machine
noise lands on all of them alike. Nothing asserts on time; every answer's status is checked and
its chart must hold bars.

Runs are seeded through the real ingest service, `events_ingest`, in batches of 5,000 events of
tests/ledger/waterfall_runs.py's shape (iterations with an LLM call, context subflows, a tool call
with two middleware decisions, every 25th call denied). `waterfall_figures()` seeds what is missing
into the database Django is set up with (bench/dashboard.py calls it beside its overview figures);
`main()` runs it alone on DATABASE_URL (default postgres://postgres@127.0.0.1:5432/
footprint_bench_waterfall; its name must contain 'bench': it is dropped and recreated) and writes
bench/results/dashboard_waterfall.json.
"""

import itertools
import json
import os
import secrets
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SIZES = (1_000, 10_000, 100_000)
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "40"))
WARMUP = 3
EVENT_BATCH = 5_000
PROJECT, USER = "waterfall-bench", "bench-waterfall"
AIM_FIRST_RENDER_MS, AIM_ZOOM_MS, AIM_BYTES, AIM_RATIO = 300, 100, 500_000, 1.5


def _run_id(size: int) -> str:
    return f"waterfall-{size}"


def _seed() -> None:
    """The three runs, unless they are stored already; their span indexes built as the worker would."""
    from django.contrib.auth.models import User

    from ledger.explorer import span_index
    from ledger.ingest.envelopes import check_events
    from ledger.ingest.services import events_ingest
    from ledger.models import Run
    from tenancy.services import project_get_or_create
    from tests.ledger.waterfall_runs import EVENTS_PER_ITERATION, synthetic_run_events

    project = project_get_or_create(slug=PROJECT, name="Waterfall benchmark")
    if not User.objects.filter(username=USER).exists():
        User.objects.create_superuser(USER, email="", password=None)  # signed in by force_login only
    for size in SIZES:
        if Run.objects.filter(project=project, run_id=_run_id(size), event_count__gte=size).exists():
            continue
        started = time.perf_counter()
        events = synthetic_run_events(_run_id(size), iterations=size // EVENTS_PER_ITERATION + 1)
        stored = 0
        while stored < size and (batch := list(itertools.islice(events, min(EVENT_BATCH, size - stored)))):
            events_ingest(project=project, events=check_events(batch))
            stored += len(batch)
        run = Run.objects.get(project=project, run_id=_run_id(size))
        span_index.run_spans_build(run_pk=run.pk)
        print(f"  seeded {stored:,} events in {time.perf_counter() - started:.1f} s", flush=True)
    from django.db import connection

    with connection.cursor() as cursor:
        for table in ("ledger_run", "ledger_runevent", "ledger_runspan", "ledger_runspanoverview"):
            cursor.execute(f"VACUUM ANALYZE {table}")


def _summary(seconds: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles([s * 1000 for s in seconds], n=100, method="inclusive")
    return {"p50_ms": round(cuts[49], 2), "p99_ms": round(cuts[98], 2)}


_BASELINE_SQL = """
    SELECT e.seq, e.position, e.type, e.tool_call_id, e.wall_clock_ms,
           left(e.doc -> 'meta' ->> 'runtimeStageId', 200), footprint_payload_gist(e.doc, %s)
    FROM ledger_runevent e WHERE e.run_id = %s AND e.seq > -1 ORDER BY e.seq LIMIT 101
"""


def waterfall_figures() -> dict[str, Any]:
    """Seed (when missing) and measure; Django must be set up on a database this may write to.
    Returns the figures per run size, with ratios, and prints them."""
    import psycopg
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    from ledger.explorer import span_index
    from ledger.explorer.run_page import GIST_KEYS
    from ledger.models import Run, RunSpanOverview

    print(f"Waterfall: runs of {', '.join(f'{size:,}' for size in SIZES)} events…", flush=True)
    _seed()
    client = Client(HTTP_HOST="127.0.0.1")  # no test environment set up: templates render as in production
    client.force_login(User.objects.get(username=USER))
    runs = {size: Run.objects.get(project__slug=PROJECT, run_id=_run_id(size)) for size in SIZES}
    build_s = {}
    for size, run in runs.items():
        started = time.perf_counter()
        spans = span_index.run_spans_build(run_pk=run.pk)
        build_s[size] = (round(time.perf_counter() - started, 3), spans)
    htmx = {"HX-Request": "true", "HX-Target": "waterfall"}
    cases: dict[str, tuple[str, dict[str, str]]] = {}
    for size, run in runs.items():
        base = f"/projects/{PROJECT}/runs/{run.run_id}/"
        duration = RunSpanOverview.objects.get(run=run).duration_ms
        middle = duration // 2
        cases[f"first-{size}"] = (base, {})
        cases[f"zoom-quarter-{size}"] = (
            f"{base}tab/waterfall/?from={middle - duration // 8}&to={middle + duration // 8}",
            htmx,
        )
        cases[f"zoom-fiftieth-{size}"] = (
            f"{base}tab/waterfall/?from={middle - duration // 100}&to={middle + duration // 100}",
            htmx,
        )
    times: dict[str, list[float]] = {name: [] for name in [*cases, *(f"sql-{size}" for size in SIZES)]}
    sizes: dict[str, int] = {}
    db = settings.DATABASES["default"]
    conninfo = psycopg.conninfo.make_conninfo(
        host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], dbname=db["NAME"], password=db["PASSWORD"] or None
    )
    with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
        for round_number in range(WARMUP + REQUESTS):
            for name, (url, headers) in cases.items():
                started = time.perf_counter()
                response = client.get(url, headers=headers)
                elapsed = time.perf_counter() - started
                body = response.content
                if response.status_code != 200 or b'class="bar ' not in body:
                    raise RuntimeError(f"{name}: {response.status_code}, {len(body)} bytes, no bars")
                sizes[name] = len(body)
                if round_number >= WARMUP:
                    times[name].append(elapsed)
            for size, run in runs.items():
                started = time.perf_counter()
                conn.execute(_BASELINE_SQL, [list(GIST_KEYS), run.pk]).fetchall()
                if round_number >= WARMUP:
                    times[f"sql-{size}"].append(time.perf_counter() - started)
    figures: dict[str, Any] = {"requests": REQUESTS, "runs": {}}
    for size in SIZES:
        sql = _summary(times[f"sql-{size}"])
        run_figures: dict[str, Any] = {
            "baseline_sql": sql,
            "index_build_s": build_s[size][0],
            "spans": build_s[size][1],
        }
        for kind in ("first", "zoom-quarter", "zoom-fiftieth"):
            page = _summary(times[f"{kind}-{size}"])
            page["bytes"] = sizes[f"{kind}-{size}"]
            page["x_sql_p50"] = round(page["p50_ms"] / sql["p50_ms"], 1)
            run_figures[kind] = page
        figures["runs"][size] = run_figures
    largest, smallest = figures["runs"][SIZES[-1]], figures["runs"][SIZES[0]]
    figures["ratio_largest_to_smallest"] = {
        kind: round(largest[kind]["p50_ms"] / smallest[kind]["p50_ms"], 2)
        for kind in ("first", "zoom-quarter", "zoom-fiftieth")
    }
    _print(figures)
    return figures


def _print(figures: dict[str, Any]) -> None:
    print(f"\nRun waterfall, p50 of {figures['requests']} requests (aims: first render < {AIM_FIRST_RENDER_MS} ms "
          f"and < {AIM_BYTES // 1000} KB, zoom < {AIM_ZOOM_MS} ms, 100k/1k < {AIM_RATIO}):")  # fmt: skip
    print(f"{'events':>8} {'page':<14} {'p50 ms':>8} {'p99 ms':>8} {'KB':>7} {'x SQL':>7}")
    for size, run in figures["runs"].items():
        for kind in ("first", "zoom-quarter", "zoom-fiftieth"):
            page = run[kind]
            print(f"{size:>8,} {kind:<14} {page['p50_ms']:>8.1f} {page['p99_ms']:>8.1f} "
                  f"{page['bytes'] / 1000:>7.1f} {page['x_sql_p50']:>7.1f}")  # fmt: skip
        print(f"{size:>8,} {'baseline SQL':<14} {run['baseline_sql']['p50_ms']:>8.2f}   "
              f"(index rebuilt in {run['index_build_s']:.2f} s, {run['spans']:,} spans)")  # fmt: skip
    ratios = figures["ratio_largest_to_smallest"]
    print("100k/1k p50 ratio: " + ", ".join(f"{kind} {ratio}" for kind, ratio in ratios.items()))


def main() -> None:
    sys.path.insert(0, str(ROOT))  # the project first: bench/artifacts.py would shadow the app
    os.environ["DATABASE_URL"] = (
        os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/footprint_bench_waterfall"
    )
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "footprint_site.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    os.environ["DJANGO_DEBUG"] = "0"  # production settings…
    os.environ["DJANGO_HTTPS"] = "0"  # …served over plain HTTP, as `make run` serves them
    warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)
    sys.path.insert(1, str(ROOT / "bench"))
    import common  # bench/common.py

    common.DATABASE_URL = os.environ["DATABASE_URL"]
    if os.environ.get("BENCH_REUSE") != "1":
        common.reset_database()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    figures = waterfall_figures()
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    (common.RESULTS / "dashboard_waterfall.json").write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
