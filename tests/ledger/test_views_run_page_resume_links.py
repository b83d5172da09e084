"""The run page links a run only to the runs a resume ties it to: its header's "Resumes" and
"Resumed by" and its tool-calls tab pair calls by the refusal tracer's origin rule (same session,
no guess), never by a shared call id alone; the tree's refusal badges count the refusals table."""

import copy
import re
from typing import Any

import pytest
from django.test import Client

from ledger.explorer import run_page
from ledger.models import Run
from tests.conftest import fixture_events

pytestmark = pytest.mark.django_db

BASE_MS = 1_796_040_000_000  # README of the fixtures: clocks read about 1796040000000
A_RUN = "run-1796043007829-1"  # the one run of tests/data/a-run-recording/events.json
B_APPROVED_RUN = "run-1796043009084-1"  # b-middleware/events-approved.json: paused on t3
B_APPROVED_RESUME = "run-1796043009518-2"  # its resume, which finishes t3
C_APPROVED_RUN = "run-1796043011151-1"  # c-checkin/events-approved.json: paused on c3, session c-approved
C_DECLINED_RUN = "run-1796043012086-3"  # c-checkin/events-declined.json: paused on c3, session c-declined
C_DECLINED_RESUME = "run-1796043012762-4"  # the declined session's resume (finishes c3, no session)


def _ingest(client: Any, events: list[dict[str, Any]]) -> None:
    response = client.ingest(events)
    assert response.status_code == 200, response.content


def _renamed(events: list[dict[str, Any]], suffix: str, session: str) -> list[dict[str, Any]]:
    """The same capture as another run of another session (run ids are not stable across
    regeneration, tool-call ids are: fixtures README, "Things that hold for every folder")."""
    out = copy.deepcopy(events)
    for event in out:
        event["meta"]["runId"] += suffix
        event["meta"]["sessionId"] = session
    return out


def _header_links(html: str, label: str) -> list[str]:
    match = re.search(rf"<dt>{label}</dt><dd>(.*?)</dd>", html)
    return re.findall(r">([^<]+)</a>", match.group(1)) if match else []


def test_tool_calls_tab_shows_only_this_runs_dispatch_when_another_session_reused_the_call_ids(
    agent_client: Any, auditor_client: Client
) -> None:
    """Two finished, unrelated runs of different sessions both made tool calls `call-1` and
    `call-2` (the framework's scripted ids repeat: fixtures README). The tools tab of run X shows
    X's dispatch only: steps of another run belong there only when that run resumed the call."""
    base = fixture_events("a-run-recording/events.json")
    _ingest(agent_client, _renamed(base, "-x", "session-x"))
    _ingest(agent_client, _renamed(base, "-y", "session-y"))

    html = auditor_client.get(f"/projects/acme/runs/{A_RUN}-x/tab/tools/").content.decode()

    assert html.count('class="dispatch"') == 2
    assert f"in run {A_RUN}-y" not in html
    assert f"/runs/{A_RUN}-y/events/" not in html


def test_run_header_does_not_link_runs_of_another_session_that_began_the_same_call_id(
    agent_client: Any, auditor_client: Client
) -> None:
    """Scenario c approved and declined are two sessions that each paused on tool call `c3`
    (tests/data/README.md). The declined session's first run began c3 itself (it has c3's
    `stream.tool_start`), so it resumes nothing of the approved run, and the approved run is not
    resumed by it. The declined session's resume has no session of its own and both runs left c3
    unfinished, so it names no run it resumes rather than a guess."""
    _ingest(agent_client, fixture_events("c-checkin/events-approved.json"))
    declined = [e for e in fixture_events("c-checkin/events-declined.json") if e["meta"]["runId"] != "consumer-scope"]
    _ingest(agent_client, declined)

    approved_page = auditor_client.get(f"/projects/acme/runs/{C_APPROVED_RUN}/").content.decode()
    declined_page = auditor_client.get(f"/projects/acme/runs/{C_DECLINED_RUN}/").content.decode()
    declined_resume_page = auditor_client.get(f"/projects/acme/runs/{C_DECLINED_RESUME}/").content.decode()

    assert C_DECLINED_RUN not in _header_links(approved_page, "Resumed by")
    assert C_APPROVED_RUN not in _header_links(declined_page, "Resumes")
    assert _header_links(declined_resume_page, "Resumes") == []


def test_tool_calls_tab_shows_the_steps_of_the_run_that_resumed_the_call(
    agent_client: Any, auditor_client: Client
) -> None:
    """Scenario b approved paused on `t3` and a new run finished it: each run's tools tab shows
    the other run's part of t3's dispatch, and only of t3."""
    _ingest(agent_client, fixture_events("b-middleware/events-approved.json"))

    paused = auditor_client.get(f"/projects/acme/runs/{B_APPROVED_RUN}/tab/tools/").content.decode()
    resumed = auditor_client.get(f"/projects/acme/runs/{B_APPROVED_RESUME}/tab/tools/").content.decode()

    assert paused.count(f"in run {B_APPROVED_RESUME}") == 2  # t3's after-tool decision and its end
    assert resumed.count(f"in run {B_APPROVED_RUN}") == 5  # t3's start and its four decisions


def test_run_page_of_a_run_without_wall_clock_sharing_a_call_id_is_not_a_500(
    agent_client: Any, auditor_client: Client
) -> None:
    """`meta.wallClockMs` is optional, so a run's `first_event_at` may be NULL: such a run, paused
    on a call that a run with a time resumed, opens and links its resume."""
    start = {"toolName": "lookup", "toolCallId": "k1", "args": {}}
    end = {"toolName": "lookup", "toolCallId": "k1", "result": "ok"}
    _ingest(
        agent_client,
        [{"seq": 0, "type": "agentfootprint.stream.tool_start", "payload": start, "meta": {"runId": "no-clock"}}],
    )
    _ingest(
        agent_client,
        [
            {
                "seq": 0,
                "type": "agentfootprint.stream.tool_end",
                "payload": end,
                "meta": {"runId": "with-clock", "wallClockMs": BASE_MS},
            }
        ],
    )

    response = auditor_client.get("/projects/acme/runs/no-clock/")

    assert response.status_code == 200
    assert _header_links(response.content.decode(), "Resumed by") == ["with-clock"]


@pytest.mark.parametrize(
    ("fixture", "run_id", "refusals"),
    [
        ("e-tool-effects/events.json", "run-1796043015109-1", 4),  # refused/superseded tools.effect
        ("b-middleware/events-declined.json", "run-1796043009968-3", 1),  # frozen-accounts deny()
    ],
)
def test_tree_refusal_badges_add_up_to_the_runs_refusals(
    agent_client: Any, auditor_client: Client, fixture: str, run_id: str, refusals: int
) -> None:
    """The tree tab's "N refused" badges count the run's rows in the refusals table, so a refused
    tool effect or a middleware deny is badged as the header counts it (README, Projections: "one
    refusals table covering every refusal-carrying event")."""
    _ingest(agent_client, fixture_events(fixture))
    run = Run.objects.get(run_id=run_id)
    assert run.refusal_count == refusals

    tree = run_page.run_tree(run=run)
    html = auditor_client.get(f"/projects/acme/runs/{run_id}/tab/tree/").content.decode()

    assert sum(root.refusals for root in tree) == refusals
    assert f'<span class="error">{refusals} refused</span>' in html
