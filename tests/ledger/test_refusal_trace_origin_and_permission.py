"""Refusal tracing across a resume (the session decides which run began the call) and the call's
permission gate in the dispatch."""

from typing import Any

import pytest
from django.test import Client

from ledger.models import Refusal
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db


def _event(run_id: str, seq: int, type_: str, payload: Any, **meta: Any) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": f"agentfootprint.{type_}",
        "payload": payload,
        "meta": {"runId": run_id, "wallClockMs": 1_760_000_000_000 + seq, **meta},
    }


def _ingest(client: ApiClient, events: list[dict[str, Any]]) -> None:
    response = client.ingest(events)
    assert response.status_code == 200, response.content


def _section(html: str, section_id: str) -> str:
    start = html.index(f'<section id="{section_id}"')
    return html[start : html.index("</section>", start)]


def _paused(run_id: str, session: str, to: str) -> list[dict[str, Any]]:
    return [
        _event(
            run_id,
            0,
            "stream.tool_start",
            {"toolName": "pay", "toolCallId": "c1", "args": {"to": to}},
            sessionId=session,
        ),
        _event(
            run_id,
            1,
            "middleware.decision",
            {
                "middleware": "four-eyes",
                "toolName": "pay",
                "toolCallId": "c1",
                "outcome": "ask",
                "moment": "before-tool",
            },
            sessionId=session,
        ),
    ]


def test_resumed_refusal_traces_back_to_its_own_sessions_paused_run(
    auditor_client: Client, agent_client: ApiClient
) -> None:
    """A resumed run's refusal walks back to the run it resumed (same session), not the latest with its call id."""
    _ingest(agent_client, _paused("run-A1", "sess-A", "ALICE"))
    _ingest(agent_client, _paused("run-B1", "sess-B", "BOB"))
    _ingest(
        agent_client,
        [
            _event(
                "run-A2",
                0,
                "middleware.decision",
                {
                    "middleware": "four-eyes",
                    "toolName": "pay",
                    "toolCallId": "c1",
                    "outcome": "deny",
                    "why": "declined",
                },
                sessionId="sess-A",
            ),
            _event("run-A2", 1, "stream.tool_end", {"toolCallId": "c1", "result": "declined"}, sessionId="sess-A"),
        ],
    )
    refusal = Refusal.objects.get(run__run_id="run-A2")
    html = auditor_client.get(f"/refusals/{refusal.pk}/").content.decode()
    call = _section(html, "chain-tool-call")
    assert 'began in <a href="/projects/acme/runs/run-A1/">run-A1</a>' in call, call
    assert "ALICE" in call
    assert "BOB" not in call


def test_dispatch_includes_the_calls_permission_check(auditor_client: Client, agent_client: ApiClient) -> None:
    """The dispatch ('every event of this tool call: permission, middleware, …') shows the call's permission.check."""
    _ingest(
        agent_client,
        [
            _event("run-p", 0, "stream.tool_start", {"toolName": "pay", "toolCallId": "c9", "args": {}}),
            _event(
                "run-p",
                1,
                "permission.check",
                {
                    "capability": "tool_call",
                    "actor": "agent",
                    "target": "pay",
                    "result": "allow",
                    "policyRuleId": "pay-ok",
                },
            ),
            _event(
                "run-p",
                2,
                "middleware.decision",
                {"middleware": "limits", "toolName": "pay", "toolCallId": "c9", "outcome": "deny", "why": "too much"},
            ),
            _event("run-p", 3, "stream.tool_end", {"toolCallId": "c9", "result": "too much"}),
        ],
    )
    refusal = Refusal.objects.get(run__run_id="run-p")
    dispatch = _section(auditor_client.get(f"/refusals/{refusal.pk}/").content.decode(), "chain-dispatch")
    assert "permission.check" in dispatch, dispatch


def test_a_permission_refusal_names_a_tool_only_for_the_tool_gate(
    auditor_client: Client, agent_client: ApiClient
) -> None:
    """`permission.check`'s target is a tool only when the capability is `tool_call` (a halt is the
    tool gate's too); a denied skill read or network call is no tool in the "By tool" groups."""
    denied = {"actor": "agent", "result": "deny", "rationale": "not allowed"}
    _ingest(
        agent_client,
        [
            _event("run-g", 0, "permission.check", {**denied, "capability": "tool_call", "target": "pay"}),
            _event("run-g", 1, "permission.check", {**denied, "capability": "skill_read", "target": "skill-billing"}),
            _event("run-g", 2, "permission.check", {**denied, "capability": "external_net", "target": "evil.example"}),
            _event("run-g", 3, "permission.halt", {"target": "pay", "reason": "policy", "iteration": 1}),
        ],
    )

    assert list(Refusal.objects.order_by("seq").values_list("tool_name", flat=True)) == ["pay", None, None, "pay"]
    groups = _section(auditor_client.get("/refusals/").content.decode(), "refusal-groups")
    assert "skill-billing" not in groups
    assert "evil.example" not in groups
