"""PostgreSQL stopped and started again under a real gunicorn while agents ingest, decide and mint.

Four writer threads, each an agent with its own run, go step by step: a batch of four numbered
events, then either an ask opened and decided or an artifact put. Every step is retried until
the server acknowledges it, the way an agent with a retrying client would. A fifth thread
long-polls a decision across the outage. Midway PostgreSQL is shut down (`pg_ctl stop -m fast`),
left down for a few seconds and started again.

Afterwards everything acknowledged, before, during or after the outage, is stored exactly once,
every run's chain verifies, and nothing the server refused was stored. While the database is
down the server should say so: 503 with Retry-After, never a 500 (which a client cannot tell
from a bug and which gives it no hint when to come back).
"""

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from artifacts.scopes import scope_header
from tests.faults.conftest import PostgresCluster, Processes, api_client, server_env, wait_until

WRITERS = 4
EVENTS_PER_STEP = 4
OUTAGE_SECONDS = 3.0
SCOPE = {"tenant": "faults", "conversationId": "pg-restart"}


@dataclass
class Failure:
    """One answer (or transport error) that was not the acknowledgement."""

    at: float
    what: str
    status: int | None
    error: str | None = None
    retry_after: str | None = None
    content_type: str | None = None
    body: str = ""


class GaveUp(Exception):
    pass


@dataclass
class Agent:
    """An agent with a retrying HTTP client: connection errors and 5xx are retried, 4xx are not."""

    http: httpx.Client
    failures: list[Failure] = field(default_factory=list)

    def call(self, what: str, method: str, path: str, give_up_after: float = 60, **kwargs: Any) -> httpx.Response:
        deadline = time.monotonic() + give_up_after
        while True:
            try:
                answer = self.http.request(method, path, **kwargs)
            except httpx.TransportError as error:
                self.failures.append(Failure(time.monotonic(), what, None, error=type(error).__name__))
            else:
                if answer.status_code < 500:
                    return answer
                self.failures.append(
                    Failure(
                        time.monotonic(),
                        what,
                        answer.status_code,
                        retry_after=answer.headers.get("Retry-After"),
                        content_type=answer.headers.get("Content-Type"),
                        body=answer.text[:160],
                    )
                )
            if time.monotonic() > deadline:
                raise GaveUp(f"{what}: no acknowledgement within {give_up_after} s")
            time.sleep(0.1)


@dataclass
class Writer:
    number: int
    agent: Agent
    decider: Agent  # an integration's key: the agent's own may not decide its asks
    stop: threading.Event
    steps: int = 0  # steps acknowledged in full
    step_done_at: list[float] = field(default_factory=list)
    decisions: list[tuple[int, str]] = field(default_factory=list)  # (ask id, by)
    artifacts: list[tuple[str, str, str]] = field(default_factory=list)  # (ref, label, value)
    refused_puts: list[tuple[str, int | None]] = field(default_factory=list)  # (label, status)
    error: BaseException | None = None

    @property
    def run_id(self) -> str:
        return f"pg-restart-w{self.number}"

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self._step(self.steps)
                self.steps += 1
                self.step_done_at.append(time.monotonic())
        except BaseException as error:
            self.error = error

    def _step(self, step: int) -> None:
        first = step * EVENTS_PER_STEP
        events = [
            {
                "seq": seq,
                "type": "custom.fault_step",
                "payload": {"writer": self.number, "seq": seq},
                "meta": {"runId": self.run_id},
            }
            for seq in range(first, first + EVENTS_PER_STEP)
        ]
        answer = self.agent.call("ingest", "POST", "/api/v1/events", json={"events": events})
        assert answer.status_code == 200, answer.text
        (receipt,) = answer.json()["runs"]
        assert receipt["accepted"] + receipt["duplicates"] == EVENTS_PER_STEP, receipt
        assert receipt["lastSeq"] == first + EVENTS_PER_STEP - 1, receipt
        if step % 2 == 0:
            self._ask(step)
        else:
            self._put(step)

    def _ask(self, step: int) -> None:
        pause = {"toolCallId": f"call-{step}", "toolName": "approve_step", "question": f"Step {step}?"}
        opened = self.agent.call("open ask", "POST", "/api/v1/asks", json={"runId": self.run_id, "pauseData": pause})
        assert opened.status_code in (200, 201), opened.text
        ask_id = opened.json()["ask"]["id"]
        by = f"writer-{self.number}"
        decided = self.decider.call(
            "decide", "POST", f"/api/v1/asks/{ask_id}/decision", json={"by": by, "note": f"s{step}", "value": "go"}
        )
        # A retried decision whose first attempt committed is told it was already decided: by us.
        if decided.status_code == 409:
            assert decided.json()["decision"]["by"] == by, decided.text
        else:
            assert decided.status_code == 200, decided.text
        self.decisions.append((ask_id, by))

    def _put(self, step: int) -> None:
        value = f"writer {self.number}, step {step}"
        for attempt in range(200):
            label = f"w{self.number}-s{step}-a{attempt}"  # a put mints a ref: every attempt is its own
            document = {"kind": "note/text", "mediaType": "text/plain", "label": label}
            document["payload"] = {"shape": "text", "value": value}
            try:
                answer = self.agent.http.post(
                    "/api/v1/artifacts", json=document, headers={"AF-Scope": scope_header(SCOPE)}
                )
            except httpx.TransportError as error:
                self.agent.failures.append(Failure(time.monotonic(), "put", None, error=type(error).__name__))
                self.refused_puts.append((label, None))
                time.sleep(0.1)
                continue
            if answer.status_code == 201:
                self.artifacts.append((answer.json()["meta"]["ref"], label, value))
                return
            self.agent.failures.append(
                Failure(
                    time.monotonic(),
                    "put",
                    answer.status_code,
                    retry_after=answer.headers.get("Retry-After"),
                    content_type=answer.headers.get("Content-Type"),
                    body=answer.text[:160],
                )
            )
            assert answer.status_code >= 500, answer.text
            self.refused_puts.append((label, answer.status_code))
            time.sleep(0.1)
        raise GaveUp("put")


def _decision_events(postgres: PostgresCluster, project_id: int) -> Counter[int]:
    rows = postgres.query(
        "SELECT (e.doc->'payload'->>'askId')::bigint FROM ledger_runevent e JOIN ledger_run r ON r.id = e.run_id"
        " WHERE r.project_id = %s AND e.type = 'ledger.human_decision'",
        [project_id],
    )
    return Counter(row[0] for row in rows)


def test_acknowledged_writes_survive_a_postgres_restart(
    postgres: PostgresCluster, processes: Processes, seed: dict[str, Any], tmp_path: Path
) -> None:
    key, project_id, decider_key = seed["faults"]["key"], seed["faults"]["project_id"], seed["faults"]["decider"]
    # No broker: this test is about the database (the project's webhook is off).
    web = processes.gunicorn(server_env(database_url=postgres.url(), broker_url=None, data_dir=tmp_path))
    web.wait_ready()

    stop = threading.Event()
    writers = [
        Writer(
            n, Agent(api_client(web.url, key, timeout=15)), Agent(api_client(web.url, decider_key, timeout=15)), stop
        )
        for n in range(WRITERS)
    ]
    threads = [threading.Thread(target=w.run, name=f"writer-{w.number}") for w in writers]
    for thread in threads:
        thread.start()

    # A long-poll held across the outage: opened and waiting before, decided after.
    waiter_agent = Agent(api_client(web.url, key, timeout=40))
    opened = waiter_agent.call(
        "open ask",
        "POST",
        "/api/v1/asks",
        json={"runId": "pg-restart-waiter", "pauseData": {"toolCallId": "hold", "toolName": "t", "question": "?"}},
    )
    waiting_ask = opened.json()["ask"]["id"]
    waited: dict[str, Any] = {}

    def wait_for_decision() -> None:
        try:
            while True:
                answer = waiter_agent.call("long-poll", "GET", f"/api/v1/asks/{waiting_ask}/decision?wait=25")
                if answer.json().get("status") == "decided":
                    waited["decision"], waited["at"] = answer.json()["decision"], time.monotonic()
                    return
        except BaseException as error:
            waited["error"] = error

    waiter = threading.Thread(target=wait_for_decision, name="long-poll")
    try:
        waiter.start()
        assert wait_until(lambda: all(w.steps >= 3 for w in writers), 30), "the writers did not get going"

        outage_started = time.monotonic()
        postgres.stop("fast")
        time.sleep(OUTAGE_SECONDS)
        postgres.start()
        outage_ended = time.monotonic()

        # Everyone carries on: each writer completes more steps after the restart.
        assert wait_until(lambda: all(sum(t > outage_ended for t in w.step_done_at) >= 3 for w in writers), 45), (
            f"the writers did not recover within 45 s of the restart; steps: {[w.steps for w in writers]}, "
            f"errors: {[w.error for w in writers]}\n{web.output()[-3000:]}"
        )
        decider = Agent(api_client(web.url, decider_key))
        decided = decider.call(
            "decide", "POST", f"/api/v1/asks/{waiting_ask}/decision", json={"by": "late", "value": "stop"}
        )
        assert decided.status_code == 200, decided.text
        decided_at = time.monotonic()
    finally:
        stop.set()
        for thread in threads:
            thread.join(90)
        waiter.join(60)

    problems: list[str] = []
    for writer in writers:
        assert writer.error is None, f"writer {writer.number} failed: {writer.error!r}"
    assert "error" not in waited, f"the long-poll failed: {waited['error']!r}"

    # The long-poll held through the outage got the decision made after it.
    if "decision" not in waited:
        problems.append("the long-poll never returned the decision")
    elif waited["decision"]["by"] != "late" or waited["at"] - decided_at > 10:
        problems.append(f"the long-poll answered {waited['decision']} {waited['at'] - decided_at:.1f} s after")

    # Every acknowledged event is stored exactly once, in order, with its own content.
    reader = api_client(web.url, key)
    decision_events = _decision_events(postgres, project_id)
    for writer in writers:
        rows = postgres.query(
            "SELECT e.seq, count(*), min(e.doc->'payload'->>'seq') FROM ledger_runevent e"
            " JOIN ledger_run r ON r.id = e.run_id WHERE r.project_id = %s AND r.run_id = %s AND e.seq IS NOT NULL"
            " GROUP BY e.seq ORDER BY e.seq",
            [project_id, writer.run_id],
        )
        expected = list(range(writer.steps * EVENTS_PER_STEP))
        if [r[0] for r in rows] != expected:
            missing = sorted(set(expected) - {r[0] for r in rows})
            problems.append(f"{writer.run_id}: stored seqs differ from the acknowledged ones; missing {missing[:20]}")
        if any(r[1] != 1 or r[2] != str(r[0]) for r in rows):
            problems.append(f"{writer.run_id}: events stored more than once or with other content")
        run = reader.get(f"/api/v1/runs/{writer.run_id}").json()
        records = len(expected) + len(writer.decisions)  # the agent's events and the server's decisions
        if run["events"] != records or run["lastSeq"] != expected[-1] or run["hasGaps"]:
            problems.append(f"{writer.run_id}: the run summary disagrees: {run}")
        verdict = reader.get(f"/api/v1/runs/{writer.run_id}/verify").json()
        if not verdict["valid"] or verdict["recordsChecked"] != records:
            problems.append(f"{writer.run_id}: chain verdict {verdict} ({len(writer.decisions)} decisions)")

        # Every acknowledged decision is recorded once, by whom it was acknowledged to.
        for ask_id, by in writer.decisions:
            ((status, label),) = postgres.query(
                "SELECT status, decided_by_label FROM ledger_ask WHERE id = %s", [ask_id]
            )
            if (status, label) != ("decided", by) or decision_events[ask_id] != 1:
                problems.append(
                    f"ask {ask_id}: {status} by {label}, {decision_events[ask_id]} decision events (expected 1 by {by})"
                )

        # Every acknowledged artifact is there once and reads back; nothing refused was stored.
        for ref, label, value in writer.artifacts:
            stored = postgres.query("SELECT ref FROM artifacts_artifact WHERE label = %s", [label])
            got = reader.get(f"/api/v1/artifacts/{ref}", headers={"AF-Scope": scope_header(SCOPE)})
            if stored != [(ref,)] or got.status_code != 200 or got.json()["payload"]["value"] != value:
                problems.append(f"artifact {label}: stored {stored}, read back {got.status_code} {got.text[:200]}")
        for label, status in writer.refused_puts:
            if postgres.query("SELECT ref FROM artifacts_artifact WHERE label = %s", [label]):
                problems.append(f"artifact {label} was answered {status} but stored all the same")

    # What the clients were told while the database was down.
    failures = [f for a in [w.agent for w in writers] + [waiter_agent] for f in a.failures]
    if not failures:
        pytest.fail("no request failed during the outage: the restart was not observed")
    by_status = Counter(f.status if f.status is not None else f.error for f in failures)
    late = [f for f in failures if f.at > outage_ended + 5]
    if late:
        problems.append(f"{len(late)} failures more than 5 s after PostgreSQL was back, e.g. {late[0]}")
    not_503 = [f for f in failures if f.status is not None and f.status != 503]
    if not_503:
        examples = {f"{f.what} -> {f.status} {f.content_type}: {f.body[:80]!r}" for f in not_503}
        problems.append(
            f"while PostgreSQL was down the server answered {len(not_503)} requests with "
            f"{sorted({f.status for f in not_503})} instead of 503 + Retry-After "
            f"(all failures by status: {dict(by_status)}); e.g. {sorted(examples)[:4]}"
        )
    no_retry_after = [f for f in failures if f.status == 503 and not f.retry_after]
    if no_retry_after:
        problems.append(f"{len(no_retry_after)} answers were 503 without Retry-After")
    print(
        f"outage {outage_ended - outage_started:.1f} s; steps {[w.steps for w in writers]}; failures {dict(by_status)}"
    )
    assert not problems, "\n".join(problems)
