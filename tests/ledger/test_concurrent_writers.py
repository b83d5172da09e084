"""Twenty writers posting overlapping, reordered and repeated batches to the same runs at once."""

import random
import threading
from collections import defaultdict

import pytest
from django.db import connection

from ledger.audits.integrity_selectors import run_chain_verify
from ledger.models import Run, RunEvent
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

WRITERS = 20
RUNS = ("cw-run-a", "cw-run-b", "cw-run-c")
EVENTS_PER_RUN = 120


def _event(run_id: str, seq: int) -> dict:
    return {
        "seq": seq,
        "type": "agentfootprint.stream.token",
        "payload": {"tokenIndex": seq, "content": f"t{seq}"},
        "meta": {"runId": run_id, "wallClockMs": 1796040000000 + seq},
    }


def test_concurrent_overlapping_batches_store_exactly_the_union(project):
    from tenancy.services import agent_key_create

    secret = agent_key_create(project=project, scopes=["ingest"])[1]
    rng = random.Random(7)
    plans = []
    for _ in range(WRITERS):
        batches = []
        for _ in range(4):
            picks = [(run, seq) for run in RUNS for seq in rng.sample(range(EVENTS_PER_RUN), 35)]
            picks += rng.sample(picks, 10)  # repeated inside the batch too
            rng.shuffle(picks)
            batches.append([_event(run, seq) for run, seq in picks])
        plans.append(batches)
    sent: dict[str, set[int]] = defaultdict(set)
    for batches in plans:
        for batch in batches:
            for event in batch:
                sent[event["meta"]["runId"]].add(event["seq"])
    receipts: list[dict] = []
    errors: list[str] = []
    start = threading.Barrier(WRITERS)

    def write(batches: list[list[dict]]) -> None:
        client = ApiClient(secret)
        start.wait()
        try:
            for batch in batches:
                response = client.ingest(batch)
                if response.status_code != 200:
                    errors.append(f"{response.status_code}: {response.content[:200]!r}")
                    continue
                receipts.extend(response.json()["runs"])
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(batches,)) for batches in plans]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert errors == []
    for run_id in RUNS:
        run = Run.objects.get(project=project, run_id=run_id)
        stored = list(RunEvent.objects.filter(run=run).values_list("seq", flat=True))
        assert sorted(stored) == sorted(sent[run_id])  # the union, each seq once
        assert run.event_count == len(sent[run_id])
        assert run_chain_verify(run=run).valid
        accepted = sum(r["accepted"] for r in receipts if r["runId"] == run_id)
        assert accepted == len(sent[run_id])  # every event was accepted exactly once, by someone
    per_batch = [len(batch) for batches in plans for batch in batches]
    assert sum(r["accepted"] + r["duplicates"] for r in receipts) == sum(per_batch)
