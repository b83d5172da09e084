"""Signed receipts close the gap between two anchors: records stored after the last anchor and cut
off before the next leave the anchors satisfied, but the receipt the agent was given for them no
longer matches the chain."""

from typing import Any

from django.db import connection

from ledger.audits.integrity import chain_anchors_write
from ledger.audits.integrity_selectors import project_anchors_audit
from ledger.models import Run, RunEvent
from tests.conftest import ApiClient, fixture_events

RUN_ID = "run-1796043007829-1"  # a-run-recording: 76 events


def _check(client: ApiClient, receipts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    answer = client.post_json("/api/v1/receipts/verify", {"receipts": receipts})
    assert answer.status_code == 200, answer.content
    return [(r["verdict"], r["reason"]) for r in answer.json()["receipts"]]


def _cut_tail_as_an_attacker_would(run: Run, keep: int) -> None:
    """Delete the records past `keep` and point the run's own columns at the new last record."""
    last = RunEvent.objects.get(run=run, position=keep - 1)
    with connection.cursor() as cur:
        cur.execute("DELETE FROM ledger_runevent WHERE run_id = %s AND position >= %s", [run.pk, keep])
    Run.objects.filter(pk=run.pk).update(
        chain_length=keep, head_hash=bytes(last.hash), max_seq=last.seq, event_count=keep
    )


def test_a_tail_cut_between_anchors_is_shown_by_the_receipt_of_its_batch(agent_client: ApiClient, project: Any) -> None:
    events = fixture_events("a-run-recording/events.json")
    first = agent_client.ingest(events[:40]).json()["runs"][0]
    chain_anchors_write()  # the anchor vouches for 40 records
    second = agent_client.ingest(events[40:]).json()["runs"][0]
    assert (first["records"], second["records"]) == (40, 76)

    assert _check(agent_client, [first, second]) == [
        ("held", "The chain still reaches this head at record 39."),
        ("held", "The chain still reaches this head at record 75."),
    ]

    _cut_tail_as_an_attacker_would(Run.objects.get(run_id=RUN_ID), keep=40)

    assert project_anchors_audit(project=project).valid  # the anchor saw only 40: it cannot tell
    assert _check(agent_client, [first, second]) == [
        ("held", "The chain still reaches this head at record 39."),
        ("tail removed", "The server signed 76 records of this run; its chain now has 40: the last 36 were removed."),
    ]


def test_a_receipt_the_server_did_not_sign_proves_nothing(
    agent_client: ApiClient, other_agent_client: ApiClient
) -> None:
    receipt = agent_client.ingest(fixture_events("a-run-recording/events.json")).json()["runs"][0]
    forged = {**receipt, "records": 100}
    ((verdict, reason),) = _check(agent_client, [forged])
    assert verdict == "not ours"
    assert reason.startswith("This receipt's signature is not this server's for this project")
    # Another project's key cannot use this project's receipts to learn about its runs.
    assert _check(other_agent_client, [receipt])[0][0] == "not ours"


def test_too_many_receipts_are_refused_with_the_limit(agent_client: ApiClient) -> None:
    answer = agent_client.post_json("/api/v1/receipts/verify", {"receipts": [{}] * 1001})
    assert answer.status_code == 413
    assert answer.json()["error"] == "At most 1000 receipts per request; this one has 1001."
