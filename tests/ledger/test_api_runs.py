"""Reads of the ledger API (runs, events, verify) and who may read what."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection

from ledger.models import Run, RunEvent
from tests.conftest import ApiClient, fixture_events

pytestmark = pytest.mark.django_db

BASE_MS = 1_796_040_000_000  # README: fixture clocks read about 1796040000000
HOUR_MS = 3_600_000


def _event(
    run_id: str, seq: int, type_: str = "agentfootprint.agent.iteration_start", payload: Any = None, **meta: Any
) -> dict[str, Any]:
    return {"seq": seq, "type": type_, "payload": {} if payload is None else payload, "meta": {"runId": run_id, **meta}}


def _ingest_ok(client: Any, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    response = client.ingest(events)
    assert response.status_code == 200, response.content
    return response.json()["runs"]


def _a_run(client: Any) -> dict[str, Any]:
    (receipt,) = _ingest_ok(client, fixture_events("a-run-recording/events.json"))
    return receipt


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


@pytest.fixture
def five_runs(agent_client) -> list[str]:
    """Five runs created oldest first: r0..r4, one hour apart, two sessions, three statuses."""
    plan = [
        ("r0", "s-a", "agentfootprint.agent.turn_end"),  # completed
        ("r1", "s-b", "agentfootprint.pause.request"),  # paused
        ("r2", "s-a", "agentfootprint.agent.turn_end"),  # completed
        ("r3", "s-b", "agentfootprint.agent.turn_start"),  # running
        ("r4", "s-a", "agentfootprint.error.fatal"),  # failed
    ]
    for index, (run_id, session, last_type) in enumerate(plan):
        at = BASE_MS + index * HOUR_MS
        _ingest_ok(
            agent_client,
            [
                _event(run_id, 0, "agentfootprint.agent.turn_start", sessionId=session, wallClockMs=at),
                _event(run_id, 1, last_type, sessionId=session, wallClockMs=at + 1000),
            ],
        )
    return [run_id for run_id, _, _ in plan]


def _list(client: Any, **params: Any) -> dict[str, Any]:
    response = client.get("/api/v1/runs", params)
    assert response.status_code == 200, response.content
    return response.json()


def _ids(page: dict[str, Any]) -> list[str]:
    return [run["runId"] for run in page["runs"]]


# --- GET /api/v1/runs ----------------------------------------------------------------------------


def test_list_runs_is_newest_first(agent_client, five_runs):
    page = _list(agent_client)

    assert _ids(page) == ["r4", "r3", "r2", "r1", "r0"]
    assert "nextCursor" not in page


def test_list_runs_filters_by_session(agent_client, five_runs):
    assert _ids(_list(agent_client, session="s-a")) == ["r4", "r2", "r0"]
    assert _ids(_list(agent_client, session="s-b")) == ["r3", "r1"]
    assert _ids(_list(agent_client, session="nobody")) == []


def test_list_runs_filters_by_status(agent_client, five_runs):
    assert _ids(_list(agent_client, status="completed")) == ["r2", "r0"]
    assert _ids(_list(agent_client, status="paused")) == ["r1"]
    assert _ids(_list(agent_client, status="running")) == ["r3"]
    assert _ids(_list(agent_client, status="failed")) == ["r4"]
    assert _ids(_list(agent_client, status="halted")) == []


def test_list_runs_unknown_status_is_422(agent_client, five_runs):
    response = agent_client.get("/api/v1/runs", {"status": "exploded"})

    assert response.status_code == 422
    assert response.json()["code"] == "ERR_INVALID_PARAMETERS"


def test_list_runs_filters_by_first_event_time(agent_client, five_runs):
    since, until = _iso(BASE_MS + 1 * HOUR_MS), _iso(BASE_MS + 3 * HOUR_MS)

    assert _ids(_list(agent_client, since=since)) == ["r4", "r3", "r2", "r1"]
    assert _ids(_list(agent_client, until=until)) == ["r2", "r1", "r0"]  # until is exclusive
    assert _ids(_list(agent_client, since=since, until=until)) == ["r2", "r1"]
    assert _ids(_list(agent_client, since=since, session="s-a")) == ["r4", "r2"]


def test_list_runs_pages_with_next_cursor(agent_client, five_runs):
    first = _list(agent_client, limit=2)
    assert _ids(first) == ["r4", "r3"]

    second = _list(agent_client, limit=2, cursor=first["nextCursor"])
    assert _ids(second) == ["r2", "r1"]

    third = _list(agent_client, limit=2, cursor=second["nextCursor"])
    assert _ids(third) == ["r0"]
    assert "nextCursor" not in third


def test_list_runs_pages_keep_the_filter(agent_client, five_runs):
    first = _list(agent_client, limit=2, session="s-a")
    second = _list(agent_client, limit=2, session="s-a", cursor=first["nextCursor"])

    assert (_ids(first), _ids(second)) == (["r4", "r2"], ["r0"])
    assert "nextCursor" not in second


def test_list_runs_exact_page_has_no_next_cursor(agent_client, five_runs):
    page = _list(agent_client, limit=5)

    assert len(page["runs"]) == 5
    assert "nextCursor" not in page


@pytest.mark.parametrize("cursor", ["%%%not-base64%%%", "bm90LWEtbnVtYmVy", "_w", "é"])
def test_list_runs_undecodable_cursor_restarts_from_the_top(agent_client, five_runs, cursor):
    page = _list(agent_client, limit=2, cursor=cursor)

    assert _ids(page) == ["r4", "r3"]
    assert "nextCursor" in page


def test_list_runs_shows_only_the_keys_project(agent_client, other_agent_client, five_runs):
    _ingest_ok(other_agent_client, [_event("globex-run", 0, sessionId="s-a")])

    assert _ids(_list(agent_client)) == ["r4", "r3", "r2", "r1", "r0"]
    assert _ids(_list(other_agent_client)) == ["globex-run"]
    assert _ids(_list(other_agent_client, session="s-a")) == ["globex-run"]


# --- GET /api/v1/runs/{run_id} -------------------------------------------------------------------


def test_get_run_summarises_the_run(agent_client):
    events = fixture_events("a-run-recording/events.json")
    receipt = _a_run(agent_client)

    response = agent_client.get(f"/api/v1/runs/{receipt['runId']}")

    assert response.status_code == 200
    run = response.json()
    usages = [e["payload"]["usage"] for e in events if e["type"] == "agentfootprint.stream.llm_end"]
    walls = [e["meta"]["wallClockMs"] for e in events]
    assert run["runId"] == receipt["runId"]
    assert run["source"] == "events"
    assert run["status"] == "completed"
    assert run["sessionId"] == "fixture-session-a"
    assert run["agentId"] == "agent"
    assert (run["events"], run["lastSeq"], run["hasGaps"]) == (76, 75, False)
    assert (run["toolCalls"], run["refusals"]) == (2, 0)
    assert run["tokens"] == {"input": sum(u["input"] for u in usages), "output": sum(u["output"] for u in usages)}
    assert run["head"] == receipt["head"]
    assert datetime.fromisoformat(run["firstEventAt"]).timestamp() * 1000 == pytest.approx(min(walls), abs=1)
    assert datetime.fromisoformat(run["lastEventAt"]).timestamp() * 1000 == pytest.approx(max(walls), abs=1)
    assert "tenant" not in run
    assert "principal" not in run


def test_get_run_unknown_is_404(agent_client):
    response = agent_client.get("/api/v1/runs/no-such-run")

    assert response.status_code == 404
    assert response.json()["code"] == "ERR_RUN_NOT_FOUND"


# --- GET /api/v1/runs/{run_id}/events ------------------------------------------------------------


def test_run_events_pages_in_seq_order(agent_client):
    events = fixture_events("a-run-recording/events.json")
    run_id = _a_run(agent_client)["runId"]

    first = agent_client.get(f"/api/v1/runs/{run_id}/events", {"limit": 30}).json()
    second = agent_client.get(f"/api/v1/runs/{run_id}/events", {"limit": 30, "after_seq": 29}).json()
    third = agent_client.get(f"/api/v1/runs/{run_id}/events", {"limit": 30, "after_seq": 59}).json()

    assert [e["seq"] for e in first["events"]] == list(range(30))
    assert first["nextAfterSeq"] == 29
    assert [e["seq"] for e in second["events"]] == list(range(30, 60))
    assert second["nextAfterSeq"] == 59
    assert [e["seq"] for e in third["events"]] == list(range(60, 76))
    assert "nextAfterSeq" not in third
    assert first["events"] + second["events"] + third["events"] == events


def test_run_events_default_page_returns_everything_in_order(agent_client):
    run_id = _a_run(agent_client)["runId"]

    page = agent_client.get(f"/api/v1/runs/{run_id}/events").json()

    assert [e["seq"] for e in page["events"]] == list(range(76))
    assert "nextAfterSeq" not in page


def test_run_events_are_in_seq_order_even_when_stored_out_of_order(agent_client):
    events = [_event("run-o", seq) for seq in range(6)]
    _ingest_ok(agent_client, events[3:])
    _ingest_ok(agent_client, events[:3])

    page = agent_client.get("/api/v1/runs/run-o/events", {"limit": 4}).json()

    assert [e["seq"] for e in page["events"]] == [0, 1, 2, 3]
    assert page["nextAfterSeq"] == 3


def test_run_events_after_the_last_seq_is_empty(agent_client):
    run_id = _a_run(agent_client)["runId"]

    page = agent_client.get(f"/api/v1/runs/{run_id}/events", {"after_seq": 75}).json()

    assert page == {"events": []}


def test_run_events_unknown_run_is_404(agent_client):
    response = agent_client.get("/api/v1/runs/no-such-run/events")

    assert response.status_code == 404
    assert response.json()["code"] == "ERR_RUN_NOT_FOUND"


# --- authentication and scopes -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/runs"),
        ("get", "/api/v1/runs/any"),
        ("get", "/api/v1/runs/any/events"),
        ("get", "/api/v1/runs/any/verify"),
        ("post", "/api/v1/events"),
        ("post", "/api/v1/recordings"),
    ],
)
def test_auth_missing_key_is_401_mentioning_bearer(anonymous_api_client, method, path):
    if method == "post":
        response = anonymous_api_client.post_json(path, {"events": [_event("r", 0)]})
    else:
        response = anonymous_api_client.get(path)

    assert response.status_code == 401
    body = response.json()
    assert body["code"] == "ERR_UNAUTHENTICATED"
    assert "Bearer" in body["error"]
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert not Run.objects.exists()


def test_auth_wrong_key_is_401(project):
    from tests.conftest import ApiClient

    client = ApiClient("not-a-real-key")

    read = client.get("/api/v1/runs")
    write = client.ingest([_event("r", 0)])

    assert (read.status_code, write.status_code) == (401, 401)
    assert read.json()["code"] == write.json()["code"] == "ERR_UNAUTHENTICATED"
    assert not Run.objects.exists()


def test_auth_non_bearer_scheme_is_401(agent_client):
    response = agent_client.get("/api/v1/runs", HTTP_AUTHORIZATION="Basic dXNlcjpwdw==")

    assert response.status_code == 401
    assert response.json()["code"] == "ERR_UNAUTHENTICATED"


@pytest.mark.parametrize(
    "path", ["/api/v1/runs", "/api/v1/runs/{run_id}", "/api/v1/runs/{run_id}/events", "/api/v1/runs/{run_id}/verify"]
)
def test_auth_key_without_read_scope_is_403_on_reads(ingest_only_client, path):
    (receipt,) = _ingest_ok(ingest_only_client, [_event("r-scope", 0)])

    response = ingest_only_client.get(path.format(run_id=receipt["runId"]))

    assert response.status_code == 403
    body = response.json()
    assert body["code"] == "ERR_SCOPE"
    assert "'read'" in body["error"]
    assert "r-scope" not in response.content.decode()


def test_auth_key_without_ingest_scope_is_403_on_ingest(project):
    from tenancy.services import agent_key_create
    from tests.conftest import ApiClient

    client = ApiClient(agent_key_create(project=project, scopes=["read"])[1])

    events = client.ingest([_event("r", 0)])
    recording = client.post_json("/api/v1/recordings", {"format": "agentfootprint.recording.v1"})

    assert (events.status_code, recording.status_code) == (403, 403)
    assert events.json()["code"] == recording.json()["code"] == "ERR_SCOPE"
    assert "'ingest'" in events.json()["error"]
    assert not Run.objects.exists()


@pytest.mark.parametrize("suffix", ["", "/events", "/verify"])
def test_auth_other_projects_run_is_404(agent_client, other_agent_client, suffix):
    receipt = _a_run(agent_client)
    run_id = receipt["runId"]

    response = other_agent_client.get(f"/api/v1/runs/{run_id}{suffix}")

    assert response.status_code == 404
    assert response.json()["code"] == "ERR_RUN_NOT_FOUND"
    text = response.content.decode()
    for secret in (receipt["head"], "fixture-session-a", "lookup_order", "A-7781", "acme", "recordsChecked"):
        assert secret not in text
    # And the owner still reads it.
    assert agent_client.get(f"/api/v1/runs/{run_id}{suffix}").status_code == 200


def test_auth_same_run_id_in_two_projects_stays_separate(agent_client, other_agent_client):
    _ingest_ok(agent_client, [_event("shared", 0, payload={"who": "acme"})])
    _ingest_ok(
        other_agent_client,
        [_event("shared", 0, payload={"who": "globex"}), _event("shared", 1, payload={"who": "globex"})],
    )

    mine = agent_client.get("/api/v1/runs/shared/events").json()["events"]
    theirs = other_agent_client.get("/api/v1/runs/shared/events").json()["events"]

    assert [e["payload"]["who"] for e in mine] == ["acme"]
    assert [e["payload"]["who"] for e in theirs] == ["globex", "globex"]
    assert Run.objects.filter(run_id="shared").count() == 2


# --- verify --------------------------------------------------------------------------------------


def _verify(client: Any, run_id: str) -> dict[str, Any]:
    response = client.get(f"/api/v1/runs/{run_id}/verify")
    assert response.status_code == 200, response.content
    return response.json()


def _execute(sql: str, params: list[Any]) -> int:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.rowcount


def _first_row_containing(run: Run, text: str) -> RunEvent:
    return RunEvent.objects.filter(run=run, body__contains=text).order_by("position").first()


def test_verify_untouched_run_is_valid(agent_client):
    run_id = _a_run(agent_client)["runId"]

    assert _verify(agent_client, run_id) == {"valid": True, "recordsChecked": 76}


def test_verify_detects_an_edited_body(agent_client):
    run = Run.objects.get(run_id=_a_run(agent_client)["runId"])
    # The same edit as README f-audit's tampered bundle: one byte, 'lookup' → 'mookup'.
    row = _first_row_containing(run, "lookup")
    assert row is not None

    changed = _execute(
        "UPDATE ledger_runevent SET body = replace(body, 'lookup', 'mookup') WHERE seq = %s AND run_id = %s",
        [row.seq, run.pk],
    )

    assert changed == 1
    verdict = _verify(agent_client, run.run_id)
    assert verdict["valid"] is False
    assert verdict["brokenAt"] == row.position
    assert verdict["recordsChecked"] == row.position
    assert "hash mismatch" in verdict["reason"]


def test_verify_detects_an_edited_body_in_the_last_record(agent_client):
    run = Run.objects.get(run_id=_a_run(agent_client)["runId"])

    _execute(
        "UPDATE ledger_runevent SET body = replace(body, '\"seq\":75', '\"seq\":75 ') WHERE seq = 75 AND run_id = %s",
        [run.pk],
    )

    verdict = _verify(agent_client, run.run_id)
    assert (verdict["valid"], verdict["brokenAt"]) == (False, 75)
    assert "hash mismatch" in verdict["reason"]


def test_verify_detects_an_edited_queryable_copy(agent_client):
    run = Run.objects.get(run_id=_a_run(agent_client)["runId"])
    position = RunEvent.objects.get(run=run, seq=5).position

    changed = _execute(
        "UPDATE ledger_runevent SET doc = jsonb_set(doc, '{type}', '\"x\"') WHERE seq = 5 AND run_id = %s",
        [run.pk],
    )

    assert changed == 1
    verdict = _verify(agent_client, run.run_id)
    assert verdict["valid"] is False
    assert verdict["brokenAt"] == position
    assert "queryable copy" in verdict["reason"]


def test_verify_detects_an_edited_type_column(agent_client):
    run = Run.objects.get(run_id=_a_run(agent_client)["runId"])

    _execute("UPDATE ledger_runevent SET type = 'x' WHERE seq = 7 AND run_id = %s", [run.pk])

    verdict = _verify(agent_client, run.run_id)
    assert (verdict["valid"], verdict["brokenAt"]) == (False, 7)
    assert "queryable copy" in verdict["reason"]


def test_verify_detects_records_removed_from_the_end(agent_client):
    run = Run.objects.get(run_id=_a_run(agent_client)["runId"])

    deleted = _execute("DELETE FROM ledger_runevent WHERE run_id = %s AND position = 75", [run.pk])

    assert deleted == 1
    verdict = _verify(agent_client, run.run_id)
    assert verdict["valid"] is False
    assert verdict["recordsChecked"] == 75
    assert "removed from the end" in verdict["reason"]


def test_verify_detects_a_record_removed_from_the_middle(agent_client):
    run = Run.objects.get(run_id=_a_run(agent_client)["runId"])

    deleted = _execute("DELETE FROM ledger_runevent WHERE run_id = %s AND position = 40", [run.pk])

    assert deleted == 1
    verdict = _verify(agent_client, run.run_id)
    assert verdict["valid"] is False
    assert verdict["brokenAt"] == 40
    assert "record 40 is missing" in verdict["reason"]


def test_verify_detects_a_rewritten_chain_tail(agent_client):
    """Rewriting a body and re-hashing it still leaves the next record's previous-hash wrong."""
    from footprint_site.lib.chain import link_hash

    run = Run.objects.get(run_id=_a_run(agent_client)["runId"])
    row = RunEvent.objects.get(run=run, position=30)
    forged = json.dumps({**json.loads(row.body), "payload": {"forged": True}}, separators=(",", ":"), sort_keys=True)
    _execute(
        "UPDATE ledger_runevent SET body = %s, doc = %s::jsonb, hash = %s WHERE run_id = %s AND position = %s",
        [forged, forged, link_hash(bytes(row.prev_hash), forged.encode()), *row.pk],
    )

    verdict = _verify(agent_client, run.run_id)
    assert (verdict["valid"], verdict["brokenAt"]) == (False, 31)
    assert "previous-hash" in verdict["reason"]


def test_verify_of_a_run_with_late_events_is_valid(agent_client):
    events = fixture_events("a-run-recording/events.json")
    run_id = events[0]["meta"]["runId"]
    for part in (events[40:], events[:20], events[20:40]):
        _ingest_ok(agent_client, part)

    assert _verify(agent_client, run_id) == {"valid": True, "recordsChecked": 76}


def test_verify_finds_a_queryable_copy_whose_large_integer_was_edited(agent_client: ApiClient) -> None:
    """A query of doc reads the other number, so verify names it, though both integers are the
    same double: two integers are compared exactly (js_equal)."""
    event = {
        "seq": 0,
        "type": "agentfootprint.custom.transfer",
        "payload": {"accountId": 9007199254740993},
        "meta": {"runId": "run-big-int", "wallClockMs": 1796040000000},
    }
    assert agent_client.ingest([event]).status_code == 200
    run = Run.objects.get(run_id="run-big-int")
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE ledger_runevent SET doc = jsonb_set(doc, '{payload,accountId}', '9007199254740992')"
            " WHERE run_id = %s AND position = 0",
            [run.pk],
        )
    assert RunEvent.objects.get(run=run).doc["payload"]["accountId"] == 9007199254740992

    verdict = agent_client.get("/api/v1/runs/run-big-int/verify").json()

    assert verdict["valid"] is False, verdict
    assert verdict["brokenAt"] == 0
