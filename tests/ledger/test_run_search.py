"""Run list filters: full-text search over payloads, tool, agent, refusals and open asks."""

import pytest
from django.db.models import F

from ledger.asks.services import ask_open
from tests.conftest import fixture_events

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(agent_client):
    """Three real runs: a (lookup_order, track_parcel), b-declined (transfer_funds, denials), d (artifacts)."""
    ids = {}
    for name in ("a-run-recording/events.json", "b-middleware/events-declined.json", "d-artifacts/events.json"):
        events = fixture_events(name)
        agent_client.ingest(events)
        ids[name.split("/")[0]] = events[0]["meta"]["runId"]
    return ids


def _listed(client, query: str) -> list[str]:
    body = client.get(f"/api/v1/runs?{query}").json()
    return [run["runId"] for run in body["runs"]]


def test_search_finds_runs_by_words_in_their_payloads(agent_client, runs):
    found = _listed(agent_client, "q=ACC-900")  # the paused run, its pause and its resumed run
    assert runs["b-middleware"] in found
    assert runs["a-run-recording"] not in found
    assert _listed(agent_client, "q=track_parcel") == [runs["a-run-recording"]]
    assert _listed(agent_client, "q=no+such+word+anywhere") == []


def test_filters_by_tool_agent_and_refusals(agent_client, runs):
    assert runs["b-middleware"] in _listed(agent_client, "tool=transfer_funds")
    assert runs["a-run-recording"] not in _listed(agent_client, "tool=transfer_funds")
    with_refusals = _listed(agent_client, "has_refusals=true")
    assert {runs["b-middleware"], runs["d-artifacts"]} <= set(with_refusals)
    assert runs["a-run-recording"] not in with_refusals
    assert runs["a-run-recording"] in _listed(agent_client, "agent=agent")


def test_filters_by_open_asks(agent_client, project, runs):
    ask_open(
        project=project,
        key=None,
        run_id=runs["a-run-recording"],
        session_id=None,
        checkpoint=None,
        deadline=None,
        on_timeout="decline",
        pause_data={"toolCallId": "zz", "toolName": "x", "ask": {"question": "?", "middleware": "m"}},
    )
    assert runs["a-run-recording"] in _listed(agent_client, "has_open_asks=true")


def test_run_list_page_keeps_filters_in_the_url_and_searches(auditor_client, runs):
    html = auditor_client.get("/runs/?q=ACC-900").content.decode()
    assert runs["b-middleware"] in html
    assert runs["a-run-recording"] not in html
    assert 'value="ACC-900"' in html


def test_search_finds_the_same_runs_before_and_after_the_worker_indexes(agent_client, runs):
    from ledger.explorer.search import search_index_pending
    from ledger.models import Run, RunSearchChunk

    before = {q: _listed(agent_client, f"q={q}") for q in ("ACC-900", "track_parcel", "nothing+like+it")}
    assert search_index_pending() == sum(Run.objects.values_list("chain_length", flat=True))
    assert not Run.objects.filter(search_indexed__lt=F("chain_length")).exists()
    assert RunSearchChunk.objects.exists()
    assert {q: _listed(agent_client, f"q={q}") for q in before} == before
    assert search_index_pending() == 0  # nothing new: nothing done


def test_events_stored_after_the_last_index_pass_are_found_too(agent_client, runs):
    from ledger.explorer.search import search_index_pending

    search_index_pending()
    late = {
        "seq": 0,
        "type": "agentfootprint.agent.turn_start",
        "payload": {"userPrompt": "zanzibar"},
        "meta": {"runId": "run-late", "wallClockMs": 1, "runOffsetMs": 0},
    }
    assert agent_client.ingest([late]).status_code == 200
    assert _listed(agent_client, "q=zanzibar") == ["run-late"]


def test_runs_indexed_together_are_chunked_as_each_alone(agent_client, runs, monkeypatch):
    """Runs share a transaction but never a chunk: the chunks are those of each run indexed alone."""
    from ledger.explorer import search
    from ledger.models import Run, RunSearchChunk

    def chunks() -> list[tuple[int, int, int, str]]:
        rows = RunSearchChunk.objects.order_by("run_id", "first_position")
        return [(c.run_id, c.first_position, c.last_position, str(c.document)) for c in rows]

    monkeypatch.setattr(search, "RECORDS_PER_TRANSACTION", 1)  # a transaction per run
    search.search_index_pending()
    alone = chunks()
    RunSearchChunk.objects.all().delete()
    Run.objects.update(search_indexed=0)
    monkeypatch.setattr(search, "RECORDS_PER_TRANSACTION", 10**6)  # every pending run in one
    search.search_index_pending()

    assert chunks() == alone
    assert len({run_id for run_id, *_ in alone}) == Run.objects.count()


def test_a_pass_finding_another_under_way_does_nothing(agent_client, runs):
    """One pass at a time: a second one (queued behind a slow pass) would index the same records."""
    from django.db import connections

    from ledger.explorer.search import search_index_pending
    from ledger.models import Run

    other = connections.create_connection("default")
    try:
        with other.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(hashtext('footprint.search-index'))")
        assert search_index_pending() == 0
        assert not Run.objects.filter(search_indexed__gt=0).exists()
        with other.cursor() as cur:  # before closing: a closed session's locks go some time after
            cur.execute("SELECT pg_advisory_unlock(hashtext('footprint.search-index'))")
    finally:
        other.close()
    assert search_index_pending() > 0
