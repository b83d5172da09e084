"""A Celery worker killed with SIGKILL while it escalates asks: the escalation step's message is
on its way to the on-call channel (a webhook receiver that takes seconds to answer) when the
worker dies. A new worker is started; beat carries on.

Each escalation step is taken exactly once (one outbox row for it, the step counter moved once),
its message reaches the channel (at least once, every copy the same delivery id to dedupe by, as
the outbox promises), and the deadline's default is applied exactly once (one chained decision).
"""

import time
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import (
    PostgresCluster,
    Processes,
    RedisServer,
    WebhookReceiver,
    server_env,
    settle,
    tail,
    wait_until,
)

pytestmark = pytest.mark.celery

ASKS = 3
RECEIVER_DELAY = 4.0
DEADLINE_SECONDS = 60  # after the kill and the redelivery (lease 30 s, then the sweep): the default comes last
# A message cut short by the kill is retried once its lease (30 s) has run out, at the outbox
# sweep (every 10 s): up to 40 s without visible progress is expected, not a stall.
STALL_SECONDS = 45.0

SEED_ASKS = """
INSERT INTO ledger_ask (project_id, run_id, tool_call_id, tool_name, kind, question, pause_data, deadline,
                        on_timeout, status)
SELECT %(project)s, 'escalated-run-' || i, 'call-' || i, 'transfer_funds', 'ask', 'Send it?',
       jsonb_build_object('toolCallId', 'call-' || i, 'toolName', 'transfer_funds'),
       now() + %(deadline)s * interval '1 second', 'decline', 'open'
FROM generate_series(1, %(count)s) AS i
"""
SEED_CHANNEL = """
INSERT INTO ledger_notificationchannel (project_id, name, kind, target, secret, on_new_ask, on_deadline,
                                        include_payload, active)
VALUES (%(project)s, 'on-call', 'webhook', %(url)s, 'escalation-hmac', false, false, false, true)
"""
# Each ask opened under a rule whose first step (due now) notifies on-call.
SEED_ESCALATIONS = """
INSERT INTO ledger_askescalation (ask_id, note, steps, next_step, next_at)
SELECT id, 'declined: nobody decided in time', '[{"afterMinutes": 1, "notify": "on-call"}]', 0, now()
FROM ledger_ask WHERE project_id = %(project)s
"""
STATE = """
SELECT a.id, a.status, a.decided_via, e.next_step,
       (SELECT count(*) FROM ledger_webhookdelivery d WHERE d.ask_id = a.id AND d.event = 'escalation') AS queued,
       (SELECT string_agg(d.status, ',') FROM ledger_webhookdelivery d
        WHERE d.ask_id = a.id AND d.event = 'escalation') AS delivery,
       (SELECT count(*) FROM ledger_runevent ev JOIN ledger_run r ON r.id = ev.run_id
        WHERE r.project_id = a.project_id AND r.run_id = a.run_id AND ev.type = 'ledger.human_decision'
          AND (ev.doc->'payload'->>'askId')::bigint = a.id) AS decisions
FROM ledger_ask a JOIN ledger_askescalation e ON e.ask_id = a.id
WHERE a.project_id = %(project)s ORDER BY a.id
"""


def test_a_worker_killed_while_escalating_takes_each_step_once_and_applies_the_default_once(
    postgres: PostgresCluster,
    redis_server: RedisServer,
    processes: Processes,
    webhook_receiver: WebhookReceiver,
    seed: dict[str, Any],
    tmp_path: Path,
) -> None:
    project = seed["faults"]["project_id"]
    webhook_receiver.delay = RECEIVER_DELAY
    postgres.query(SEED_CHANNEL, {"project": project, "url": webhook_receiver.url})
    postgres.query(SEED_ASKS, {"project": project, "deadline": DEADLINE_SECONDS, "count": ASKS})
    postgres.query(SEED_ESCALATIONS, {"project": project})
    asks = [row[0] for row in postgres.query("SELECT id FROM ledger_ask WHERE project_id = %s", [project])]
    env = server_env(
        database_url=postgres.url(),
        broker_url=redis_server.url,
        data_dir=tmp_path,
        FOOTPRINT_NOTIFY_HTTP_HOSTS="127.0.0.1",
    )
    worker = processes.worker(env, concurrency=4)
    worker.wait_for_output("ready.")
    beat = processes.beat(env, tmp_path)  # the escalation pass every 5 s, the outbox sweep every 10 s

    def state() -> list[tuple[Any, ...]]:
        return postgres.query(STATE, {"project": project})

    if not wait_until(lambda: webhook_receiver.in_flight > 0, 30, 0.02):
        pytest.fail(f"no escalation message in flight: {state()}\n{tail(worker.output())}\n{tail(beat.output())}")
    worker.kill()
    webhook_receiver.delay = 0.0
    at_kill = state()
    time.sleep(1.0)  # the killed worker's sessions end; whatever they had not committed rolls back

    worker = processes.worker(env, concurrency=4)
    worker.wait_for_output("ready.")

    def progress() -> tuple[bool, object]:
        rows = state()
        done = all(
            status == "decided" and delivery == "delivered" and webhook_receiver.for_ask(ask_id)
            for ask_id, status, _, _, _, delivery, _ in rows
        )
        return done, (rows, len(webhook_receiver.received))

    settle(progress, stall=STALL_SECONDS, cap=150)
    rows = state()
    problems = []
    for ask_id, status, via, next_step, queued, delivery, decisions in rows:
        if (status, via, decisions) != ("decided", "deadline", 1):
            problems.append(f"ask {ask_id}: {status} via {via} with {decisions} chained decisions")
        if (next_step, queued, delivery) != (1, 1, "delivered"):
            problems.append(f"ask {ask_id}: step counter {next_step}, {queued} messages queued, {delivery}")
        copies = webhook_receiver.for_ask(ask_id)
        if not copies:
            problems.append(f"ask {ask_id}: its escalation never reached on-call")
        if len({copy.headers.get("X-Footprint-Delivery") for copy in copies}) != 1:
            problems.append(f"ask {ask_id}: copies of different deliveries: {[c.headers for c in copies]}")
        if any(copy.document.get("event") != "escalation" for copy in copies):
            problems.append(f"ask {ask_id}: a message other than the escalation reached on-call")
    assert not problems, f"at the kill: {at_kill}\n" + "\n".join(problems) + f"\n{tail(worker.output())}"
    assert sorted(asks) == [row[0] for row in rows]
