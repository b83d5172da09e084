"""Artifact-store benchmark: reads over HTTP against a raw SELECT, and the sweep under ingestion.

With BENCH_ARTIFACTS live artifacts stored (default 1,000,000, over BENCH_SCOPES=1000 conversations),
times BENCH_REQUESTS (2000) sequential requests each of head, get (1 KB) and resolve, served as
`make run` serves them (gunicorn + gunicorn.conf.py, production settings), beside the same lookup
as a raw SELECT on one persistent psycopg connection, in the same run. Then stores as many
artifacts that expired two days ago (payloads in that day's partition, which the sweeper drops
whole: the case the design is for) and times artifacts_sweep while two clients post 100-event
batches, against the same load's latency in a quiet window just before.

Prints figures as ratios against those baselines and writes bench/results/artifacts.json. Nothing
here asserts on time; it does check every answer (status, ref, payload) and that the sweep removed
exactly the expired rows, or the figures would mean nothing.

Environment: DATABASE_URL (default postgres://postgres@127.0.0.1:5432/footprint_bench_art; dropped
and recreated, so its name must contain 'bench'), BENCH_PORT (8766), BENCH_ARTIFACTS, BENCH_SCOPES,
BENCH_REQUESTS, BENCH_QUIET_S (60: the quiet ingestion window before the sweep), BENCH_INGEST_RPS
(40 batches/s over both clients; 0 posts flat out, as bench/ingest.py does), BENCH_SWEEP_BUDGET_S
(600). BENCH_ARTIFACTS=100000 BENCH_REQUESTS=500 is a quick smoke run.
"""

import base64
import hashlib
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import orjson
import psycopg
from psycopg.conninfo import conninfo_to_dict

# bench/common.py (shared with bench/ingest.py) reads these when imported: this benchmark's defaults.
os.environ["DATABASE_URL"] = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/footprint_bench_art"
os.environ.setdefault("BENCH_PORT", "8766")
import common  # bench/ is on sys.path when bench/artifacts.py runs
from artifacts_noise import ForeignCpu
from ingest import run_events  # its workload, so that ingestion figures are comparable

ARTIFACTS = int(os.environ.get("BENCH_ARTIFACTS", "1000000"))
SCOPES = int(os.environ.get("BENCH_SCOPES", "1000"))
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "2000"))
QUIET_S = float(os.environ.get("BENCH_QUIET_S", "60"))
INGEST_RPS = float(os.environ.get("BENCH_INGEST_RPS", "40"))
SWEEP_BUDGET_S = float(os.environ.get("BENCH_SWEEP_BUDGET_S", "600"))
DAY_MS, TTL_MS = 86_400_000, 30 * 86_400_000  # TTL: the store's default max_ttl_ms, stamped on every mint

# Row shapes as artifact_put writes them for a json payload with digest: 'sha-256' asked. Both the
# body (1,024 bytes of JSON) and the ref are functions of the id, so Python can check answers.
BODY_SQL = """convert_to('{"rows":"' || left(repeat(md5(id::text), 32), 1013) || '"}', 'UTF8')"""
REF_SQL = "'art_' || substr(translate(encode(sha256(id::text::bytea), 'base64'), '+/=', 'xyz'), 1, 22)"
INSERT_ARTIFACTS = (
    "INSERT INTO artifacts_artifact (id, store_id, scope_ns, ref, scope_conversation, kind, media_type, bytes,"
    " digest, created_at, expires_at, expiry_bucket, payload_shape, held)"
    " SELECT id, %(store)s, '_/_/conv-' || mod(id, %(scopes)s), " + REF_SQL + ", 'conv-' || mod(id, %(scopes)s),"
    " 'dataset/rows', 'application/json', 1024, 'sha-256:' || encode(sha256(" + BODY_SQL + "), 'hex'),"
    " e - %(ttl)s::int8, e, (to_timestamp(e / 1000.0) AT TIME ZONE 'UTC')::date, 'json', false"
    # expires_at uniform over [first_expiry, first_expiry + spread); created_at one TTL before it
    " FROM (SELECT g AS id, %(first_expiry)s::int8 + (random() * %(spread)s)::int8 AS e"
    "       FROM generate_series(%(first)s::int8, %(last)s::int8) g) s"
)
INSERT_PAYLOADS = (
    "INSERT INTO artifacts_payload (expiry_bucket, artifact_id, body)"
    " SELECT expiry_bucket, id, " + BODY_SQL + " FROM artifacts_artifact WHERE id BETWEEN %(first)s AND %(last)s"
)
RAW_SELECT = (  # the baseline: the head query's row by its unique key, nothing else
    "SELECT id, ref, kind, media_type, bytes, created_at, label, digest, expires_at, origin, parent_refs,"
    " payload_shape, expiry_bucket FROM artifacts_artifact WHERE store_id = %s AND scope_ns = %s AND ref = %s"
)


def body_of(artifact_id: int) -> str:
    return '{"rows":"' + (hashlib.md5(str(artifact_id).encode()).hexdigest() * 32)[:1013] + '"}'  # noqa: S324


def load(db: psycopg.Connection, store: int, first: int, count: int, first_expiry: int, spread: int) -> float:
    params = {"store": store, "scopes": SCOPES, "ttl": TTL_MS, "first": first, "last": first + count - 1,
              "first_expiry": first_expiry, "spread": spread}  # fmt: skip
    started = time.perf_counter()
    with db.transaction():
        db.execute(INSERT_ARTIFACTS, params)
        db.execute(INSERT_PAYLOADS, params)
        # Later puts take ids from the identity sequence: move it past the explicit ids.
        db.execute("SELECT setval(pg_get_serial_sequence('artifacts_artifact', 'id'), %s)", [first + count - 1])
    db.execute("VACUUM ANALYZE artifacts_artifact")  # as autovacuum would have by now: hint bits, stats
    db.execute("VACUUM ANALYZE artifacts_payload")
    common.checkpoint()  # the load's dirty pages are not the measurements' to write
    return time.perf_counter() - started


def quantiles(values: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values, n=100)  # 99 cut points
    return {"p50_ms": round(cuts[49] * 1000, 3), "p99_ms": round(cuts[98] * 1000, 3),
            "max_ms": round(max(values) * 1000, 3), "n": len(values)}  # fmt: skip


# --- Reads: head, get, resolve over HTTP; the raw SELECT --------------------------------------


def read_requests(key: str, sample: list[tuple]) -> dict[str, list]:
    """Per operation, (method, path, body, headers, check) for every sampled artifact."""
    ops: dict[str, list] = {"head": [], "get": [], "resolve": []}
    for artifact_id, ref, conversation, _ in sample:  # checks: every answer is the right one
        headers = {"Authorization": f"Bearer {key}", "AF-Scope": scope_header(conversation),
                   "Content-Type": "application/json"}  # fmt: skip
        body = body_of(artifact_id)
        resolve = {"toolName": "render_chart", "wants": {"dataset": "dataset/rows"}, "args": {"dataset": ref}}
        path, data = f"/api/v1/artifacts/{ref}", orjson.loads(body)
        ops["head"].append(("GET", path + "/meta", None, headers, lambda doc, ref=ref: doc["meta"]["ref"] == ref))
        ops["get"].append(("GET", path, None, headers, lambda doc, body=body: doc["payload"]["value"] == body))
        ops["resolve"].append(("POST", "/api/v1/wants:resolve", orjson.dumps(resolve), headers,
                               lambda doc, data=data: doc["ok"] and doc["args"]["dataset"] == data))  # fmt: skip
    return ops


def scope_header(conversation: str) -> str:
    # artifacts.scopes.scope_header, inlined: bench/ shadows the `artifacts` package in this process.
    return base64.urlsafe_b64encode(orjson.dumps({"conversationId": conversation})).decode().rstrip("=")


def time_http(conn: http.client.HTTPConnection, method: str, path: str, body, headers: dict, check) -> float:
    """One request on a keep-alive connection (http.client reconnects by itself whenever the
    server closes it: with sync workers, after every answer; that connect is then part of the cost)."""
    started = time.perf_counter()
    conn.request(method, path, body, headers)
    response = conn.getresponse()
    data = response.read()
    seconds = time.perf_counter() - started
    if response.status != 200 or not check(orjson.loads(data)):
        raise RuntimeError(f"{method} {path} answered {response.status}: {data[:300]!r}")
    return seconds


def time_raw(cur: psycopg.Cursor, store: int, ref: str, scope_ns: str) -> float:
    started = time.perf_counter()
    cur.execute(RAW_SELECT, [store, scope_ns, ref])
    row = cur.fetchone()
    seconds = time.perf_counter() - started
    if row is None or row[1] != ref:
        raise RuntimeError(f"the raw SELECT did not find {ref}")
    return seconds


# --- Ingestion load during the sweep -------------------------------------------------------------

PLACEHOLDER = "run-" + "0" * 20


class Ingestion:
    """Two clients posting ingest.py's runs in 100-event batches (a run streamed as it happens), paced
    at INGEST_RPS in all so the quiet figure is not already a saturated machine's; records (sent at,
    seconds) per request."""

    def __init__(self, key: str) -> None:
        events = run_events(PLACEHOLDER, "bench-artifacts")
        self.batches = [orjson.dumps({"events": events[i : i + 100]}) for i in range(0, len(events), 100)]
        self.key, self.stopping = key, threading.Event()
        self.samples: list[tuple[float, float]] = []
        self.failures: list[str] = []
        self.threads = [threading.Thread(target=self.client, args=(n,), daemon=True) for n in range(2)]

    def client(self, n: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", common.PORT, timeout=120)
        headers = {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"}
        interval, next_at, runs = (2 / INGEST_RPS if INGEST_RPS > 0 else 0.0), time.monotonic(), 0
        while True:
            runs += 1
            run_id = f"run-{n}{runs:019d}".encode()  # same length as the placeholder
            for template in self.batches:
                if self.stopping.wait(max(0.0, next_at - time.monotonic())):
                    return conn.close()
                next_at = max(next_at + interval, time.monotonic())  # late: go now, never burst
                sent_at, started = time.time(), time.perf_counter()
                conn.request("POST", "/api/v1/events", template.replace(PLACEHOLDER.encode(), run_id), headers)
                response = conn.getresponse()
                data = response.read()
                self.samples.append((sent_at, time.perf_counter() - started))
                if response.status != 200:
                    self.failures.append(f"{response.status} {data[:200]!r}")

    def between(self, start: float, end: float) -> list[float]:
        return [seconds for sent_at, seconds in self.samples if start <= sent_at < end]


def measure_reads(env: dict, db: psycopg.Connection, key: str, store: int) -> tuple[dict, dict]:
    """p50/p99 of the raw SELECT, head, get and resolve over the same random live refs."""
    ids = random.sample(range(2, 2 + ARTIFACTS), REQUESTS)
    sample = db.execute(
        "SELECT id, ref, scope_conversation, scope_ns FROM artifacts_artifact WHERE id = ANY(%s)", [ids]
    ).fetchall()
    random.shuffle(sample)
    # An untimed pass over the sampled rows and payloads, so that no operation pays for first reads.
    db.execute(
        "SELECT count(*) FROM artifacts_artifact a JOIN artifacts_payload p"
        " ON p.expiry_bucket = a.expiry_bucket AND p.artifact_id = a.id WHERE a.id = ANY(%s)",
        [ids],
    )
    ops = read_requests(key, sample)
    conn, cur = http.client.HTTPConnection("127.0.0.1", common.PORT, timeout=60), db.cursor()
    for i in range(min(100, REQUESTS)):  # warms every worker (lazy imports, connections): not timed
        time_raw(cur, store, sample[i][1], sample[i][3])
        for requests in ops.values():
            time_http(conn, *requests[i])
    print(f"Timing {REQUESTS} sequential requests each of raw SELECT, head, get, resolve…", flush=True)
    # The floor: the same rows by their unique key, back to back on a hot connection.
    timings = {"raw_select": [time_raw(cur, store, ref, scope_ns) for _, ref, _, scope_ns in sample]}
    # HTTP interleaved, ref by ref: whatever else happens on the machine falls on all three alike.
    timings.update({op: [] for op in ops})
    for i in range(len(sample)):
        for op, requests in ops.items():
            timings[op].append(time_http(conn, *requests[i]))
    conn.close()
    reads = {op: quantiles(values) for op, values in timings.items()}
    explained = django(env, "explain", sample[0][2], sample[0][1], key)
    return reads, explained


def measure_sweep(env: dict, db: psycopg.Connection, key: str, store: int, foreign: ForeignCpu) -> dict:
    """Store ARTIFACTS expired artifacts, then time the sweep under ingestion; ingestion latencies
    during it and in a quiet window of (about) the same length just before."""
    print(f"Loading {ARTIFACTS:,} artifacts that expired two days ago…", flush=True)
    past = datetime.now(tz=UTC).date() - timedelta(days=2)
    # artifacts.partitions.ensure_partitions_sql's DDL, for a day it never creates (the past).
    db.execute(
        f"CREATE TABLE artifacts_payload_p{past:%Y%m%d} PARTITION OF artifacts_payload"
        f" FOR VALUES FROM ('{past}') TO ('{past + timedelta(days=1)}')"
    )
    past_ms = int(datetime(past.year, past.month, past.day, tzinfo=UTC).timestamp() * 1000)
    load_s = load(db, store, 2 + ARTIFACTS, ARTIFACTS, past_ms, DAY_MS - 1)

    ingestion = Ingestion(key)
    print(f"Ingesting ({INGEST_RPS or 'flat-out'} batches/s) for a {QUIET_S:.0f} s quiet window…", flush=True)
    for thread in ingestion.threads:
        thread.start()
    try:
        time.sleep(5)  # warm-up, not counted
        foreign_quiet = foreign.now()
        time.sleep(QUIET_S)
        launched, foreign_before = time.time(), foreign.now()
        foreign_quiet = foreign_before - foreign_quiet
        print("Sweeping under the same ingestion…", flush=True)
        swept = django(env, "sweep", str(SWEEP_BUDGET_S))
        foreign_during = foreign.now() - foreign_before
        time.sleep(1)  # let the requests sent during the sweep finish
    finally:
        ingestion.stopping.set()
        for thread in ingestion.threads:
            thread.join()
    if ingestion.failures:
        raise RuntimeError(f"{len(ingestion.failures)} ingestion requests failed, e.g. {ingestion.failures[0]}")
    left = db.execute("SELECT count(*) FROM artifacts_artifact WHERE expires_at < %s", [past_ms + DAY_MS]).fetchone()
    tombstones = db.execute("SELECT count(*) FROM artifacts_tombstone").fetchone()
    if swept["metadata_rows"] != ARTIFACTS or left[0] or tombstones[0] != ARTIFACTS:
        raise RuntimeError(f"the sweep removed {swept['metadata_rows']} rows, left {left[0]}, wrote {tombstones[0]}")

    started, finished = swept.pop("started"), swept.pop("finished")
    # Quiet: the window just before the sweep's process was launched, as long as the sweep (10 s at
    # least, for a p99 worth the name; BENCH_QUIET_S at most). Django's start-up lies in neither.
    quiet_s = min(QUIET_S, max(10.0, finished - started))
    batches = swept.pop("batch_seconds")
    return {
        "seconds": round(finished - started, 2),
        **swept,
        "metadata_batches": len(batches),
        "batch_p50_ms": round(statistics.median(batches) * 1000, 1) if batches else None,
        "batch_max_ms": round(max(batches) * 1000, 1) if batches else None,
        "load_seconds": round(load_s, 1),
        "ingestion": {
            "batch_events": 100,
            "target_batches_per_s": INGEST_RPS,
            "quiet_window_s": round(quiet_s, 1),
            "quiet": quantiles(ingestion.between(launched - quiet_s, launched)),
            "during_sweep": quantiles(ingestion.between(started, finished)),
        },
        "foreign_cpu_seconds": {"quiet_window": round(foreign_quiet, 1), "sweep": round(foreign_during, 1)},
    }


def django(env: dict, *args: str) -> dict:
    """bench/artifacts_django.py in the server's environment; the JSON line it prints last."""
    cmd = [sys.executable, str(common.ROOT / "bench" / "artifacts_django.py"), *args]
    done = subprocess.run(cmd, cwd=common.ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"artifacts_django.py {args[0]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    env = common.reset_database()  # drops, recreates and migrates; the server's environment
    env.pop("FOOTPRINT_TEST_HOOKS", None)  # production: no test hooks
    key = common.manage(env, "create_agent_key", "--project", "bench", "--scopes", "ingest", "artifacts", "read")
    key = key.strip().splitlines()[-1]
    foreign = ForeignCpu(conninfo_to_dict(common.DATABASE_URL)["dbname"])
    foreign.start()
    with psycopg.connect(common.DATABASE_URL, autocommit=True) as db:
        server = common.start_gunicorn(env)
        try:
            # One real put creates the project's store through the service (and takes id 1).
            put = {"kind": "dataset/rows", "mediaType": "application/json", "digest": "sha-256"}
            put["payload"] = {"shape": "json", "value": body_of(0)}
            conn = http.client.HTTPConnection("127.0.0.1", common.PORT, timeout=60)
            conn.request("POST", "/api/v1/artifacts", orjson.dumps(put), {"Authorization": f"Bearer {key}",
                         "AF-Scope": scope_header("conv-0"), "Content-Type": "application/json"})  # fmt: skip
            response = conn.getresponse()
            assert response.status == 201, response.read()
            store = db.execute("SELECT id FROM artifacts_artifactstore").fetchone()[0]
            print(f"Loading {ARTIFACTS:,} live artifacts (1 KB payloads, {SCOPES} scopes)…", flush=True)
            # Expiring 1 to 30 days from now: created up to 29 days ago under the 30-day TTL.
            live_load_s = load(db, store, 2, ARTIFACTS, int(time.time() * 1000) + DAY_MS, TTL_MS - DAY_MS)
            foreign_before = foreign.now()
            reads, explained = measure_reads(env, db, key, store)
            reads_foreign = foreign.now() - foreign_before
            sweep = measure_sweep(env, db, key, store, foreign)
        finally:
            common.stop(server)
            foreign.terminate()
    report(live_load_s, reads, round(reads_foreign, 1), explained, sweep)


def report(live_load_s: float, reads: dict, reads_foreign: float, explained: dict, sweep: dict) -> None:
    base, ingestion = reads["raw_select"], sweep["ingestion"]
    quiet, during = ingestion["quiet"], ingestion["during_sweep"]
    ingestion["p99_ratio"] = round(during["p99_ms"] / quiet["p99_ms"], 2)
    ratios = {op: {"p50": round(r["p50_ms"] / base["p50_ms"], 1), "p99": round(r["p99_ms"] / base["p99_ms"], 1)}
              for op, r in reads.items()}  # fmt: skip
    figures = {
        "artifacts": ARTIFACTS, "scopes": SCOPES, "requests_per_operation": REQUESTS,
        "reads": reads, "ratios_to_raw_select": ratios, "reads_foreign_cpu_seconds": reads_foreign, "sweep": sweep,
        "head_query": explained, "live_load_seconds": round(live_load_s, 1), "machine": common.machine(),
    }  # fmt: skip
    (common.RESULTS / "artifacts.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(f"\n  {ARTIFACTS:,} live artifacts, {REQUESTS} sequential requests each (aim: resolve p99 < 10 ms)")
    print(f"  {'':12}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'p50 / raw':>11}{'p99 / raw':>11}")
    for op, r in reads.items():
        print(f"  {op:12}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{r['max_ms']:>9.2f}", end="")
        print(f"{ratios[op]['p50']:>11.1f}{ratios[op]['p99']:>11.1f}")
    noise = sweep["foreign_cpu_seconds"]
    statements = ", ".join(f"{k} {v['count']}x {v['seconds']} s" for k, v in sweep["statements"].items())
    print(f"""
  sweep          {sweep["seconds"]} s for {sweep["metadata_rows"]:,} expired artifacts (aim < 60 s), \
{sweep["partitions_dropped"]} partition(s) dropped
  its batches    {sweep["metadata_batches"]} of metadata: p50 {sweep["batch_p50_ms"]} ms, max {sweep["batch_max_ms"]} ms
  its statements {statements}
  ingestion p99  quiet {quiet["p99_ms"]:.1f} ms (n={quiet["n"]}), during the sweep {during["p99_ms"]:.1f} ms \
(n={during["n"]}): x{ingestion["p99_ratio"]} (aim < 2)
  ingestion p50  quiet {quiet["p50_ms"]:.1f} ms, during the sweep {during["p50_ms"]:.1f} ms
  noise          CPU seconds used by other jobs on the machine: {reads_foreign} during the reads, \
{noise["quiet_window"]} in the quiet window, {noise["sweep"]} during the sweep
  loading        {live_load_s:.0f} s live, {sweep["load_seconds"]:.0f} s expired (SQL; not a figure of the store)
  machine        {figures["machine"]}
  written to     {common.RESULTS / "artifacts.json"}""")


if __name__ == "__main__":
    main()
