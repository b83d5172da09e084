"""The refusal tracer: the filtered list with its groups and repeat offences, and one refusal's chain."""

import re
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client
from django.utils.html import escape

from ledger.models import Ask, MiddlewareDecision, Refusal
from ledger.refusals import views
from tests.conftest import ApiClient, fixture_events

pytestmark = pytest.mark.django_db

MAX_QUERIES = 15
LIST_URL = "/refusals/"
SCRIPT = "<script>alert(1)</script>"
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"
B_RUN = "run-1796043009968-3"
B_RESUMED_RUN = "run-1796043010363-4"
D_RUN = "run-1796043013444-1"
CONSUMER_SCOPE = "consumer-scope"
FIXTURES = (
    "b-middleware/events-declined.json",
    "c-checkin/events-declined.json",
    "d-artifacts/events.json",
    "e-tool-effects/events.json",
)
REFUSAL_ROW = re.compile(r'<tr class="refusal-row">\s*<td><a href="/refusals/(\d+)/">')
CATEGORY_COUNT = re.compile(r'<span class="tag" data-count="([^"]+)">(\d+)</span>')
REPEAT_ROW = re.compile(
    r'<tr class="repeat-row">\s*<td><a href="[^"]*">([^<]*)</a></td>\s*<td>[^<]*</td>\s*'
    r"<td>([^<]*)</td>\s*<td>([^<]*)</td>\s*<td>(\d+)</td>"
)
OLDER_LINK = re.compile(r'<a href="(\?[^"]*cursor=[^"]*)"')
TR_TAG = re.compile(r"<tr\b[^>]*>")


def _ingest(client: ApiClient, events: list[dict[str, Any]]) -> None:
    response = client.ingest(events)
    assert response.status_code == 200, response.content


def _html(response: Any) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def _row_ids(html: str) -> list[int]:
    return [int(pk) for pk in REFUSAL_ROW.findall(html)]


def _section(html: str, section_id: str) -> str:
    start = html.index(f'<section id="{section_id}"')
    return html[start : html.index("</section>", start)]


def _detail_url(refusal: Refusal) -> str:
    return f"/refusals/{refusal.pk}/"


def _event(run_id: str, seq: int, type_: str, payload: Any, **meta: Any) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": f"agentfootprint.{type_}",
        "payload": payload,
        "meta": {"runId": run_id, "wallClockMs": 1_760_000_000_000 + seq, **meta},
    }


@pytest.fixture
def all_fixtures(agent_client: ApiClient) -> None:
    """Scenarios b (middleware deny, declined ask), c (declined check-in), d (10 artifact
    refusals) and e (refused tool effects), ingested into `acme`.

    b and c both report their pause under the runId 'consumer-scope' with the same seqs, so c's
    copies are left out (its ask opens from `checkin.request` all the same)."""
    for name in FIXTURES:
        events = fixture_events(name)
        if name.startswith("c-"):
            events = [e for e in events if e["meta"]["runId"] != CONSUMER_SCOPE]
        _ingest(agent_client, events)


@pytest.fixture
def b_middleware(agent_client: ApiClient) -> None:
    _ingest(agent_client, fixture_events("b-middleware/events-declined.json"))


@pytest.fixture
def d_artifacts(agent_client: ApiClient) -> None:
    _ingest(agent_client, fixture_events("d-artifacts/events.json"))


# Anonymous visitors and outsiders


@pytest.mark.parametrize("path", [LIST_URL, "/refusals/1/"])
def test_refusal_pages_anonymous_redirect_to_login(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_refusal_detail_outsider_gets_404(outsider_client: Client, b_middleware: None) -> None:
    refusal = Refusal.objects.get(rule="frozen-accounts")
    assert outsider_client.get(_detail_url(refusal)).status_code == 404


def test_refusal_list_outsider_shows_no_rows(outsider_client: Client, all_fixtures: None) -> None:
    html = _html(outsider_client.get(LIST_URL))
    assert _row_ids(html) == []
    assert CATEGORY_COUNT.findall(html) == []
    assert "No refusals yet." in html
    assert "frozen-accounts" not in html
    assert "render_chart" not in html


def test_refusal_list_outsider_sees_own_project_only(
    outsider_client: Client, all_fixtures: None, other_agent_client: ApiClient
) -> None:
    _ingest(
        other_agent_client,
        [_event("run-globex", 0, "middleware.decision", {"middleware": "globex-rule", "outcome": "deny"})],
    )
    html = _html(outsider_client.get(LIST_URL))
    assert _row_ids(html) == [Refusal.objects.get(rule="globex-rule").pk]


def test_refusal_detail_unknown_id_is_404(auditor_client: Client) -> None:
    assert auditor_client.get("/refusals/999999/").status_code == 404


def test_refusal_pages_refuse_post(auditor_client: Client, b_middleware: None) -> None:
    refusal = Refusal.objects.get(rule="frozen-accounts")
    assert auditor_client.post(LIST_URL).status_code == 405
    assert auditor_client.post(_detail_url(refusal)).status_code == 405


# The list


def test_refusal_list_auditor_shows_every_refusal_newest_first(
    auditor_client: Client, all_fixtures: None, django_assert_max_num_queries: Any
) -> None:
    with django_assert_max_num_queries(MAX_QUERIES):
        html = _html(auditor_client.get(LIST_URL))
    assert "<html" in html
    assert "<h1>Refusals</h1>" in html
    expected = list(Refusal.objects.order_by("-id").values_list("id", flat=True))
    assert len(expected) == 2 + 1 + 10 + 4  # b: two denies, c: one decline, d: ten, e: four
    assert _row_ids(html) == expected
    assert "frozen-accounts" in html
    assert "render_chart" in html
    assert f'href="/projects/acme/runs/{D_RUN}/"' in html


def test_refusal_list_counts_by_category_match_rows(auditor_client: Client, all_fixtures: None) -> None:
    html = _html(auditor_client.get(LIST_URL))
    shown = {category: int(n) for category, n in CATEGORY_COUNT.findall(html)}
    stored = Counter(Refusal.objects.values_list("category", flat=True))
    assert shown == dict(stored)
    assert shown == {"middleware": 2, "checkin": 1, "artifact": 10, "effect": 4}
    assert "<h2>17 refusals</h2>" in html


def test_refusal_list_groups_by_rule_tool_and_agent(auditor_client: Client, all_fixtures: None) -> None:
    html = _section(_html(auditor_client.get(LIST_URL)), "refusal-groups")
    assert '<a href="?rule=dispatch">dispatch</a> <span class="tag">5</span>' in html
    assert '<a href="?tool=render_chart">render_chart</a> <span class="tag">4</span>' in html
    assert '<a href="?tool=probe_store">probe_store</a> <span class="tag">5</span>' in html
    agents = Counter(Refusal.objects.values_list("run__agent_id", flat=True))
    for agent, n in agents.items():
        assert f'<a href="?agent={agent}">{agent}</a> <span class="tag">{n}</span>' in html


def test_refusal_list_filters_by_category(auditor_client: Client, all_fixtures: None) -> None:
    html = _html(auditor_client.get(LIST_URL + "?category=artifact"))
    expected = list(Refusal.objects.filter(category="artifact").order_by("-id").values_list("id", flat=True))
    assert len(expected) == 10
    assert _row_ids(html) == expected
    assert CATEGORY_COUNT.findall(html) == [("artifact", "10")]
    assert '<option value="artifact" selected>' in html


def test_refusal_list_filters_by_rule_tool_and_agent(auditor_client: Client, all_fixtures: None) -> None:
    html = _html(auditor_client.get(LIST_URL + "?rule=frozen-accounts"))
    assert _row_ids(html) == [Refusal.objects.get(rule="frozen-accounts").pk]
    html = _html(auditor_client.get(LIST_URL + "?tool=render_chart&rule=dispatch"))
    assert len(_row_ids(html)) == 4
    agent = Refusal.objects.filter(run__run_id=D_RUN).values_list("run__agent_id", flat=True).first()
    html = _html(auditor_client.get(LIST_URL + f"?agent={agent}&category=artifact"))
    assert len(_row_ids(html)) == 10


def test_refusal_list_ignores_unknown_category(auditor_client: Client, all_fixtures: None) -> None:
    html = _html(auditor_client.get(LIST_URL + "?category=bogus"))
    assert len(_row_ids(html)) == 17
    assert "this filter was ignored" in html


def test_refusal_list_filters_by_time(auditor_client: Client, all_fixtures: None) -> None:
    d_refusals = Refusal.objects.filter(run__run_id=D_RUN)
    first_ms = min(d_refusals.values_list("wall_clock_ms", flat=True))
    since = datetime.fromtimestamp(first_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    expected = Refusal.objects.filter(wall_clock_ms__gte=first_ms // 1000 * 1000).count()
    html = _html(auditor_client.get(LIST_URL + f"?since={since}%2B00:00"))
    assert len(_row_ids(html)) == expected
    assert set(_row_ids(html)) >= set(d_refusals.values_list("id", flat=True))
    assert _row_ids(_html(auditor_client.get(LIST_URL + "?until=2000-01-01"))) == []
    assert len(_row_ids(_html(auditor_client.get(LIST_URL + "?since=not-a-date")))) == 17


def test_refusal_list_htmx_filter_renders_results_only(auditor_client: Client, all_fixtures: None) -> None:
    response = auditor_client.get(LIST_URL + "?category=effect", headers={"HX-Request": "true"})
    html = _html(response)
    assert "<html" not in html
    assert "<form" not in html
    assert html.lstrip().startswith('<div id="refusal-results">')
    assert len(_row_ids(html)) == 4
    assert CATEGORY_COUNT.findall(html) == [("effect", "4")]
    assert "HX-Request" in response["Vary"]


def test_refusal_list_pages_rows(auditor_client: Client, all_fixtures: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(views, "REFUSALS_PER_PAGE", 5)
    html = _html(auditor_client.get(LIST_URL + "?category=artifact"))
    seen = _row_ids(html)
    assert len(seen) == 5
    pages = 1
    while links := OLDER_LINK.findall(html):
        href = links[0].replace("&amp;", "&")
        assert "category=artifact" in href
        html = _html(auditor_client.get(LIST_URL + href, headers={"HX-Request": "true"}))
        assert "<html" not in html
        assert "<table" not in html
        assert set(TR_TAG.findall(html)) <= {'<tr class="refusal-row">', '<tr class="more">'}
        seen += _row_ids(html)
        pages += 1
    assert pages == 2
    assert seen == list(Refusal.objects.filter(category="artifact").order_by("-id").values_list("id", flat=True))


def test_refusal_list_repeat_offences(auditor_client: Client, all_fixtures: None) -> None:
    html = _section(_html(auditor_client.get(LIST_URL)), "repeat-offences")
    rows = REPEAT_ROW.findall(html)
    assert (D_RUN, "render_chart", "dispatch", "4") in rows
    assert (D_RUN, "probe_store", "put", "2") in rows
    assert rows[0] == (D_RUN, "render_chart", "dispatch", "4")
    assert all(int(n) > 1 for *_, n in rows)


def test_refusal_list_repeat_offences_empty(auditor_client: Client, b_middleware: None) -> None:
    html = _section(_html(auditor_client.get(LIST_URL)), "repeat-offences")
    assert "No refusal repeated within a run." in html


# The chain of one refusal


def test_refusal_detail_middleware_deny(
    auditor_client: Client, b_middleware: None, django_assert_max_num_queries: Any
) -> None:
    refusal = Refusal.objects.get(rule="frozen-accounts")
    with django_assert_max_num_queries(MAX_QUERIES):
        html = _html(auditor_client.get(_detail_url(refusal)))
    why = "account FROZEN-777 is frozen by compliance hold CH-19; do not retry this transfer"
    assert "frozen-accounts" in _section(html, "chain-refusal")
    assert why in _section(html, "chain-refusal")
    call = _section(html, "chain-tool-call")
    assert "transfer_funds" in call
    assert "<code>t2</code>" in call
    assert "&quot;to&quot;: &quot;FROZEN-777&quot;" in call
    assert "&quot;amount&quot;: 15" in call
    dispatch = _section(html, "chain-dispatch")
    assert dispatch.count('<tr class="dispatch-row') == 5  # tool_start, three decisions, tool_end
    assert dispatch.index("stream.tool_start") < dispatch.index("← this refusal") < dispatch.index("stream.tool_end")
    decisions = _section(html, "chain-decisions")
    assert decisions.count('<tr class="decision-row">') == 3
    assert '<strong class="error">deny</strong>' in decisions
    assert why in _section(html, "chain-model-read")
    assert "middleware&#x27;s why" in _section(html, "chain-model-read")
    assert "No person was asked" in _section(html, "chain-human")
    following = _section(html, "chain-next")
    assert following.count('<tr class="next-row">') == 5
    assert "<code>stream.tool_end</code>" in following
    assert "<code>agent.iteration_end</code>" in following


def test_refusal_detail_declined_ask_shows_who_declined(
    auditor_client: Client, b_middleware: None, project: Any, django_assert_max_num_queries: Any
) -> None:
    """The run reported omar's decline (its verdict row, spec §1.7): the ask opened from its pause
    is closed by it, and the refusal's chain shows who declined and why."""
    ask = Ask.objects.get(project=project)
    refusal = Refusal.objects.get(rule="four-eyes")
    assert refusal.run.run_id == B_RESUMED_RUN
    with django_assert_max_num_queries(MAX_QUERIES):
        html = _html(auditor_client.get(_detail_url(refusal)))
    human = _section(html, "chain-human")
    assert f'<a href="/asks/{ask.pk}/">#{ask.pk}</a>' in human
    assert '<dd class="ask-decided-by">omar@treasury</dd>' in human
    assert '<dd class="ask-note">no PO on file</dd>' in human
    assert '<strong class="error">declined</strong>' in human
    call = _section(html, "chain-tool-call")
    assert f'began in <a href="/projects/acme/runs/{B_RUN}/">{B_RUN}</a>' in call
    assert "&quot;amount&quot;: 2500" in call  # the arguments come from the run that began the call
    dispatch = _section(html, "chain-dispatch")
    assert dispatch.index(B_RUN) < dispatch.index("← this refusal")
    assert "declined by omar@treasury: no PO on file" in _section(html, "chain-model-read")


def test_refusal_detail_declined_checkin(auditor_client: Client, agent_client: ApiClient) -> None:
    _ingest(agent_client, fixture_events("c-checkin/events-declined.json"))
    refusal = Refusal.objects.get(category="checkin")
    html = _html(auditor_client.get(_detail_url(refusal)))
    human = _section(html, "chain-human")
    assert '<dd class="ask-decided-by">bob@ops</dd>' in human
    assert '<dd class="ask-note">not this week</dd>' in human
    assert "declined by human: not this week" in _section(html, "chain-model-read")
    assert "#team-updates" in _section(html, "chain-tool-call")


def test_refusal_detail_artifact_refusal_shows_detail(
    auditor_client: Client, d_artifacts: None, django_assert_max_num_queries: Any
) -> None:
    refusal = Refusal.objects.get(category="artifact", rule="dispatch", reason="kind-mismatch")
    with django_assert_max_num_queries(MAX_QUERIES):
        html = _html(auditor_client.get(_detail_url(refusal)))
    detail = refusal.run.events.get(seq=refusal.seq).doc["payload"]["detail"]
    assert "Live 'dataset/rows' refs in scope: art_cDRCFlfMn1JOBXFGxyuOjM" in detail
    assert f"<pre>{escape(detail)}</pre>" in _section(html, "chain-artifact-detail")
    call = _section(html, "chain-tool-call")
    assert "names no tool call" in call
    assert "&quot;dataset&quot;: &quot;art_RlFNRYQlD2bUMEnuKktfQo&quot;" in call
    dispatch = _section(html, "chain-dispatch")
    assert dispatch.count('<tr class="dispatch-row') == 3  # tool_start, the refusal, tool_end
    assert "Tool &#x27;render_chart&#x27; was not executed" in _section(html, "chain-model-read")


def test_refusal_detail_effect_shows_refusal_reason(auditor_client: Client, agent_client: ApiClient) -> None:
    _ingest(agent_client, fixture_events("e-tool-effects/events.json"))
    refusal = Refusal.objects.filter(category="effect", tool_name="propose_unreachable").get()
    html = _html(auditor_client.get(_detail_url(refusal)))
    read = _section(html, "chain-model-read")
    assert "effect&#x27;s refusalReason" in read
    assert "propose-transition → &#x27;refunds&#x27; was refused" in read


# Escaping


def test_refusal_pages_escape_payloads(auditor_client: Client, agent_client: ApiClient) -> None:
    _ingest(
        agent_client,
        [
            _event("run-xss", 0, "agent.run_configured", {"agentId": SCRIPT}),
            _event("run-xss", 1, "stream.tool_start", {"toolName": SCRIPT, "toolCallId": "x1", "args": {"q": SCRIPT}}),
            _event(
                "run-xss",
                2,
                "middleware.decision",
                {"middleware": SCRIPT, "toolName": SCRIPT, "toolCallId": "x1", "outcome": "deny", "why": SCRIPT},
            ),
            _event("run-xss", 3, "stream.tool_end", {"toolCallId": "x1", "result": SCRIPT}),
        ],
    )
    refusal = Refusal.objects.get(run__run_id="run-xss")
    for response in (
        auditor_client.get(LIST_URL),
        auditor_client.get(LIST_URL, headers={"HX-Request": "true"}),
        auditor_client.get(_detail_url(refusal)),
    ):
        html = _html(response)
        assert SCRIPT not in html
        assert ESCAPED_SCRIPT in html


def test_refusal_detail_shows_recorded_before_and_after_escaped(auditor_client: Client, b_middleware: None) -> None:
    refusal = Refusal.objects.get(rule="frozen-accounts")
    MiddlewareDecision.objects.filter(run=refusal.run, seq=refusal.seq).update(
        before={"args": {"to": SCRIPT}}, after={"args": {"to": "FROZEN-778"}}
    )
    decisions = _section(_html(auditor_client.get(_detail_url(refusal))), "chain-decisions")
    assert decisions.count("<summary>before / after</summary>") == 1
    assert decisions.count("not recorded") == 2
    assert f"&quot;to&quot;: &quot;{ESCAPED_SCRIPT}&quot;" in decisions
    assert "&quot;to&quot;: &quot;FROZEN-778&quot;" in decisions
    assert SCRIPT not in decisions
