"""bench/dashboard.py: the pages people open first, timed as the ledger grows.

The overview (`overview_figures()`): server time of GET `overview:overview` (the signed-in home)
in-process (Django's test Client, production settings, a person who is a member of every project),
for each window (last hour, day, week, 30 days) across the person's PROJECTS projects and for one
of them, as the ledger grows in the two ways it does:

1. 1 million events: HISTORY_DAYS of history.
2. 10 million: nine million more events of older history (ten times as long at the same pace):
   what every deployment's ledger does as months pass. The windows hold the same activity, so a
   page whose cost followed the ledger's size would take ten times longer; one that follows only
   the window is flat (ratio 10M / 1M near 1).
3. 19 million: nine million more in the last HISTORY_DAYS, ten times as busy as before. A busier
   window fills more of its columns and keys, so this ratio (19M / 10M) may grow up to the
   point every column is filled; it says what busier agents cost the page.

The events are in `ledger_runevent` (lean rows, as the rollups see them: what matters is the
table's size) and the overview's rollups are what the worker's fold would have written from them,
with every run's `rolled_up` mark at its end; both are written with SQL generate_series, since
ingesting 19 million events through the API would time ingestion, not the page. The asks (one per
50 runs) are counted by the fold itself.

Baseline: the sign-in page (a template render, no ledger read) in the same process and rounds.
Requests are repeated BENCH_REQUESTS times (default 50) round-robin over the cases, so machine
noise lands on all of them alike; figures are p50/p90 wall time, the multiple of the baseline, and
the ratios of one stage's multiples to the one before's. Nothing asserts on time; every timed
answer's status and its charts are checked.

The database (DATABASE_URL, default postgres://postgres@127.0.0.1:5432/footprint_bench_dashboard;
its name must contain 'bench') is dropped, created and migrated here. Writes
bench/results/dashboard.json.

`main()` runs the overview's figures, then the run waterfall's (bench/dashboard_waterfall.py) on
the same database.
"""

import json
import os
import secrets
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["DATABASE_URL"] = (
    os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/footprint_bench_dashboard"
)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "footprint_site.settings")
os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
os.environ["DJANGO_DEBUG"] = "0"
os.environ["DJANGO_HTTPS"] = "0"

import common  # bench/common.py
import dashboard_waterfall  # bench/dashboard_waterfall.py
import django
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)

REQUESTS = int(os.environ.get("BENCH_REQUESTS", "50"))
WARMUP = 3
PROJECTS = 10
EVENTS_PER_RUN = 100
HISTORY_DAYS = 35
AGENTS = 5
USER = "bench-overview"
WINDOWS = ("hour", "day", "week", "30d")


@dataclass(frozen=True)
class Stage:
    name: str  # how the ledger grew, as reported
    runs: int  # runs of the stage's series, spread evenly from oldest_days to newest_days ago
    keep: str  # which of them: "all", "tenth" (g % 10 = 0) or "rest" (the other nine tenths)
    newest_days: int
    oldest_days: int


# The first and third stages are the tenth and the rest of one series, so the third stage's
# window is the first one's with nine runs beside each run. The second has as many runs a day as
# the first, before it.
STAGES = (
    Stage("1M", 100_000, "tenth", 0, HISTORY_DAYS),
    Stage("10M, older history", 90_000, "all", HISTORY_DAYS, HISTORY_DAYS * 10),
    Stage("19M, 10x as busy", 100_000, "rest", 0, HISTORY_DAYS),
)

# Each run has EVENTS_PER_RUN events stored within its first minute; one run in seven refused (a
# middleware rule, a tool), one in thirteen with a failed call. A run's project and agent follow
# g / 10, not g: the first stage's runs are the multiples of 10, and by g alone they all fell in
# one project with one agent.
_RUNS = """
INSERT INTO ledger_run (project_id, run_id, agent_id, composition_path, source, status, status_seq,
    first_event_at, last_event_at, tokens_in, tokens_out, iterations, tool_call_count, refusal_count,
    event_count, max_seq, chain_length, head_hash, rolled_up)
SELECT p.ids[1 + (g / 10) %% %(projects)s], 'bench-' || %(stage)s || '-' || g, 'agent-' || ((g / 10) %% %(agents)s),
    '[]', 'events',
    CASE WHEN g %% 13 = 5 THEN 'failed' ELSE 'completed' END, %(per_run)s - 1,
    at, at + interval '50 seconds', 900, 100, 3, 2, (g %% 7 = 3)::int,
    %(per_run)s, %(per_run)s - 1, %(per_run)s, '\\x00'::bytea, %(per_run)s
FROM generate_series(0, %(runs)s - 1) AS g,
    LATERAL (SELECT date_trunc('minute', now() - %(newest)s::interval
        - (%(oldest)s::interval - %(newest)s::interval) * (1 - g::float8 / %(runs)s))
        + (g %% 60) * interval '1 second' AS at) AS t,
    (SELECT array_agg(id ORDER BY id) AS ids FROM ledger_project WHERE slug LIKE 'bench-%%') AS p
WHERE CASE %(keep)s WHEN 'all' THEN true WHEN 'tenth' THEN g %% 10 = 0 ELSE g %% 10 <> 0 END
"""
_EVENTS = """
INSERT INTO ledger_runevent (run_id, seq, position, type, wall_clock_ms, body, doc, prev_hash, hash, received_at)
SELECT r.id, n, n, 'agentfootprint.stream.llm_end', (extract(epoch FROM r.first_event_at) * 1000)::bigint + n * 500,
    '{}', '{}'::jsonb, '\\x00'::bytea, '\\x00'::bytea, r.first_event_at + n * interval '0.5 seconds'
FROM ledger_run r, generate_series(0, %(per_run)s - 1) AS n
WHERE r.run_id LIKE 'bench-%%' AND r.id > %(after)s
"""
# What the fold writes for those runs (ledger.overview.services), grouped as it groups them. The
# rule follows r.id / 7: refused runs are every seventh, so r.id % 7 named one rule alone.
_ACTIVITY = """
INSERT INTO ledger_activitycount (project_id, minute, kind, key, count)
SELECT project_id, minute, kind, key, count(*) * weight FROM (
    SELECT r.project_id, date_trunc('minute', r.first_event_at) AS minute, kind, key, weight
    FROM ledger_run r,
    LATERAL (VALUES ('events', '', %(per_run)s), ('run-started', '', 1), ('run-ended', r.status, 1))
        AS k(kind, key, weight)
    WHERE r.id > %(after)s AND r.run_id LIKE 'bench-%%'
    UNION ALL
    SELECT r.project_id, date_trunc('minute', r.first_event_at), kind, key, 1
    FROM ledger_run r,
    LATERAL (VALUES ('refusal-category', 'middleware'), ('refusal-rule', 'rule-' || (r.id / 7 %% 7)),
        ('tool-refusal', 'tool-' || (r.id %% 13))) AS k(kind, key)
    WHERE r.id > %(after)s AND r.run_id LIKE 'bench-%%' AND r.refusal_count > 0
    UNION ALL
    SELECT r.project_id, date_trunc('minute', r.first_event_at), 'tool-error', 'tool-' || (r.id %% 11), 1
    FROM ledger_run r WHERE r.id > %(after)s AND r.run_id LIKE 'bench-%%' AND r.status = 'failed'
) AS counted
GROUP BY project_id, minute, kind, key, weight
ON CONFLICT (project_id, minute, kind, key) DO UPDATE SET count = ledger_activitycount.count + EXCLUDED.count
"""
# The fold writes the same counts by the hour and by the day: here summed again from all the minutes.
_CLEAR_HOURS, _CLEAR_DAYS = "DELETE FROM ledger_activityhourcount", "DELETE FROM ledger_activitydaycount"
_ACTIVITY_HOURS = """
INSERT INTO ledger_activityhourcount (project_id, hour, kind, key, count)
SELECT project_id, date_trunc('hour', minute, 'UTC'), kind, key, sum(count)
FROM ledger_activitycount GROUP BY 1, 2, 3, 4
"""
_ACTIVITY_DAYS = """
INSERT INTO ledger_activitydaycount (project_id, day, kind, key, count)
SELECT project_id, date_trunc('day', minute, 'UTC'), kind, key, sum(count)
FROM ledger_activitycount GROUP BY 1, 2, 3, 4
"""
_USAGE = """
INSERT INTO ledger_agentdayusage (project_id, day, agent, tokens_in, tokens_out, cost_usd)
SELECT project_id, (first_event_at AT TIME ZONE 'UTC')::date, agent_id, sum(tokens_in), sum(tokens_out), count(*) * 0.01
FROM ledger_run WHERE id > %(after)s AND run_id LIKE 'bench-%%'
GROUP BY 1, 2, 3
ON CONFLICT (project_id, day, agent) DO UPDATE SET
    tokens_in = ledger_agentdayusage.tokens_in + EXCLUDED.tokens_in,
    tokens_out = ledger_agentdayusage.tokens_out + EXCLUDED.tokens_out,
    cost_usd = ledger_agentdayusage.cost_usd + EXCLUDED.cost_usd
"""
# One ask per 50 runs, decided by a person within minutes (or by its deadline, one in five: by
# r.id / 50, as every r.id here is a multiple of 5); counted by the fold itself
# (ledger.overview.services.asks_fold_pending) once they are in.
_ASKS = """
INSERT INTO ledger_ask (project_id, run_id, tool_call_id, tool_name, kind, pause_data, on_timeout, status,
    created_at, decided_at, decided_via, approved, pause_reported, opened_from_event, answered)
SELECT r.project_id, r.run_id, 'call-1', 'tool-1', 'consent', '{}', 'decline', 'decided',
    r.first_event_at, r.first_event_at + (r.id %% 600) * interval '1 second',
    CASE WHEN r.id / 50 %% 5 = 0 THEN 'deadline' ELSE 'page' END, r.id / 50 %% 5 <> 0, false, true, false
FROM ledger_run r WHERE r.id > %(after)s AND r.run_id LIKE 'bench-%%' AND r.id %% 50 = 0
"""


def reset_database() -> None:
    name = conninfo_to_dict(common.DATABASE_URL)["dbname"]
    if "bench" not in name:
        sys.exit(f"DATABASE_URL names database '{name}'; the benchmark drops and recreates it, so "
                 "point DATABASE_URL at a database whose name contains 'bench'.")  # fmt: skip
    with psycopg.connect(make_conninfo(common.DATABASE_URL, dbname="postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def grow(stage: Stage) -> float:
    """Add the stage's runs (and their events and rollups); seconds taken."""
    started = time.monotonic()
    with psycopg.connect(common.DATABASE_URL, autocommit=True) as conn, conn.cursor() as cur:
        (after,) = cur.execute("SELECT coalesce(max(id), 0) FROM ledger_run").fetchone()
        params = {
            "projects": PROJECTS, "agents": AGENTS, "per_run": EVENTS_PER_RUN, "after": after,
            "stage": STAGES.index(stage), "runs": stage.runs, "keep": stage.keep,
            "newest": f"{stage.newest_days} days", "oldest": f"{stage.oldest_days} days",
        }  # fmt: skip
        cur.execute(_RUNS, params)
        print(f"  {cur.rowcount:,} runs", flush=True)
        cur.execute(_EVENTS, params)
        print(f"  {cur.rowcount:,} events", flush=True)
        for statement in (_ACTIVITY, _CLEAR_HOURS, _CLEAR_DAYS, _ACTIVITY_HOURS, _ACTIVITY_DAYS, _USAGE, _ASKS):
            cur.execute(statement, params)
        cur.execute("VACUUM ANALYZE")
    return time.monotonic() - started


def _summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p90_ms": round(ordered[int(len(ordered) * 0.9) - 1] * 1000, 2),
    }


def measure() -> dict[str, dict[str, float]]:
    """Each window across every project and for one, and the sign-in page, round-robin."""
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(User.objects.get(username=USER))
    anonymous = Client(HTTP_HOST="127.0.0.1")
    cases = {f"overview-{w}": ("/", {"window": w}) for w in WINDOWS}
    cases |= {f"overview-{w}-one-project": ("/", {"window": w, "project": "bench-0"}) for w in WINDOWS}
    times: dict[str, list[float]] = {name: [] for name in [*cases, "baseline-sign-in"]}
    for round_number in range(WARMUP + REQUESTS):
        for name, (path, query) in cases.items():
            started = time.perf_counter()
            response = client.get(path, query)
            elapsed = time.perf_counter() - started
            html = response.content.decode()
            charted = 'id="chart-runs-started"' in html and ("project" in query or 'class="mark"' in html)
            if response.status_code != 200 or not charted:
                raise SystemExit(f"{name}: answered {response.status_code} without its charts")
            if round_number >= WARMUP:
                times[name].append(elapsed)
        started = time.perf_counter()
        response = anonymous.get("/accounts/login/")
        elapsed = time.perf_counter() - started
        assert response.status_code == 200
        if round_number >= WARMUP:
            times["baseline-sign-in"].append(elapsed)
    return {name: _summary(seconds) for name, seconds in times.items()}


def overview_figures() -> dict[str, Any]:
    """The overview's server time at each stage of the ledger's growth, with its ratios; printed as it goes."""
    reset_database()
    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection

    from ledger.overview import services
    from tenancy.models import Membership, Project

    call_command("migrate", verbosity=0, interactive=False)
    person = User.objects.create_user(USER, password=None)
    for n in range(PROJECTS):
        project = Project.objects.create(slug=f"bench-{n}", name=f"bench {n}")
        Membership.objects.create(user=person, project=project, role=Membership.Role.AUDITOR)
    by_stage: dict[str, dict[str, dict[str, float]]] = {}
    for stage in STAGES:
        print(f"Ledger grows to {stage.name} events: seeding…", flush=True)
        seeded = grow(stage)
        asks_folded = time.monotonic()
        counted = services.asks_fold_pending(deadline=time.monotonic() + 3600)
        with connection.cursor() as cur:  # as autovacuum would have, by the time anyone looks
            cur.execute(
                "VACUUM ANALYZE ledger_ask, ledger_activitycount, ledger_activityhourcount, ledger_activitydaycount"
            )
            seeded += time.monotonic() - asks_folded
            cur.execute("SELECT count(*) FROM ledger_runevent")
            (events,) = cur.fetchone()
        print(f"  {counted:,} asks counted by the fold; seeded in {seeded:.0f} s", flush=True)
        print(f"  {events:,} events in the ledger; timing {REQUESTS} requests a case", flush=True)
        by_stage[stage.name] = measure()
    figures = figures_of(by_stage)
    print(report(figures))
    return figures


def figures_of(by_stage: dict[str, dict[str, dict[str, float]]]) -> dict[str, Any]:
    """Each stage's pages as multiples of the sign-in page timed in the same rounds, and the ratios
    of those from stage to stage: the stages are minutes apart, and a shared machine drifts between
    them (the sign-in page itself, which reads no ledger, moved by a fifth between two stages of
    one idle run)."""
    x_baseline = {
        name: {page: times["p50_ms"] / pages["baseline-sign-in"]["p50_ms"] for page, times in pages.items()}
        for name, pages in by_stage.items()
    }
    first, older, busier = (x_baseline[stage.name] for stage in STAGES)
    return {
        "requests": REQUESTS, "projects": PROJECTS, "history_days": HISTORY_DAYS,
        "stages": by_stage,
        "x_baseline_p50": {name: {page: round(x, 2) for page, x in xs.items()} for name, xs in x_baseline.items()},
        "ratio_x_baseline_p50": {
            "older_history_10m_to_1m": {page: round(older[page] / first[page], 2) for page in first},
            "busier_19m_to_10m": {page: round(busier[page] / older[page], 2) for page in first},
        },
    }  # fmt: skip


def report(figures: dict[str, Any]) -> str:
    stages, x_baseline = figures["stages"], figures["x_baseline_p50"]
    older, busier = (figures["ratio_x_baseline_p50"][name] for name in ("older_history_10m_to_1m", "busier_19m_to_10m"))
    lines = [
        f"\nOverview: server time in-process (test Client), p50 ms of {figures['requests']} requests each and "
        f"its multiple of the sign-in page's, {figures['projects']} projects, "
        f"{figures['history_days']} days of recent history",
        f"  {'page':34}" + "".join(f" {name:>26}" for name in stages) + f" {'older / 1M':>11} {'busier / older':>15}",
    ]  # fmt: skip
    for page in stages[STAGES[0].name]:
        times = "".join(f" {stages[name][page]['p50_ms']:17.2f} (x{x_baseline[name][page]:5.2f})" for name in stages)
        ratios = f" {older[page]:11.2f} {busier[page]:15.2f}" if page != "baseline-sign-in" else ""
        lines.append(f"  {page:34}{times}{ratios}")
    return "\n".join(lines)


def main() -> None:
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"overview": overview_figures(), "waterfall": dashboard_waterfall.waterfall_figures()}
    result["machine"] = common.machine()
    (common.RESULTS / "dashboard.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n  machine    {result['machine']}\n  written to {common.RESULTS / 'dashboard.json'}")


if __name__ == "__main__":
    main()
