"""The Django-side half of bench/artifacts.py, run in its own process with the server's environment.

python bench/artifacts_django.py sweep BUDGET_S
    Runs artifacts.services.artifacts_sweep once and prints one JSON line: its SweepRun figures,
    wall-clock start and end (to place ingestion samples inside or outside the sweep), the time
    of every statement it issued grouped by kind, and the plan of its first metadata batch.
    Statements are timed through connection.execute_wrapper, so the service runs unmodified.

python bench/artifacts_django.py explain CONVERSATION REF KEY
    Prints one JSON line: EXPLAIN (ANALYZE, BUFFERS) of the exact SQL artifact_head issues for
    REF, and the queries that head, get and resolve issue per request (in-process test client).
"""

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# sys.path[0] is bench/, whose artifacts.py would shadow the `artifacts` app: put the project first.
sys.path[0] = str(ROOT)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "footprint_site.settings")


def kind_of(sql: str) -> str:
    for marker, kind in (("WITH d AS", "batch"), ("DETACH PARTITION", "detach"), ("DROP TABLE", "drop")):
        if marker in sql:
            return kind
    return "create-partition" if sql.startswith("CREATE TABLE") else "other"


def sweep(budget_s: float) -> dict:
    from django.db import connection

    from artifacts.services import artifacts_sweep

    statements: list[tuple[str, float]] = []
    plan: list[str] = []

    def timed(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        kind = kind_of(sql)
        if kind == "batch" and not plan:
            # Plain EXPLAIN plans without executing (a few ms): the shape behind the batch timings.
            execute("EXPLAIN " + sql, params, many, context)
            plan.extend(row[0] for row in context["cursor"].fetchall())
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            statements.append((kind, time.perf_counter() - started))

    connection.ensure_connection()  # the connect is not the sweep's cost
    started = time.time()
    with connection.execute_wrapper(timed):
        run = artifacts_sweep(time_budget_s=budget_s)
    finished = time.time()
    grouped: dict[str, list[float]] = {}
    for kind, seconds in statements:
        grouped.setdefault(kind, []).append(seconds)
    return {
        "started": started,
        "finished": finished,
        "metadata_rows": run.metadata_rows,
        "payload_bytes": run.payload_bytes,
        "partitions_dropped": run.partitions_dropped,
        "duration_ms": run.duration_ms,
        "statements": {k: {"count": len(v), "seconds": round(sum(v), 3)} for k, v in grouped.items()},
        "batch_seconds": grouped.get("batch", []),
        "first_batch_plan": "\n".join(plan),
    }


def explain(conversation: str, ref: str, key: str) -> dict:
    from django.db import connection
    from django.test import Client

    from artifacts.clock import store_now_ms
    from artifacts.models import ArtifactStore
    from artifacts.scopes import Scope, scope_header
    from artifacts.selectors import HEAD_SQL

    store = ArtifactStore.objects.get()  # the benchmark's only store
    params = {
        "store": store.pk,
        "ns": Scope(None, None, conversation).namespace,
        "ref": ref,
        "now": store_now_ms(store),
    }
    with connection.cursor() as cursor:  # Django's cursors bind on the client: mogrify gives the literal SQL
        head_sql = cursor.mogrify(HEAD_SQL, params)
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + head_sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    headers = {"HTTP_HOST": "127.0.0.1", "HTTP_AUTHORIZATION": f"Bearer {key}"}
    headers["HTTP_AF_SCOPE"] = scope_header({"conversationId": conversation})
    client, base = Client(), "/api/v1/artifacts"
    resolve = {"toolName": "render_chart", "wants": {"dataset": "dataset/rows"}, "args": {"dataset": ref}}
    requests = {
        "head": lambda: client.get(f"{base}/{ref}/meta", **headers),
        "get": lambda: client.get(f"{base}/{ref}", **headers),
        "resolve": lambda: client.post("/api/v1/wants:resolve", resolve, content_type="application/json", **headers),
    }
    queries: dict[str, list[str]] = {}
    for name, request in requests.items():
        request()  # warm: first calls pay for lazy imports
        sent = queries[name] = []

        def record(execute, sql, *args, sent=sent):  # every statement, the prepared cursor's too
            sent.append(sql[:160])
            return execute(sql, *args)

        with connection.execute_wrapper(record):
            assert request().status_code == 200
    return {"head_sql": head_sql, "head_plan": plan, "queries": queries}


if __name__ == "__main__":
    import django

    django.setup()
    command, *args = sys.argv[1:]
    result = sweep(float(args[0])) if command == "sweep" else explain(*args)
    print(json.dumps(result))
