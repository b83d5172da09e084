"""The auditor's pages: the run list, a run with its events, and the events pager."""

import re
from typing import Any

import pytest
from django.test import Client

from ledger.explorer import span_index
from tests.conftest import fixture_events

pytestmark = pytest.mark.django_db

MAX_QUERIES = 10
# The run page opens on its waterfall: the run's overview row and its short lanes' spans.
RUN_PAGE_QUERIES = MAX_QUERIES + 2
SCRIPT = "<script>alert(1)</script>"
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"
EVENT_ROW = re.compile(r'<tr class="event-row">\s*<td><a href="[^"]*/events/\d+/"[^>]*>(\d+)</a></td>')
RUN_ROW = re.compile(r'<tr class="run-row">\s*<td><a href="[^"]*">([^<]*)</a></td>')
TR_TAG = re.compile(r"<tr\b[^>]*>")
LATER_LINK = re.compile(r'<a href="([^"]*/events/\?after_seq=(\d+))"')
BIG_RUN = "run-1796043013444-1"  # the one run of tests/data/d-artifacts/events.json, 451 events


def _event(run_id: str, seq: int, type_: str, payload: Any = None, **meta: Any) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": f"agentfootprint.{type_}",
        "payload": payload if payload is not None else {},
        "meta": {"runId": run_id, "wallClockMs": 1_760_000_000_000 + seq, **meta},
    }


def _ingest(agent_client: Any, events: list[dict[str, Any]]) -> None:
    response = agent_client.ingest(events)
    assert response.status_code == 200, response.content


def _html(response: Any) -> str:
    assert response.status_code == 200
    return response.content.decode()


def _event_seqs(html: str) -> list[int]:
    return [int(seq) for seq in EVENT_ROW.findall(html)]


def _run_ids(html: str) -> list[str]:
    return RUN_ROW.findall(html)


def _run_url(run_id: str, slug: str = "acme") -> str:
    return f"/projects/{slug}/runs/{run_id}/"


@pytest.fixture
def run_id(agent_client: Any) -> str:
    """A finished run of `acme` in session s-1; its events are posted out of order."""
    events = [
        _event("run-a", 0, "agent.turn_start", {"userMessage": "hello"}, sessionId="s-1"),
        _event("run-a", 1, "stream.llm_start", {"iteration": 1}, sessionId="s-1"),
        _event("run-a", 2, "stream.llm_end", {"iteration": 1, "content": "hi"}, sessionId="s-1"),
        _event("run-a", 3, "agent.turn_end", {"content": "hi"}, sessionId="s-1"),
    ]
    _ingest(agent_client, [events[2], events[0], events[3], events[1]])
    return "run-a"


@pytest.fixture
def big_run(agent_client: Any) -> str:
    events = fixture_events("d-artifacts/events.json")
    assert {e["meta"]["runId"] for e in events} == {BIG_RUN}
    assert len(events) == 451
    _ingest(agent_client, events)
    return BIG_RUN


# Anonymous visitors


@pytest.mark.parametrize("path", ["/", "/runs/", _run_url("run-a"), _run_url("run-a") + "events/?after_seq=1"])
def test_pages_anonymous_redirect_to_login(client: Client, run_id: str, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


# Outsiders (members of another project)


def test_run_detail_outsider_gets_404(outsider_client: Client, run_id: str) -> None:
    assert outsider_client.get(_run_url(run_id)).status_code == 404


def test_run_events_outsider_gets_404(outsider_client: Client, run_id: str) -> None:
    response = outsider_client.get(_run_url(run_id) + "events/?after_seq=0", headers={"HX-Request": "true"})
    assert response.status_code == 404


def test_run_detail_outsider_gets_404_under_own_project_slug(outsider_client: Client, run_id: str) -> None:
    assert outsider_client.get(_run_url(run_id, slug="globex")).status_code == 404


def test_run_list_outsider_does_not_show_run(outsider_client: Client, run_id: str, other_agent_client: Any) -> None:
    _ingest(other_agent_client, [_event("run-globex", 0, "agent.turn_start")])
    html = _html(outsider_client.get("/runs/"))
    assert _run_ids(html) == ["run-globex"]
    assert run_id not in html


# Auditors of the project


def test_run_list_auditor_shows_run(
    auditor_client: Client, run_id: str, agent_client: Any, django_assert_max_num_queries: Any
) -> None:
    for n in range(5):  # more runs must not mean more queries
        _ingest(agent_client, [_event(f"run-extra-{n}", 0, "agent.turn_start")])
    with django_assert_max_num_queries(MAX_QUERIES):
        html = _html(auditor_client.get("/runs/"))
    assert "<html" in html
    assert _run_ids(html) == [f"run-extra-{n}" for n in reversed(range(5))] + [run_id]
    assert f'href="{_run_url(run_id)}"' in html
    assert "completed" in html
    assert "s-1" in html


def test_run_list_auditor_empty(auditor_client: Client) -> None:
    html = _html(auditor_client.get("/runs/"))
    assert _run_ids(html) == []
    assert "No runs yet" in html


def test_run_detail_auditor_shows_events_in_seq_order(
    auditor_client: Client, run_id: str, django_assert_max_num_queries: Any
) -> None:
    span_index.run_spans_index_pending()  # as the worker leaves it: the page reads the waterfall's index
    with django_assert_max_num_queries(RUN_PAGE_QUERIES):
        html = _html(auditor_client.get(_run_url(run_id)))
    assert "<html" in html
    assert f"<h1>{run_id}</h1>" in html
    assert _event_seqs(html) == [0, 1, 2, 3]
    assert "<code>agent.turn_start</code>" in html
    assert "Later events" not in html


def test_run_detail_shows_tool_call_id(auditor_client: Client, agent_client: Any) -> None:
    _ingest(
        agent_client,
        [
            _event("run-tool", 0, "agent.turn_start"),
            _event("run-tool", 1, "stream.tool_start", {"toolCallId": "call-7", "toolName": "search", "args": {}}),
        ],
    )
    html = _html(auditor_client.get(_run_url("run-tool")))
    assert _event_seqs(html) == [0, 1]
    assert "<td>call-7</td>" in html


def test_run_detail_unknown_run_is_404(auditor_client: Client) -> None:
    assert auditor_client.get(_run_url("no-such-run")).status_code == 404


def test_run_detail_query_count_does_not_grow_with_events(
    auditor_client: Client, big_run: str, django_assert_max_num_queries: Any
) -> None:
    span_index.run_spans_index_pending()  # as the worker leaves it: the page reads the waterfall's index
    with django_assert_max_num_queries(RUN_PAGE_QUERIES):
        html = _html(auditor_client.get(_run_url(big_run)))
    assert len(_event_seqs(html)) == 100


def test_run_events_query_count_does_not_grow_with_events(
    auditor_client: Client, big_run: str, django_assert_max_num_queries: Any
) -> None:
    with django_assert_max_num_queries(MAX_QUERIES):
        html = _html(auditor_client.get(_run_url(big_run) + "events/?after_seq=99", headers={"HX-Request": "true"}))
    assert len(_event_seqs(html)) == 100


# htmx partials


def test_run_list_htmx_renders_only_rows(auditor_client: Client, run_id: str) -> None:
    response = auditor_client.get("/runs/", headers={"HX-Request": "true"})
    html = _html(response)
    assert "<html" not in html
    assert "<table" not in html
    assert "<form" not in html
    assert TR_TAG.findall(html) == ['<tr class="run-row">']
    assert _run_ids(html) == [run_id]
    assert "HX-Request" in response["Vary"]


def test_run_events_htmx_renders_only_rows(auditor_client: Client, run_id: str) -> None:
    response = auditor_client.get(_run_url(run_id) + "events/?after_seq=0", headers={"HX-Request": "true"})
    html = _html(response)
    assert "<html" not in html
    assert "<table" not in html
    assert set(TR_TAG.findall(html)) == {'<tr class="event-row">'}
    assert _event_seqs(html) == [1, 2, 3]
    assert "HX-Request" in response["Vary"]


def test_run_events_without_htmx_renders_full_page(auditor_client: Client, run_id: str) -> None:
    html = _html(auditor_client.get(_run_url(run_id) + "events/?after_seq=1"))
    assert "<html" in html
    assert _event_seqs(html) == [2, 3]


def test_run_events_bad_after_seq_starts_at_first_event(auditor_client: Client, run_id: str) -> None:
    html = _html(auditor_client.get(_run_url(run_id) + "events/?after_seq=abc", headers={"HX-Request": "true"}))
    assert _event_seqs(html) == [0, 1, 2, 3]


# Paging


def test_run_detail_pages_events(auditor_client: Client, big_run: str) -> None:
    html = _html(auditor_client.get(_run_url(big_run)))
    assert _event_seqs(html) == list(range(100))
    assert "Later events" in html
    ((href, after_seq),) = LATER_LINK.findall(html)
    assert after_seq == "99"
    assert href == _run_url(big_run) + "events/?after_seq=99"
    assert f'hx-get="{href}"' in html

    second = _html(auditor_client.get(href, headers={"HX-Request": "true"}))
    assert "<html" not in second
    assert _event_seqs(second) == list(range(100, 200))
    assert LATER_LINK.findall(second) == [(_run_url(big_run) + "events/?after_seq=199", "199")]
    assert TR_TAG.findall(second) == ['<tr class="event-row">'] * 100 + ['<tr class="more">']


def test_run_events_last_page_has_no_later_link(auditor_client: Client, big_run: str) -> None:
    html = _html(auditor_client.get(_run_url(big_run) + "events/?after_seq=399"))
    assert _event_seqs(html) == list(range(400, 451))
    assert "Later events" not in html


def test_run_events_page_follows_links_to_the_end(auditor_client: Client, big_run: str) -> None:
    seen: list[int] = []
    href: str | None = _run_url(big_run)
    while href:
        html = _html(auditor_client.get(href, headers={"HX-Request": "true"} if seen else {}))
        seen += _event_seqs(html)
        links = LATER_LINK.findall(html)
        href = links[0][0] if links else None
    assert seen == list(range(451))


# Escaping


def test_run_detail_escapes_event_payload(auditor_client: Client, agent_client: Any) -> None:
    _ingest(
        agent_client,
        [
            _event("run-xss", 0, "agent.turn_start", {"userMessage": SCRIPT, SCRIPT: "key"}, sessionId=SCRIPT),
        ],
    )
    page = _html(auditor_client.get(_run_url("run-xss")))
    assert _event_seqs(page) == [0]
    for response in (
        auditor_client.get(_run_url("run-xss")),
        auditor_client.get(_run_url("run-xss") + "events/0/", headers={"HX-Request": "true"}),
        auditor_client.get(_run_url("run-xss") + "events/0/"),
    ):
        html = _html(response)
        assert SCRIPT not in html
        assert ESCAPED_SCRIPT in html


def test_run_list_escapes_session(auditor_client: Client, agent_client: Any) -> None:
    _ingest(agent_client, [_event("run-xss", 0, "agent.turn_start", sessionId=SCRIPT)])
    html = _html(auditor_client.get("/runs/"))
    assert SCRIPT not in html
    assert ESCAPED_SCRIPT in html


# Filters


@pytest.fixture
def mixed_runs(agent_client: Any) -> None:
    """run-done (completed, s-1), run-busy (running, s-1), run-other (running, s-2)."""
    _ingest(
        agent_client,
        [
            _event("run-done", 0, "agent.turn_start", sessionId="s-1"),
            _event("run-done", 1, "agent.turn_end", sessionId="s-1"),
            _event("run-busy", 0, "agent.turn_start", sessionId="s-1"),
            _event("run-other", 0, "agent.turn_start", sessionId="s-2"),
        ],
    )


def test_run_list_filters_by_status(auditor_client: Client, mixed_runs: None) -> None:
    assert _run_ids(_html(auditor_client.get("/runs/?status=completed"))) == ["run-done"]
    assert sorted(_run_ids(_html(auditor_client.get("/runs/?status=running")))) == ["run-busy", "run-other"]
    assert _run_ids(_html(auditor_client.get("/runs/?status=failed"))) == []


def test_run_list_filter_marks_selected_status(auditor_client: Client, mixed_runs: None) -> None:
    html = _html(auditor_client.get("/runs/?status=completed"))
    assert '<option value="completed" selected>' in html


def test_run_list_ignores_unknown_status(auditor_client: Client, mixed_runs: None) -> None:
    assert len(_run_ids(_html(auditor_client.get("/runs/?status=bogus")))) == 3


def test_run_list_filters_by_session(auditor_client: Client, mixed_runs: None) -> None:
    assert sorted(_run_ids(_html(auditor_client.get("/runs/?session=s-1")))) == ["run-busy", "run-done"]
    assert _run_ids(_html(auditor_client.get("/runs/?session=s-2"))) == ["run-other"]
    assert _run_ids(_html(auditor_client.get("/runs/?session=nope"))) == []


def test_run_list_filters_by_status_and_session_htmx(auditor_client: Client, mixed_runs: None) -> None:
    html = _html(auditor_client.get("/runs/?session=s-1&status=running", headers={"HX-Request": "true"}))
    assert "<html" not in html
    assert _run_ids(html) == ["run-busy"]


def test_run_list_pages_runs(auditor_client: Client, agent_client: Any) -> None:
    _ingest(agent_client, [_event(f"run-{n:02}", 0, "agent.turn_start") for n in range(55)])
    first = _html(auditor_client.get("/runs/"))
    assert _run_ids(first) == [f"run-{n:02}" for n in reversed(range(5, 55))]
    (href,) = re.findall(r'<a href="(\?cursor=[^"]*)"', first)
    second = _html(auditor_client.get("/runs/" + href.replace("&amp;", "&"), headers={"HX-Request": "true"}))
    assert _run_ids(second) == [f"run-{n:02}" for n in reversed(range(5))]
    assert "Older runs" not in second


# Login


def test_login_page_renders(client: Client) -> None:
    html = _html(client.get("/accounts/login/"))
    assert "<h1>Sign in</h1>" in html
    assert 'name="username"' in html
    assert 'name="password"' in html
    assert 'name="csrfmiddlewaretoken"' in html


def test_login_with_password_signs_in(auditor: Any, run_id: str) -> None:
    client = Client(enforce_csrf_checks=True)
    login_page = client.get("/accounts/login/?next=/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page.content.decode())
    assert token is not None
    response = client.post(
        "/accounts/login/",
        {
            "username": "alice",
            "password": "pw-alice",
            "next": "/",
            "csrfmiddlewaretoken": token.group(1),
        },
    )
    assert response.status_code == 302
    assert response["Location"] == "/"
    html = _html(client.get("/runs/"))
    assert "Sign out alice" in html
    assert _run_ids(html) == [run_id]


def test_login_with_wrong_password_is_refused(auditor: Any) -> None:
    client = Client()
    response = client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
    assert response.status_code == 200
    assert "didn't match" in response.content.decode()
    assert client.get("/").status_code == 302
