"""A run's status is what happened to it, not the type of its last event: every way a run of the
framework ends, with the events agentfootprint 9.62.0 emits for it, in whatever order they arrive.

The sequences in tests/data/run-endings/endings.json were produced by the framework itself, its
Agent over its mock provider (tests/data/run-endings/generate.mjs, see the README there).
"""

import importlib
from typing import Any

import pytest
from django.db import connection

from ledger.ingest.projections import THROWN_ENDING_KEYS
from ledger.models import Run
from tests.conftest import load_fixture, numbered_per_run

pytestmark = pytest.mark.django_db

ENDINGS = {e["name"]: e for e in load_fixture("run-endings/endings.json")["endings"]}
CONSUMER_SCOPE = "consumer-scope"

# What run()/resume() did in the framework, and the status each of its runs must read.
EXPECTED: dict[str, tuple[dict[str, Any], list[str]]] = {
    "completed": ({"returned": "answer"}, [Run.Status.COMPLETED]),
    "denied-input": ({"threw": "MessageDeniedError", "code": "ERR_MESSAGE_DENIED"}, [Run.Status.DENIED]),
    "denied-output": ({"threw": "MessageDeniedError", "code": "ERR_MESSAGE_DENIED"}, [Run.Status.DENIED]),
    # After a tool ran, the deny reaches the caller wrapped with the run's checkpoint.
    "denied-output-after-tool": ({"threw": "RunCheckpointError", "code": "ERR_RUN_CHECKPOINT"}, [Run.Status.DENIED]),
    "failed": ({"threw": "Error", "code": None}, [Run.Status.FAILED]),
    # 9.62.0 has no event of its own for a run the caller aborted or one past its `timeoutMs`:
    # the engine fails the run, `error.fatal` says why, and the run reads failed.
    "cancelled": ({"threw": "Error", "code": None}, [Run.Status.FAILED]),
    "timed-out": ({"threw": "Error", "code": None}, [Run.Status.FAILED]),
    "paused": ({"returned": "paused"}, [Run.Status.PAUSED]),
    "halted": ({"threw": "PolicyHaltError", "code": "ERR_POLICY_HALT"}, [Run.Status.HALTED]),
    "resumed-completed": ({"returned": "answer"}, [Run.Status.PAUSED, Run.Status.COMPLETED]),
    "resumed-denied-output": (
        {"threw": "MessageDeniedError", "code": "ERR_MESSAGE_DENIED"},
        [Run.Status.PAUSED, Run.Status.DENIED],
    ),
}


def _events(name: str) -> list[dict[str, Any]]:
    return numbered_per_run(ENDINGS[name]["events"])


def _runs(name: str) -> list[str]:
    """The ending's runs in the order they started (`consumer-scope` is the pause's, no run)."""
    return list(dict.fromkeys(e["meta"]["runId"] for e in _events(name) if e["meta"]["runId"] != CONSUMER_SCOPE))


def _status(agent_client: Any, run_id: str) -> str:
    response = agent_client.get(f"/api/v1/runs/{run_id}")
    assert response.status_code == 200, response.content
    return str(response.json()["status"])


def _short_types(name: str, run_id: str) -> list[str]:
    return [e["type"].removeprefix("agentfootprint.") for e in _events(name) if e["meta"]["runId"] == run_id]


def test_every_ending_is_covered_by_what_the_framework_produced():
    assert set(ENDINGS) == set(EXPECTED)
    for name, (ending, _) in EXPECTED.items():
        assert ENDINGS[name]["ending"] == ending, name


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_run_reads_how_it_ended(agent_client, name):
    response = agent_client.ingest(_events(name))
    assert response.status_code == 200, response.content

    statuses = [_status(agent_client, run_id) for run_id in _runs(name)]
    assert statuses == EXPECTED[name][1]


# 9.62.0 reports a pause under `consumer-scope`; ledger.asks traces it to its run by the tool
# call it names, so a pause that arrives before that call's `stream.tool_start` pauses no run (the
# ask itself is opened). Known, and left to the asks: strict, so a fix is noticed.
PAUSE_FIRST = pytest.mark.xfail(strict=True, reason="a consumer-scope pause that arrives before its tool call")


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=PAUSE_FIRST) if n in ("paused", "resumed-completed", "resumed-denied-output") else n
        for n in EXPECTED
    ],
)
def test_the_ending_is_the_same_whatever_arrives_first(agent_client, name):
    """Each event sent alone, the last first: the status does not depend on arrival order."""
    for event in reversed(_events(name)):
        response = agent_client.ingest([event])
        assert response.status_code == 200, response.content

    assert [_status(agent_client, run_id) for run_id in _runs(name)] == EXPECTED[name][1]


@pytest.mark.parametrize(
    ("name", "after"),
    [
        ("denied-input", "agent.turn_start"),
        ("denied-output", "agent.turn_end"),
        ("resumed-denied-output", "agent.turn_end"),
    ],
)
def test_the_framework_emits_a_status_moving_event_after_the_deny(name, after):
    """Why the last event's type cannot be the status: the deny is followed by `after`."""
    run_id = _runs(name)[-1]
    types = _short_types(name, run_id)
    deny = next(
        i
        for i, e in enumerate(e for e in _events(name) if e["meta"]["runId"] == run_id)
        if e["type"].endswith("middleware.decision") and e["payload"]["outcome"] == "deny"
    )
    assert after in types[deny + 1 :]


def test_an_output_deny_sent_after_the_turn_end_still_denies(agent_client):
    events = _events("denied-output")
    deny = next(i for i, e in enumerate(events) if e["payload"].get("outcome") == "deny")
    rest = events[:deny] + events[deny + 1 :]
    assert agent_client.ingest(rest).status_code == 200
    run_id = _runs("denied-output")[0]
    assert _status(agent_client, run_id) == Run.Status.COMPLETED

    assert agent_client.ingest([events[deny]]).status_code == 200
    assert _status(agent_client, run_id) == Run.Status.DENIED


def test_stored_runs_that_read_completed_or_running_after_a_thrown_ending_are_migrated(agent_client):
    """The data migration: a run stored under the old rule (the last status-moving event wins)."""
    old_rule = {"denied-output": "completed", "denied-input": "running", "halted": "halted", "completed": "completed"}
    for name in old_rule:
        assert agent_client.ingest(_events(name)).status_code == 200
    for name, status in old_rule.items():
        last = max(
            (e["seq"] for e in _events(name) if e["type"].endswith(("turn_end", "turn_start", "permission.halt"))),
        )
        Run.objects.filter(run_id=_runs(name)[0]).update(status=status, status_seq=last)

    migration = importlib.import_module("ledger.migrations.0024_run_status_thrown_endings")
    with connection.cursor() as cursor:
        cursor.execute(migration.FORWARD)
        cursor.execute(migration.FORWARD)  # a second run changes nothing

    runs = {name: Run.objects.get(run_id=_runs(name)[0]) for name in old_rule}
    assert {name: run.status for name, run in runs.items()} == {
        "denied-output": Run.Status.DENIED,
        "denied-input": Run.Status.DENIED,
        "halted": Run.Status.HALTED,
        "completed": Run.Status.COMPLETED,
    }
    assert runs["denied-output"].status_seq == THROWN_ENDING_KEYS["denied"]
    assert runs["halted"].status_seq == THROWN_ENDING_KEYS["halted"]
