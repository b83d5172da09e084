"""Soak: a steady, rate-limited mix for SOAK_MINUTES, watching for what only time reveals.

Serves the app as `make run` does (gunicorn + gunicorn.conf.py with production settings, one
Celery worker, Celery beat) on the machine's PostgreSQL and Redis, and drives, paced, never flat out:

- ingestion: bench/ingest.py's 500-event runs, numbered, 50 events a request (25 from each of two
  runs), SOAK_INGEST_RPS requests/s over two clients. 3 % of requests are sent twice, as after a
  lost answer: the second must store nothing. Every receipt's head is checked against the chain
  computed here from the bytes sent.
- artifacts: SOAK_ARTIFACT_OPS operations/s over two clients over 500 scopes: puts (four in five
  with a 10-90 s expiresAt, so beat's sweep, every SOAK_SWEEP_SECONDS, really deletes), get, head
  and resolve of live and expired refs (an expired or deleted ref must never be served), deletes.
- asks: SOAK_ASK_AGENTS agents each start a run, pause on a tool call, open an ask (every other
  one already opened by an ingested pause.request), long-poll its decision and finish the run. A
  reviewer decides 0.2-1.5 s later through the API or, signed in, through the ask page; one in ten
  also tries a second decision, which must be refused. One ask in ten carries a 2 s deadline that
  beat applies. Decisions go to a webhook receiver in this process, which refuses one first
  attempt in twenty so the worker's retries are part of the mix.

Every 10 s it samples RSS, CPU time, open files and threads of every server process, the database's
connections and the CPU other jobs on the machine use (bench/artifacts_noise.py: on a shared machine
that is what latencies drift with); each request's latency is kept. At the end (the server still up):

- per-minute p50/p99 per operation and last-minute / first-minute ratios; per-minute throughput,
  web and Celery CPU, other jobs' CPU, and web CPU per request (steadier than latency under noise);
- memory, first sample after the warm-up vs the last, per process: flat when it grew less than
  SOAK_RSS_MAX_GROWTH_MIB (20) or less than SOAK_RSS_MAX_GROWTH_RATIO (1.10);
- errors: any unexpected answer, exception or mismatch, and ERROR/CRITICAL/Traceback in the logs;
- a reconciliation with the database: every acknowledged event stored exactly once (per run:
  count, distinct seqs, last seq, the run's counters, the head computed here), every acknowledged
  decision present once (the ask, the run's chain, what the waiting agent got, the webhook),
  every minted artifact resolvable with its exact bytes or tombstoned once (expired or deleted),
  and every run's chain verifying (GET /api/v1/runs/{runId}/verify).

Exits 1 when any check fails. Logs and figures go to bench/results/soak/.

Environment: DATABASE_URL (default postgres://postgres@127.0.0.1:5432/footprint_soak; dropped and
recreated, so its name must contain 'soak'), CELERY_BROKER_URL (redis://127.0.0.1:6379/10; its
queue is purged first), SOAK_MINUTES (30), SOAK_WARMUP_S (a third of the run, at least 60),
SOAK_INGEST_RPS (4), SOAK_ARTIFACT_OPS (8), SOAK_ASK_AGENTS (3), SOAK_ASK_EVERY_S (3, per agent),
SOAK_SWEEP_SECONDS (30), SOAK_RSS_MAX_GROWTH_MIB, SOAK_RSS_MAX_GROWTH_RATIO, WEB_CONCURRENCY and
WEB_THREADS (as gunicorn.conf.py reads them).
"""

import base64
import contextlib
import hashlib
import heapq
import hmac
import http.client
import itertools
import json
import os
import random
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlencode

import orjson
import psutil
import psycopg
import redis
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

# bench/common.py reads DATABASE_URL when imported: the soak's own database.
os.environ["DATABASE_URL"] = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/footprint_soak"
import common  # bench/ is on sys.path when bench/soak.py runs
from artifacts_noise import ForeignCpu
from ingest import run_events  # its runs, so that ingestion here is the benchmark's workload

MINUTES = float(os.environ.get("SOAK_MINUTES", "30"))
DURATION_S = MINUTES * 60
# A third of the run (ten minutes of thirty): a first 30-minute soak with a two-minute warm-up saw
# web workers grow +6 to +21 MiB in its first ten minutes, then +0.2 to +2.5 MiB in the last
# fifteen. The early rise is each worker reaching its steady heap (templates, prepared
# statements, a fourth thread, and the raised gc threshold gunicorn.conf.py sets), not a leak.
WARMUP_S = float(os.environ.get("SOAK_WARMUP_S") or max(60.0, DURATION_S / 3))
BROKER_URL = os.environ.get("CELERY_BROKER_URL") or "redis://127.0.0.1:6379/10"
INGEST_RPS = float(os.environ.get("SOAK_INGEST_RPS", "4"))
ARTIFACT_OPS = float(os.environ.get("SOAK_ARTIFACT_OPS", "8"))
ASK_AGENTS = int(os.environ.get("SOAK_ASK_AGENTS", "3"))
ASK_EVERY_S = float(os.environ.get("SOAK_ASK_EVERY_S", "3"))
SWEEP_EVERY_S = float(os.environ.get("SOAK_SWEEP_SECONDS", "30"))
RSS_MAX_GROWTH_MIB = float(os.environ.get("SOAK_RSS_MAX_GROWTH_MIB", "20"))
RSS_MAX_GROWTH_RATIO = float(os.environ.get("SOAK_RSS_MAX_GROWTH_RATIO", "1.10"))
WEB_WORKERS = int(os.environ.get("WEB_CONCURRENCY") or max(2, (os.cpu_count() or 1) * 2))
WEB_THREADS = int(os.environ.get("WEB_THREADS", "4"))
WORKER_CONCURRENCY = 2  # as `make run` starts it
SAMPLE_EVERY_S = 10
OUT = common.RESULTS / "soak"
INGEST_CLIENTS, RUNS_PER_CLIENT, HALF_BATCH = 2, 4, 25
SCOPES, SHORT_TTL_MS = 500, (10_000, 90_000)
USER, PASSWORD = "soak-approver", secrets.token_urlsafe(16)
MIB = 2**20
# Columns of the per-minute tables, in this order.
OPS = ["ingest", "resend", "ask_ev", "open", "dec_api", "dec_page", "dec_2nd", "wake", "page_ask", "inbox"]
OPS += ["put", "get", "head", "resolve", "delete"]


def now_ms() -> int:
    return int(time.time() * 1000)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def quantiles(values: list[float]) -> tuple[float, float]:
    """(p50, p99) in ms."""
    ms = [v * 1000 for v in values]
    if len(ms) < 2:
        return (ms[0], ms[0]) if ms else (float("nan"), float("nan"))
    cuts = statistics.quantiles(ms, n=100, method="inclusive")
    return cuts[49], cuts[98]


# --- What the soak measures and expects ------------------------------------------------------------


class Recorder:
    """Latencies as (seconds since the load started, seconds taken) and errors, per operation."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.latencies: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.errors: dict[str, list[str]] = defaultdict(list)
        self.lock = threading.Lock()

    def ok(self, op: str, seconds: float, sent_at: float) -> None:
        with self.lock:
            self.latencies[op].append((sent_at - self.started, seconds))

    def error(self, op: str, message: str) -> None:
        with self.lock:
            self.errors[op].append(message[:500])


@dataclass
class RunState:
    """What the server acknowledged of one run: seqs 0..acked-1, and the chain head over them."""

    run_id: str
    acked: int = 0
    head: bytes = bytes(32)
    unsure: int = 0  # events sent whose answer never came: stored or not, either is right
    head_known: bool = True  # false once the server appended an event of its own (a decision)


@dataclass
class AskState:
    ask_id: int
    run_id: str
    on_timeout: str | None  # set for asks with a deadline: beat decides them
    question: str
    decided: dict[str, Any] | None = None  # the decision whose submission the server acknowledged
    waited: dict[str, Any] | None = None  # the decision the waiting agent received
    decide_sent: float | None = None  # perf_counter when the reviewer sent it


@dataclass
class Minted:
    ref: str
    conversation: str
    kind: str
    shape: str
    value: str
    expires_at: int
    short: bool
    deleting: bool = False
    deleted: bool = False
    swept_by_put: bool = False


@dataclass
class Expected:
    runs: dict[str, RunState] = field(default_factory=dict)
    asks: dict[int, AskState] = field(default_factory=dict)
    artifacts: dict[str, Minted] = field(default_factory=dict)
    refs: list[str] = field(default_factory=list)
    second_refused: int = 0
    resends: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def chained(head: bytes, events: list[dict[str, Any]]) -> bytes:
    """The ledger's chain over events as sent: sha256(previous head + canonical bytes)."""
    for event in events:
        head = hashlib.sha256(head + orjson.dumps(event, option=orjson.OPT_SORT_KEYS)).digest()
    return head


# --- HTTP ----------------------------------------------------------------------------------------------


class Http:
    """One keep-alive connection with a cookie jar, as an agent's client or a browser tab keeps one.

    It is closed before it idles past gunicorn's 5 s keepalive: a request written into a socket the
    server is closing is neither answered nor known to be unprocessed, which would blur the counts.
    """

    def __init__(self, port: int, timeout: float = 60, **headers: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.headers, self.cookies, self.used = headers, {}, 0.0

    def call(
        self, method: str, path: str, body: bytes | dict | None = None, **headers: str
    ) -> tuple[int, bytes, float]:
        """(status, body, seconds from sending to the answer's last byte)."""
        if time.monotonic() - self.used > 3.0:
            self.conn.close()
        headers = {**self.headers, **headers}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if isinstance(body, dict):  # a form, posted as a browser posts it
            body, headers["Content-Type"] = urlencode(body).encode(), "application/x-www-form-urlencoded"
        elif body is not None:
            headers.setdefault("Content-Type", "application/json")
        started = time.perf_counter()
        try:
            self.conn.request(method, path, body, headers)
            response = self.conn.getresponse()
            data = response.read()
        except BaseException:
            self.conn.close()
            raise
        finally:
            self.used = time.monotonic()
        for header in response.headers.get_all("Set-Cookie") or []:
            self.cookies |= {name: morsel.value for name, morsel in SimpleCookie(header).items()}
        return response.status, data, time.perf_counter() - started


def error_code(data: bytes) -> str | None:
    with contextlib.suppress(ValueError, AttributeError):
        return orjson.loads(data).get("code")
    return None


# --- The server: gunicorn, Celery worker, beat --------------------------------------------------------


class Stack:
    """gunicorn, a Celery worker and beat, each in its own session so one killpg stops it whole."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env, self.procs, self.port = env, {}, 0

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        with open(OUT / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", *args],
                cwd=common.ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs[name] = proc
        return proc

    def _wait_for(self, name: str, ready: Any, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                raise RuntimeError(f"{name} exited with {self.procs[name].returncode}; see {OUT / name}.log")
            if ready():
                return
            time.sleep(0.25)
        raise RuntimeError(f"{name} was not ready within {seconds:.0f} s; see {OUT / name}.log")

    def _healthy(self) -> bool:
        with contextlib.suppress(OSError, http.client.HTTPException):
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        return False

    def _logged(self, name: str, text: str) -> bool:
        return text in (OUT / f"{name}.log").read_text(errors="replace")

    def start(self) -> None:
        for _attempt in range(3):  # a free port can be taken between the probe and gunicorn's bind
            self.port = free_port()
            self._spawn(
                "gunicorn",
                ["gunicorn", "footprint_site.wsgi", "-c", "gunicorn.conf.py"],
                self.env | {"PORT": str(self.port)},
            )
            try:
                self._wait_for("gunicorn", self._healthy)
                break
            except RuntimeError:
                if not self._logged("gunicorn", "Connection in use"):
                    raise
                common.stop(self.procs.pop("gunicorn"))
        else:
            raise RuntimeError("gunicorn found no free port in three attempts")
        name = f"soak-{os.getpid()}@%h"
        worker = f"celery -A footprint_site worker --loglevel=INFO --concurrency={WORKER_CONCURRENCY} -n {name}"
        self._spawn("worker", worker.split(), self.env)
        self._spawn("beat", ["celery", "-A", "footprint_site", "beat", "--loglevel=INFO"], self.env)
        self._wait_for("worker", lambda: self._logged("worker", " ready."))
        self._wait_for("beat", lambda: self._logged("beat", "beat: Starting"))

    def dead(self) -> list[str]:
        return [f"{name} exited with {p.returncode}" for name, p in self.procs.items() if p.poll() is not None]

    def stop(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            common.stop(proc)  # waits; SIGKILL after 15 s


def reset_database() -> None:
    name = conninfo_to_dict(common.DATABASE_URL)["dbname"]
    if "soak" not in name:  # it is dropped below: never a database that may hold real runs
        sys.exit(
            f"DATABASE_URL names database '{name}'; the soak drops and recreates it, so point "
            "DATABASE_URL at a database whose name contains 'soak'."
        )
    try:
        with psycopg.connect(make_conninfo(common.DATABASE_URL, dbname="postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.OperationalError as exc:
        sys.exit(f"PostgreSQL at {common.DATABASE_URL} is not reachable: {exc}")


def server_environment() -> dict[str, str]:
    env = dict(os.environ, DATABASE_URL=common.DATABASE_URL, CELERY_BROKER_URL=BROKER_URL, HOST="127.0.0.1")
    env |= {"DJANGO_DEBUG": "0", "DJANGO_HTTPS": "0", "FOOTPRINT_DATA_DIR": str(OUT / "data")}
    env |= {"FOOTPRINT_SWEEP_EVERY_SECONDS": str(SWEEP_EVERY_S), "LOG_LEVEL": "INFO"}
    env.pop("FOOTPRINT_TEST_HOOKS", None)  # production: no test hooks
    env.pop("GUNICORN_ACCESS_LOG", None)
    env.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    return env


# --- The webhook receiver ----------------------------------------------------------------------------


class Hooks:
    """The project's webhook endpoint: checks each POST's signature, and answers 503 to the first
    attempt for one ask in twenty, so the worker's retries with backoff are part of the soak."""

    def __init__(self) -> None:
        self.secret = ""
        self.posts: Counter[int] = Counter()
        self.accepted: dict[int, list[dict[str, Any]]] = defaultdict(list)
        self.refused: set[int] = set()
        self.bad: list[str] = []
        self.lock = threading.Lock()
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                wanted = "sha256=" + hmac.new(hooks.secret.encode(), body, hashlib.sha256).hexdigest()
                status = 204
                with hooks.lock:
                    if not hmac.compare_digest(self.headers.get("X-Footprint-Signature") or "", wanted):
                        hooks.bad.append(f"bad signature on {body[:120]!r}")
                        status = 400
                    else:
                        doc = orjson.loads(body)
                        ask_id = int(doc["askId"])
                        hooks.posts[ask_id] += 1
                        if ask_id % 20 == 0 and ask_id not in hooks.refused:
                            hooks.refused.add(ask_id)
                            status = 503
                        else:
                            hooks.accepted[ask_id].append(doc)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/decisions"
        threading.Thread(target=self.server.serve_forever, name="hooks", daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- The workload --------------------------------------------------------------------------------------


class Paced(threading.Thread):
    """Calls step() `rate` times a second until stopped; a late step goes at once, never in a burst."""

    def __init__(self, name: str, rate: float, step: Any, stop: threading.Event, rec: Recorder) -> None:
        super().__init__(name=name, daemon=True)
        self.rate, self.step, self.stopping, self.rec, self.steps = rate, step, stop, rec, 0

    def run(self) -> None:
        interval = 1 / self.rate
        next_at = time.monotonic() + random.uniform(0, interval)  # clients start out of step
        while not self.stopping.wait(max(0.0, next_at - time.monotonic())):
            next_at = max(next_at + interval, time.monotonic())
            self.steps += 1
            try:
                self.step()
            except Exception as exc:  # a broken step is counted, and the soak goes on
                self.rec.error(self.name, f"{type(exc).__name__}: {exc}")


class Ingester:
    """One agent host streaming RUNS_PER_CLIENT runs at once, 25 events of two runs per request."""

    def __init__(self, n: int, tag: str, port: int, key: str, rec: Recorder, expected: Expected) -> None:
        self.n, self.tag, self.rec, self.expected = n, tag, rec, expected
        self.http = Http(port, Authorization=f"Bearer {key}")
        self.count, self.turn = itertools.count(), 0
        self.active = [self._new_run() for _ in range(RUNS_PER_CLIENT)]

    def _new_run(self) -> list[Any]:
        number = next(self.count)
        run_id = f"{self.tag}-i{self.n}-{number:05d}"
        state = RunState(run_id)
        with self.expected.lock:
            self.expected.runs[run_id] = state
        return [state, run_events(run_id, f"{self.tag}-s{number % 50}"), 0]

    def post(self, op: str, body: bytes) -> tuple[list[dict[str, Any]] | None, bool]:
        """(receipts or None on failure, whether it took a retry). Retries what a careful agent
        retries, no answer or a 5xx, twice; after a retry the events may count as accepted or duplicates."""
        for attempt in range(3):
            sent_at = time.monotonic()
            try:
                status, data, seconds = self.http.call("POST", "/api/v1/events", body)
            except (OSError, http.client.HTTPException) as exc:
                self.rec.error(op, f"attempt {attempt + 1}: {type(exc).__name__}: {exc}")
            else:
                if status == 200:
                    self.rec.ok(op, seconds, sent_at)
                    return list(orjson.loads(data)["runs"]), attempt > 0
                self.rec.error(op, f"attempt {attempt + 1}: HTTP {status}: {data[:300]!r}")
                if status < 500:
                    return None, False
            time.sleep(1)
        return None, True

    def step(self) -> None:
        slots = [self.active[self.turn % RUNS_PER_CLIENT], self.active[(self.turn + 1) % RUNS_PER_CLIENT]]
        self.turn += 2
        parts = [(slot, slot[1][slot[2] : slot[2] + HALF_BATCH]) for slot in slots]
        body = orjson.dumps({"events": [e for _, chunk in parts for e in chunk]})
        receipts, retried = self.post("ingest", body)
        if receipts is None:  # unknown whether stored: both runs end here, counted as unsure
            for slot, chunk in parts:
                slot[0].unsure += len(chunk)
                slot[1] = []
        else:
            heads = {slot[0].run_id: chained(slot[0].head, chunk) for slot, chunk in parts}
            check_receipts("ingest", self.rec, receipts, parts, heads, resent=None if retried else False)
            for slot, chunk in parts:
                slot[0].acked += len(chunk)
                slot[0].head = heads[slot[0].run_id]
                slot[2] += len(chunk)
            if random.random() < 0.03:  # the answer was "lost": the agent sends the same batch again
                with self.expected.lock:
                    self.expected.resends += 1
                again, _ = self.post("resend", body)
                if again is not None:
                    check_receipts("resend", self.rec, again, parts, heads, resent=True)
        for i, slot in enumerate(self.active):
            if slot[2] >= len(slot[1]):
                self.active[i] = self._new_run()


def check_receipts(
    op: str, rec: Recorder, receipts: list, parts: list, heads: dict[str, bytes], resent: bool | None
) -> None:
    """Each run's receipt against what was sent: all new, all duplicates (resent), or either (None:
    a retry after an attempt whose fate is unknown)."""
    by_run = {r["runId"]: r for r in receipts}
    if len(by_run) != len(parts):
        rec.error(op, f"{len(receipts)} receipts for {len(parts)} runs: {receipts}")
    for slot, chunk in parts:
        state, got = slot[0], by_run.get(slot[0].run_id) or {}
        wanted: dict[str, Any] = {"lastSeq": chunk[-1]["seq"], "gaps": []}
        if resent is None:
            wanted["accepted+duplicates"] = len(chunk)
            got = {**got, "accepted+duplicates": got.get("accepted", 0) + got.get("duplicates", 0)}
        else:
            wanted |= {"accepted": 0 if resent else len(chunk), "duplicates": len(chunk) if resent else 0}
        if state.head_known:
            wanted["head"] = heads[state.run_id].hex()
        if any(got.get(k) != v for k, v in wanted.items()):
            rec.error(op, f"receipt for {state.run_id}: wanted {wanted}, got {got}")


class ArtifactClient:
    """An agent's artifact traffic over SCOPES conversations: mint, read, resolve, delete."""

    def __init__(self, tag: str, port: int, key: str, rec: Recorder, expected: Expected) -> None:
        self.tag, self.rec, self.expected, self.key = tag, rec, expected, key
        self.http = Http(port, Authorization=f"Bearer {key}")

    def headers(self, conversation: str) -> dict[str, str]:
        scope = base64.urlsafe_b64encode(orjson.dumps({"conversationId": conversation})).decode().rstrip("=")
        return {"AF-Scope": scope}

    def step(self) -> None:
        roll = random.random()
        with self.expected.lock:
            have = len(self.expected.refs)
        if roll < 0.35 or have < 10:
            self.put()
        elif roll < 0.97:
            self.read(random.choice(("resolve", "resolve", "get", "head")))
        else:
            self.delete()

    def put(self) -> None:
        conversation, shape = f"conv-{random.randrange(SCOPES)}", random.choice(("json", "text", "binary"))
        if shape == "json":
            kind, media = "dataset/rows", "application/json"
            value = orjson.dumps({"rows": [{"region": random.choice("NESW"), "n": i} for i in range(40)]}).decode()
        elif shape == "text":
            kind, media = "note/text", "text/plain"
            value = f"Summary {secrets.token_hex(8)}: " + "the carrier expects delivery on Tuesday. " * 8
        else:
            kind, media, value = "blob/bytes", "application/octet-stream", base64.b64encode(os.urandom(512)).decode()
        doc: dict[str, Any] = {"kind": kind, "mediaType": media, "payload": {"shape": shape, "value": value}}
        short = random.random() < 0.8
        if short:
            doc["expiresAt"] = now_ms() + random.randint(*SHORT_TTL_MS)
        if random.random() < 0.5:
            doc["digest"] = "sha-256"
        if random.random() < 0.3:
            doc["origin"] = {"runId": f"{self.tag}-art", "toolCallId": f"c{random.randrange(1000)}"}
        sent_at = time.monotonic()
        try:
            status, data, seconds = self.http.call(
                "POST", "/api/v1/artifacts", orjson.dumps(doc), **self.headers(conversation)
            )
        except (OSError, http.client.HTTPException) as exc:  # a put is not retried: it would mint twice
            self.rec.error("put", f"{type(exc).__name__}: {exc}")
            return
        if status != 201:
            self.rec.error("put", f"HTTP {status}: {data[:300]!r}")
            return
        answered_ms = now_ms()
        self.rec.ok("put", seconds, sent_at)
        answer = orjson.loads(data)
        meta = answer["meta"]
        stored = base64.b64decode(value) if shape == "binary" else value.encode()
        problems = [
            k
            for k, ok in (
                ("bytes", meta.get("bytes") == len(stored)),
                ("kind", meta.get("kind") == kind),
                (
                    "expiresAt",
                    meta.get("expiresAt") == doc["expiresAt"] if short else meta.get("expiresAt", 0) > now_ms(),
                ),
                (
                    "digest",
                    meta.get("digest") == "sha-256:" + hashlib.sha256(stored).hexdigest()
                    if "digest" in doc
                    else "digest" not in meta,
                ),
            )
            if not ok
        ]
        if problems:
            self.rec.error("put", f"meta {meta} does not match the put in {problems}")
        minted = Minted(meta["ref"], conversation, kind, shape, value, int(meta["expiresAt"]), short)
        with self.expected.lock:
            if minted.ref in self.expected.artifacts:
                self.rec.error("put", f"ref {minted.ref} minted twice")
            self.expected.artifacts[minted.ref] = minted
            self.expected.refs.append(minted.ref)
            for swept in answer.get("swept", []):
                gone = self.expected.artifacts.get(swept.get("ref"))
                if gone is None or gone.conversation != conversation or swept.get("reason") != "ttl":
                    self.rec.error("put", f"the put swept {swept}, not an artifact of this scope that expired")
                else:
                    gone.swept_by_put = True
                    if gone.expires_at > answered_ms:  # the server's clock when it swept: at most this
                        self.rec.error("put", f"the put swept {swept} {gone.expires_at - answered_ms} ms early")

    def pick(self) -> Minted:
        with self.expected.lock:
            refs = self.expected.refs
            # Mostly recent refs, whose short TTLs run out while they are read.
            ref = refs[-random.randint(1, min(len(refs), 300))] if random.random() < 0.7 else random.choice(refs)
            return self.expected.artifacts[ref]

    def read(self, op: str) -> None:
        minted = self.pick()
        sent_ms = now_ms()
        gone = minted.deleted or minted.expires_at <= sent_ms  # the server's clock is at least sent_ms
        path = f"/api/v1/artifacts/{minted.ref}"
        method, body = "GET", None
        if op == "head":
            path += "/meta"
        elif op == "resolve":
            method, path = "POST", "/api/v1/wants:resolve"
            body = orjson.dumps({"toolName": "render", "wants": {"input": minted.kind}, "args": {"input": minted.ref}})
        sent_at = time.monotonic()
        try:
            status, data, seconds = self.http.call(method, path, body, **self.headers(minted.conversation))
        except (OSError, http.client.HTTPException) as exc:
            self.rec.error(op, f"{type(exc).__name__}: {exc}")
            return
        found: bool | None = None
        if status == 200 and op == "resolve":
            answer = orjson.loads(data)
            found = bool(answer.get("ok"))
            if found and answer["args"]["input"] != self.data_of(minted):
                self.rec.error(op, f"{minted.ref} resolved to other data than was stored")
            if not found and [r.get("reason") for r in answer.get("refusals", [])] != ["missing-or-expired"]:
                self.rec.error(op, f"{minted.ref}: unexpected refusal {answer}")
        elif status == 200:
            answer, found = orjson.loads(data), True
            if answer["meta"]["ref"] != minted.ref or (op == "get" and answer["payload"]["value"] != minted.value):
                self.rec.error(op, f"{minted.ref}: another artifact's meta or bytes: {data[:200]!r}")
        elif status == 404 and error_code(data) == "ERR_ARTIFACT_NOT_FOUND":
            found = False
        else:
            self.rec.error(op, f"HTTP {status}: {data[:300]!r}")
            return
        self.rec.ok(op, seconds, sent_at)
        answered_ms = now_ms()
        live = not minted.deleting and minted.expires_at > answered_ms  # the server's clock is at most this
        if found and gone:
            late = sent_ms - minted.expires_at
            self.rec.error(
                op, f"{minted.ref} was served though {'deleted' if minted.deleted else f'{late} ms expired'}"
            )
        if not found and live:
            self.rec.error(op, f"{minted.ref} is missing {minted.expires_at - answered_ms} ms before it expires")

    @staticmethod
    def data_of(minted: Minted) -> Any:
        if minted.shape == "json":
            return orjson.loads(minted.value)
        if minted.shape == "text":
            return minted.value
        return {"shape": "binary", "value": minted.value}

    def delete(self) -> None:
        minted = self.pick()
        if minted.deleting or minted.deleted:
            return
        minted.deleting = True
        sent_at = time.monotonic()
        try:
            status, data, seconds = self.http.call(
                "DELETE", f"/api/v1/artifacts/{minted.ref}", **self.headers(minted.conversation)
            )
        except (OSError, http.client.HTTPException) as exc:
            self.rec.error("delete", f"{type(exc).__name__}: {exc}")
            return
        if status != 204:
            self.rec.error("delete", f"HTTP {status}: {data[:300]!r}")
            return
        self.rec.ok("delete", seconds, sent_at)
        minted.deleted = True


class AskAgent:
    """A run that pauses on a tool call, waits for a person's decision, and finishes."""

    def __init__(self, n: int, tag: str, port: int, key: str, rec: Recorder, expected: Expected, reviewer: Any) -> None:
        self.n, self.tag, self.rec, self.expected, self.reviewer = n, tag, rec, expected, reviewer
        self.http = Http(port, Authorization=f"Bearer {key}")
        self.waiter = Http(port, timeout=45, Authorization=f"Bearer {key}")  # the long-poll's own connection
        self.count = itertools.count()

    def event(self, state: RunState, seq: int, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
        meta = {"runId": state.run_id, "sessionId": f"{self.tag}-a{self.n}", "wallClockMs": now_ms()}
        return {"seq": seq, "type": f"agentfootprint.{type_}", "payload": payload, "meta": meta}

    def post_events(self, state: RunState, steps: list[tuple[str, dict[str, Any]]]) -> bool:
        events = [self.event(state, state.acked + i, t, p) for i, (t, p) in enumerate(steps)]
        sent_at = time.monotonic()
        try:
            status, data, seconds = self.http.call("POST", "/api/v1/events", orjson.dumps({"events": events}))
        except (OSError, http.client.HTTPException) as exc:
            self.rec.error("ask_ev", f"{type(exc).__name__}: {exc}")
            state.unsure += len(events)
            return False
        if status != 200:
            self.rec.error("ask_ev", f"HTTP {status}: {data[:300]!r}")
            return False
        self.rec.ok("ask_ev", seconds, sent_at)
        head = chained(state.head, events)
        check_receipts("ask_ev", self.rec, orjson.loads(data)["runs"], [([state], events)], {state.run_id: head}, False)
        state.acked += len(events)
        state.head = head
        return True

    def step(self) -> None:
        number = next(self.count)
        state = RunState(f"{self.tag}-a{self.n}-{number:05d}")
        with self.expected.lock:
            self.expected.runs[state.run_id] = state
        amount, from_events = random.randint(10, 9000), number % 2 == 1
        question = f"Transfer {amount} EUR to DE89 3704 0044 0532 0130 00?"
        pause = {
            "toolCallId": "t1",
            "toolName": "transfer_funds",
            "ask": {"question": question, "middleware": "four-eyes"},
        }
        steps = [
            ("agent.run_configured", {"agentId": "payments-agent"}),
            ("agent.turn_start", {"turnIndex": 0}),
            ("stream.tool_start", {"toolName": "transfer_funds", "toolCallId": "t1", "args": {"amount": amount}}),
        ]
        if from_events:  # the observer ingests the pause first; the ask exists before it is posted
            steps.append(("pause.request", {"questionPayload": pause}))
        if not self.post_events(state, steps):
            return
        doc: dict[str, Any] = {"runId": state.run_id, "pauseData": pause, "checkpoint": {"step": number, "at": "t1"}}
        on_timeout = random.choice(("approve", "decline")) if random.random() < 0.1 else None
        if on_timeout:
            doc |= {"deadline": (datetime.now(tz=UTC) + timedelta(seconds=2)).isoformat(), "onTimeout": on_timeout}
        ask = self.open(doc, 200 if from_events else 201, on_timeout, question)
        if ask is None:
            return
        with self.expected.lock:
            self.expected.asks[ask.ask_id] = ask
        if random.random() < 0.05:  # a re-post after a lost answer: the same ask
            again = self.open(doc, 200, on_timeout, question)
            if again is not None and again.ask_id != ask.ask_id:
                self.rec.error("open", f"re-posting ask {ask.ask_id} opened another, {again.ask_id}")
        if not on_timeout:
            self.reviewer.submit(ask)
        decision = self.wait(ask)
        if decision is None:
            return
        state.head_known = False  # the decision is a server-authored link in the run's chain now
        self.post_events(
            state,
            [
                ("stream.tool_end", {"toolCallId": "t1", "result": {"sent": decision["approved"]}, "durationMs": 3}),
                ("agent.turn_end", {"turnIndex": 0, "iterationCount": 1}),
            ],
        )

    def open(self, doc: dict[str, Any], wanted: int, on_timeout: str | None, question: str) -> AskState | None:
        sent_at = time.monotonic()
        try:
            status, data, seconds = self.http.call("POST", "/api/v1/asks", orjson.dumps(doc))
        except (OSError, http.client.HTTPException) as exc:
            self.rec.error("open", f"{type(exc).__name__}: {exc}")
            return None
        if status != wanted:
            self.rec.error("open", f"HTTP {status} (wanted {wanted}): {data[:300]!r}")
            if status not in (200, 201):
                return None
        self.rec.ok("open", seconds, sent_at)
        return AskState(orjson.loads(data)["ask"]["id"], doc["runId"], on_timeout, question)

    def wait(self, ask: AskState) -> dict[str, Any] | None:
        give_up = time.monotonic() + 90
        while time.monotonic() < give_up:
            try:
                status, data, _ = self.waiter.call("GET", f"/api/v1/asks/{ask.ask_id}/decision?wait=30")
            except (OSError, http.client.HTTPException) as exc:
                self.rec.error("wake", f"long-poll of ask {ask.ask_id}: {type(exc).__name__}: {exc}")
                time.sleep(1)
                continue
            received = time.perf_counter()
            if status != 200:
                self.rec.error("wake", f"long-poll of ask {ask.ask_id}: HTTP {status}: {data[:300]!r}")
                return None
            answer = orjson.loads(data)
            if answer.get("status") == "decided":
                ask.waited = answer["decision"]
                sent = ask.decide_sent
                if sent is not None:  # decided by a person: time from their submit to this agent's wake
                    self.rec.ok("wake", received - sent, time.monotonic() - (received - sent))
                return ask.waited
        self.rec.error("wake", f"ask {ask.ask_id} was not decided within 90 s")
        return None


class Reviewer(threading.Thread):
    """People deciding: each ask 0.2-1.5 s after it opens, through the API or the ask page."""

    def __init__(self, port: int, key: str, rec: Recorder, expected: Expected) -> None:
        super().__init__(name="reviewer", daemon=True)
        self.rec, self.expected = rec, expected
        self.api = Http(port, Authorization=f"Bearer {key}")
        self.page = Http(port)
        self.jobs: list[tuple[float, int, AskState]] = []
        self.ready = threading.Condition()
        self.finishing = False
        self.decided = 0

    def log_in(self) -> None:
        status, form, _ = self.page.call("GET", "/accounts/login/")
        token = form.decode().split('name="csrfmiddlewaretoken" value="', 1)[1].split('"', 1)[0]
        credentials = {"username": USER, "password": PASSWORD, "csrfmiddlewaretoken": token}
        status, data, _ = self.page.call("POST", "/accounts/login/", credentials)
        if status != 302:
            raise RuntimeError(f"the approver could not sign in: HTTP {status} {data[:200]!r}")

    def submit(self, ask: AskState) -> None:
        with self.ready:
            heapq.heappush(self.jobs, (time.monotonic() + random.uniform(0.2, 1.5), ask.ask_id, ask))
            self.ready.notify()

    def finish(self) -> None:
        with self.ready:
            self.finishing = True
            self.ready.notify()

    def run(self) -> None:
        while True:
            with self.ready:
                if not self.jobs:
                    if self.finishing:
                        return
                    self.ready.wait(0.5)
                    continue
                due = self.jobs[0][0] - time.monotonic()
                if due > 0:
                    self.ready.wait(due)
                    continue
                ask = heapq.heappop(self.jobs)[2]
            try:
                self.decide(ask)
            except Exception as exc:  # counted; the next ask is decided all the same
                self.rec.error("reviewer", f"ask {ask.ask_id}: {type(exc).__name__}: {exc}")

    def timed(self, op: str, client: Http, method: str, path: str, body: Any = None, **headers: str) -> tuple:
        sent_at = time.monotonic()
        status, data, seconds = client.call(method, path, body, **headers)
        self.rec.ok(op, seconds, sent_at)
        return status, data

    def decide(self, ask: AskState) -> None:
        approved, self.decided = random.random() < 0.7, self.decided + 1
        if self.decided % 2:
            body = orjson.dumps({"approved": approved, "by": "soak-bot", "note": "checked by the soak"})
            ask.decide_sent = time.perf_counter()
            status, data = self.timed("dec_api", self.api, "POST", f"/api/v1/asks/{ask.ask_id}/decision", body)
            decision = orjson.loads(data).get("decision") if status == 200 else None
            if not decision or decision.get("approved") != approved or decision.get("by") != "soak-bot":
                self.rec.error("dec_api", f"ask {ask.ask_id}: HTTP {status}: {data[:300]!r}")
                return
            ask.decided = {"approved": approved, "by": "soak-bot", "via": "api"}
        else:  # a person reads the ask's page first, now and then the inbox
            if self.decided % 10 == 0:
                status, data = self.timed("inbox", self.page, "GET", "/inbox/")
                if status != 200:
                    self.rec.error("inbox", f"HTTP {status}: {data[:300]!r}")
            status, data = self.timed("page_ask", self.page, "GET", f"/asks/{ask.ask_id}/")
            if status != 200 or ask.question.encode() not in data:
                self.rec.error("page_ask", f"ask {ask.ask_id}: HTTP {status} without its question")
            form = {
                "decision": "approve" if approved else "decline",
                "note": "",
                "csrfmiddlewaretoken": self.page.cookies.get("csrftoken", ""),
            }
            ask.decide_sent = time.perf_counter()
            status, data = self.timed(
                "dec_page", self.page, "POST", f"/asks/{ask.ask_id}/decide/", form, **{"HX-Request": "true"}
            )
            html = data.decode(errors="replace")
            if status != 200 or f"by <strong>{USER}</strong>" not in html or "Someone else decided first" in html:
                self.rec.error("dec_page", f"ask {ask.ask_id}: HTTP {status}: {html[:300]!r}")
                return
            ask.decided = {"approved": approved, "by": USER, "via": "page"}
        if random.random() < 0.1:  # a second person, too late: refused, told who decided
            body = orjson.dumps({"approved": not approved, "by": "soak-late"})
            status, data = self.timed("dec_2nd", self.api, "POST", f"/api/v1/asks/{ask.ask_id}/decision", body)
            if status == 409:
                with self.expected.lock:
                    self.expected.second_refused += 1
            else:
                self.rec.error("dec_2nd", f"a second decision on ask {ask.ask_id} got HTTP {status}: {data[:300]!r}")


# --- Process sampling ------------------------------------------------------------------------------------


class Sampler:
    """RSS, CPU time, open files and threads of every server process, the soak database's
    connections, and the CPU other jobs on the machine used (the noise in the latencies)."""

    def __init__(self, stack: Stack, foreign: ForeignCpu) -> None:
        self.stack, self.foreign = stack, foreign
        self.samples: list[dict[str, Any]] = []
        self.db = psycopg.connect(common.DATABASE_URL, autocommit=True)

    def processes(self) -> dict[str, psutil.Process]:
        found = {}
        for name, roles in (
            ("gunicorn", ("web master", "web worker")),
            ("worker", ("celery worker", "celery pool")),
            ("beat", ("celery beat", "")),
        ):
            with contextlib.suppress(psutil.Error, KeyError):
                root = psutil.Process(self.stack.procs[name].pid)
                found[f"{roles[0]} {root.pid}"] = root
                for child in root.children() if roles[1] else []:
                    found[f"{roles[1]} {child.pid}"] = child
        return found

    def sample(self, at: float) -> None:
        procs = {}
        for label, proc in self.processes().items():
            with contextlib.suppress(psutil.Error), proc.oneshot():
                cpu = proc.cpu_times()
                procs[label] = {"rss": proc.memory_info().rss, "cpu": cpu.user + cpu.system, "fds": proc.num_fds(),
                                "threads": proc.num_threads()}  # fmt: skip
        query = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        connections = self.db.execute(query).fetchone()[0]
        sample = {"t": round(at, 1), "procs": procs, "db_connections": connections, "foreign_cpu": self.foreign.now()}
        self.samples.append(sample)


# --- The soak -----------------------------------------------------------------------------------------


def prepare(env: dict[str, str], hooks: Hooks) -> tuple[str, str]:
    """The database migrated and seeded; returns the agents' key and the reviewers' (scope decide)."""
    try:
        redis.Redis.from_url(BROKER_URL, socket_timeout=5).ping()
    except redis.RedisError as exc:
        sys.exit(f"Redis at {BROKER_URL} is not reachable: {exc}")
    print(f"Creating database '{conninfo_to_dict(common.DATABASE_URL)['dbname']}' and migrating…", flush=True)
    reset_database()
    common.manage(env, "migrate", "--no-input")
    common.manage(env, "collectstatic", "--no-input")
    key = common.manage(env, "create_agent_key", "--project", "soak", "--scopes", "ingest", "artifacts", "asks", "read")
    decide_key = common.manage(env, "create_agent_key", "--project", "soak", "--scopes", "decide")
    create = f"from django.contrib.auth.models import User; User.objects.create_user({USER!r}, password={PASSWORD!r})"
    common.manage(env, "shell", "-c", create)
    common.manage(env, "grant_role", "--user", USER, "--project", "soak", "--role", "approver")
    hooks.secret = common.manage(env, "set_webhook", "--project", "soak", "--url", hooks.url).split()[-1]
    subprocess.run(
        [sys.executable, "-m", "celery", "-A", "footprint_site", "purge", "-f"],
        cwd=common.ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    return key.split()[-1], decide_key.split()[-1]


def run_load(
    stack: Stack, key: str, decide_key: str, rec: Recorder, expected: Expected, sampler: Sampler
) -> dict[str, Any]:
    tag = f"soak-{int(time.time())}"
    stop = threading.Event()
    reviewer = Reviewer(stack.port, decide_key, rec, expected)
    reviewer.log_in()
    threads = [
        Paced(
            f"ingest-{n}", INGEST_RPS / INGEST_CLIENTS, Ingester(n, tag, stack.port, key, rec, expected).step, stop, rec
        )
        for n in range(INGEST_CLIENTS)
    ]
    threads += [
        Paced(f"artifacts-{n}", ARTIFACT_OPS / 2, ArtifactClient(tag, stack.port, key, rec, expected).step, stop, rec)
        for n in range(2)
    ]
    agents = [
        Paced(f"asks-{n}", 1 / ASK_EVERY_S, AskAgent(n, tag, stack.port, key, rec, expected, reviewer).step, stop, rec)
        for n in range(ASK_AGENTS)
    ]
    print(
        f"Soaking for {MINUTES:g} min (warm-up {WARMUP_S:.0f} s): ingestion {INGEST_RPS:g} requests/s x 50 events, "
        f"artifacts {ARTIFACT_OPS:g} operations/s, {ASK_AGENTS} agents asking every {ASK_EVERY_S:g} s",
        flush=True,
    )
    rec.started = time.monotonic()
    for thread in [reviewer, *threads, *agents]:
        thread.start()
    end, next_sample, next_report = rec.started + DURATION_S, rec.started, rec.started + 60
    dead: list[str] = []
    try:
        while (now := time.monotonic()) < end:
            dead = stack.dead()
            if dead:
                print(f"Stopping early: {'; '.join(dead)}", flush=True)
                break
            if now >= next_sample:
                sampler.sample(now - rec.started)
                next_sample += SAMPLE_EVERY_S
            if now >= next_report:
                progress(rec, sampler, now - rec.started)
                next_report += 60
            time.sleep(min(1.0, max(0.0, min(next_sample, next_report, end) - time.monotonic())))
    except BaseException:  # Ctrl-C: the clients are daemon threads; the server goes down under them
        stop.set()
        reviewer.finish()
        raise
    load_s = time.monotonic() - rec.started
    sampler.sample(load_s)  # the last sample: the load, not the reconciliation that follows
    stop.set()
    if not dead:
        print("Load stopped; finishing the asks in flight…", flush=True)
        for thread in [*threads, *agents]:
            thread.join(120)
    reviewer.finish()  # after the agents: it decides every ask they opened
    reviewer.join(0 if dead else 120)
    planned = {"ingest": INGEST_RPS * load_s, "artifacts": ARTIFACT_OPS * load_s}
    done = {
        "ingest": sum(t.steps for t in threads[:INGEST_CLIENTS]),
        "artifacts": sum(t.steps for t in threads[INGEST_CLIENTS:]),
    }
    asks = sum(a.steps for a in agents)
    return {"load_s": load_s, "ended_ms": now_ms(), "planned": planned, "done": done, "asks_started": asks,
            "dead": dead}  # fmt: skip


def recent(rec: Recorder, op: str, start: float, end: float) -> list[float]:
    return [seconds for t, seconds in list(rec.latencies[op]) if start <= t < end]


def progress(rec: Recorder, sampler: Sampler, at: float) -> None:
    ingest = recent(rec, "ingest", at - 60, at)
    errors = sum(len(v) for v in rec.errors.values())
    procs = sampler.samples[-1]["procs"] if sampler.samples else {}
    rss = " ".join(f"{v['rss'] / MIB:.0f}" for label, v in procs.items())
    print(
        f"  {at / 60:5.1f} min  {len(ingest) * 50 / 60:4.0f} events/s, p99 {quantiles(ingest)[1]:6.1f} ms;"
        f" {len(recent(rec, 'open', at - 60, at))} asks/min; {errors} errors; RSS MiB {rss}",
        flush=True,
    )


# --- Reconciliation ---------------------------------------------------------------------------------------


class Checks:
    def __init__(self) -> None:
        self.results: list[tuple[bool, str, list[str]]] = []

    def add(self, ok: bool, line: str, problems: list[str] | None = None) -> None:
        self.results.append((ok, line, problems or []))

    @property
    def passed(self) -> bool:
        return all(ok for ok, _, _ in self.results)


def wait_until(what: str, done: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(1)
    print(f"  ({what}: still not so after {seconds:.0f} s)", flush=True)
    return False


def reconcile(port: int, key: str, expected: Expected, hooks: Hooks, ended_ms: int, checks: Checks) -> dict[str, Any]:
    db = psycopg.connect(common.DATABASE_URL, autocommit=True)
    figures: dict[str, Any] = {}
    print("Reconciling: waiting for a beat sweep that starts after the load…", flush=True)
    ended = datetime.fromtimestamp(ended_ms / 1000, tz=UTC) + timedelta(seconds=1)
    query = "SELECT min(started_at) FROM artifacts_sweeprun WHERE started_at > %s"
    wait_until("no sweep after the load", lambda: db.execute(query, [ended]).fetchone()[0], SWEEP_EVERY_S + 90)
    swept_from = db.execute(query, [ended]).fetchone()[0]
    pending = "SELECT count(*) FROM ledger_webhookdelivery WHERE status <> 'delivered'"
    wait_until("webhook deliveries pending", lambda: db.execute(pending).fetchone()[0] == 0, 90)

    reconcile_events(db, expected, checks, figures)
    reconcile_asks(db, expected, hooks, checks, figures)
    reconcile_artifacts(db, port, key, expected, swept_from, checks, figures)
    reconcile_chains(db, port, key, expected, checks, figures)
    db.close()
    return figures


def reconcile_events(db: psycopg.Connection, expected: Expected, checks: Checks, figures: dict[str, Any]) -> None:
    rows = db.execute(
        """
        SELECT r.run_id, r.event_count, r.max_seq, r.chain_length, r.head_hash, count(e.seq), count(DISTINCT e.seq),
               coalesce(max(e.seq), -1), count(e.position) - count(e.seq), count(e.position)
        FROM ledger_run r LEFT JOIN ledger_runevent e ON e.run_id = r.id GROUP BY r.id
        """
    ).fetchall()
    decisions_of: Counter[str] = Counter(a.run_id for a in expected.asks.values() if a.decided or a.waited)
    stored = {row[0]: row for row in rows}
    problems, acked, kept, heads = [], 0, 0, 0
    for run_id in sorted(stored.keys() - expected.runs.keys()):
        problems.append(f"run {run_id} is stored but was never sent")
    for run_id, state in expected.runs.items():
        row = stored.get(run_id)
        acked += state.acked
        if row is None:
            if state.acked:
                problems.append(f"run {run_id}: {state.acked} events acknowledged, the run is not stored")
            continue
        _, event_count, max_seq, chain_length, head, seqs, distinct, last, server, total = row
        kept += seqs
        if not state.acked <= seqs <= state.acked + state.unsure or seqs != distinct:
            problems.append(
                f"run {run_id}: {state.acked} events acknowledged (+{state.unsure} unsure), "
                f"{seqs} stored under {distinct} distinct seqs"
            )
        if seqs and (last != seqs - 1 or event_count != seqs or max_seq != last):
            problems.append(f"run {run_id}: {seqs} events, last seq {last}, counters say {event_count} / {max_seq}")
        if server != decisions_of[run_id] or chain_length != total:
            problems.append(
                f"run {run_id}: {server} server events for {decisions_of[run_id]} decisions, "
                f"chain length {chain_length} for {total} rows"
            )
        if state.head_known and not state.unsure:
            heads += 1
            if bytes(head) != state.head:
                problems.append(f"run {run_id}: head {bytes(head).hex()[:16]}… is not the chain of the bytes sent")
    unsure = sum(s.unsure for s in expected.runs.values())
    figures["events"] = {
        "acknowledged": acked,
        "stored": kept,
        "unsure": unsure,
        "runs": len(stored),
        "resends": expected.resends,
        "heads_checked": heads,
    }
    checks.add(
        not problems,
        f"events: {acked:,} acknowledged, {kept:,} stored ({kept / max(acked, 1):.4f}), each once; "
        f"{len(stored)} runs, none stray; {expected.resends} batches re-sent stored nothing twice; "
        f"{heads} heads equal the chain computed from the bytes sent",
        problems,
    )


def reconcile_asks(db: psycopg.Connection, expected: Expected, hooks: Hooks, checks: Checks, figures: dict) -> None:
    asks = {
        row[0]: row
        for row in db.execute(
            "SELECT id, run_id, status, approved, decided_by_label, decided_via FROM ledger_ask"
        ).fetchall()
    }
    events = {
        row[0]: row[1:]
        for row in db.execute(
            "SELECT (doc->'payload'->>'askId')::int8, count(*), min(doc->'payload'->'decision'->>'approved'),"
            " max(doc->'payload'->'decision'->>'approved') FROM ledger_runevent WHERE type = 'ledger.human_decision'"
            " GROUP BY 1"
        ).fetchall()
    }
    deliveries = {
        row[0]: row[1:] for row in db.execute("SELECT ask_id, status, attempts FROM ledger_webhookdelivery").fetchall()
    }
    problems, hook_problems, via, waited_ok = [], list(hooks.bad), Counter(), 0
    for ask_id in sorted(asks.keys() - expected.asks.keys()):
        problems.append(f"ask {ask_id} is stored but was never opened by an agent here")
    for ask_id in sorted(events.keys() - expected.asks.keys()):
        problems.append(f"a decision event names ask {ask_id}, which was never opened here")
    for ask in expected.asks.values():
        row = asks.get(ask.ask_id)
        if ask.decided:
            wanted = ask.decided
        elif ask.on_timeout:
            wanted = {"approved": ask.on_timeout == "approve", "by": "deadline", "via": "deadline"}
        else:
            problems.append(f"ask {ask.ask_id}: no decision was acknowledged")
            continue
        via[wanted["via"]] += 1
        if row is None or (row[2], row[3], row[4], row[5]) != (
            "decided",
            wanted["approved"],
            wanted["by"],
            wanted["via"],
        ):
            problems.append(f"ask {ask.ask_id}: decided {wanted}, stored {row}")
        count, low, high = events.get(ask.ask_id, (0, None, None))
        if count != 1 or low != high or low != str(wanted["approved"]).lower():
            problems.append(f"ask {ask.ask_id}: {count} decision events in the chain (approved {low}/{high})")
        if ask.waited is None or (ask.waited.get("approved"), ask.waited.get("by")) != (
            wanted["approved"],
            wanted["by"],
        ):
            problems.append(f"ask {ask.ask_id}: the waiting agent got {ask.waited}, the decision was {wanted}")
        else:
            waited_ok += 1
        delivery, got = deliveries.get(ask.ask_id), hooks.accepted.get(ask.ask_id, [])
        if delivery is None or delivery[0] != "delivered" or delivery[1] != hooks.posts[ask.ask_id] or len(got) != 1:
            hook_problems.append(
                f"ask {ask.ask_id}: delivery {delivery}, {hooks.posts[ask.ask_id]} POSTs received, {len(got)} accepted"
            )
        elif (got[0]["decision"]["approved"], got[0]["decision"]["by"]) != (wanted["approved"], wanted["by"]):
            hook_problems.append(f"ask {ask.ask_id}: the webhook carried {got[0]['decision']}, not {wanted}")
    decided = sum(via.values())
    still_open = sum(1 for row in asks.values() if row[2] != "decided")
    if still_open:
        problems.append(f"{still_open} asks are still open")
    figures["asks"] = {
        "opened": len(expected.asks),
        "decided": dict(via),
        "waiters_ok": waited_ok,
        "second_refused": expected.second_refused,
        "webhooks_retried": len(hooks.refused),
    }
    checks.add(
        not problems,
        f"decisions: {decided} acknowledged of {len(expected.asks)} asks "
        f"({', '.join(f'{k} {v}' for k, v in sorted(via.items()))}), each stored once in its ask and once in "
        f"its run's chain; {waited_ok} waiting agents got exactly that decision; none open; "
        f"{expected.second_refused} second decisions refused (409)",
        problems,
    )
    checks.add(
        not hook_problems,
        f"webhooks: {decided - len(hook_problems)} of {decided} decisions delivered once, "
        f"signed ({len(hooks.refused)} after a refused first attempt, retried by the worker)",
        hook_problems,
    )


def reconcile_artifacts(
    db: psycopg.Connection,
    port: int,
    key: str,
    expected: Expected,
    swept_from: datetime | None,
    checks: Checks,
    figures: dict[str, Any],
) -> None:
    live = {row[0]: row[1:] for row in db.execute("SELECT ref, expires_at, deleted_at FROM artifacts_artifact")}
    tombs: dict[str, list[str]] = defaultdict(list)
    for ref, reason in db.execute("SELECT ref, reason FROM artifacts_tombstone"):
        tombs[ref].append(reason)
    sweeps, beat_rows = db.execute(
        "SELECT count(*), coalesce(sum(metadata_rows), 0) FROM artifacts_sweeprun"
    ).fetchone()
    orphans = db.execute(
        "SELECT count(*) FROM artifacts_payload p WHERE NOT EXISTS"
        " (SELECT 1 FROM artifacts_artifact a WHERE a.id = p.artifact_id)"
    ).fetchone()[0]
    swept_ms = int(swept_from.timestamp() * 1000) if swept_from else 0
    problems, outcome, to_read = [], Counter(), []
    if swept_from is None:
        problems.append("no beat sweep started after the load: expired artifacts cannot be checked")
    for ref in sorted((live.keys() | tombs.keys()) - expected.artifacts.keys()):
        problems.append(f"artifact {ref} is stored or tombstoned but was never minted here")
    checked_at = now_ms()
    for ref, minted in expected.artifacts.items():
        present, reasons = ref in live, tombs.get(ref, [])
        if len(reasons) > 1 or (present and reasons):
            problems.append(f"{ref}: present {present}, tombstones {reasons}")
        elif minted.deleted:
            outcome["deleted"] += 1
            if present or len(reasons) != 1:
                problems.append(f"{ref}: deleted (204), yet present {present}, tombstones {reasons}")
        elif minted.expires_at <= swept_ms:  # a sweep that started after it expired has finished
            outcome["expired"] += 1
            if present or reasons != ["ttl"]:
                problems.append(
                    f"{ref}: expired {swept_ms - minted.expires_at} ms before a sweep, yet present "
                    f"{present}, tombstones {reasons}"
                )
        elif minted.expires_at > checked_at + 5000:
            outcome["live"] += 1
            if not present:
                problems.append(f"{ref}: live for {minted.expires_at - checked_at} ms more, yet gone ({reasons})")
            else:
                to_read.append(minted)
        elif not present and reasons not in ([], ["ttl"]):
            problems.append(f"{ref}: expiring about now, tombstones {reasons}")
        else:
            outcome["expiring now"] += 1
    http_ = Http(port, Authorization=f"Bearer {key}")
    for minted in to_read:  # every live artifact, read back whole over HTTP
        scope = base64.urlsafe_b64encode(orjson.dumps({"conversationId": minted.conversation})).decode().rstrip("=")
        status, data, _ = http_.call("GET", f"/api/v1/artifacts/{minted.ref}", **{"AF-Scope": scope})
        if status == 404 and minted.expires_at <= now_ms():
            continue  # it expired while the others were read
        if status != 200 or orjson.loads(data)["payload"]["value"] != minted.value:
            problems.append(f"{minted.ref}: live, yet GET answered {status} {data[:120]!r}")
    ttl_tombs = sum(r.count("ttl") for r in tombs.values())
    by_put = sum(1 for m in expected.artifacts.values() if m.swept_by_put)
    if not beat_rows:
        problems.append("beat's sweeps deleted nothing")
    if ttl_tombs != beat_rows + by_put:
        problems.append(f"{ttl_tombs} ttl tombstones, but beat swept {beat_rows} and puts {by_put}")
    figures["artifacts"] = {
        "minted": len(expected.artifacts),
        **outcome,
        "read_back": len(to_read),
        "sweeps": sweeps,
        "swept_by_beat": beat_rows,
        "swept_by_puts": by_put,
        "payload_rows_awaiting_partition_drop": orphans,
    }
    checks.add(
        not problems,
        f"artifacts: {len(expected.artifacts):,} minted: {outcome['live']} resolvable with their "
        f"exact bytes, {outcome['expired']} tombstoned as expired, {outcome['deleted']} deleted, "
        f"{outcome['expiring now']} expiring as checked; {sweeps} beat sweeps deleted {beat_rows} "
        f"({beat_rows / max(ttl_tombs, 1):.2f} of expiries; puts swept {by_put}); none lost, none twice",
        problems,
    )


def reconcile_chains(
    db: psycopg.Connection, port: int, key: str, expected: Expected, checks: Checks, figures: dict[str, Any]
) -> None:
    lengths = dict(db.execute("SELECT run_id, chain_length FROM ledger_run").fetchall())
    local = threading.local()

    def verify(run_id: str) -> str | None:
        if not hasattr(local, "http"):
            local.http = Http(port, timeout=120, Authorization=f"Bearer {key}")
        status, data, _ = local.http.call("GET", f"/api/v1/runs/{run_id}/verify")
        verdict = orjson.loads(data) if status == 200 else {}
        if verdict.get("valid") is not True or verdict.get("recordsChecked") != lengths[run_id]:
            return f"run {run_id}: HTTP {status} {data[:200]!r} (chain length {lengths[run_id]})"
        return None

    with ThreadPoolExecutor(4) as pool:
        problems = [p for p in pool.map(verify, sorted(lengths)) if p]
    figures["chains"] = {"verified": len(lengths) - len(problems), "runs": len(lengths)}
    checks.add(
        not problems,
        f"chains: {len(lengths) - len(problems)} of {len(lengths)} runs verify "
        f"(GET /api/v1/runs/{{runId}}/verify, every record re-hashed)",
        problems,
    )


# --- Report ----------------------------------------------------------------------------------------------


def minutes_of(rec: Recorder, load_s: float) -> list[tuple[str, float, float]]:
    """(label, start, end) in seconds since the load started: the warm-up, then whole minutes after it."""
    spans = [("warm-up", 0.0, WARMUP_S)]
    start = WARMUP_S
    while start < load_s - 1:
        spans.append((f"{len(spans) - 1}", start, min(start + 60, load_s)))
        start += 60
    return spans


def latency_report(rec: Recorder, load_s: float) -> tuple[str, dict[str, Any]]:
    spans = minutes_of(rec, load_s)
    ops = [op for op in OPS if rec.latencies.get(op)]
    table: dict[str, dict[str, Any]] = {}
    for op in ops:
        per = []
        for label, start, end in spans:
            values = [s for t, s in rec.latencies[op] if start <= t < end]
            per.append(
                {"minute": label, "n": len(values), **dict(zip(("p50_ms", "p99_ms"), quantiles(values), strict=True))}
            )
        table[op] = {"minutes": per}
    out = []
    for which in ("p50_ms", "p99_ms"):
        out.append(
            f"\nPer-minute {which[:3]} (ms); minute 0 starts after the {WARMUP_S:.0f} s warm-up;"
            " ev/s: events acknowledged"
        )
        out.append(f"  {'minute':<8}{'ev/s':>6}" + "".join(f"{op:>9}" for op in ops))
        for i, (label, start, end) in enumerate(spans):
            rate = sum(1 for t, _ in rec.latencies["ingest"] if start <= t < end) * 50 / max(end - start, 1)
            cells = "".join(fmt(table[op]["minutes"][i][which]) for op in ops)
            out.append(f"  {label:<8}{rate:>6.0f}{cells}")
    # First full minute after the warm-up against the last minute with at least 30 s of load.
    last = len(spans) - 1 if spans[-1][2] - spans[-1][1] >= 30 else len(spans) - 2
    out.append("\nPer operation after the warm-up: latency, and the last minute against the first")
    out.append(
        f"  {'op':<10}{'n':>7}{'p50':>8}{'p99':>8}{'max':>8}{'max at s':>10}"
        f"{'p50 last/first':>16}{'p99 last/first':>16}"
    )
    for op in ops:
        after = [(t, s) for t, s in rec.latencies[op] if t >= WARMUP_S] or [(float("nan"), float("nan"))]
        p50, p99 = quantiles([s for _, s in after])
        worst_at, worst = max(after, key=lambda sample: sample[1])
        first, final = (table[op]["minutes"][1], table[op]["minutes"][last]) if last > 1 else ({}, {})
        r50 = final["p50_ms"] / first["p50_ms"] if first.get("n") and final.get("n") else float("nan")
        r99 = final["p99_ms"] / first["p99_ms"] if first.get("n") and final.get("n") else float("nan")
        table[op] |= {"n": len(after), "p50_ms": p50, "p99_ms": p99, "max_ms": worst * 1000, "max_at_s": worst_at,
                      "p50_last_over_first": r50, "p99_last_over_first": r99}  # fmt: skip
        out.append(f"  {op:<10}{len(after):>7}{fmt(p50, 8)}{fmt(p99, 8)}{fmt(worst * 1000, 8)}{worst_at:>10.0f}"
                   f"{ratio(r50, 16)}{ratio(r99, 16)}")  # fmt: skip
    return "\n".join(out), table


def load_report(rec: Recorder, samples: list[dict[str, Any]], load_s: float) -> tuple[str, list[dict[str, Any]]]:
    """Per minute: throughput, and CPU (% of one core) of the web workers, of Celery, and of other jobs
    on the machine. Server CPU per request is steadier than latency on a shared machine."""
    out = [
        "\nPer-minute load: events acknowledged/s, requests/s, CPU in % of one core (web: gunicorn; celery: worker,"
        " pool and beat; other: every process on the machine that is not the soak's), web CPU ms per request",
        f"  {'minute':<8}{'ev/s':>7}{'req/s':>7}{'web %':>8}{'celery %':>10}{'other %':>9}{'web ms/req':>12}",
    ]
    rows = []
    for label, start, end in minutes_of(rec, load_s):
        a = max((s for s in samples if s["t"] <= start + 1), key=lambda s: s["t"], default=samples[0])
        b = min((s for s in samples if s["t"] >= end - 1), key=lambda s: s["t"], default=samples[-1])
        seconds = max(b["t"] - a["t"], 1.0)

        def cpu(prefix: str, a: dict = a, b: dict = b) -> float:
            both = [k for k in b["procs"] if k.startswith(prefix) and k in a["procs"]]
            return sum(b["procs"][k]["cpu"] - a["procs"][k]["cpu"] for k in both)

        requests = sum(len(recent(rec, op, start, end)) for op in OPS if op != "wake")
        events = len(recent(rec, "ingest", start, end)) * 50
        web, celery = cpu("web"), cpu("celery")
        row = {"minute": label, "events_per_s": events / (end - start), "requests_per_s": requests / (end - start),
               "web_cpu_pct": 100 * web / seconds, "celery_cpu_pct": 100 * celery / seconds,
               "other_cpu_pct": 100 * (b["foreign_cpu"] - a["foreign_cpu"]) / seconds,
               "web_cpu_ms_per_request": 1000 * web * (end - start) / seconds / max(requests, 1)}  # fmt: skip
        rows.append(row)
        cells = zip((7, 7, 8, 10, 9, 12), (0, 1, 0, 0, 0, 2), list(row.values())[1:], strict=True)
        out.append(f"  {label:<8}" + "".join(f"{value:>{width}.{digits}f}" for width, digits, value in cells))
    if len(rows) > 2:
        drift = rows[-1]["web_cpu_ms_per_request"] / rows[1]["web_cpu_ms_per_request"]
        out.append(f"  web CPU ms per request, last minute / first: {drift:.2f}")
    return "\n".join(out), rows


def ratio(value: float, width: int) -> str:
    return f"{'-':>{width}}" if value != value else f"{value:>{width}.2f}"  # NaN: a single minute, no ratio


def fmt(ms: float, width: int = 9) -> str:
    if ms != ms:  # NaN: no samples
        return f"{'-':>{width}}"
    return f"{ms:>{width}.1f}" if ms < 100 else f"{ms:>{width}.0f}"


def memory_report(sampler: Sampler, checks: Checks) -> tuple[str, dict[str, Any]]:
    samples = sampler.samples
    after = [s for s in samples if s["t"] >= WARMUP_S] or samples[-1:]
    first, last = after[0], samples[-1]
    mid = after[len(after) // 2]
    out = [
        f"\nMemory per process: RSS at {first['t']:.0f} s (first sample after the warm-up), mid-way, and at "
        f"{last['t']:.0f} s; flat = grew < {RSS_MAX_GROWTH_MIB:g} MiB or < {(RSS_MAX_GROWTH_RATIO - 1) * 100:.0f} %",
        f"  {'process':<24}{'first':>8}{'mid':>8}{'last':>8}{'growth':>9}{'last/first':>12}{'MiB/h':>8}"
        f"{'files':>9}{'threads':>9}  verdict",
    ]
    figures, problems = {}, []
    for label in sorted(first["procs"]):
        series = [(s["t"], s["procs"][label]["rss"] / MIB) for s in after if label in s["procs"]]
        if label not in last["procs"]:
            problems.append(f"{label} is gone (replaced or exited) by the end")
            out.append(f"  {label:<24}{series[0][1]:>8.1f}{'gone':>8}")
            continue
        a, b, m = first["procs"][label], last["procs"][label], mid["procs"].get(label, first["procs"][label])
        growth, ratio = (b["rss"] - a["rss"]) / MIB, b["rss"] / a["rss"]
        slope = (
            statistics.linear_regression([t / 3600 for t, _ in series], [r for _, r in series]).slope
            if len(series) > 2
            else 0.0
        )
        flat = growth < RSS_MAX_GROWTH_MIB or ratio < RSS_MAX_GROWTH_RATIO
        if not flat:
            problems.append(f"{label} grew {growth:.1f} MiB (x{ratio:.2f})")
        figures[label] = {
            "first_mib": a["rss"] / MIB,
            "mid_mib": m["rss"] / MIB,
            "last_mib": b["rss"] / MIB,
            "growth_mib": growth,
            "ratio": ratio,
            "slope_mib_per_h": slope,
            "fds": [a["fds"], b["fds"]],
            "threads": [a["threads"], b["threads"]],
        }
        out.append(
            f"  {label:<24}{a['rss'] / MIB:>8.1f}{m['rss'] / MIB:>8.1f}{b['rss'] / MIB:>8.1f}{growth:>+9.1f}"
            f"{ratio:>12.3f}{slope:>8.0f}{a['fds']:>4}->{b['fds']:<4}{a['threads']:>4}->{b['threads']:<4}  "
            f"{'flat' if flat else 'GROWING'}"
        )
    for label in sorted(last["procs"].keys() - first["procs"].keys()):
        problems.append(f"{label} appeared after the warm-up (a replaced worker)")
    connections = [s["db_connections"] for s in after]
    bound = WEB_WORKERS * (WEB_THREADS + 1) + WORKER_CONCURRENCY + 4  # a connection per thread, a LISTEN per worker
    out.append(
        f"  database connections: {connections[0]} first, {max(connections)} at most, {connections[-1]} last "
        f"(bound {bound}: web threads + listeners + pool + beat)"
    )
    if max(connections) > bound:
        problems.append(f"{max(connections)} database connections, more than the {bound} the processes can hold")
    checks.add(
        not problems,
        f"memory: {len(figures)} processes flat from {first['t']:.0f} s to {last['t']:.0f} s; "
        f"database connections {connections[0]} -> {connections[-1]}",
        problems,
    )
    return "\n".join(out), {"processes": figures, "db_connections": connections, "samples": samples}


LOG_PROBLEM = re.compile(r"\[(ERROR|CRITICAL)|\bERROR\b|CRITICAL|Traceback")


def log_problems() -> dict[str, list[str]]:
    found = {}
    for name in ("gunicorn", "worker", "beat"):
        path = OUT / f"{name}.log"
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        found[name] = [line for line in lines if LOG_PROBLEM.search(line)]
    return found


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through the finally below, as Ctrl-C does
    foreign = ForeignCpu(conninfo_to_dict(common.DATABASE_URL)["dbname"])
    foreign.start()  # first: it forks, and this process has no threads yet
    env, hooks, rec, expected, checks = server_environment(), Hooks(), Recorder(), Expected(), Checks()
    stack, sampler = Stack(env), None
    try:
        key, decide_key = prepare(env, hooks)
        stack.start()
        print(
            f"Serving on 127.0.0.1:{stack.port}: gunicorn ({WEB_WORKERS} workers x {WEB_THREADS} threads), Celery "
            f"worker (concurrency {WORKER_CONCURRENCY}), beat (sweep every {SWEEP_EVERY_S:g} s); logs in {OUT}",
            flush=True,
        )
        sampler = Sampler(stack, foreign)
        load = run_load(stack, key, decide_key, rec, expected, sampler)
        checks.add(not load["dead"], f"server: {'; '.join(load['dead']) or 'every process up from start to end'}")
        figures = {} if load["dead"] else reconcile(stack.port, key, expected, hooks, load["ended_ms"], checks)
    except KeyboardInterrupt:
        print("\nInterrupted: stopping every process.", flush=True)
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave processes behind
        stack.stop()
        hooks.close()
        foreign.terminate()
        if sampler is not None:
            sampler.db.close()

    latency_text, latency = latency_report(rec, load["load_s"])
    load_text, per_minute = load_report(rec, sampler.samples, load["load_s"])
    memory_text, memory = memory_report(sampler, checks)
    errors = {op: messages for op, messages in rec.errors.items() if messages}
    checks.add(
        not errors,
        "errors: " + (", ".join(f"{op} {len(m)}" for op, m in errors.items()) or "none"),
        [f"{op}: {m}" for op, messages in errors.items() for m in messages[:5]],
    )
    logs = log_problems()
    checks.add(
        not any(logs.values()),
        "logs: " + ", ".join(f"{name} {len(lines)} ERROR/CRITICAL/Traceback lines" for name, lines in logs.items()),
        [f"{n}: {line}" for n, lines in logs.items() for line in lines[:5]],
    )
    rates = {k: load["done"][k] / max(load["planned"][k], 1) for k in load["planned"]}

    print(latency_text)
    print(load_text)
    print(memory_text)
    print(
        f"\nLoad achieved / planned: ingestion {rates['ingest']:.3f}, artifacts {rates['artifacts']:.3f}; "
        f"{load['asks_started']} ask cycles started"
    )
    print("\nChecks")
    for ok, line, problems in checks.results:
        print(f"  {'PASS' if ok else 'FAIL'}  {line}")
        for problem in problems[:10]:
            print(f"          {problem}")
        if len(problems) > 10:
            print(f"          … and {len(problems) - 10} more")
    result = {
        "minutes": MINUTES,
        "warmup_s": WARMUP_S,
        "load_s": round(load["load_s"], 1),
        "achieved_over_planned": rates,
        "rates": {
            "ingest_requests_per_s": INGEST_RPS,
            "artifact_ops_per_s": ARTIFACT_OPS,
            "ask_agents": ASK_AGENTS,
            "ask_every_s": ASK_EVERY_S,
            "sweep_every_s": SWEEP_EVERY_S,
        },
        "latency": latency,
        "load_per_minute": per_minute,
        "memory": memory,
        "reconciliation": figures,
        "errors": errors,
        "log_problems": logs,
        "checks": [{"ok": ok, "check": line, "problems": problems[:50]} for ok, line, problems in checks.results],
        "machine": common.machine(),
    }
    (OUT / "soak.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"\n  machine     {result['machine']}\n  written to  {OUT / 'soak.json'}")
    print(f"\nSoak {'PASSED' if checks.passed else 'FAILED'}")
    return 0 if checks.passed else 1


if __name__ == "__main__":
    sys.exit(main())
