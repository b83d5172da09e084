"""A Celery worker killed with SIGKILL in the middle of a sweep, a deadline pass and a webhook
delivery, all three at once; a new worker is started and beat carries on.

The work is slowed down with real volume, not mocks: tens of thousands of expired artifacts
(a sweep of seconds), hundreds of asks past their deadline (a pass of seconds), and a webhook
receiver that takes seconds to answer. The kill leaves nothing half done, and the
next runs finish the work: every expired artifact swept exactly once (metadata, payload and
tombstone together), every deadline applied exactly once, every chain intact, and every decision
delivered to the webhook at least once, each copy the same delivery (receivers dedupe by it).
"""

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import (
    PostgresCluster,
    Processes,
    RedisServer,
    WebhookReceiver,
    api_client,
    seed_artifacts,
    server_env,
    settle,
    tail,
    wait_until,
)

pytestmark = pytest.mark.celery

EXPIRED = 150_000  # thirty batches of the sweep: several seconds even on a quiet machine
LIVE = 500
DEADLINE_ASKS = 1_200  # three deadline passes (each takes at most 500), one every 5 s
BULK_RUNS = 50
HOOKED = 3  # asks of the project with a webhook, first in deadline order
RECEIVER_DELAY = 4.0
# An attempt cut short by the kill is retried once its lease (15 s) runs out, at the outbox
# sweep (every 10 s): up to 25 s without visible progress is expected, not a stall.
STALL_SECONDS = 30.0  # work that makes no progress for this long after the restart has stopped

SEED_ASKS = """
INSERT INTO ledger_ask (project_id, run_id, tool_call_id, tool_name, kind, question, pause_data, deadline,
                        on_timeout, status)
SELECT %(project)s, %(run_prefix)s || mod(i, %(runs)s), 'call-' || i, 'ask_user', 'plain', 'Go on?',
       jsonb_build_object('toolCallId', 'call-' || i, 'toolName', 'ask_user', 'question', 'Go on?'),
       now() - %(age)s::interval + i * interval '1 ms', %(on_timeout)s, 'open'
FROM generate_series(1, %(count)s) AS i
"""

# For each seeded artifact: is it whole (metadata and payload) or gone (tombstone, nothing else)?
ARTIFACT_STATE = """
SELECT s.live,
       count(*) FILTER (WHERE a.id IS NOT NULL) AS metadata,
       count(*) FILTER (WHERE (a.id IS NULL) <> (p.artifact_id IS NULL)) AS torn,
       count(*) FILTER (WHERE (a.id IS NULL) = (t.n IS NULL)) AS neither_or_both,
       coalesce(max(t.n), 0) AS most_tombstones
FROM faults_seeded s
LEFT JOIN artifacts_artifact a ON a.id = s.id
LEFT JOIN artifacts_payload_far p ON p.expiry_bucket = '9999-12-31' AND p.artifact_id = s.id
LEFT JOIN (SELECT ref, count(*) AS n FROM artifacts_tombstone WHERE store_id = %(store)s GROUP BY ref) t
       ON t.ref = s.ref
GROUP BY s.live
"""

# For each seeded ask: its state and how many decision events its run's chain holds for it.
ASK_STATE = """
SELECT a.id, a.project_id, a.run_id, a.status, a.decided_via, a.approved,
       (SELECT count(*) FROM ledger_runevent e JOIN ledger_run r ON r.id = e.run_id
        WHERE r.project_id = a.project_id AND r.run_id = a.run_id AND e.type = 'ledger.human_decision'
          AND (e.doc->'payload'->>'askId')::bigint = a.id) AS decision_events
FROM ledger_ask a ORDER BY a.id
"""


def _busy_backends(postgres: PostgresCluster) -> list[str]:
    """What the database's other sessions are doing: evidence when work does not finish."""
    rows = postgres.query(
        "SELECT pid, state, wait_event_type, wait_event, round(extract(epoch FROM now() - xact_start)),"
        " pg_blocking_pids(pid), left(regexp_replace(query, '\\s+', ' ', 'g'), 100) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle' ORDER BY xact_start"
    )
    return [
        f"pid {pid} {state} waiting {kind}:{event} for {age} s in its transaction, blocked by {blockers}: {query}"
        for pid, state, kind, event, age, blockers, query in rows
    ]


def _artifact_state(postgres: PostgresCluster, store: int) -> dict[bool, tuple[int, int, int, int]]:
    return {row[0]: row[1:] for row in postgres.query(ARTIFACT_STATE, {"store": store})}


def _half_done(postgres: PostgresCluster, store: int) -> list[str]:
    """Artifacts torn apart or tombstoned twice, asks decided without their event or twice."""
    found = []
    for live, (_, torn, neither_or_both, most_tombstones) in _artifact_state(postgres, store).items():
        if torn or neither_or_both or most_tombstones > 1:
            found.append(
                f"{'live' if live else 'expired'} artifacts half deleted: {torn} with metadata xor payload, "
                f"{neither_or_both} with both or neither of metadata and tombstone, "
                f"up to {most_tombstones} tombstones for one ref"
            )
    for ask_id, _, _, status, via, _, events in postgres.query(ASK_STATE):
        if events != (1 if status == "decided" else 0):
            found.append(f"ask {ask_id} is {status} (via {via}) with {events} decision events in its chain")
    return found


def test_a_worker_killed_mid_work_leaves_nothing_half_done_and_the_next_run_finishes_it(
    postgres: PostgresCluster,
    redis_server: RedisServer,
    processes: Processes,
    webhook_receiver: WebhookReceiver,
    seed: dict[str, Any],
    tmp_path: Path,
) -> None:
    bulk, hooked = seed["bulk"], seed["faults"]
    webhook_receiver.delay = RECEIVER_DELAY
    postgres.query(
        "UPDATE ledger_webhookendpoint SET url = %s, active = true WHERE project_id = %s",
        [webhook_receiver.url, hooked["project_id"]],
    )
    env = server_env(
        database_url=postgres.url(),
        broker_url=redis_server.url,
        data_dir=tmp_path,
        FOOTPRINT_SWEEP_EVERY_SECONDS="3",
    )
    web = processes.gunicorn(env, workers=1)
    worker = processes.worker(env, concurrency=4)

    seed_artifacts(postgres, store_id=bulk["store_id"], expired=EXPIRED, live=LIVE)
    ask_seed = {"on_timeout": "decline", "runs": BULK_RUNS, "count": DEADLINE_ASKS, "age": "1 minute"}
    postgres.query(SEED_ASKS, {**ask_seed, "project": bulk["project_id"], "run_prefix": "bulk-run-"})
    # The hooked asks' deadlines passed earliest: the pass decides them first, so their webhooks
    # are on their way while the pass goes on through the bulk asks.
    hooked_seed = {"on_timeout": "approve", "runs": HOOKED, "count": HOOKED, "age": "10 minutes"}
    postgres.query(SEED_ASKS, {**hooked_seed, "project": hooked["project_id"], "run_prefix": "hooked-run-"})
    hooked_asks = [
        row[0] for row in postgres.query("SELECT id FROM ledger_ask WHERE project_id = %s", [hooked["project_id"]])
    ]
    web.wait_ready()
    worker.wait_for_output("ready.")

    # Beat sends a sweep and a deadline pass as it starts, and again every few seconds.
    beat = processes.beat(env, tmp_path)

    def midway() -> tuple[int, int, int]:
        ((tombstones, decided),) = postgres.query(
            "SELECT (SELECT count(*) FROM artifacts_tombstone WHERE store_id = %s),"
            " (SELECT count(*) FROM ledger_ask WHERE status = 'decided')",
            [bulk["store_id"]],
        )
        return tombstones, decided, webhook_receiver.in_flight

    def all_three_midway() -> bool:
        tombstones, decided, in_flight = midway()
        return 0 < tombstones < EXPIRED and 0 < decided < DEADLINE_ASKS + HOOKED and in_flight > 0

    if not wait_until(all_three_midway, 30, 0.02):
        pytest.fail(
            f"could not catch the worker with a sweep, a deadline pass and a delivery all under way: "
            f"(tombstones, decided, deliveries in flight) = {midway()}\n{tail(worker.output())}\n{tail(beat.output())}"
        )
    worker.kill()
    killed_at = time.monotonic()
    at_kill = midway()
    webhook_receiver.delay = 0.0
    received_at_kill = len(webhook_receiver.received)

    problems = [f"right after the kill: {p}" for p in _half_done(postgres, bulk["store_id"])]
    time.sleep(1.0)  # the killed worker's sessions end; whatever they had not committed rolls back
    problems += [f"after the killed worker's sessions ended: {p}" for p in _half_done(postgres, bulk["store_id"])]

    restarted = time.monotonic()
    worker = processes.worker(env, concurrency=4)
    worker.wait_for_output("ready.")

    def deliveries() -> dict[int, tuple[str, int]]:
        rows = postgres.query(
            "SELECT ask_id, status, attempts FROM ledger_webhookdelivery WHERE ask_id = ANY(%s)", [hooked_asks]
        )
        return {ask_id: (status, attempts) for ask_id, status, attempts in rows}

    def progress() -> tuple[bool, object]:
        expired_left = _artifact_state(postgres, bulk["store_id"])[False][0]
        ((open_asks,),) = postgres.query("SELECT count(*) FROM ledger_ask WHERE status = 'open'")
        rows = deliveries()
        delivered = all(rows.get(a, ("",))[0] == "delivered" and webhook_receiver.for_ask(a) for a in hooked_asks)
        done = expired_left == 0 and open_asks == 0 and delivered
        return done, (expired_left, open_asks, len(webhook_receiver.received), tuple(sorted(rows.items())))

    settle(progress, stall=STALL_SECONDS, cap=120)
    waited = time.monotonic() - restarted
    problems += _half_done(postgres, bulk["store_id"])

    # The sweep finished: every expired artifact gone exactly once, every live one untouched.
    state = _artifact_state(postgres, bulk["store_id"])
    if state[False][0]:
        problems.append(f"{state[False][0]} of {EXPIRED} expired artifacts still there {waited:.0f} s after restart")
    if state[True][0] != LIVE:
        problems.append(f"live artifacts lost: {LIVE - state[True][0]} of {LIVE}")

    # The deadline passes finished: every ask timed out once, by the deadline, as it asked.
    asks = postgres.query(ASK_STATE)
    undecided = [a[0] for a in asks if a[3] != "decided"]
    if undecided:
        problems.append(
            f"{len(undecided)} asks past their deadline still open {waited:.0f} s after the restart; the database's"
            " busy sessions:\n  " + "\n  ".join(_busy_backends(postgres))
        )
    wrong = [a for a in asks if a[3] == "decided" and (a[4], a[5]) != ("deadline", a[1] == hooked["project_id"])]
    if wrong:
        problems.append(f"{len(wrong)} asks decided otherwise than by their deadline's onTimeout, e.g. {wrong[0]}")

    # Every chain the passes appended to still verifies.
    for key, run_ids in (
        (bulk["key"], [f"bulk-run-{n}" for n in range(BULK_RUNS)]),
        (hooked["key"], [f"hooked-run-{n}" for n in range(HOOKED)]),
    ):
        reader = api_client(web.url, key)
        for run_id in run_ids:
            answer = reader.get(f"/api/v1/runs/{run_id}/verify")
            if answer.status_code != 200 or not answer.json()["valid"]:
                problems.append(f"chain of {run_id}: {answer.status_code} {answer.text[:200]}")

    # Every decision reached the webhook and was acknowledged by it (the server recorded the 2xx);
    # a copy the killed worker sent but never saw answered does not count. Copies are one delivery.
    rows = deliveries()
    seen = Counter(webhook_receiver.ask_ids())
    for ask_id in hooked_asks:
        copies = webhook_receiver.for_ask(ask_id)
        if not copies or rows.get(ask_id, ("",))[0] != "delivered":
            problems.append(
                f"the webhook of ask {ask_id} was not delivered {waited:.0f} s after the restart: received "
                f"{len(copies)} times (all before the kill: {all(c.at < killed_at for c in copies)}), "
                f"delivery row (status, attempts) = {rows.get(ask_id)}"
            )
        if len({c.body for c in copies}) > 1:
            problems.append(f"the {len(copies)} copies of ask {ask_id}'s webhook differ: {[c.body for c in copies]}")
    print(
        f"at the kill: (tombstones, decided, in flight) = {at_kill}, webhooks received {received_at_kill}; "
        f"after {waited:.0f} s: webhooks by ask {dict(seen)}, deliveries {rows}"
    )
    assert not problems, "\n".join(problems)
