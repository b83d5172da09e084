"""Ingestion benchmark: POST /api/v1/events over HTTP against a bare binary COPY of the same rows.

Serves the app as `make run` does (gunicorn + gunicorn.conf.py, production settings), posts
RUNS x 500 events from 4 keep-alive clients, then COPYs the identical ledger_runevent rows into a
bare copy of that table in one transaction. Prints the figures and writes bench/results/ingest.json.
A benchmark, not a test: nothing here asserts on time. It does check that every batch was stored
and that the server's chain heads equal the ones computed for the COPY rows (same rows, or the
comparison means nothing).
"""

import hashlib
import http.client
import json
import os
import secrets
import signal
import socket
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
PREFIX = "agentfootprint."
FILLER = "The customer asked where order A-7781 is; the agent looked it up, asked the carrier and " * 8


# --- Workload: realistic agentfootprint runs (shapes follow tests/data/*/events.json) -----------

def _context(source: str):
    return lambda i, pad: {
        "contentSummary": pad[:80], "contentHash": f"{i:08x}", "slot": "messages", "source": source,
        "reason": f"conversation history [{i}]", "rawContent": pad, "asRole": "user",
        "asRecency": "latest",
    }


# One ReAct iteration: 8 events touching every hot projection (tool calls, decisions, tokens).
CYCLE = [
    ("agent.iteration_start", lambda i, pad: {"turnIndex": 0, "iterIndex": i, "detail": pad}),
    ("context.injected", _context("user")),
    ("stream.llm_start", lambda i, pad: {
        "iteration": i, "provider": "mock", "model": "mock-small", "systemPromptChars": 61,
        "messagesCount": i, "toolsCount": 1, "tools": [{"name": "lookup_order", "description": pad}]}),
    ("stream.llm_end", lambda i, pad: {
        "iteration": i, "content": pad, "toolCallCount": 1, "usage": {"input": 200 + i, "output": 20},
        "stopReason": "tool_use", "durationMs": 120}),
    ("stream.tool_start", lambda i, pad: {
        "toolName": "lookup_order", "toolCallId": f"call-{i}", "args": {"orderId": f"A-{i}", "q": pad}}),
    ("middleware.decision", lambda i, pad: {
        "middleware": "audit-trail", "moment": "before-tool", "at": "tool", "toolName": "lookup_order",
        "toolCallId": f"call-{i}", "iteration": i, "outcome": "allow", "changed": False, "why": pad}),
    ("stream.tool_end", lambda i, pad: {
        "toolCallId": f"call-{i}", "durationMs": 2,
        "result": {"orderId": f"A-{i}", "status": "shipped", "carrier": "DHL", "notes": pad}}),
    ("context.injected", _context("tool-result")),
]
HEAD = [
    ("agent.run_configured", lambda i, pad: {
        "agentId": "support-agent", "llm": {"provider": "mock", "model": "mock-small"},
        "reactMode": "dynamic", "memories": [], "systemPrompt": pad}),
    ("agent.turn_start", lambda i, pad: {"turnIndex": 0, "userPrompt": pad}),
]
TAIL = [
    ("stream.llm_end", lambda i, pad: {
        "iteration": i, "content": pad, "toolCallCount": 0, "usage": {"input": 900, "output": 60},
        "stopReason": "end_turn", "durationMs": 140}),
    ("agent.turn_end", lambda i, pad: {
        "turnIndex": 0, "finalContent": pad, "totalInputTokens": 9000, "totalOutputTokens": 1300,
        "iterationCount": i, "durationMs": 3000}),
]


def _padded(build, i: int):
    # Two passes so every payload serializes to ~PAYLOAD_BYTES whatever its fixed fields weigh.
    base = len(orjson.dumps(build(i, "")))
    return build(i, FILLER[: max(0, PAYLOAD_BYTES - base)])


def run_events(run_id: str, session: str) -> list[dict]:
    cycles = (EVENTS_PER_RUN - len(HEAD) - len(TAIL)) // len(CYCLE)
    steps = [(t, b, 0) for t, b in HEAD]
    steps += [(t, b, n + 1) for n in range(cycles) for t, b in CYCLE]
    steps += [(t, b, cycles) for t, b in TAIL]
    assert len(steps) == EVENTS_PER_RUN, "EVENTS_PER_RUN must be HEAD + k*CYCLE + TAIL"
    wall = 1_796_043_007_832
    return [
        {"seq": seq, "type": PREFIX + type_, "payload": _padded(build, it), "meta": {
            "wallClockMs": wall + 7 * seq, "runOffsetMs": 7 * seq, "runtimeStageId": f"{type_}#{seq}",
            "subflowPath": [], "compositionPath": ["Agent:agent"], "runId": run_id, "sessionId": session}}
        for seq, (type_, build, it) in enumerate(steps)
    ]


def copy_rows(run_pk: int, events: list[dict]) -> tuple[list[tuple], str]:
    """The ledger_runevent rows the service writes for a fresh run (chain from 32 zero bytes)."""
    rows, head = [], bytes(32)
    for event in events:
        body = orjson.dumps(event, option=orjson.OPT_SORT_KEYS)  # the service's canonical text
        prev, head = head, hashlib.sha256(head + body).digest()
        call_id = event["payload"].get("toolCallId")
        rows.append((run_pk, event["seq"], event["seq"], event["type"], call_id,
                     event["meta"]["wallClockMs"], body.decode(), Jsonb(body, dumps=_raw), prev, head))
    return rows, head.hex()


def _raw(data: bytes) -> bytes:
    return data


# --- Environment: database, key, server ------------------------------------------------------

def reset_database() -> str:
    name = conninfo_to_dict(DATABASE_URL)["dbname"]
    if "bench" not in name:  # it is dropped below: never touch a database that holds real runs
        sys.exit(f"DATABASE_URL names database '{name}'; the benchmark drops and recreates its "
                 "database, so point it at one whose name contains 'bench'.")
    with psycopg.connect(make_conninfo(DATABASE_URL, dbname="postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name


def server_env() -> dict[str, str]:
    env = dict(os.environ, DATABASE_URL=DATABASE_URL, DJANGO_DEBUG="0", DJANGO_SECURE_COOKIES="0",
               HOST="127.0.0.1", PORT=str(PORT))
    env.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    return env


def manage(env: dict[str, str], *args: str) -> str:
    out = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
                         stdout=subprocess.PIPE, text=True)
    return out.stdout


def start_gunicorn(env: dict[str, str]) -> subprocess.Popen:
    with socket.socket() as probe:  # fail with a sentence, not a gunicorn traceback
        if probe.connect_ex(("127.0.0.1", PORT)) == 0:
            sys.exit(f"Port {PORT} is in use; set BENCH_PORT to a free port.")
    log = open(RESULTS / "gunicorn.log", "wb")  # noqa: SIM115 - lives as long as the server
    cmd = [sys.executable, "-m", "gunicorn", "footprint_site.wsgi", "-c", "gunicorn.conf.py"]
    # Own session, so stopping it means killing one process group: master and workers together.
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


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
    """Peak RSS of the gunicorn workers (the master's children), sampled every 100 ms."""

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
            self.peak_total, self.peak_worker = max(self.peak_total, sum(rss)), max([self.peak_worker, *rss])


# --- The two phases --------------------------------------------------------------------------

def post_all(key: str, batches: list[tuple[str, bytes]]) -> tuple[float, list[tuple]]:
    """Post every batch from CLIENTS threads sharing one queue; wall time and per-request results."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    queue, lock, results = iter(batches), threading.Lock(), []

    def client() -> None:
        # http.client reopens by itself when the server closes (sync workers close every response).
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


def checkpoint(conn: psycopg.Connection) -> None:
    # Neither phase should pay for flushing the other's dirty buffers (needs superuser; optional).
    try:
        conn.execute("CHECKPOINT")
    except psycopg.Error:
        conn.rollback()


def copy_baseline(rows: list[tuple]) -> float:
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_copy")
        conn.execute("CREATE TABLE bench_copy (LIKE ledger_runevent INCLUDING ALL)")
        checkpoint(conn)
        conn.autocommit = False
        with conn.cursor() as cur:
            started = time.perf_counter()
            with cur.copy("COPY bench_copy (run_id, seq, position, type, tool_call_id, wall_clock_ms,"
                          " body, doc, prev_hash, hash) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "int4", "int4", "text", "text", "int8", "text", "jsonb",
                                "bytea", "bytea"])  # the same binary types the service declares
                for row in rows:
                    copy.write_row(row)
            conn.commit()
            return time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                  if line.startswith("model name")), "unknown CPU")
    return f"{os.cpu_count()} CPUs, {model}, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM"


def main() -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    print(f"Preparing {RUNS * EVENTS_PER_RUN:,} events in {RUNS} runs…", flush=True)
    session_id = f"bench-{int(time.time())}"
    runs = {f"run-{session_id}-{n:04d}": run_events(f"run-{session_id}-{n:04d}", f"{session_id}-{n % 50}")
            for n in range(RUNS + WARMUP_RUNS)}
    bodies = [(run_id, orjson.dumps({"events": events})) for run_id, events in runs.items()]
    warmup, measured = bodies[:WARMUP_RUNS], bodies[WARMUP_RUNS:]
    expected_heads, rows = {}, []
    for pk, (run_id, _) in enumerate(measured, start=1):
        run_rows, expected_heads[run_id] = copy_rows(pk, runs[run_id])
        rows.extend(run_rows)
    del runs

    name = reset_database()
    env = server_env()
    print(f"Migrating database '{name}'…", flush=True)
    manage(env, "migrate", "--no-input")
    key = manage(env, "create_agent_key", "--project", "bench", "--scopes", "ingest", "read")
    key = key.strip().splitlines()[-1]

    server = start_gunicorn(env)
    try:
        wait_healthy(server)
        post_all(key, warmup)  # first requests pay for connections and lazy imports: not measured
        with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
            checkpoint(conn)
        sampler = RssSampler(server.pid)
        sampler.start()
        print(f"Posting {len(measured)} batches of {EVENTS_PER_RUN} from {CLIENTS} clients…", flush=True)
        http_s, results = post_all(key, measured)
        sampler.done.set()
        sampler.join()
    finally:
        stop(server)

    for _, run_id, status, data in results:
        receipt = orjson.loads(data)
        if status != 200 or receipt["runs"][0]["head"] != expected_heads[run_id]:
            raise RuntimeError(f"batch for {run_id} was not stored as expected: {status} {data[:300]!r}")
    print(f"COPYing {len(rows):,} rows into bench_copy…", flush=True)
    copy_s = copy_baseline(rows)

    latencies = [r[0] * 1000 for r in results]
    events = len(rows)
    figures = {
        "events": events, "batch_size": EVENTS_PER_RUN, "clients": CLIENTS,
        "payload_bytes": PAYLOAD_BYTES, "request_bytes_avg": sum(len(b) for _, b in measured) // len(measured),
        "http_seconds": round(http_s, 3), "http_events_per_s": round(events / http_s),
        "copy_seconds": round(copy_s, 3), "copy_events_per_s": round(events / copy_s),
        "ratio": round(copy_s / http_s, 3),
        "p50_ms": round(percentile(latencies, 0.50), 1), "p99_ms": round(percentile(latencies, 0.99), 1),
        "max_ms": round(max(latencies), 1), "web_workers": sampler.workers,
        "workers_peak_rss_mib_total": round(sampler.peak_total / 2**20, 1),
        "worker_peak_rss_mib_max": round(sampler.peak_worker / 2**20, 1),
        "machine": machine(), "postgres_database": name,
    }
    (RESULTS / "ingest.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(f"""
  http ingest      {figures['http_events_per_s']:>9,} events/s   ({http_s:.2f} s)
  copy baseline    {figures['copy_events_per_s']:>9,} events/s   ({copy_s:.2f} s)
  ratio            {figures['ratio']:>9.2f}            (http / copy; aim >= 0.70)
  request latency  p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms (aim < 60), max {figures['max_ms']} ms
  web workers      {sampler.workers}, peak RSS {figures['workers_peak_rss_mib_total']} MiB total, \
{figures['worker_peak_rss_mib_max']} MiB largest
  machine          {figures['machine']}
  written to       {RESULTS / 'ingest.json'}""")


if __name__ == "__main__":
    main()
