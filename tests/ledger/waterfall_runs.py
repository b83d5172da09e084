"""Runs of any length in the framework's event shapes, for the waterfall's tests and benchmark.

Each iteration is an LLM call in its own stage, the context subflows before it, and one tool
call with two middleware decisions; every `deny_every`-th call is denied (a refusal). A turn
holds `iterations_per_turn` iterations.
"""

from collections.abc import Iterator
from typing import Any

EVENTS_PER_ITERATION = 10


def synthetic_run_events(
    run_id: str,
    *,
    iterations: int,
    iterations_per_turn: int = 50,
    deny_every: int = 25,
    start_ms: int = 1_796_043_000_000,
    step_ms: int = 7,
) -> Iterator[dict[str, Any]]:
    """The run's events in seq order: EVENTS_PER_ITERATION per iteration, and a turn's start and end."""
    seq = 0
    clock = start_ms

    def event(event_type: str, payload: dict[str, Any], subflow: str | None = None, call: str | None = None):
        nonlocal seq, clock
        clock += step_ms
        meta = {
            "wallClockMs": clock,
            "runOffsetMs": clock - start_ms,
            "runtimeStageId": f"{subflow or 'stage'}#{seq}",
            "subflowPath": [subflow] if subflow else [],
            "compositionPath": ["Agent:agent"],
            "runId": run_id,
            "sessionId": f"session-{run_id}",
        }
        body = {"seq": seq, "type": f"agentfootprint.{event_type}", "payload": payload, "meta": meta}
        seq += 1
        return body

    for iteration in range(iterations):
        turn, in_turn = divmod(iteration, iterations_per_turn)
        if in_turn == 0:
            yield event("agent.turn_start", {"turnIndex": turn, "userPrompt": f"question {turn}"})
        yield event("context.injected", {"slot": "messages", "source": "history"}, subflow="sf-messages")
        yield event("context.slot_composed", {"slot": "messages"}, subflow="sf-messages")
        yield event("agent.iteration_start", {"turnIndex": turn, "iterIndex": iteration})
        yield event("stream.llm_start", {"iteration": iteration, "provider": "mock", "model": "mock-small"})
        yield event("stream.llm_end", {"iteration": iteration, "content": "calling a tool", "toolCallCount": 1})
        call = f"call-{iteration}"
        denied = deny_every and iteration % deny_every == deny_every - 1
        tool = {"toolName": "lookup_order", "toolCallId": call}
        yield event("stream.tool_start", {**tool, "args": {"orderId": f"A-{iteration}"}})
        decision = {"moment": "before-tool", "at": "tool", **tool, "iteration": iteration, "changed": False}
        yield event("middleware.decision", {**decision, "middleware": "audit-trail", "outcome": "allow"})
        outcome = {"outcome": "deny", "why": "account frozen"} if denied else {"outcome": "allow"}
        yield event("middleware.decision", {**decision, "middleware": "frozen-accounts", **outcome})
        yield event("stream.tool_end", {"toolCallId": call, "result": {"status": "shipped"}, "durationMs": 2})
        yield event("agent.iteration_end", {"turnIndex": turn, "iterIndex": iteration, "toolCallCount": 1})
        if in_turn == iterations_per_turn - 1 or iteration == iterations - 1:
            yield event("agent.turn_end", {"turnIndex": turn, "finalContent": "done", "iterationCount": in_turn + 1})
