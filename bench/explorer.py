"""bench/explorer.py: server time of the run page and the run list as runs and the ledger grow.

Times, in-process (Django's test Client, a signed-in superuser, production settings, no test
instrumentation), the pages a person reads a run with:

- the run page's first page, GET `ledger:run-detail` (the whole page), and a deep page,
  GET `ledger:run-events`?after_seq=N with HX-Request: true (the rows "Later events" fetches, N
  two pages before the run's end), for runs of 1,000, 10,000 and 100,000 events;
- the run list, GET `ledger:run-list` (first page; its "Older runs" cursor is followed once and
  checked) and a deep keyset page (`?cursor=` two pages from the oldest of 100,000 runs, whole page
  and htmx rows);
- the run list searched (`?q=`, PostgreSQL full-text search over the stored events): a word in one
  run's events only, and a word in every run's (the first page of 100,000 matches). The worker's
  index pass is run to the end first, as the worker keeps it within seconds of ingestion.

Baseline: the bare SQL of one page of events by keyset (seq > N ORDER BY seq LIMIT 101, with the
stored bodies) on the same run, on one psycopg connection without prepared statements (the ORM
prepares none either); the run list's, searched or not, is the bare SQL of one page of runs. Pages and baselines are
repeated BENCH_REQUESTS times (default 200) round-robin, so machine noise lands on all of them
alike; figures are p50/p99 wall time, Django's CPU time (steadier on a busy machine), ratios to the
baselines, and the ratio between the largest and the smallest run (a flat cost is near 1).
BENCH_ANATOMY more requests per page, outside the timings, show where the time goes: queries, SQL
time, template render CPU, the slowest statement, and its EXPLAIN ANALYZE when the server spends
more than BENCH_EXPLAIN_MS (5) on it. A page that fails is reported
and not timed. Nothing asserts on time; every timed page's status and rows are checked.

Seeding goes through the real ingest service, `events_ingest`, in large batches: the three long
runs repeat the bodies of tests/data/*/events*.json (tool calls, middleware decisions, refusals,
artifacts, tool effects; the events that open asks are left out), and the other 99,997 runs are
short (configured, prompt, usage, one tool call, end; some refused, some still running), ingested
by BENCH_SEED_WORKERS processes (default: one per CPU). The database (DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/footprint_bench_explorer; its name must contain 'bench') is
created and migrated here, and reused by the next run when its counts match, the seed is this
version's and no migration applied to it has changed since (new ones are applied on top);
otherwise it is dropped and seeded again. Writes bench/results/explorer.json.
"""

import contextlib
import functools
import hashlib
import itertools
import json
import multiprocessing
import os
import re
import secrets
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# bench/artifacts.py would shadow the `artifacts` app: the project goes first, bench/ stays for common.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["DATABASE_URL"] = (
    os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/footprint_bench_explorer"
)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "footprint_site.settings")
os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
os.environ["DJANGO_DEBUG"] = "0"  # production settings…
os.environ["DJANGO_HTTPS"] = "0"  # …served over plain HTTP, as `make run` serves them

import common  # bench/common.py
import django
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

# Static files are not served here: WhiteNoise's notice that `collectstatic` never ran is noise.
warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)

ROOT = common.ROOT
SIZES = (1_000, 10_000, 100_000)
RUNS = 100_000  # in the ledger, the three long runs included
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "200"))
WARMUP = 10
EXPLAIN_MS = float(os.environ.get("BENCH_EXPLAIN_MS", "5"))
ANATOMY_REQUESTS = int(os.environ.get("BENCH_ANATOMY", "21"))
AIM_FIRST_PAGE_MS = 150
PROJECT, USER = "explorer", "bench-explorer"
COMMON_WORD = "lookup_order"  # the tool every short run calls (scenario a's), in every run's events
SEED_WORKERS = int(os.environ.get("BENCH_SEED_WORKERS", str(os.cpu_count() or 2)))
EVENT_BATCH, RUN_BATCH = 5_000, 500  # events per events_ingest call (long runs); short runs per call
SEED_VERSION = "3"  # change it when the seed below changes: the next run seeds a fresh database
WALL0 = 1_796_043_007_832  # meta.wallClockMs of the first fixture event

EVENTS_SQL = """
SELECT seq, position, type, tool_call_id, body, wall_clock_ms, hash, run_id FROM ledger_runevent
WHERE run_id = %(run)s AND seq > %(after)s ORDER BY seq LIMIT %(limit)s
"""
RUNS_SQL = """
SELECT r.*, p.id, p.slug, p.name, p.created_at FROM ledger_run r JOIN ledger_project p ON p.id = r.project_id
WHERE r.id < %(before)s ORDER BY r.id DESC LIMIT %(limit)s
"""

# --- Workload: events shaped like the fixture runs ---------------------------------------------

# Left out of the repeated bodies: pauses and check-ins open and settle asks (a run pauses a few
# times, not thousands), and the status-moving turn events belong once at each end of a run.
SKIPPED = {"pause.request", "pause.resume", "checkin.request", "checkin.decision"}
ENDS = {"agent.run_configured", "agent.turn_start", "agent.turn_end"}
OWN_META = {"runId", "sessionId", "tenant", "principal", "wallClockMs", "runOffsetMs"}


@functools.cache
def load_fixtures() -> tuple[dict[str, dict], list[list[dict]]]:
    """The first event of each type (scenario a's where it has one), and each fixture run's body."""
    ends: dict[str, dict] = {}
    bodies = []
    for path in sorted((ROOT / "tests" / "data").glob("*/events*.json")):
        events = json.loads(path.read_text())["events"]
        for e in events:
            ends.setdefault(e["type"].removeprefix("agentfootprint."), e)
        body = [e for e in events if e["type"].removeprefix("agentfootprint.") not in SKIPPED | ENDS]
        bodies.append(body)
    return ends, bodies


def envelope(template: dict, run_id: str, session: str, seq: int, call_suffix: str = "", start: int = WALL0) -> dict:
    meta = {k: v for k, v in template["meta"].items() if k not in OWN_META}
    meta |= {"runId": run_id, "sessionId": session, "wallClockMs": start + 4 * seq, "runOffsetMs": 4 * seq}
    event = {"seq": seq, "type": template["type"], "meta": meta}
    if "payload" in template:
        payload = template["payload"]
        if call_suffix and isinstance(payload, dict) and isinstance(payload.get("toolCallId"), str):
            # Tool call ids are unique in the ledger, as real ones are: runs sharing one are linked as
            # a paused run and its resumption.
            payload = {**payload, "toolCallId": payload["toolCallId"] + call_suffix}
        event["payload"] = payload
    return event


def long_run(run_id: str, size: int, ends: dict[str, dict], bodies: list[list[dict]]) -> Iterator[dict]:
    """`size` events: configured, prompt, the fixture bodies repeated, and the turn's end."""
    session = f"{run_id}-session"
    yield envelope(ends["agent.run_configured"], run_id, session, 0)
    yield envelope(ends["agent.turn_start"], run_id, session, 1)
    seq, repetition = 2, 0
    while True:
        for body in bodies:
            repetition += 1
            for template in body:
                if seq == size - 1:
                    yield envelope(ends["agent.turn_end"], run_id, session, seq)
                    return
                yield envelope(template, run_id, session, seq, f"~{run_id}.{repetition}")
                seq += 1


def short_run(n: int, ends: dict[str, dict], refusal: dict, usage: dict) -> list[dict]:
    """A short run: configured, prompt, usage, one tool call, end; every 10th refused once, every
    13th still running."""
    run_id, session = f"list-{n:06d}", f"session-{n % 2000:04d}"
    steps = [ends["agent.run_configured"], ends["agent.turn_start"], usage]
    steps += [ends["stream.tool_start"], ends["stream.tool_end"]]
    if n % 10 == 0:
        steps.append(refusal)
    if n % 13:
        steps.append(ends["agent.turn_end"])
    start = WALL0 + 60_000 * n  # a run a minute
    return [envelope(t, run_id, session, seq, f"~{run_id}", start) for seq, t in enumerate(steps)]


# --- The database: created, migrated, seeded once ----------------------------------------------


def migration_hashes() -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        for path in sorted(ROOT.glob("*/migrations/0*.py"))
    }


def seeded_already() -> bool:
    """True when the database exists and holds this seed, complete, and no migration applied to it
    has changed since (new ones are applied on top); otherwise it is recreated empty: False."""
    name = conninfo_to_dict(common.DATABASE_URL)["dbname"]
    if "bench" not in name:  # it may be dropped below: never a database that may hold real runs
        sys.exit(f"DATABASE_URL names database '{name}'; this benchmark may drop and recreate it, so "
                 "point DATABASE_URL at a database whose name contains 'bench'.")  # fmt: skip
    with psycopg.connect(make_conninfo(common.DATABASE_URL, dbname="postgres"), autocommit=True) as admin:
        if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            with contextlib.suppress(psycopg.ProgrammingError, TypeError), psycopg.connect(common.DATABASE_URL) as db:
                version, applied = db.execute("SELECT version, migrations FROM bench_explorer_seed").fetchone()
                runs = db.execute("SELECT count(*) FROM ledger_run").fetchone()
                longest = db.execute(
                    "SELECT array_agg(event_count ORDER BY event_count) FROM ledger_run WHERE run_id LIKE 'long-%'"
                ).fetchone()
                current = migration_hashes()
                unchanged = all(current.get(path) == digest for path, digest in applied.items())
                if version == SEED_VERSION and unchanged and runs == (RUNS,) and longest == (list(SIZES),):
                    return True
            print(f"Dropping database '{name}': not seeded by this version of the benchmark, or a migration "
                  "applied to it has changed since…", flush=True)  # fmt: skip
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return False


def record_migrations() -> None:
    """Note the migrations as just applied, so an edit to one of them later rebuilds the database."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("UPDATE bench_explorer_seed SET migrations = %s::jsonb", [json.dumps(migration_hashes())])


def ingest(raw: list[dict]) -> int:
    """Store the events through the ingest service, as POST /api/v1/events does; returns their count."""
    from ledger.ingest.envelopes import check_events
    from ledger.ingest.services import events_ingest
    from tenancy.models import Project

    receipts = events_ingest(project=Project.objects.get(slug=PROJECT), events=check_events(raw))
    if sum(r.accepted for r in receipts) != len(raw):
        raise RuntimeError(f"events_ingest accepted {sum(r.accepted for r in receipts)} of {len(raw)} events")
    return len(raw)


def seed_short_runs(first: int) -> int:
    """RUN_BATCH short runs from the `first`th, in one call of the service (a worker process's task)."""
    ends, bodies = load_fixtures()
    refusal = next(e for b in bodies for e in b if e["payload"].get("outcome") == "refused")
    last = min(first + RUN_BATCH, RUNS - len(SIZES))
    return ingest([e for n in range(first, last) for e in short_run(n, ends, refusal, ends["stream.llm_end"])])


def seed() -> None:
    from django.contrib.auth.models import User
    from django.db import connection, connections

    from tenancy.services import project_get_or_create

    project_get_or_create(slug=PROJECT, name="Explorer benchmark")
    User.objects.create_superuser(USER, email="", password=None)  # signed in by force_login only
    ends, bodies = load_fixtures()

    started = time.perf_counter()
    print(f"Seeding {sum(SIZES):,} events in {len(SIZES)} long runs through events_ingest…", flush=True)
    for size in SIZES:
        events = long_run(f"long-{size}", size, ends, bodies)
        while batch := list(itertools.islice(events, EVENT_BATCH)):
            ingest(batch)
    long_s = time.perf_counter() - started
    short = RUNS - len(SIZES)
    print(f"  {long_s:.1f} s. Seeding {short:,} short runs, {RUN_BATCH} per call, {SEED_WORKERS} processes…",
          flush=True)  # fmt: skip
    # Short runs cost round trips (each run's row is upserted, then updated) more than CPU: processes
    # overlap them. Forked children open their own connections once the parent's are closed.
    connections.close_all()
    with ProcessPoolExecutor(SEED_WORKERS, mp_context=multiprocessing.get_context("fork")) as pool:
        count = sum(pool.map(seed_short_runs, range(0, short, RUN_BATCH)))
    print(f"  {time.perf_counter() - started - long_s:.1f} s ({count:,} events). VACUUM ANALYZE…", flush=True)
    with connection.cursor() as cursor:
        # As autovacuum would leave tables this size: planner statistics and the visibility map.
        for table in ("ledger_run", "ledger_runevent", "ledger_toolcall", "ledger_middlewaredecision",
                      "ledger_refusal", "ledger_tooleffect", "ledger_permissionverdict"):  # fmt: skip
            cursor.execute(f"VACUUM ANALYZE {table}")
        cursor.execute("CREATE TABLE bench_explorer_seed (version text, migrations jsonb, seeded_at timestamptz)")
        cursor.execute("INSERT INTO bench_explorer_seed VALUES (%s, '{}', now())", [SEED_VERSION])
    record_migrations()
    print(f"Seeded in {time.perf_counter() - started:.0f} s.", flush=True)


# --- Timing -------------------------------------------------------------------------------------


@dataclass
class Case:
    """One request to time, and what its answer must hold."""

    label: str
    url: str
    headers: dict[str, str]
    rows: tuple[str, int]  # the row marker and how many the page must hold
    must_have: str = ""  # text the page must contain (the next page's link, a run of the page)
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # CPU seconds of this thread: Django's own work
    error: str = ""
    note: str = ""
    anatomy: dict[str, Any] = field(default_factory=dict)


def summary(seconds: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles([s * 1000 for s in seconds], n=100, method="inclusive")
    return {"p50_ms": round(cuts[49], 2), "p99_ms": round(cuts[98], 2), "max_ms": round(max(seconds) * 1000, 2)}


def check(case: Case, html: str) -> str:
    """Empty when the page shows the rows it should, else how it differs."""
    marker, wanted = case.rows
    found = html.count(marker)
    if found != wanted:
        return f"{found} rows marked {marker!r}, expected {wanted}"
    if case.must_have and case.must_have not in html:
        return f"{case.must_have!r} is not on the page"
    return ""


def anatomy(client: Any, case: Case) -> dict[str, Any]:
    """ANATOMY_REQUESTS more requests outside the timings, medians of: queries, SQL time, CPU, template
    render CPU, and the slowest statement (with EXPLAIN ANALYZE when the server spends long on it)."""
    from django.db import connection
    from django.template.backends.django import Template

    samples: list[dict[str, Any]] = []
    sample: dict[str, Any] = {}

    def timed_sql(execute: Callable, sql_: str, params: Any, many: bool, context: dict) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql_, params, many, context)
        finally:
            sample["statements"].append((time.perf_counter() - started, sql_, params))

    original = Template.render

    def timed_render(self: Template, *args: Any, **kwargs: Any) -> Any:
        sample["rendering"] = True
        started = time.thread_time()  # CPU: waiting on PostgreSQL inside the render does not count
        try:
            return original(self, *args, **kwargs)
        finally:
            sample["render"] += time.thread_time() - started
            sample["rendering"] = False

    Template.render = timed_render  # type: ignore[method-assign]
    try:
        with connection.execute_wrapper(timed_sql):
            for _ in range(ANATOMY_REQUESTS):
                sample = {"statements": [], "rendering": False, "render": 0.0}
                started, cpu = time.perf_counter(), time.thread_time()
                client.get(case.url, headers=case.headers)
                sample |= {"total": time.perf_counter() - started, "cpu": time.thread_time() - cpu}
                samples.append(sample)
    finally:
        Template.render = original  # type: ignore[method-assign]

    def ms(values: list[float]) -> float:
        return round(statistics.median(values) * 1000, 2)

    statements = samples[0]["statements"]
    same_shape = [s for s in samples if len(s["statements"]) == len(statements)]
    by_statement = [ms([s["statements"][i][0] for s in same_shape]) for i in range(len(statements))]
    slowest = max(range(len(statements)), key=lambda i: by_statement[i]) if statements else None
    result: dict[str, Any] = {
        "queries": len(statements), "total_ms": ms([s["total"] for s in samples]),
        "cpu_ms": ms([s["cpu"] for s in samples]),
        "sql_ms": ms([sum(t for t, *_ in s["statements"]) for s in samples]),
        "render_cpu_ms": ms([s["render"] for s in samples]),
        "statements_ms": by_statement,
        "statements": [" ".join(sql_.split())[:300] for _, sql_, _ in statements],
    }  # fmt: skip
    if slowest is not None:
        _, sql_, params = statements[slowest]
        result |= {"slowest_sql_ms": by_statement[slowest], "slowest_sql": " ".join(sql_.split())[:400]}
        # The server's own time for it (best of 3: the machine may be busy), and its plan when slow.
        plans = []
        with connection.cursor() as cursor:
            for _ in range(3):
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql_, params)
                plans.append([row[0] for row in cursor.fetchall()])
        executions = [
            float(line.split(":")[1].split()[0]) for plan in plans for line in plan if "Execution Time" in line
        ]
        result["slowest_sql_execution_ms"] = min(executions)
        if min(executions) > EXPLAIN_MS:
            result["explain"] = plans[executions.index(min(executions))]
    return result


def timeline_page_size() -> int:
    """Events per timeline page, as the run page pages them."""
    from ledger.explorer.run_page import TIMELINE_PAGE

    return TIMELINE_PAGE


def measure() -> tuple[dict[str, Case], dict[str, list[float]], dict[str, Any]]:
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import get_resolver, reverse

    try:  # the URLconf imports every app's views: one that does not import serves nothing
        get_resolver().url_patterns  # noqa: B018
        from footprint_site import pagination
        from ledger.explorer import views
    except Exception as exc:
        sys.exit(f"NOT TIMED: the URLconf does not import ({type(exc).__name__}: {exc}); nothing can be served.")
    from ledger.models import Run

    per_page = timeline_page_size()
    runs_per_page = getattr(views, "RUNS_PER_PAGE", 50)
    client = Client(HTTP_HOST="127.0.0.1")  # no test environment set up: templates render as in production
    client.force_login(User.objects.get(username=USER))
    runs = {size: Run.objects.get(project__slug=PROJECT, run_id=f"long-{size}") for size in SIZES}
    cases: dict[str, Case] = {}
    deep_after = {size: size - 1 - 2 * per_page for size in SIZES}  # two pages before the last event
    for size, run in runs.items():
        args = [PROJECT, run.run_id]
        cases[f"first-{size}"] = Case(
            f"first page, {size:,}", reverse("ledger:run-detail", args=args), {}, ('class="event-row"', per_page),
            f"?after_seq={per_page - 1}",
        )  # fmt: skip
        after = deep_after[size]
        cases[f"deep-{size}"] = Case(
            f"deep page, {size:,}", reverse("ledger:run-events", args=args) + f"?after_seq={after}",
            {"HX-Request": "true"}, ('class="event-row"', per_page), f"?after_seq={after + per_page}",
        )  # fmt: skip

    # The run list: the first page, then its own "Older runs" cursor followed once (it must lead
    # to the next 50 runs), then a cursor as deep as following it ~2,000 times would reach.
    ids = list(Run.objects.order_by("-id").values_list("id", flat=True))
    list_url = reverse("ledger:run-list")
    first = client.get(list_url)
    found = re.search(r'href="\?cursor=([A-Za-z0-9_-]+)', first.content.decode())
    followed = ""
    if first.status_code != 200 or not found:
        followed = f"the first page (HTTP {first.status_code}) has no 'Older runs' cursor"
    else:
        second = client.get(list_url + f"?cursor={found.group(1)}", headers={"HX-Request": "true"})
        if Run.objects.get(pk=ids[runs_per_page]).run_id not in second.content.decode():
            followed = "following the first page's cursor did not lead to the 51st newest run"
    deep_before = ids[-(2 * runs_per_page)]  # the run a cursor two pages from the oldest names
    cursor = pagination.encode_cursor(deep_before)
    on_deep_page = Run.objects.get(pk=ids[-(2 * runs_per_page) + 1]).run_id
    cases["list-first"] = Case(
        "run list, first page", list_url, {}, ('class="run-row"', runs_per_page), "?cursor="
    )  # fmt: skip
    cases["list-deep"] = Case(
        f"run list, deep page (runs {RUNS - 2 * runs_per_page + 2:,} to {RUNS - runs_per_page + 1:,})",
        list_url + f"?cursor={cursor}", {},
        ('class="run-row"', runs_per_page), on_deep_page,
    )  # fmt: skip
    cases["list-deep-htmx"] = Case(
        "run list, deep page, htmx rows", list_url + f"?cursor={cursor}", {"HX-Request": "true"},
        ('class="run-row"', runs_per_page), on_deep_page,
    )  # fmt: skip
    if followed:
        cases["list-first"].note = followed
    index_for_search()
    one_run = f"list-{RUNS // 2:06d}"  # its run id is in its events' meta, and in no other run's
    cases["search-rare"] = Case(
        f"run list, q= a word of one run ({one_run})", list_url + f"?q={one_run}", {},
        ('class="run-row"', 1), one_run,
    )  # fmt: skip
    cases["search-common"] = Case(
        f"run list, q= a word of every run ({COMMON_WORD})", list_url + f"?q={COMMON_WORD}", {},
        ('class="run-row"', runs_per_page), "cursor=",
    )  # fmt: skip

    # Probe each page once: a page that fails is reported, not timed; one
    # that answers with other rows than expected is timed, with the difference noted.
    for case in cases.values():
        try:
            answer = client.get(case.url, headers=case.headers)  # the test Client re-raises a view's exception
        except Exception as exc:
            case.error = f"{type(exc).__name__}: {str(exc)[:300]}"
            continue
        if answer.status_code != 200:
            case.error = f"HTTP {answer.status_code}: {answer.content[:300]!r}"
        elif problem := check(case, answer.content.decode()):
            case.note = (case.note + "; " if case.note else "") + problem
    live = [case for case in cases.values() if not case.error]

    baselines: dict[str, tuple[str, dict[str, int]]] = {}
    for size, run in runs.items():
        baselines[f"sql-first-{size}"] = (EVENTS_SQL, {"run": run.pk, "after": -1, "limit": per_page + 1})
        baselines[f"sql-deep-{size}"] = (EVENTS_SQL, {"run": run.pk, "after": deep_after[size], "limit": per_page + 1})
    baselines["sql-list-first"] = (RUNS_SQL, {"before": ids[0] + 1, "limit": runs_per_page + 1})
    baselines["sql-list-deep"] = (RUNS_SQL, {"before": deep_before, "limit": runs_per_page + 1})
    base_times: dict[str, list[float]] = {name: [] for name in baselines}

    print(f"Timing {len(live)} pages and {len(baselines)} bare queries, {REQUESTS} times each, round-robin…",
          flush=True)  # fmt: skip
    # prepare_threshold=None: the ORM's statements are not server-side prepared, so neither is the baseline.
    with psycopg.connect(common.DATABASE_URL, autocommit=True, prepare_threshold=None) as db:
        meter = common.CpuMeter(postgres=common.database_backends)  # this process's backend and the baseline's
        wall, load = time.perf_counter(), os.getloadavg()[0]
        with meter:
            timing_rounds(client, live, db, baselines, base_times)
        cpu = {k: round(v, 1) for k, v in meter.seconds.items()}
        cpu |= {"wall": round(time.perf_counter() - wall, 1), "load_before": load, "load_after": os.getloadavg()[0]}
    for case in live:
        case.anatomy = anatomy(client, case)
    context = {"per_page": per_page, "runs_per_page": runs_per_page, "deep_after": deep_after, "cpu": cpu}
    return cases, base_times, context


def index_for_search() -> None:
    """The worker's search index pass, run here until nothing is left (kept with the seed)."""
    from django.db import connection

    from ledger.explorer.search import search_index_pending

    started, indexed = time.perf_counter(), 0
    while batch := search_index_pending(budget_seconds=60):
        indexed += batch
        print(f"  indexing for search: {indexed:,} records…", flush=True)
    if indexed:
        print(f"Indexed {indexed:,} records for search in {time.perf_counter() - started:.0f} s.", flush=True)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE ledger_runsearchchunk")  # as autovacuum would, for the planner


def timing_rounds(client: Any, live: list[Case], db: psycopg.Connection, baselines: dict, base_times: dict) -> None:
    """Round-robin over the pages and the bare queries, so machine noise lands on all of them alike."""
    for round_ in range(WARMUP + REQUESTS):
        for case in live:
            started, cpu = time.perf_counter(), time.thread_time()
            response = client.get(case.url, headers=case.headers)
            seconds, cpu = time.perf_counter() - started, time.thread_time() - cpu
            if response.status_code != 200:
                raise RuntimeError(f"{case.label}: HTTP {response.status_code} during the timings")
            if round_ >= WARMUP:
                case.times.append(seconds)
                case.cpu.append(cpu)
        for name, (query, params) in baselines.items():
            started = time.perf_counter()
            rows = db.execute(query, params).fetchall()
            seconds = time.perf_counter() - started
            if len(rows) != params["limit"]:
                raise RuntimeError(f"{name} returned {len(rows)} rows, expected {params['limit']}")
            if round_ >= WARMUP:
                base_times[name].append(seconds)


# --- Report -------------------------------------------------------------------------------------


def main() -> None:
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    seeded = seeded_already()
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    if seeded:
        record_migrations()
        print(f"Reusing the seeded database ({RUNS:,} runs; long runs of {', '.join(f'{s:,}' for s in SIZES)} events).")
    else:
        seed()
    common.checkpoint()
    cases, base_times, ctx = measure()

    pages = {name: {**summary(c.times), "cpu_p50_ms": summary(c.cpu)["p50_ms"]} for name, c in cases.items() if c.times}
    base = {name: summary(t) for name, t in base_times.items()}
    for name, page in pages.items():
        baseline = "sql-list-first" if name.startswith("search-") else "sql-" + name.removesuffix("-htmx")
        page["x_sql_p50"] = round(page["p50_ms"] / base[baseline]["p50_ms"], 1)
        page["anatomy"] = cases[name].anatomy
    result = {
        "sizes": SIZES, "runs": RUNS, "requests": REQUESTS, "events_per_page": ctx["per_page"],
        "deep_after_seq": ctx["deep_after"], "pages": pages, "bare_sql": base,
        "errors": {c.label: c.error for c in cases.values() if c.error},
        "notes": {c.label: c.note for c in cases.values() if c.note}, "cpu_seconds": ctx["cpu"],
        "machine": common.machine(), "database_url": common.DATABASE_URL,
    }  # fmt: skip
    (common.RESULTS / "explorer.json").write_text(json.dumps(result, indent=2) + "\n")
    print(report(cases, pages, base, ctx) + f"\n\n  machine    {result['machine']}")
    print(f"  written to {common.RESULTS / 'explorer.json'}")


def report(cases: dict[str, Case], pages: dict[str, Any], base: dict[str, Any], ctx: dict[str, Any]) -> str:
    width = 42

    def row(label: str, names: list[str], show: Callable[[dict], str], growth: str | None = "p50_ms") -> str:
        known = [pages.get(name) or base.get(name) for name in names]
        line = f"\n  {label:<{width}}" + "".join(show(v) if v else f"{'failed':>17}" for v in known)
        if growth and known[0] and known[-1]:
            line += f"{known[-1][growth] / known[0][growth]:>10.2f}x"
        return line

    def wall(v: dict) -> str:
        return f"{v['p50_ms']:>8.1f} /{v['p99_ms']:>7.1f}"

    n, per_list = ctx["per_page"], ctx["runs_per_page"]
    out = f"\nRun page: server time in-process (test Client, signed-in superuser), {REQUESTS} requests each, ms"
    out += f"\n  {'':<{width}}" + "".join(f"{f'{size:,} events':>17}" for size in SIZES)
    out += f"{f'{SIZES[-1] // 1000}k / {SIZES[0] // 1000}k':>11}"
    for kind, title in (("first", "first page (run-detail)"), ("deep", "deep page (run-events, htmx)")):
        names = [f"{kind}-{size}" for size in SIZES]
        out += row(f"{title}  p50 / p99", names, wall)
        out += row("  Django CPU, p50", names, lambda v: f"{v['cpu_p50_ms']:>8.1f}{'':>9}", "cpu_p50_ms")
        out += row("  ÷ bare SQL of that page, p50", names, lambda v: f"{v['x_sql_p50']:>7.0f}x{'':>9}", None)
    out += row(f"bare SQL, first {n + 1} events  p50 / p99", [f"sql-first-{size}" for size in SIZES], wall)
    out += row(f"bare SQL, {n + 1} events deep  p50 / p99", [f"sql-deep-{size}" for size in SIZES], wall)
    out += f"\n  (deep page: ?after_seq = events - {2 * n + 1} with HX-Request: true, the rows 'Later events' fetches"
    out += (
        f" near the end.\n   Bare SQL: seq > N ORDER BY seq LIMIT {n + 1}, stored bodies included, on one connection.)"
    )
    biggest = pages.get(f"first-{SIZES[-1]}")
    if biggest:
        met = "met" if biggest["p99_ms"] < AIM_FIRST_PAGE_MS else "met at p50 only"
        met = met if biggest["p50_ms"] < AIM_FIRST_PAGE_MS else "NOT met"
        verdict = f"p50 {biggest['p50_ms']:.0f} ms, p99 {biggest['p99_ms']:.0f} ms: {met}"
    else:
        verdict = "not timed (the page failed)"
    out += f"\n  aim: first page of a {SIZES[-1]:,}-event run < {AIM_FIRST_PAGE_MS} ms server time — {verdict}"
    flat = []
    for kind in ("first", "deep"):
        small, large = pages.get(f"{kind}-{SIZES[0]}"), pages.get(f"{kind}-{SIZES[-1]}")
        if small and large:
            flat.append(f"{kind} page {large['p50_ms'] / small['p50_ms']:.2f}x")
    out += f"\n  aim: page cost does not grow with the run ({SIZES[-1] // 1000}k / {SIZES[0] // 1000}k near 1) — "
    out += ", ".join(flat) or "not timed"

    out += f"\n\nRun list: {RUNS:,} runs in the ledger, {REQUESTS} requests each, ms"
    out += f"\n  {'':<50}{'p50 /    p99':>17}{'CPU p50':>9}{'÷ bare SQL':>12}"
    for name in ("list-first", "list-deep", "list-deep-htmx", "search-rare", "search-common"):
        v = pages.get(name)
        shown = f"{wall(v)}{v['cpu_p50_ms']:>9.1f}{v['x_sql_p50']:>11.0f}x" if v else f"{'failed':>17}"
        out += f"\n  {cases[name].label:<50}{shown}"
    for name, label in (("sql-list-first", "bare SQL, first page"), ("sql-list-deep", "bare SQL, deep page")):
        out += f"\n  {label + f' ({per_list + 1} rows)':<50}{wall(base[name])}"
    if "list-first" in pages and "list-deep" in pages:
        ratio = pages["list-deep"]["p50_ms"] / pages["list-first"]["p50_ms"]
        out += f"\n  deep page / first page, p50: {ratio:.2f}x (a flat cost is near 1)"
    searched = [f"{name.removeprefix('search-')} {pages[name]['p50_ms'] / pages['list-first']['p50_ms']:.2f}x"
                for name in ("search-rare", "search-common") if name in pages and "list-first" in pages]  # fmt: skip
    if searched:
        out += f"\n  searched / first page unsearched, p50: {', '.join(searched)} (the searched pages' ÷ bare SQL"
        out += " is against the unsearched first page's)"

    out += f"\n\nWhere the time goes: medians of {ANATOMY_REQUESTS} more requests each, outside the timings, ms"
    out += f"\n  {'':<46}{'queries':>8}{'total':>7}{'CPU':>7}{'SQL':>7}{'render':>7}  slowest statement: median"
    out += " (server execution, best of 3)"
    for name, case in cases.items():
        if name in pages:
            a = case.anatomy
            out += f"\n  {case.label:<46}{a['queries']:>8}{a['total_ms']:>7.1f}{a['cpu_ms']:>7.1f}{a['sql_ms']:>7.1f}"
            out += f"{a['render_cpu_ms']:>7.1f}  {a.get('slowest_sql_ms', 0):.1f} "
            out += f"({a.get('slowest_sql_execution_ms', 0):.1f}): {a.get('slowest_sql', '')[:60]}"
    out += "\n  (total: wall; CPU: Django's thread, waits on PostgreSQL excluded; SQL: wall of all statements;"
    out += " render: CPU of template rendering)"
    explained: dict[str, tuple[list[str], list[str]]] = {}  # statement → (pages, the plan of the first)
    for name, case in cases.items():
        if name in pages and "explain" in case.anatomy:
            explained.setdefault(case.anatomy["slowest_sql"], ([], case.anatomy["explain"]))[0].append(case.label)
    for sql_, (labels, plan) in explained.items():
        out += f"\n\n  EXPLAIN ANALYZE, slower than {EXPLAIN_MS:g} ms on the server ({'; '.join(labels)}):"
        out += "\n    " + sql_ + "\n    " + "\n    ".join(plan)
    for case in cases.values():
        if case.error:
            out += f"\n\n  NOT TIMED: {case.label} ({case.url}) failed: {case.error}"
        if case.note:
            out += f"\n  note: {case.label}: {case.note}"
    c = ctx["cpu"]
    out += (f"\n\n  CPU during the timings ({c['wall']} s wall): Django {c['client']} s, its PostgreSQL backends"
            f" {c['postgres']} s, everything else on the machine {c['other']} s (other jobs; high means noisy"
            f" figures); load average {c['load_before']:.1f} before, {c['load_after']:.1f} after")  # fmt: skip
    return out


if __name__ == "__main__":
    main()
