"""Redis, the Celery broker, shut down under a real gunicorn, worker and beat, then started again.

While the broker is down, everything an agent or a person does synchronously keeps working at
once (ingestion, artifacts, asks opened, decided through the API and the page, long-polls, pages):
the broker only carries background work. Once it is back, that background work resumes with
nothing skipped: the artifacts that expired meanwhile are swept, the ask whose deadline passed
meanwhile gets its timeout outcome, and the decisions made meanwhile reach the webhook.
"""

import hashlib
import hmac
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from artifacts.scopes import scope_header
from tests.faults.conftest import (
    PostgresCluster,
    Processes,
    RedisServer,
    WebhookReceiver,
    api_client,
    seed_artifacts,
    server_env,
    settle,
    signed_in,
    tail,
    wait_until,
)

pytestmark = pytest.mark.celery

SCOPE = {"tenant": "faults", "conversationId": "broker-outage"}
HANG_SECONDS = 5.0  # "keeps working": every answer within this, never a hang on the broker
SWEPT_MEANWHILE = 40_000  # a sweep of seconds, under way when the broker stops
STALL_SECONDS = 10.0  # background work that makes no progress for this long has stopped


def _plain_ask(tool_call_id: str, **extra: Any) -> dict[str, Any]:
    pause = {"toolCallId": tool_call_id, "toolName": "ask_user", "question": f"{tool_call_id}?"}
    return {"runId": "broker-outage", "pauseData": pause, **extra}


def test_work_goes_on_without_the_broker_and_background_work_resumes_with_it(
    postgres: PostgresCluster,
    redis_server: RedisServer,
    processes: Processes,
    webhook_receiver: WebhookReceiver,
    seed: dict[str, Any],
    tmp_path: Path,
) -> None:
    key, project_id = seed["faults"]["key"], seed["faults"]["project_id"]
    postgres.query(
        "UPDATE ledger_webhookendpoint SET url = %s, active = true WHERE project_id = %s",
        [webhook_receiver.url, project_id],
    )
    env = server_env(
        database_url=postgres.url(),
        broker_url=redis_server.url,
        data_dir=tmp_path,
        FOOTPRINT_SWEEP_EVERY_SECONDS="2",
    )
    web = processes.gunicorn(env)
    worker = processes.worker(env, concurrency=2)
    beat = processes.beat(env, tmp_path)
    web.wait_ready()
    worker.wait_for_output("ready.")
    beat.wait_for_output("beat: Starting")
    api = api_client(web.url, key)
    integration = api_client(web.url, seed["faults"]["decider"])  # the agent's own key may not decide
    artifacts_headers = {"AF-Scope": scope_header(SCOPE)}

    # The pipeline works before the fault: a decision reaches the webhook.
    warm = api.post("/api/v1/asks", json=_plain_ask("warm-up")).json()["ask"]["id"]
    assert integration.post(f"/api/v1/asks/{warm}/decision", json={"by": "ops", "value": "ok"}).status_code == 200
    assert wait_until(lambda: warm in webhook_receiver.ask_ids(), 20), f"no warm-up webhook:\n{tail(worker.output())}"

    # A sweep is under way when the broker goes (real volume: tens of thousands of expired
    # artifacts), so the worker holds an unacknowledged acks_late task at that moment, as it does
    # whenever Redis restarts during one of the sweeps or the deadline passes beat keeps sending.
    store_id = seed["bulk"]["store_id"]
    seed_artifacts(postgres, store_id=store_id, expired=SWEPT_MEANWHILE)

    def tombstones() -> int:
        return int(postgres.query("SELECT count(*) FROM artifacts_tombstone WHERE store_id = %s", [store_id])[0][0])

    assert wait_until(lambda: 0 < tombstones() < SWEPT_MEANWHILE, 30, 0.02), (
        f"no sweep under way: {tombstones()} of {SWEPT_MEANWHILE} swept\n{tail(worker.output())}"
    )

    # Work that falls due while the broker is down (made quickly: the sweep is still under way).
    now_ms = int(time.time() * 1000)
    expiring = []
    for n in range(5):
        document = {
            "kind": "note/text",
            "mediaType": "text/plain",
            "expiresAt": now_ms + 4_000,
            "payload": {"shape": "text", "value": f"short-lived {n}"},
        }
        answer = api.post("/api/v1/artifacts", json=document, headers=artifacts_headers)
        assert answer.status_code == 201, answer.text
        expiring.append(answer.json()["meta"]["ref"])
    deadline = time.time() + 4
    deadline_iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline + 1))
    timed_out = api.post("/api/v1/asks", json=_plain_ask("deadline", deadline=deadline_iso, onTimeout="approve"))
    assert timed_out.status_code == 201, timed_out.text
    timed_out_ask = timed_out.json()["ask"]["id"]

    redis_server.stop()
    assert not redis_server.answers()

    problems: list[str] = []
    calls: list[tuple[str, int | None, float]] = []

    def timed(what: str, send: Any, expect: int) -> httpx.Response | None:
        started = time.monotonic()
        try:
            answer = send()
        except httpx.TimeoutException:
            calls.append((what, None, time.monotonic() - started))
            problems.append(f"{what}: no answer within the client's timeout while the broker was down")
            return None
        elapsed = time.monotonic() - started
        calls.append((what, answer.status_code, elapsed))
        if answer.status_code != expect:
            problems.append(
                f"{what}: {answer.status_code} after {elapsed:.2f} s while the broker was down (expected {expect}); "
                f"{answer.headers.get('Content-Type')}: {answer.text[:120]!r}"
            )
        elif elapsed > HANG_SECONDS:
            problems.append(f"{what}: took {elapsed:.1f} s while the broker was down")
        return answer

    # Agents: ingestion, artifacts, asks.
    events = [
        {"seq": seq, "type": "custom.outage", "payload": {"seq": seq}, "meta": {"runId": "broker-outage-events"}}
        for seq in range(10)
    ]
    timed("ingest", lambda: api.post("/api/v1/events", json={"events": events}), 200)
    put = timed(
        "put artifact",
        lambda: api.post(
            "/api/v1/artifacts",
            json={"kind": "dataset/rows", "mediaType": "application/json", "payload": {"shape": "json", "value": "[]"}},
            headers=artifacts_headers,
        ),
        201,
    )
    if put is not None and put.status_code == 201:
        ref = put.json()["meta"]["ref"]
        timed("get artifact", lambda: api.get(f"/api/v1/artifacts/{ref}", headers=artifacts_headers), 200)
        resolve = {"toolName": "chart", "wants": {"data": "dataset/rows"}, "args": {"data": ref}}
        timed("resolve", lambda: api.post("/api/v1/wants:resolve", json=resolve, headers=artifacts_headers), 200)

    opened = timed("open ask", lambda: api.post("/api/v1/asks", json=_plain_ask("by-api")), 201)
    assert opened is not None, "no ask to decide"
    assert opened.status_code == 201, "no ask to decide"
    by_api = opened.json()["ask"]["id"]
    waited: dict[str, Any] = {}

    def long_poll() -> None:
        started = time.monotonic()
        answer = api_client(web.url, key, timeout=30).get(f"/api/v1/asks/{by_api}/decision?wait=20")
        waited.update(status=answer.status_code, body=answer.json(), at=time.monotonic(), started=started)

    poller = threading.Thread(target=long_poll, name="long-poll")
    poller.start()
    time.sleep(0.5)
    decision_by_api = {"by": "bot", "value": 1}
    timed("decide via the API", lambda: integration.post(f"/api/v1/asks/{by_api}/decision", json=decision_by_api), 200)
    decided_at = time.monotonic()
    poller.join(25)
    if waited.get("status") != 200 or waited["body"].get("status") != "decided" or waited["at"] - decided_at > 3:
        problems.append(f"the long-poll did not return the decision promptly: {waited}")

    # A person: pages, and a decision through the ask page.
    on_page = timed("open ask", lambda: api.post("/api/v1/asks", json=_plain_ask("by-page")), 201)
    assert on_page is not None, "no ask to decide on the page"
    assert on_page.status_code == 201, "no ask to decide on the page"
    by_page = on_page.json()["ask"]["id"]
    person = signed_in(web.url, seed["user"]["username"], seed["user"]["password"])
    for page in ("/", "/inbox/", f"/asks/{by_page}/"):
        timed(f"GET {page}", lambda page=page: person.get(page), 200)
    decision = {
        "decision": "answer",
        "value": "yes",
        "confirmed": "on",
        "csrfmiddlewaretoken": person.cookies["csrftoken"],
    }
    timed("decide on the ask page", lambda: person.post(f"/asks/{by_page}/decide/", data=decision), 302)
    health = timed("GET /healthz", lambda: httpx.get(f"{web.url}/healthz", timeout=10), 200)
    if health is not None and health.status_code == 200 and health.json()["broker"] == "ok":
        problems.append(f"/healthz says the broker is ok while it is down: {health.json()}")

    # Let the expiries and the deadline pass while the broker is still down (beat's ticks fail).
    time.sleep(max(0.0, deadline + 3 - time.time()))
    for process in (web, worker, beat):
        if not process.alive:
            lines = process.output().splitlines()
            said = [line for line in lines if "CRITICAL" in line or "Unrecoverable" in line] or lines[-3:]
            problems.append(f"{process.name} exited ({process.returncode}) while the broker was down: {said}")
    redis_server.start()

    def sweep_state() -> tuple[int, int, int]:
        """(expired meanwhile still there, of those tombstoned, left of the interrupted sweep)."""
        ((left, tombstoned, bulk_left),) = postgres.query(
            "SELECT (SELECT count(*) FROM artifacts_artifact WHERE ref = ANY(%(refs)s)),"
            " (SELECT count(*) FROM artifacts_tombstone WHERE ref = ANY(%(refs)s) AND reason = 'ttl'),"
            " (SELECT count(*) FROM artifacts_artifact WHERE store_id = %(bulk)s)",
            {"refs": expiring, "bulk": store_id},
        )
        return left, tombstoned, bulk_left

    def swept() -> bool:
        return sweep_state() == (0, len(expiring), 0) and tombstones() == SWEPT_MEANWHILE

    def deadline_applied() -> bool:
        rows = postgres.query("SELECT status, decided_via, approved FROM ledger_ask WHERE id = %s", [timed_out_ask])
        return rows[0] == ("decided", "deadline", True)

    decided_meanwhile = {by_api: "by-api", by_page: "by-page", timed_out_ask: "deadline"}

    def deliveries() -> list[tuple[int, str | None, int | None]]:
        return postgres.query(
            "SELECT a.id, d.status, d.attempts FROM ledger_ask a"
            " LEFT JOIN ledger_webhookdelivery d ON d.ask_id = a.id WHERE a.id = ANY(%s) ORDER BY a.id",
            [list(decided_meanwhile)],
        )

    def delivered() -> bool:
        received = set(webhook_receiver.ask_ids())
        return all(ask_id in received and status == "delivered" for ask_id, status, _ in deliveries())

    def state() -> tuple[bool, object]:
        progress = (sweep_state(), deadline_applied(), len(webhook_receiver.received), tuple(deliveries()))
        return swept() and deadline_applied() and delivered(), progress

    waited_for = settle(state, stall=STALL_SECONDS, cap=60)
    if not swept():
        left, tombstoned, bulk_left = sweep_state()
        problems.append(
            f"sweeping did not resume: {waited_for:.0f} s after the broker came back {left} of the {len(expiring)}"
            f" artifacts that expired while it was down are still stored ({tombstoned} tombstoned), and"
            f" {bulk_left} of the {SWEPT_MEANWHILE} of the sweep under way when it went"
        )
    if not deadline_applied():
        problems.append(f"the ask whose deadline passed while the broker was down was not timed out ({timed_out_ask})")
    for ask_id, status, attempts in deliveries():
        if ask_id not in webhook_receiver.ask_ids() or status != "delivered":
            problems.append(
                f"the webhook of ask {ask_id} ({decided_meanwhile[ask_id]}, decided while the broker was down"
                f" or falling due then) was not delivered {waited_for:.0f} s after the broker came back:"
                f" received {webhook_receiver.ask_ids().count(ask_id)} times, delivery row {status!r},"
                f" {attempts} attempts"
            )
    for received in webhook_receiver.received:
        expected = "sha256=" + hmac.new(seed["webhook_secret"].encode(), received.body, hashlib.sha256).hexdigest()
        if received.headers.get("X-Footprint-Signature") != expected:
            problems.append(f"webhook of ask {received.document['askId']} has a bad signature")
    print("calls while the broker was down:", [(w, s, round(e, 2)) for w, s, e in calls])
    assert not problems, "\n".join(problems)
