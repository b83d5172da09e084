"""The i-9.70-pauses fixtures (tests/data/i-9.70-pauses): an authorization consent and a person
takeover, each paused and resumed in two sessions on the same tool call id, as agentfootprint
emitted them; split into what the agent sends at the pause and what its resumed run sends."""

import copy
from typing import Any

from tests.conftest import load_fixture, numbered_per_run

CONSUMER_SCOPE = "consumer-scope"


def scenario(name: str) -> dict[str, Any]:
    """`consent-a`, `consent-b`, `takeover-a` or `takeover-b`."""
    return copy.deepcopy(load_fixture(f"i-9.70-pauses/{name}.json"))


def paused_run(name: str) -> str:
    return str(scenario(name)["events"][0]["meta"]["runId"])


def resumed_run(name: str) -> str:
    doc = scenario(name)
    return str(doc["events"][-1]["meta"]["runId"])


def session_of(name: str) -> str:
    return str(scenario(name)["events"][0]["meta"]["sessionId"])


def pause_events(name: str) -> list[dict[str, Any]]:
    """Every event up to the pause (the run's, and the `consumer-scope` pause.request)."""
    doc = scenario(name)
    return numbered_per_run(doc["events"])[: doc["resumeStartsAtSeq"]]


def resume_events(name: str, *, with_consumer_scope: bool = True) -> list[dict[str, Any]]:
    """The resumed run's events (and the `consumer-scope` pause.resume, unless left out)."""
    doc = scenario(name)
    events = numbered_per_run(doc["events"])[doc["resumeStartsAtSeq"] :]
    return [e for e in events if with_consumer_scope or e["meta"]["runId"] != CONSUMER_SCOPE]


def ask_body(name: str) -> dict[str, Any]:
    """What the agent POSTs to /api/v1/asks at the pause: its paused outcome, checkpoint, run."""
    doc = scenario(name)
    return {**doc["pauseOutcome"], "checkpoint": doc["checkpoint"], "runId": paused_run(name)}
