"""A run's event count and its record count are one number on every page and API answer, and the
events API lists the server's own records (a person's decision, `ledger.human_decision`, no seq)
with the agent's events, marked as the server's."""

import re
from typing import Any

import pytest

from ledger.ingest.runs import SERVER_AUTHOR
from ledger.models import Run
from tests.conftest import load_fixture, numbered_per_run
from tests.ledger.ask_helpers import B_RUN, decide, open_ask

pytestmark = pytest.mark.django_db

DECISION = "ledger.human_decision"


def _all_events(client: Any, run_id: str, limit: int) -> list[dict[str, Any]]:
    events, after = [], None
    while True:
        query = {"limit": limit} | ({"after_seq": after} if after is not None else {})
        page = client.get(f"/api/v1/runs/{run_id}/events", query).json()
        events += page["events"]
        if "nextAfterSeq" not in page:
            return events
        after = page["nextAfterSeq"]


@pytest.fixture
def decided_run(agent_client, integration_client) -> Run:
    """Scenario b's run, paused on an ask, and a person's decision the server chained to it."""
    capture = load_fixture("b-middleware/events-declined.json")
    before_resume = capture["events"][: capture["resumeStartsAtSeq"]]
    assert agent_client.ingest(numbered_per_run(before_resume)).status_code == 200
    ask_id = open_ask(agent_client, status=200)["id"]
    assert decide(integration_client, ask_id, approved=False, by="dana", note="no PO").status_code == 200
    run = Run.objects.get(run_id=B_RUN)
    assert run.chain_length == run.event_count + 1
    return run


def test_the_events_api_lists_the_servers_decision_after_the_event_chained_before_it(agent_client, decided_run):
    events = _all_events(agent_client, B_RUN, limit=1000)

    decisions = [e for e in events if e["type"] == DECISION]
    assert len(decisions) == 1
    assert "seq" not in decisions[0]
    assert decisions[0]["meta"]["author"] == SERVER_AUTHOR
    assert decisions[0]["payload"]["decision"]["approved"] is False
    # Chained last, so listed last; the agent's events keep their seq order before it.
    assert events[-1] is decisions[0]
    assert [e["seq"] for e in events[:-1]] == list(range(decided_run.event_count))


@pytest.mark.parametrize("limit", [1, 7, 30])
def test_every_page_size_lists_every_record_once_in_the_same_order(agent_client, decided_run, limit):
    assert _all_events(agent_client, B_RUN, limit) == _all_events(agent_client, B_RUN, limit=1000)


def test_a_decision_chained_before_later_events_is_listed_between_them(agent_client, decided_run):
    later = {
        "seq": decided_run.max_seq + 1,
        "type": "agentfootprint.agent.turn_end",
        "payload": {"turnIndex": 0},
        "meta": {"runId": B_RUN},
    }
    assert agent_client.ingest([later]).status_code == 200

    events = _all_events(agent_client, B_RUN, limit=5)
    assert [e["type"] for e in events[-2:]] == [DECISION, "agentfootprint.agent.turn_end"]


def test_the_run_the_events_and_the_chain_count_the_same_records(agent_client, auditor_client, decided_run):
    run = agent_client.get(f"/api/v1/runs/{B_RUN}").json()
    listed = _all_events(agent_client, B_RUN, limit=10)
    verified = agent_client.get(f"/api/v1/runs/{B_RUN}/verify").json()
    in_list = next(r for r in agent_client.get("/api/v1/runs").json()["runs"] if r["runId"] == B_RUN)
    bundle = agent_client.get(f"/api/v1/runs/{B_RUN}/audit-bundle").json()

    records = decided_run.chain_length
    assert run["events"] == in_list["events"] == len(listed) == verified["recordsChecked"] == records
    assert bundle["header"]["recordCount"] == records + 1  # and the bundle's genesis record

    page = auditor_client.get(f"/projects/acme/runs/{B_RUN}/").content.decode()
    shown = re.search(r"<dt>Events</dt><dd>(\d+) \((\d+) from the agent, (\d+) the server's decision\)", page)
    assert shown is not None, page[:2000]
    assert [int(n) for n in shown.groups()] == [records, decided_run.event_count, 1]
    assert f"({records} records;" in page
    listing = auditor_client.get("/runs/").content.decode()
    row = listing[listing.index(B_RUN) :]
    assert re.search(rf"<td>{records}(<| )", row), row[:1500]
