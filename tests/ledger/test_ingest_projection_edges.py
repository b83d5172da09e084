"""Ingestion edges: an odd validation issue path, an integer beyond int64 beside half an emoji, and a
numeric tool call id: each must store (or dedupe) as the rest of the batch does."""

import json
from typing import Any

import pytest

from ledger.models import Refusal, Run, RunEvent, ToolCall
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db

P = "agentfootprint."


def _event(seq: int, type_: str, payload: Any, run_id: str = "rev-run") -> dict[str, Any]:
    return {"seq": seq, "type": P + type_, "payload": payload, "meta": {"runId": run_id, "wallClockMs": 1796040000000}}


def test_enforced_args_invalid_whose_issue_path_is_not_a_list_is_stored_not_a_500(agent_client: ApiClient) -> None:
    """A valid envelope is stored whatever its payload holds: an enforced `validation.args_invalid`
    whose issue path is a number once made the projection raise, and the batch was a 500 the agent
    retries forever."""
    agent_client.raise_request_exception = False  # see the 500 as the agent does
    events = [
        _event(0, "agent.turn_start", {"turnIndex": 0}),
        _event(1, "validation.args_invalid", {"toolName": "t", "enforced": True, "issues": [{"path": 5}]}),
    ]

    response = agent_client.ingest(events)

    assert response.status_code == 200, response.status_code
    assert RunEvent.objects.count() == 2
    assert Refusal.objects.get().category == "validation"


def test_resending_an_event_with_a_u64_integer_beside_half_an_emoji_is_a_duplicate_not_a_409(
    agent_client: ApiClient,
) -> None:
    """Re-sending an unchanged event is a duplicate whichever reader reads its batch: an integer
    orjson reads as one (up to uint64, as JSON.stringify writes 1e19) is one for the reader that
    takes half an emoji too, so the canonical bytes agree and no 409 drops the batch."""
    first = _event(0, "agent.iteration_start", {"iteration": 0, "budget": 10**19})
    body_1 = b'{"events": [%s]}' % _raw(first)
    assert agent_client.post_json("/api/v1/events", body_1).status_code == 200

    half_emoji = (
        b'{"seq": 1, "type": "agentfootprint.stream.token", "payload": {"content": "\\ud83d"},'
        b' "meta": {"runId": "rev-run", "wallClockMs": 1796040000001}}'
    )
    response = agent_client.post_json("/api/v1/events", b'{"events": [%s, %s]}' % (_raw(first), half_emoji))

    assert response.status_code == 200, response.content
    (receipt,) = response.json()["runs"]
    assert (receipt["accepted"], receipt["duplicates"]) == (1, 1)


def _raw(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode()


def test_a_non_string_tool_call_id_projects_the_same_id_on_the_call_and_on_its_events(agent_client: ApiClient) -> None:
    """Only a string is a tool call id, on the call and on its events alike: a call projected as "7"
    from the number 7 found none of its events (the run page joins them on the id)."""
    response = agent_client.ingest(
        [
            _event(0, "stream.tool_start", {"toolName": "ping", "toolCallId": 7, "args": {}}),
            _event(1, "stream.tool_end", {"toolCallId": 7, "result": "pong", "durationMs": 3}),
        ]
    )
    assert response.status_code == 200, response.content

    call_ids = set(ToolCall.objects.values_list("tool_call_id", flat=True))
    event_call_ids = set(RunEvent.objects.values_list("tool_call_id", flat=True))
    assert call_ids <= event_call_ids, (call_ids, event_call_ids)
    assert Run.objects.get().tool_call_count == len(call_ids)


def test_a_tool_call_id_used_twice_gives_the_same_row_however_its_events_are_batched(
    agent_client: ApiClient,
) -> None:
    """The latest start and the latest end by seq describe the call, as within one batch: a later
    end without `error` clears the one an earlier end set."""
    events = [
        _event(0, "stream.tool_start", {"toolName": "ping", "toolCallId": "k1", "args": {}}),
        _event(1, "stream.tool_end", {"toolCallId": "k1", "result": "boom", "error": True, "durationMs": 5}),
        _event(2, "stream.tool_start", {"toolName": "ping", "toolCallId": "k1", "args": {}}),
        _event(3, "stream.tool_end", {"toolCallId": "k1", "result": "pong", "durationMs": 6, "status": "success"}),
    ]
    fields = ("tool_name", "error", "status", "duration_ms", "start_seq", "end_seq")
    rows = []
    for batches in ([events], [events[:2], events[2:]], [events[2:], events[:2]], [[e] for e in reversed(events)]):
        Run.objects.all().delete()
        for batch in batches:
            assert agent_client.ingest(batch).status_code == 200
        rows.append(ToolCall.objects.values_list(*fields).get())
    assert rows == [("ping", None, "success", 6, 2, 3)] * 4


def test_a_tool_proposal_outrun_by_a_declared_edge_is_a_refusal(agent_client: ApiClient) -> None:
    """Spec §3.7: `skill.reroute_superseded{source:'tool-proposal'}` is the only record that an
    accepted proposal was overruled; a reroute from another source refuses nothing."""
    effect = {
        "kind": "propose-transition", "outcome": "accepted", "toolName": "classify", "toolCallId": "e2",
        "iteration": 2, "targetSkillId": "billing", "reason": "classifier said so",
    }  # fmt: skip
    reroute = {"volunteeredId": "billing", "wonId": "refunds", "fromSkillId": "triage", "iteration": 2}
    events = [
        _event(0, "tools.effect", effect),
        _event(1, "skill.reroute_superseded", {**reroute, "source": "tool-proposal"}),
        _event(2, "skill.reroute_superseded", reroute),
    ]
    assert agent_client.ingest(events).status_code == 200

    refusal = Refusal.objects.get()
    assert (refusal.seq, refusal.category, refusal.rule, refusal.iteration) == (1, "effect", "propose-transition", 2)
    assert refusal.reason == "proposal of 'billing' outrun by a declared edge to 'refunds'"
    assert Run.objects.get().refusal_count == 1
