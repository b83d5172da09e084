"""Values Python accepts but PostgreSQL or a URL cannot hold: refused or normalized where they are
read, never a database error later (found by the API fuzz)."""

import pytest

from ledger.models import Ask, Run

pytestmark = pytest.mark.django_db


def event(**meta):
    return {"seq": 0, "type": "agentfootprint.agent.turn_start", "payload": {}, "meta": {"runId": "run-b", **meta}}


def plain_ask(deadline: str) -> dict:
    return {"runId": "run-b", "pauseData": {"toolCallId": "q1", "question": "?"}, "deadline": deadline}


def test_a_run_id_with_a_slash_is_refused_since_it_names_the_run_in_urls(agent_client):
    response = agent_client.ingest([event(runId="team/run-1")])
    assert response.status_code == 422
    assert "'/'" in response.json()["errors"][0]["message"]
    assert not Run.objects.exists()


@pytest.mark.parametrize("run_id", [".", ".."])
def test_a_run_id_every_url_client_resolves_away_is_refused(agent_client, run_id):
    """/projects/acme/runs/./ is /projects/acme/runs/ to every browser (RFC 3986 §5.2.4): such a
    run could be stored but never opened, on the pages or the API."""
    for response in (
        agent_client.ingest([event(runId=run_id)]),
        agent_client.post_json("/api/v1/asks", {**plain_ask("2026-12-01T09:00:00Z"), "runId": run_id}),
        agent_client.post_json(
            "/api/v1/recordings",
            {"format": "agentfootprint.recording.v1", "run": {"runId": run_id}, "recording": {"events": []}},
        ),
    ):
        assert response.status_code == 422, response.content
        assert "'..'" in response.content.decode()
    assert not Run.objects.exists()
    assert not Ask.objects.exists()


def test_a_tool_call_id_too_long_for_the_ledgers_indexes_is_stored_but_files_no_call(agent_client):
    """The id is the LLM provider's, so refusing it would lose the agent's batch for good; 8,000
    characters overflow PostgreSQL's btree row (a 500 that lost the whole batch): the event is
    stored as sent and filed as no call's, while an id of 512 characters is still a call."""
    events = [
        {"seq": seq, "type": "agentfootprint.stream.tool_start", "payload": {"toolCallId": call_id}}
        for seq, call_id in enumerate(["x" * 8000, "y" * 512])
    ]
    response = agent_client.ingest([{**e, "meta": {"runId": "run-b"}} for e in events])

    assert response.status_code == 200, response.content[:300]
    run = Run.objects.get(run_id="run-b")
    assert list(run.tool_calls.values_list("tool_call_id", flat=True)) == ["y" * 512]
    assert list(run.events.order_by("seq").values_list("tool_call_id", flat=True)) == [None, "y" * 512]
    assert agent_client.get("/api/v1/runs/run-b/verify").json()["valid"] is True


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("path", ["/api/v1/events", "/api/v1/asks"])
@pytest.mark.parametrize("levels", [300, 1100])  # within and past orjson's own 1,024 levels
def test_nesting_past_the_limit_is_refused_naming_it_however_deep(agent_client, path, levels):
    if path == "/api/v1/events":
        body = '{"events":[{"seq":0,"type":"x.deep","payload":{"p":' + _nested(levels) + '},"meta":{"runId":"d"}}]}'
    else:
        body = '{"runId":"d","pauseData":{"toolCallId":"c1"},"checkpoint":' + _nested(levels) + "}"
    response = agent_client.post(path, body, content_type="application/json")
    assert response.status_code in (400, 422), response.content
    assert "254 levels" in response.content.decode()
    assert not Run.objects.exists()


def test_a_wall_clock_in_the_year_10000_is_refused(agent_client):
    response = agent_client.ingest([event(wallClockMs=253_402_300_800_000)])
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "meta.wallClockMs"


def test_a_deadline_with_a_wide_utc_offset_is_kept_as_its_utc_instant(agent_client):
    response = agent_client.post_json("/api/v1/asks", plain_ask("2026-12-01T09:00:00-23:59"))
    assert response.status_code == 201, response.content
    assert Ask.objects.get().deadline.isoformat() == "2026-12-02T08:59:00+00:00"


@pytest.mark.parametrize("deadline", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "2026-13-45T25:61Z"])
def test_a_deadline_no_database_can_hold_is_refused(agent_client, deadline):
    response = agent_client.post_json("/api/v1/asks", plain_ask(deadline))
    assert response.status_code == 422
    assert "deadline" in response.json()["error"]
    assert not Ask.objects.exists()


def test_a_time_filter_with_a_wide_utc_offset_filters_by_its_utc_instant(agent_client):
    assert agent_client.get("/api/v1/runs?until=1981-08-28T22:06:35-20:57").status_code == 200
    response = agent_client.get("/api/v1/runs?since=0001-01-01T00:00:00%2B01:00")
    assert response.status_code == 422
