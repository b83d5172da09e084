"""The explorer reaches everything it counts: tabs page past 200 rows, a dispatch shows the steps
that name the tool rather than the call, a reused call id still traces its resume, a search gives
the same runs before and after indexing, and a filter by a long id is kept."""

import json
import re
from typing import Any

import pytest
from django.test import Client

from ledger.models import Ask, Refusal, Run
from tenancy.models import Project
from tests.conftest import DATA, ApiClient, fixture_events
from tests.ledger.test_views_refusals import _html, _ingest

pytestmark = pytest.mark.django_db

D_RUN = "run-1796043013444-1"


def _event(run_id: str, seq: int, type_: str, payload: Any, **meta: Any) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": f"agentfootprint.{type_}",
        "payload": payload,
        "meta": {"runId": run_id, "wallClockMs": 1_760_000_000_000 + seq, **meta},
    }


def _denies(run_id: str, n: int) -> list[dict[str, Any]]:
    return [
        _event(
            run_id,
            i,
            "middleware.decision",
            {
                "middleware": "limits",
                "toolName": "pay",
                "toolCallId": f"c{i}",
                "outcome": "deny",
                "why": f"refusal number {i}",
                "moment": "before-tool",
            },
        )
        for i in range(n)
    ]


def _dispatch_of(html: str, call_id: str) -> str:
    for article in html.split('<article class="dispatch">')[1:]:
        if f'<span class="muted">{call_id}</span>' in article:
            return article[: article.index("</article>")]
    raise AssertionError(f"no dispatch for {call_id}")


def _section(html: str, section_id: str) -> str:
    start = html.index(f'<section id="{section_id}"')
    return html[start : html.index("</section>", start)]


# --- run page: tabs that stop at 200 rows ------------------------------------------------------


def _all_pages(client: Client, url: str) -> list[str]:
    pages = []
    while url:
        html = _html(client.get(url))
        pages.append(html)
        found = re.search(r'<p class="more"><a href="([^"]+)"', html)
        url = found.group(1).replace("&amp;", "&") if found else ""
    return pages


def test_refusals_tab_pages_through_every_refusal_the_header_counts(
    auditor_client: Client, agent_client: ApiClient
) -> None:
    _ingest(agent_client, _denies("run-many", 205))
    pages = _all_pages(auditor_client, "/projects/acme/runs/run-many/tab/refusals/")
    listed = [
        pk
        for html in pages
        for pk in re.findall(r'href="/refusals/(\d+)/"', html[html.index('<ul class="refusals">') :])
    ]
    assert len(pages) == 2
    assert sorted(map(int, listed)) == sorted(
        Refusal.objects.filter(run__run_id="run-many").values_list("pk", flat=True)
    )


def test_verdicts_tab_pages_through_every_middleware_decision(auditor_client: Client, agent_client: ApiClient) -> None:
    _ingest(agent_client, _denies("run-many", 205))
    pages = _all_pages(auditor_client, "/projects/acme/runs/run-many/tab/verdicts/")
    assert [html.count('class="decision-row"') for html in pages] == [200, 5]


def test_artifacts_tab_pages_through_every_artifact_event(auditor_client: Client, agent_client: ApiClient) -> None:
    minted = [
        _event("run-mints", i, "artifacts.minted", {"ref": f"art_{i:022d}", "kind": "k", "tool": "t"})
        for i in range(205)
    ]
    _ingest(agent_client, minted)
    pages = _all_pages(auditor_client, "/projects/acme/runs/run-mints/tab/artifacts/")
    tables = [
        html[
            html.index('<table class="artifact-events">') : html.index(
                "</table>", html.index('<table class="artifact-events">')
            )
        ]
        for html in pages
    ]
    assert [table.count("<tr><td>") for table in tables] == [200, 5]


def test_asks_tab_pages_through_every_ask_of_the_run(
    auditor_client: Client, agent_client: ApiClient, project: Project
) -> None:
    _ingest(agent_client, _denies("run-asks", 1))
    Ask.objects.bulk_create(
        Ask(project=project, run_id="run-asks", tool_call_id=f"q{i}", kind=Ask.Kind.PLAIN, pause_data={})
        for i in range(205)
    )
    pages = _all_pages(auditor_client, "/projects/acme/runs/run-asks/tab/asks/")
    listed = [
        int(pk) for html in pages for pk in re.findall(r'href="/asks/(\d+)/"', html[html.index('<ul class="asks">') :])
    ]
    assert [len(re.findall(r'href="/asks/\d+/"', html[html.index('<ul class="asks">') :])) for html in pages] == [
        200,
        5,
    ]
    assert listed == sorted(Ask.objects.filter(run_id="run-asks").values_list("pk", flat=True))


def test_spans_tab_pages_through_every_span_of_the_trace(auditor_client: Client, agent_client: ApiClient) -> None:
    document = json.loads((DATA / "g-otel/otlp-traces.json").read_bytes())
    scope_spans = document["resourceSpans"][0]["scopeSpans"][0]
    template = scope_spans["spans"][0]
    scope_spans["spans"] = [{**template, "spanId": f"{i + 1:016x}", "parentSpanId": ""} for i in range(205)]
    agent_client.raise_request_exception = False
    assert agent_client.post("/v1/traces", json.dumps(document), content_type="application/json").status_code == 200
    run = Run.objects.get(source=Run.Source.OTLP)
    pages = _all_pages(auditor_client, f"/projects/acme/runs/{run.run_id}/tab/spans/")
    numbers = [int(n) for html in pages for n in re.findall(r'<tr class="span-row"><td>(\d+)</td>', html)]
    assert [html.count('<tr class="span-row">') for html in pages] == [200, 5]
    assert numbers == list(range(205))


# --- run page: the tool call's dispatch --------------------------------------------------------


def test_tool_calls_tab_dispatch_includes_the_permission_gate(auditor_client: Client, agent_client: ApiClient) -> None:
    """Spec §1.8 step 2: the permission gate names the tool as `target`, not the call, and is the call's step."""
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
                {
                    "middleware": "limits",
                    "toolName": "pay",
                    "toolCallId": "c9",
                    "outcome": "allow",
                    "moment": "before-tool",
                },
            ),
            _event("run-p", 3, "stream.tool_end", {"toolCallId": "c9", "result": "paid"}),
        ],
    )
    dispatch = _dispatch_of(_html(auditor_client.get("/projects/acme/runs/run-p/tab/tools/")), "c9")
    steps = re.findall(r'<li class="step[^"]*"><a [^>]*>([^<]*)</a>', dispatch)
    assert "permission" in steps, steps
    assert steps.index("permission") < steps.index("before-tool decision"), steps


def test_tool_calls_tab_dispatch_includes_wants_resolution(auditor_client: Client, agent_client: ApiClient) -> None:
    """Spec §1.8 step 8: wants resolution (`artifacts.resolved` / `.refused`) names the tool as `tool`."""
    _ingest(agent_client, fixture_events("d-artifacts/events.json"))
    html = _html(auditor_client.get(f"/projects/acme/runs/{D_RUN}/tab/tools/"))
    d5 = _dispatch_of(html, "d5")
    assert "wants refused" in d5, d5
    assert '<li class="step refused">' in d5, d5
    d3 = _dispatch_of(html, "d3")
    assert "wants resolved" in d3, d3


# --- refusal tracer ----------------------------------------------------------------------------


def test_refusal_page_dispatch_includes_the_calls_artifact_events(
    auditor_client: Client, agent_client: ApiClient
) -> None:
    """The refusal page's dispatch holds the call's artifact events too, which name the tool, not the call."""
    _ingest(agent_client, fixture_events("d-artifacts/events.json"))
    refusals = list(Refusal.objects.filter(run__run_id=D_RUN, tool_name="probe_store").order_by("seq"))
    assert len(refusals) == 5
    last = refusals[-1]
    dispatch = _section(_html(auditor_client.get(f"/refusals/{last.pk}/")), "chain-dispatch")
    assert "artifacts.resolved" in dispatch, dispatch
    for earlier in refusals[:-1]:
        assert f"<td>{earlier.seq}</td>" in dispatch, (earlier.seq, dispatch)


# --- run search --------------------------------------------------------------------------------


def test_multi_word_search_finds_the_same_runs_before_and_after_indexing(agent_client: ApiClient) -> None:
    """A search gives the same runs before and after the worker indexes: every word, anywhere in the run."""
    from ledger.explorer.search import search_index_pending

    _ingest(
        agent_client,
        [
            _event("run-words", 0, "agent.turn_start", {"userPrompt": "zanzibar"}),
            _event("run-words", 1, "agent.turn_end", {"finalContent": "quokka"}),
        ],
    )

    def found() -> list[str]:
        return [r["runId"] for r in agent_client.get("/api/v1/runs?q=zanzibar+quokka").json()["runs"]]

    before = found()
    assert search_index_pending() > 0
    after = found()
    assert before == after, f"before indexing {before}, after {after}"


def test_a_resumed_call_whose_id_the_paused_run_used_before_is_traced_to_that_run(
    auditor_client: Client, agent_client: ApiClient
) -> None:
    """Unfinished means no end after the latest start: a run that used the call id before still began the resume."""
    s = {"sessionId": "sess-R"}
    call = {"toolName": "pay", "toolCallId": "c1"}
    _ingest(
        agent_client,
        [
            _event("run-R1", 0, "stream.tool_start", {**call, "args": {"to": "first"}}, **s),
            _event("run-R1", 1, "stream.tool_end", {"toolCallId": "c1", "result": "ok"}, **s),
            _event("run-R1", 2, "stream.tool_start", {**call, "args": {"to": "SECOND"}}, **s),
            _event(
                "run-R1",
                3,
                "middleware.decision",
                {**call, "middleware": "four-eyes", "outcome": "ask", "moment": "before-tool", "why": "ok?"},
                **s,
            ),
        ],
    )
    _ingest(
        agent_client,
        [
            _event(
                "run-R2",
                0,
                "middleware.decision",
                {**call, "middleware": "four-eyes", "outcome": "deny", "moment": "before-tool", "why": "declined by x"},
                **s,
            ),
            _event("run-R2", 1, "stream.tool_end", {"toolCallId": "c1", "result": "declined by x"}, **s),
        ],
    )
    refusal = Refusal.objects.get(run__run_id="run-R2")
    tool_call = _section(_html(auditor_client.get(f"/refusals/{refusal.pk}/")), "chain-tool-call")
    assert 'began in <a href="/projects/acme/runs/run-R1/">run-R1</a>' in tool_call, tool_call
    header = _html(auditor_client.get("/projects/acme/runs/run-R2/"))
    assert "<dt>Resumes</dt>" in header


def test_run_list_filter_by_a_long_agent_id_shows_only_that_agents_runs(
    auditor_client: Client, agent_client: ApiClient
) -> None:
    agent = "a" * 250
    _ingest(agent_client, [_event("run-long-agent", 0, "agent.run_configured", {"agentId": agent})])
    _ingest(agent_client, [_event("run-other-agent", 0, "agent.run_configured", {"agentId": "other"})])
    assert Run.objects.get(run_id="run-long-agent").agent_id == agent
    html = _html(auditor_client.get("/runs/", {"agent": agent}))
    assert "run-long-agent" in html
    assert "run-other-agent" not in html
