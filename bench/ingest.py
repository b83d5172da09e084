"""Ingestion benchmark: POST /api/v1/events over HTTP against a bare binary COPY of the same rows.

Serves the app as `make run` does (gunicorn + gunicorn.conf.py, production settings), posts
RUNS x 500 events from 4 client threads, then COPYs the identical ledger_runevent rows into a bare
copy of that table in one transaction. Prints the figures and writes bench/results/ingest.json.
A benchmark, not a test: nothing asserts on time. It does check that every batch was stored and
that the server's chain heads equal the ones computed for the COPY rows (else the ratio compares
different work).
"""

import hashlib
import http.client
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import psutil
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Jsonb

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
RUNS = int(os.environ.get("BENCH_RUNS", "400"))  # 400 runs x 500 events = 200,000 events
EVENTS_PER_RUN, CLIENTS, WARMUP_RUNS, PAYLOAD_BYTES = 500, 4, 8, 400
PORT = int(os.environ.get("BENCH_PORT", "8765"))
DATABASE_URL = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/footprint_bench"
COLUMNS = "run_id, seq, position, type, tool_call_id, wall_clock_ms, body, doc, prev_hash, hash"
TYPES = ["int8", "int4", "int4", "text", "text", "int8", "text", "jsonb", "bytea", "bytea"]
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
        rows.append((run_pk, e["seq"], e["seq"], e["type"], call_id, wall, body.decode(), doc, prev, head))
    return rows, head.hex()


# --- Environment: database, server, memory sampling -------------------------------------------


def reset_database() -> str:
    name = conninfo_to_dict(DATABASE_URL)["dbname"]
    if "bench" not in name:  # it is dropped below: never a database that may hold real runs
        sys.exit(f"DATABASE_URL names database '{name}'; the benchmark drops and recreates it, so "
                 "point DATABASE_URL at a database whose name contains 'bench'.")  # fmt: skip
    with psycopg.connect(make_conninfo(DATABASE_URL, dbname="postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name


def manage(env: dict[str, str], *args: str) -> str:
    # stderr captured too: create_agent_key's "store it now" notice is noise here.
    cmd = [sys.executable, "manage.py", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout


def start_gunicorn(env: dict[str, str]) -> subprocess.Popen:
    with socket.socket() as probe:  # fail with a sentence, not a gunicorn traceback
        if probe.connect_ex(("127.0.0.1", PORT)) == 0:
            sys.exit(f"Port {PORT} is in use; set BENCH_PORT to a free port.")
    cmd = [sys.executable, "-m", "gunicorn", "footprint_site.wsgi", "-c", "gunicorn.conf.py"]
    # Own session, so stopping it is one killpg that reaches the master and every worker.
    with open(RESULTS / "gunicorn.log", "wb") as log:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_healthy(server: subprocess.Popen, deadline_s: float = 60) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if server.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {server.returncode}; see {RESULTS}/gunicorn.log")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=5)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"/healthz did not answer 200 within {deadline_s} s")


def stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


class RssSampler(threading.Thread):
    """Peak RSS of the gunicorn workers (the master's children), sampled every 100 ms.

    Workers fork from a preloaded master, so part of each RSS is shared: the total overstates
    the memory really used; the largest single worker is the per-worker figure to watch."""

    def __init__(self, master_pid: int) -> None:
        super().__init__(daemon=True)
        self.master, self.done = psutil.Process(master_pid), threading.Event()
        self.peak_total = self.peak_worker = self.workers = 0

    def run(self) -> None:
        while not self.done.wait(0.1):
            rss = []
            for child in self.master.children():
                try:
                    rss.append(child.memory_info().rss)
                except psutil.NoSuchProcess:
                    continue
            self.workers = max(self.workers, len(rss))
            self.peak_total = max(self.peak_total, sum(rss))
            self.peak_worker = max(self.peak_worker, *rss, 0)


# --- The two phases --------------------------------------------------------------------------


def post_all(key: str, batches: list[tuple[str, bytes]]) -> tuple[float, list[tuple]]:
    """Post every batch from CLIENTS threads sharing one queue; wall time and per-request results."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    queue, lock, results = iter(batches), threading.Lock(), []

    def client() -> None:
        # One persistent http.client connection per thread: it reconnects by itself when the
        # server closes (gunicorn's sync workers answer every request with Connection: close).
        conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
        while True:
            with lock:
                item = next(queue, None)
            if item is None:
                return conn.close()
            started = time.perf_counter()
            conn.request("POST", "/api/v1/events", item[1], headers)
            response = conn.getresponse()
            data = response.read()
            results.append((time.perf_counter() - started, item[0], response.status, data))

    started = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        for future in [pool.submit(client) for _ in range(CLIENTS)]:
            future.result()  # re-raises a client's exception here
    return time.perf_counter() - started, results


def checkpoint() -> None:
    # Neither phase should pay for flushing the other's dirty buffers (needs superuser; optional).
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        try:
            conn.execute("CHECKPOINT")
        except psycopg.Error:
            pass


def copy_baseline(rows: list[tuple]) -> float:
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_copy")
        conn.execute("CREATE TABLE bench_copy (LIKE ledger_runevent INCLUDING ALL)")
        checkpoint()
        conn.autocommit = False
        started = time.perf_counter()
        with conn.cursor() as cur, cur.copy(f"COPY bench_copy ({COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(TYPES)  # the binary types the service declares for ledger_runevent
            for row in rows:
                copy.write_row(row)
        conn.commit()
        return time.perf_counter() - started


def machine(load_before: float) -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    models = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")]
    with psycopg.connect(DATABASE_URL) as conn:
        pg = conn.execute("SELECT current_setting('server_version'), current_setting('synchronous_commit')")
        version, sync = pg.fetchone()
    # A load average near or above the CPU count before the start means something else was running.
    return (f"{os.cpu_count()} CPUs, {models[0] if models else 'unknown CPU'}, "
            f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM; PostgreSQL {version} "
            f"(synchronous_commit={sync}); load average before start {load_before:.2f}")  # fmt: skip


def main() -> None:
    load_before = os.getloadavg()[0]
    RESULTS.mkdir(parents=True, exist_ok=True)
    print(f"Preparing {RUNS * EVENTS_PER_RUN:,} events in {RUNS} runs…", flush=True)
    tag = f"bench-{int(time.time())}"  # fresh runIds every time, so no batch is a duplicate
    runs = {f"{tag}-{n:04d}": run_events(f"{tag}-{n:04d}", f"{tag}-s{n % 50}") for n in range(RUNS + WARMUP_RUNS)}
    # Everything the clients send is serialized now, so the timed loop only moves bytes.
    bodies = [(run_id, orjson.dumps({"events": events})) for run_id, events in runs.items()]
    warmup, measured = bodies[:WARMUP_RUNS], bodies[WARMUP_RUNS:]
    heads, rows = {}, []
    for pk, (run_id, _) in enumerate(measured, start=1):
        run_rows, heads[run_id] = copy_rows(pk, runs[run_id])
        rows.extend(run_rows)
    del runs

    name = reset_database()
    env = dict(os.environ, DATABASE_URL=DATABASE_URL, HOST="127.0.0.1", PORT=str(PORT))
    env |= {"DJANGO_DEBUG": "0", "DJANGO_SECURE_COOKIES": "0"}
    env.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    print(f"Migrating database '{name}'…", flush=True)
    manage(env, "migrate", "--no-input")
    key = manage(env, "create_agent_key", "--project", "bench", "--scopes", "ingest", "read")
    key = key.strip().splitlines()[-1]

    server = start_gunicorn(env)
    try:
        wait_healthy(server)
        post_all(key, warmup)  # first requests pay for connections and lazy imports: not measured
        checkpoint()
        sampler = RssSampler(server.pid)
        sampler.start()
        print(f"Posting {len(measured)} batches of {EVENTS_PER_RUN} from {CLIENTS} clients…", flush=True)
        http_s, results = post_all(key, measured)
        sampler.done.set()
        sampler.join()
    finally:
        stop(server)

    for _, run_id, status, data in results:
        if status != 200 or orjson.loads(data)["runs"][0]["head"] != heads[run_id]:
            raise RuntimeError(f"{run_id} was not stored as expected: {status} {data[:300]!r}")
    print(f"COPYing {len(rows):,} rows into bench_copy…", flush=True)
    copy_s = copy_baseline(rows)
    report(len(rows), http_s, copy_s, results, sampler, machine(load_before), name)


def report(events: int, http_s: float, copy_s: float, results: list, sampler: RssSampler, box: str, db: str) -> None:
    cuts = statistics.quantiles([r[0] * 1000 for r in results], n=100)  # 99 cut points
    figures = {
        "events": events, "batch_size": EVENTS_PER_RUN, "clients": CLIENTS,
        "payload_bytes": PAYLOAD_BYTES, "http_seconds": round(http_s, 3),
        "http_events_per_s": round(events / http_s), "copy_seconds": round(copy_s, 3),
        "copy_events_per_s": round(events / copy_s), "ratio": round(copy_s / http_s, 3),
        "p50_ms": round(cuts[49], 1), "p99_ms": round(cuts[98], 1),
        "max_ms": round(max(r[0] for r in results) * 1000, 1), "web_workers": sampler.workers,
        "workers_peak_rss_mib_total": round(sampler.peak_total / 2**20, 1),
        "worker_peak_rss_mib_max": round(sampler.peak_worker / 2**20, 1),
        "machine": box, "database": db,
    }  # fmt: skip
    (RESULTS / "ingest.json").write_text(json.dumps(figures, indent=2) + "\n")
    f = figures
    print(
        f"\n  http ingest     {f['http_events_per_s']:>8,} events/s  ({http_s:.2f} s)"
        f"\n  copy baseline   {f['copy_events_per_s']:>8,} events/s  ({copy_s:.2f} s, one transaction)"
        f"\n  ratio           {f['ratio']:>8.2f}  (http / copy; aim >= 0.70)"
        f"\n  latency         p50 {f['p50_ms']} ms, p99 {f['p99_ms']} ms (aim < 60), max {f['max_ms']} ms"
        f"\n  web workers     {f['web_workers']}, peak RSS {f['worker_peak_rss_mib_max']} MiB largest,"
        f" {f['workers_peak_rss_mib_total']} MiB summed"
        f"\n  machine         {box}\n  written to      {RESULTS / 'ingest.json'}"
    )


if __name__ == "__main__":
    main()
