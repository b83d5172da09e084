"""Ingestion benchmark: POST /api/v1/events over HTTP against a bare binary COPY of the same rows.

Serves the app as `make run` does (gunicorn + gunicorn.conf.py, production settings), posts
RUNS x 500 events from 4 client threads, and COPYs the identical ledger_runevent rows into a bare
copy of that table in one transaction (three times: once before the HTTP phase, twice after; the
median is the baseline). Then the same load again, on fresh runs, against two gunicorn nodes
(each with half the workers, on two ports, the clients split between them) behind one PostgreSQL:
events per second, CPU per event per tier, and what one core of each tier carries, the figures
docs/scaling.md's capacity model is made of, with the disk the ledger takes per million events.
Prints the figures and writes bench/results/ingest.json.
A benchmark, not a test: nothing asserts on time. It does check that every batch was stored and
that the server's chain heads equal the ones computed for the COPY rows (else the ratio compares
different work).
"""

import hashlib
import http.client
import json
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import common  # bench/common.py: running bench/ingest.py puts bench/ on sys.path
import orjson
import psutil
import psycopg
from psycopg.types.json import Jsonb

RUNS = int(os.environ.get("BENCH_RUNS", "400"))  # 400 runs x 500 events = 200,000 events
EVENTS_PER_RUN, CLIENTS, PAYLOAD_BYTES = 500, 4, 400
# Not measured: the first requests of each of the 16 web threads (4 workers x 4 threads) open
# its database connection and warm its caches, and psycopg prepares a statement on its 5th run.
# A server under steady load has all that behind it. The warm-up posts from one client per web
# thread, so each worker holds four connections in flight and every thread serves some of the 96
# (with 4 clients, a worker the balancer skipped stayed cold and its first measured requests
# took ~450 ms: two of the four requests p99 allows above it).
WARMUP_RUNS = 96
COPY_ATTEMPTS = 3
COLUMNS = "run_id, seq, position, type, tool_call_id, wall_clock_ms, body, doc, prev_hash, hash, period"
TYPES = ["int8", "int4", "int4", "text", "text", "int8", "text", "jsonb", "bytea", "bytea", "int4"]
PERIOD = int(time.strftime("%Y%m", time.gmtime()))  # the month a new run's rows carry (ledger/partitions.py)
FILLER = "Order A-7781 shipped with DHL and is at the Leipzig hub; the carrier expects delivery. " * 8

# --- Workload: agentfootprint runs shaped like tests/data/*/events.json -----------------------

# Where each type's free text lives; it is padded so every payload serializes to ~PAYLOAD_BYTES.
# Tool args/results carry theirs inside, as they do in real runs (and the projection copies them).
PAD_AT = {
    "stream.tool_start": ("args", "query"),
    "stream.tool_end": ("result", "notes"),
    "middleware.decision": ("why",),
    "context.injected": ("rawContent",),
    "agent.turn_start": ("userPrompt",),
    "agent.turn_end": ("finalContent",),
}


def iteration(i: int) -> list[tuple[str, dict]]:
    """One ReAct iteration: 8 events that feed every hot projection (tool calls, decisions, usage)."""
    call = f"call-{i}"
    return [
        ("agent.iteration_start", {"turnIndex": 0, "iterIndex": i}),
        ("context.injected", {"slot": "messages", "source": "user", "asRole": "user"}),
        ("stream.llm_start", {"iteration": i, "provider": "mock", "model": "mock-small"}),
        ("stream.llm_end", {"iteration": i, "usage": {"input": 200 + i, "output": 20}}),
        ("stream.tool_start", {"toolName": "lookup_order", "toolCallId": call, "args": {"id": i}}),
        (
            "middleware.decision",
            {"middleware": "audit-trail", "moment": "before-tool", "at": "tool", "iteration": i,
             "toolName": "lookup_order", "toolCallId": call, "outcome": "allow", "changed": False},
        ),
        ("stream.tool_end", {"toolCallId": call, "result": {"status": "shipped"}, "durationMs": 2}),
        ("context.injected", {"slot": "messages", "source": "tool-result", "asRole": "tool"}),
    ]  # fmt: skip


def run_events(run_id: str, session: str) -> list[dict]:
    cycles = (EVENTS_PER_RUN - 4) // 8
    steps = [("agent.run_configured", {"agentId": "support-agent"}), ("agent.turn_start", {})]
    steps += [step for i in range(1, cycles + 1) for step in iteration(i)]
    steps += [
        ("stream.llm_end", {"iteration": cycles, "usage": {"input": 900, "output": 60}}),
        ("agent.turn_end", {"turnIndex": 0, "iterationCount": cycles}),
    ]
    assert len(steps) == EVENTS_PER_RUN, "EVENTS_PER_RUN must be 4 + a multiple of 8"
    events = []
    for seq, (type_, payload) in enumerate(steps):
        *parents, leaf = PAD_AT.get(type_, ("content",))
        target = payload
        for key in parents:
            target = target[key]
        target[leaf] = ""
        target[leaf] = FILLER[: max(0, PAYLOAD_BYTES - len(orjson.dumps(payload)))]
        meta = {"wallClockMs": 1_796_043_007_832 + 7 * seq, "runOffsetMs": 7 * seq}
        meta |= {"runtimeStageId": f"{type_}#{seq}", "subflowPath": [], "runId": run_id}
        meta |= {"compositionPath": ["Agent:agent"], "sessionId": session}
        events.append({"seq": seq, "type": f"agentfootprint.{type_}", "payload": payload, "meta": meta})
    return events


def copy_rows(run_pk: int, events: list[dict]) -> tuple[list[tuple], str]:
    """The ledger_runevent rows the service writes for a fresh run (chain from 32 zero bytes)."""
    rows, head = [], bytes(32)
    for e in events:
        body = orjson.dumps(e, option=orjson.OPT_SORT_KEYS)  # the service's canonical text
        prev, head = head, hashlib.sha256(head + body).digest()
        doc = Jsonb(body, dumps=lambda b: b)  # already JSON, as the service passes it
        call_id, wall = e["payload"].get("toolCallId"), e["meta"]["wallClockMs"]
        rows.append((run_pk, e["seq"], e["seq"], e["type"], call_id, wall, body.decode(), doc, prev, head, PERIOD))
    return rows, head.hex()


# --- The two phases --------------------------------------------------------------------------


def post_all(
    key: str, batches: list[tuple[str, bytes]], clients: int = CLIENTS, ports: tuple[int, ...] = (common.PORT,)
) -> tuple[float, list[tuple]]:
    """Post every batch from `clients` threads sharing one queue, the threads spread over the web
    nodes on `ports`; wall time and per-request results."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    queue, lock, results, abort = iter(batches), threading.Lock(), [], threading.Event()

    def client(port: int) -> None:
        # One persistent http.client connection per thread: it reconnects by itself when the
        # server closes (gunicorn's sync workers answer every request with Connection: close).
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                item = next(queue, None)
            if item is None or abort.is_set():
                return conn.close()
            started = time.perf_counter()
            conn.request("POST", "/api/v1/events", item[1], headers)
            response = conn.getresponse()
            data = response.read()
            results.append((time.perf_counter() - started, item[0], response.status, data))

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(client, ports[n % len(ports)]) for n in range(clients)]
        try:
            for future in futures:
                future.result()  # re-raises a client's exception here
        except BaseException:  # Ctrl-C or a failed client: the others stop after their request
            abort.set()
            raise
    return time.perf_counter() - started, results


def serve_and_post(env: dict[str, str], key: str, warmup: list, measured: list, nodes: int = 1) -> tuple:
    """Serve from `nodes` gunicorn masters on consecutive ports sharing the configured workers,
    warm every thread, then post `measured` and meter each tier's CPU."""
    workers = max(1, common.configured_workers(env) // nodes)
    ports = tuple(common.PORT + n for n in range(nodes))
    node_env = {"WEB_CONCURRENCY": str(workers)} if nodes > 1 else {}
    servers: list = []
    try:
        for port in ports:
            servers.append(common.start_gunicorn({**env, **node_env, "PORT": str(port)}))
        web_threads = sum(len(psutil.Process(s.pid).children()) for s in servers) * int(env.get("WEB_THREADS") or 4)
        post_all(key, warmup, clients=web_threads, ports=ports)  # first requests pay for connections: not measured
        common.checkpoint()
        samplers = [common.RssSampler(s.pid) for s in servers]
        for sampler in samplers:
            sampler.start()
        web = [pid for s in samplers for pid in (s.master.pid, *(child.pid for child in s.master.children()))]
        print(f"Posting {len(measured)} batches of {EVENTS_PER_RUN} from {CLIENTS} clients to {nodes} web node(s)…")
        with common.CpuMeter(web=web, postgres=common.database_backends) as cpu:
            seconds, results = post_all(key, measured, ports=ports)
        for sampler in samplers:
            sampler.done.set()
            sampler.join()
        return seconds, results, cpu.seconds, samplers[0]
    finally:
        for server in servers:
            common.stop(server)


def ledger_disk_bytes() -> tuple[int, int]:
    """(events stored, bytes of every ledger table with its indexes and TOAST): disk per event."""
    with psycopg.connect(common.DATABASE_URL) as conn:
        events = conn.execute("SELECT count(*) FROM ledger_runevent").fetchone()[0]
        size = conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname LIKE 'ledger\\_%'"
        ).fetchone()[0]
    return events, int(size)


def check_stored(results: list[tuple], heads: dict[str, str]) -> None:
    for _, run_id, status, data in results:
        if status != 200 or (heads and orjson.loads(data)["runs"][0]["head"] != heads[run_id]):
            raise RuntimeError(f"{run_id} was not stored as expected: {status} {data[:300]!r}")


def copy_baseline(rows: list[tuple], attempt: int) -> tuple[float, dict[str, float]]:
    table = f"bench_copy_{attempt}"
    with psycopg.connect(common.DATABASE_URL, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (LIKE ledger_runevent INCLUDING ALL)")
        common.checkpoint()
        conn.autocommit = False
        with common.CpuMeter(postgres=[conn.info.backend_pid]) as cpu:
            started = time.perf_counter()
            with conn.cursor() as cur, cur.copy(f"COPY {table} ({COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(TYPES)  # the binary types the service declares for ledger_runevent
                for row in rows:
                    copy.write_row(row)
            conn.commit()
            seconds = time.perf_counter() - started
    return seconds, cpu.seconds


def main() -> None:
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    print(f"Preparing {RUNS * EVENTS_PER_RUN:,} events in {RUNS} runs…", flush=True)
    tag = f"bench-{int(time.time())}"  # fresh runIds every time, so no batch is a duplicate
    runs = {f"{tag}-{n:04d}": run_events(f"{tag}-{n:04d}", f"{tag}-s{n % 50}") for n in range(RUNS + WARMUP_RUNS)}
    # Everything the clients send is serialized now, so the timed loop only moves bytes.
    bodies = [(run_id, orjson.dumps({"events": events})) for run_id, events in runs.items()]
    warmup, measured = bodies[:WARMUP_RUNS], bodies[WARMUP_RUNS:]
    two_nodes = [  # the second phase's own runs: a re-sent batch would be a duplicate, not work
        (f"{tag}-n{n:04d}", orjson.dumps({"events": run_events(f"{tag}-n{n:04d}", f"{tag}-s{n % 50}")}))
        for n in range(RUNS + WARMUP_RUNS)
    ]
    heads, rows = {}, []
    for pk, (run_id, _) in enumerate(measured, start=1):
        run_rows, heads[run_id] = copy_rows(pk, runs[run_id])
        rows.extend(run_rows)
    del runs

    env = common.reset_database()
    key = common.manage(env, "create_agent_key", "--project", "bench", "--scopes", "ingest", "read").split()[-1]
    # The baseline swings more than the HTTP phase (WAL segments created or recycled, the shared
    # machine). COPY_ATTEMPTS COPYs, each into a fresh table, one before the HTTP phase and the
    # rest after it, so a machine that speeds up or slows down mid-run weighs on both sides; the
    # median is the one compared.
    print(f"COPYing {len(rows):,} rows into a bare table ({COPY_ATTEMPTS} times: once now, then after)…", flush=True)
    copies = [copy_baseline(rows, 0)]
    http_s, results, http_cpu, sampler = serve_and_post(env, key, warmup, measured)
    check_stored(results, heads)
    copies += [copy_baseline(rows, attempt) for attempt in range(1, COPY_ATTEMPTS)]
    nodes_s, nodes_results, nodes_cpu, _ = serve_and_post(
        env, key, two_nodes[:WARMUP_RUNS], two_nodes[WARMUP_RUNS:], nodes=2
    )
    check_stored(nodes_results, {})
    stored, disk = ledger_disk_bytes()
    copies.sort(key=lambda c: c[0])
    copy_s, copy_cpu = copies[len(copies) // 2]

    events, size = len(rows), sum(len(body) for _, body in measured) // len(measured)
    cuts = statistics.quantiles([r[0] * 1000 for r in results], n=100, method="inclusive")  # 99 cut points
    cpu_us = {phase: {k: round(v / events * 1e6, 1) for k, v in cpu.items()} for phase, cpu in
              (("http", http_cpu), ("copy", copy_cpu), ("two_nodes", nodes_cpu))}  # fmt: skip
    node_cuts = statistics.quantiles([r[0] * 1000 for r in nodes_results], n=100, method="inclusive")
    n = cpu_us["two_nodes"]
    f = {
        "events": events, "batch_size": EVENTS_PER_RUN, "clients": CLIENTS,
        "payload_bytes": PAYLOAD_BYTES, "request_bytes": size, "http_seconds": round(http_s, 3),
        "http_events_per_s": round(events / http_s), "copy_seconds": round(copy_s, 3),
        "copy_events_per_s": round(events / copy_s), "ratio": round(copy_s / http_s, 3),
        "copy_events_per_s_each": [round(events / c[0]) for c in copies],
        "p50_ms": round(cuts[49], 1), "p99_ms": round(cuts[98], 1),
        "max_ms": round(max(r[0] for r in results) * 1000, 1), "web_workers": sampler.workers,
        "workers_peak_rss_mib_total": round(sampler.peak_total / 2**20, 1),
        "worker_peak_rss_mib_max": round(sampler.peak_worker / 2**20, 1),
        "cpu_us_per_event": cpu_us, "machine": common.machine(), "database_url": common.DATABASE_URL,
        "two_nodes": {
            "events_per_s": round(events / nodes_s), "ratio_to_one_node": round(http_s / nodes_s, 3),
            "p50_ms": round(node_cuts[49], 1), "p99_ms": round(node_cuts[98], 1),
            "events_per_s_per_web_core": round(1e6 / n["web"]),
            "events_per_s_per_postgres_core": round(1e6 / n["postgres"]),
        },
        "disk_mib_per_million_events": round(disk / stored * 1e6 / 2**20),
    }  # fmt: skip
    (common.RESULTS / "ingest.json").write_text(json.dumps(f, indent=2) + "\n")
    h, c, nodes = cpu_us["http"], cpu_us["copy"], f["two_nodes"]
    print(
        f"\n  http ingest     {f['http_events_per_s']:>8,} events/s  ({http_s:.2f} s, {size // 1024} KiB requests)"
        f"\n  copy baseline   {f['copy_events_per_s']:>8,} events/s  ({copy_s:.2f} s, one transaction;"
        f" median of {', '.join(f'{rate:,}' for rate in f['copy_events_per_s_each'])})"
        f"\n  ratio           {f['ratio']:>8.2f}  (http / copy; aim >= 0.70)"
        f"\n  latency         p50 {f['p50_ms']} ms, p99 {f['p99_ms']} ms (aim < 60), max {f['max_ms']} ms"
        f"\n  web workers     {f['web_workers']}, peak RSS {f['worker_peak_rss_mib_max']} MiB largest,"
        f" {f['workers_peak_rss_mib_total']} MiB summed"
        f"\n  CPU µs/event    http: web {h['web']} + postgres {h['postgres']} (client {h['client']});"
        f" copy: postgres {c['postgres']} (client {c['client']})"
        f"\n  other CPU       {h['other']} µs/event during http, {c['other']} during copy"
        " (PostgreSQL background writers and other jobs; high values mean noisy figures)"
        f"\n  two web nodes   {nodes['events_per_s']:>8,} events/s, {nodes['ratio_to_one_node']:.2f}"
        f" of one node's rate; p50 {nodes['p50_ms']} ms, p99 {nodes['p99_ms']} ms"
        f"\n  per core        {nodes['events_per_s_per_web_core']:,} events/s per web core (web {n['web']} µs),"
        f" {nodes['events_per_s_per_postgres_core']:,} per PostgreSQL core (postgres {n['postgres']} µs)"
        f"\n  disk            {f['disk_mib_per_million_events']:,} MiB per million events"
        f" (ledger tables, indexes, TOAST; {stored:,} events stored)"
        f"\n  machine         {f['machine']}\n  written to      {common.RESULTS / 'ingest.json'}"
    )


if __name__ == "__main__":
    main()
