"""bench/refusal_order.py: what listing refusals in time order costs the refusal list.

The refusal list reads its pages newest first by the refusing event's wall clock (then id), keyset
paged on the index refusal_by_time (migration 0029); before, it read them by id alone. Seeds
BENCH_REFUSALS refusals (default 1,000,000) over BENCH_RUNS runs (default 10,000) of one project
straight into the tables (the list reads nothing else), arriving out of time order, then times in
the same run, round-robin, BENCH_REQUESTS times each (default 200):

- baseline: the first page by id, as the list read it before (`order=-id`, the primary key);
- the first page in time order, and a deep page (its cursor 90% of the way down), through the
  selector `refusal_list` as the page calls it, for a signed-in member of the project;
- the same two with refusal_by_time dropped, to show what the index is for.

Figures: p50/p99 wall time and ratios to the baseline. Nothing asserts on time. The database
(DATABASE_URL, default postgres://postgres@127.0.0.1:5432/footprint_bench_refusals; its name must
contain 'bench') is dropped, created and migrated here.
"""

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/footprint_bench_refusals")

from bench import common

REFUSALS = int(os.environ.get("BENCH_REFUSALS", "1000000"))
RUNS = int(os.environ.get("BENCH_RUNS", "10000"))
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "200"))
PAGE = 50


def seed(cur: Any, project: int) -> None:
    cur.execute(
        """
        INSERT INTO ledger_run (project_id, run_id, source, status, status_seq, tokens_in, tokens_out,
            iterations, tool_call_count, refusal_count, event_count, max_seq, chain_length, head_hash,
            created_at, updated_at, composition_path)
        SELECT %s, 'run-' || n, 'events', 'completed', -1, 0, 0, 0, 0, 0, 0, -1, 0, '\\x00'::bytea, now(), now(), '[]'
        FROM generate_series(1, %s) n
        """,
        [project, RUNS],
    )
    # Each run's refusals arrive in one batch, runs in random order: ids follow arrival, not time.
    cur.execute(
        """
        INSERT INTO ledger_refusal (run_id, seq, event_type, category, rule, reason, wall_clock_ms)
        SELECT r.id, s.seq, 'agentfootprint.middleware.decision', 'middleware', 'rule-' || (s.seq %% 7),
               'refused', CASE WHEN s.seq %% 97 = 0 THEN NULL
                               ELSE 1796000000000 + (r.id * 7919 %% %(runs)s) * 60000 + s.seq * 1000 END
        FROM (SELECT id FROM ledger_run ORDER BY random()) r
        CROSS JOIN generate_series(0, %(per_run)s - 1) s(seq)
        """,
        {"runs": RUNS, "per_run": max(1, REFUSALS // RUNS)},
    )
    cur.execute("ANALYZE")


def timed(calls: dict[str, Callable[[], object]]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(REQUESTS):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    env = common.reset_database()
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "footprint_site.settings")
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.db import connection

    from footprint_site.pagination import encode_cursor
    from ledger.models import Refusal
    from ledger.refusals import selectors
    from tenancy.models import Membership, Project

    print(f"Seeding {REFUSALS:,} refusals over {RUNS:,} runs…", flush=True)
    project = Project.objects.create(slug="acme", name="acme")
    with connection.cursor() as cur:
        seed(cur, project.pk)
    user = User.objects.create_user("auditor")
    Membership.objects.create(user=user, project=project, role=Membership.Role.AUDITOR)
    deep = (
        Refusal.objects.annotate(when_ms=selectors.REFUSAL_TIME)
        .order_by("-when_ms", "-id")
        .values_list("when_ms", "id")[int(Refusal.objects.count() * 0.9)]
    )
    deep_cursor = encode_cursor(tuple(deep))

    def by_id() -> object:
        refusals = Refusal.objects.filter(run__project__in=selectors.projects_for_user(user))
        return list(refusals.select_related("run__project").order_by("-id")[: PAGE + 1])

    def first() -> object:
        return selectors.refusal_list(user=user, limit=PAGE)

    def deep_page() -> object:
        page = selectors.refusal_list(user=user, cursor=deep_cursor, limit=PAGE)
        assert len(page.items) == PAGE
        return page

    results = timed({"by id (before)": by_id, "time order, first page": first, "time order, deep page": deep_page})
    with connection.cursor() as cur:
        cur.execute("DROP INDEX refusal_by_time")
    results |= timed({"no index, first page": first, "no index, deep page": deep_page})

    baseline = statistics.median(results["by id (before)"])
    print(f"\n{REFUSALS:,} refusals, {RUNS:,} runs, {REQUESTS} requests each")
    print(f"{'page':<26}{'p50 ms':>9}{'p99 ms':>9}{'x baseline':>12}")
    for name, values in results.items():
        values.sort()
        p50, p99 = statistics.median(values), values[int(len(values) * 0.99) - 1]
        print(f"{name:<26}{p50:>9.2f}{p99:>9.2f}{p50 / baseline:>12.2f}")


if __name__ == "__main__":
    main()
