"""The overview page: the signed-in home, drawn from the rollups of the person's projects only."""

import re
import time
from datetime import datetime, timedelta
from html import unescape
from typing import Any

import pytest
from django.test import Client

from ledger.models import Refusal, Run
from ledger.overview import services
from tests.conftest import fixture_events

pytestmark = pytest.mark.django_db

MARK_HREF = re.compile(r'<a href="([^"]+)" class="mark"><rect class="([^"]+)"')


def recent(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fixture's events as if sent in the last minutes: their wall clocks moved to now."""
    last = max(e["meta"]["wallClockMs"] for e in events)
    shift = int(time.time() * 1000) - 60_000 - last
    return [{**e, "meta": {**e["meta"], "wallClockMs": e["meta"]["wallClockMs"] + shift}} for e in events]


@pytest.fixture
def folded(agent_client, other_agent_client) -> None:
    for name in ("a-run-recording/events.json", "b-middleware/events-declined.json", "d-artifacts/events.json"):
        assert agent_client.ingest(recent(fixture_events(name))).status_code == 200
    assert other_agent_client.ingest(recent(fixture_events("e-tool-effects/events.json"))).status_code == 200
    services.rollups_fold_pending()


def _html(response: Any) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def test_the_overview_is_the_signed_in_home_and_asks_anonymous_callers_to_sign_in(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/")


def test_the_overview_charts_the_persons_projects(auditor_client, folded, django_assert_max_num_queries) -> None:
    # 9 reads, and the overview's transaction (here a savepoint and its release) with its SET LOCAL.
    with django_assert_max_num_queries(12):
        html = _html(auditor_client.get("/"))
    assert "<h1>Overview</h1>" in html
    for chart in ("runs-started", "runs-ended", "events", "refusals", "refusal-rules", "asks", "tools", "usage"):
        assert f'id="chart-{chart}"' in html, chart
    assert "Figures are up to date" in html
    marks = MARK_HREF.findall(html)
    assert marks, "no chart mark"
    assert all("<title" in part for part in html.split('class="mark"')[1:])  # each mark names itself
    assert "The figures as a table" in html
    assert 'style="' not in html  # the CSP forbids inline styles
    assert "/static/css/overview.css" in html


def test_a_runs_mark_links_to_the_runs_behind_it(auditor_client, folded, project) -> None:
    html = _html(auditor_client.get("/"))
    section = html.split('id="chart-runs-started"')[1].split("</section>")[0]
    hrefs = [unescape(href) for href, _ in MARK_HREF.findall(section)]
    assert hrefs
    assert all(href.startswith("/runs/?since=") for href in hrefs)
    listed: set[str] = set()
    for href in hrefs:
        listed |= set(
            re.findall(r'class="run-row">\s*<td><a href="[^"]+">([^<]+)</a>', _html(auditor_client.get(href)))
        )
    assert listed == set(Run.objects.filter(project=project).values_list("run_id", flat=True))


def test_a_refusals_mark_links_to_the_refusals_behind_it(auditor_client, folded, project) -> None:
    """Counted in the minute their event's wall clock names, as the refusals page filters them."""
    html = _html(auditor_client.get("/?window=hour"))
    section = html.split('id="chart-refusals"')[1].split("</section>")[0]
    hrefs = [unescape(href) for href, _ in MARK_HREF.findall(section)]
    assert hrefs
    assert all(href.startswith("/refusals/?") and "category=" in href for href in hrefs)
    behind = sum(_html(auditor_client.get(href)).count('class="refusal-row"') for href in hrefs)
    assert behind == Refusal.objects.filter(run__project=project).count() > 0


def test_another_projects_figures_never_show(outsider_client, auditor_client, folded, project) -> None:
    theirs = _html(outsider_client.get("/"))
    ours = _html(auditor_client.get("/"))
    assert project.slug not in theirs
    assert "transfer_funds" in ours
    assert "transfer_funds" not in theirs
    assert outsider_client.get("/", {"project": project.slug}).status_code == 404
    assert outsider_client.get("/", {"project": "no-such-project"}).status_code == 404


def test_the_window_and_project_are_kept_in_the_url(auditor_client, folded, project) -> None:
    html = _html(auditor_client.get("/", {"window": "week", "project": project.slug}))
    assert 'value="week" checked' in html
    assert f'value="{project.slug}" selected' in html
    assert "per 6 hours" in html
    assert all(
        f"project={project.slug}" in unescape(href)
        for href, _ in MARK_HREF.findall(html.split('id="chart-runs-started"')[1].split("</section>")[0])
    )


def test_a_window_that_does_not_parse_is_named_and_the_day_is_shown(auditor_client, folded) -> None:
    html = _html(auditor_client.get("/", {"window": "forever"}))
    assert "window: Select a valid choice. forever is not one of the available choices." in html
    assert "(the last day is shown instead)" in html
    assert 'value="day" checked' in html


def test_the_htmx_request_gets_the_figures_only(auditor_client, folded) -> None:
    response = auditor_client.get("/", {"window": "hour"}, headers={"HX-Request": "true"})
    body = _html(response)
    assert "<html" not in body
    assert body.lstrip().startswith('<div id="overview-figures">')
    assert "HX-Request" in response["Vary"]


def test_figures_not_yet_counted_show_their_age(auditor_client, agent_client) -> None:
    assert agent_client.ingest(recent(fixture_events("a-run-recording/events.json"))).status_code == 200
    html = _html(auditor_client.get("/"))
    assert "Figures as of" in html
    assert "newer events and asks are counted within 20 s" in html
    services.rollups_fold_pending()
    assert "Figures are up to date" in _html(auditor_client.get("/"))


def test_empty_states_say_why(auditor_client, django_user_model) -> None:
    html = _html(auditor_client.get("/"))
    assert "No runs yet: agents post their events to /api/v1/events." in html
    assert "No ask was opened or decided in the last day" in html
    assert "No chain was checked in the last day" in html
    nobody = django_user_model.objects.create_user("nobody", password="pw")
    client = Client()
    client.force_login(nobody)
    assert "You are not a member of any project yet" in _html(client.get("/"))


def test_the_overview_server_time_does_not_read_events(auditor_client, folded, django_assert_max_num_queries) -> None:
    """The page reads the rollups: no statement of its touches the events' table."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        _html(auditor_client.get("/?window=30d"))
    touching = [q["sql"] for q in queries if "ledger_runevent" in q["sql"] and "position = r.rolled_up" not in q["sql"]]
    assert touching == []


def test_a_longer_window_reads_as_many_statements_and_the_same_figures(auditor_client, folded, project) -> None:
    """Windows of whole-hour columns read the hourly rollup: the same counts, no more queries."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from ledger.overview.selectors import RANKED_KINDS, WINDOWS, overview_get

    statements = {}
    for window in WINDOWS:
        with CaptureQueriesContext(connection) as queries:
            _html(auditor_client.get("/", {"window": window}))
        statements[window] = len(queries)
    assert len(set(statements.values())) == 1, statements
    # Everything happened in the last minutes: each window, minutes or hours, sums to the same totals.
    stored = sum(Run.objects.filter(project=project).values_list("chain_length", flat=True))
    totals = {}
    for name, window in WINDOWS.items():
        overview = overview_get(projects=[project], window=window)
        totals[name] = {series: sum(counts) for series, counts in overview.counts.items()} | overview.totals
    assert totals["hour"][("events", "")] == stored
    assert {kind for kind, _key in totals["hour"]} >= set(RANKED_KINDS)  # the rankings' sums too
    assert totals["day"] == totals["week"] == totals["30d"] == totals["hour"]


def test_every_time_on_a_chart_carries_its_instant_for_the_readers_time_zone(auditor_client, folded) -> None:
    """The UTC words are the no-JavaScript fallback; static/js/pages.js rewrites them from these
    instants in the reader's zone (tests/e2e/test_overview.py checks it in Chromium)."""
    html = _html(auditor_client.get("/", {"window": "hour"}))
    section = html.split('id="chart-runs-started"')[1].split("</section>")[0]
    titles = re.findall(r"<title([^>]*)>([^<]+)</title>", section)
    assert titles
    for attributes, text in titles:
        start, end = re.search(r'data-period-start="([^"]+)" data-period-end="([^"]+)"', attributes).groups()
        assert datetime.fromisoformat(end) - datetime.fromisoformat(start) == timedelta(minutes=1)
        assert 'data-subject="Runs started"' in attributes
        assert text.startswith("Runs started, ")
        assert text.endswith(" UTC")
    axis = re.findall(r'<time datetime="([^"]+)" data-moment>', section)
    assert len(axis) == 2
    assert re.search(r'<td><time datetime="[^"]+" data-period-start=', section)


def _marks(html: str, chart: str) -> list[tuple[str, str]]:
    """(href, title) of each mark of a chart."""
    section = html.split(f'id="chart-{chart}"')[1].split("</section>")[0]
    return [
        (unescape(href), unescape(title))
        for href, title in re.findall(
            r'<a href="([^"]+)" class="mark"><rect [^>]*><title[^>]*>([^<]+)</title>', section
        )
    ]


def test_each_asks_mark_leads_to_the_asks_behind_it(auditor_client, agent_client, integration_client, project):
    """Opened, decided and closed by their deadline: each column's link lists exactly its asks."""
    from datetime import UTC
    from datetime import datetime as moment

    from ledger.asks.services import asks_apply_deadlines
    from ledger.models import Ask
    from tests.ledger.ask_helpers import decide, open_ask, plain_body

    past = moment.now(UTC) - timedelta(minutes=1)
    decided = open_ask(agent_client, plain_body("q1", "run-a"))
    timed_out = open_ask(agent_client, {**plain_body("q2", "run-b"), "deadline": past.isoformat()})
    still_open = open_ask(agent_client, plain_body("q3", "run-c"))
    answered = decide(integration_client, decided["id"], approved=True, by="carol", value="EU")
    assert answered.status_code == 200, answered.content
    assert asks_apply_deadlines() == 1
    services.rollups_fold_pending()
    html = _html(auditor_client.get("/", {"window": "hour", "project": project.slug}))
    marks = _marks(html, "asks")
    expected = {
        "Asks opened": {decided["id"], timed_out["id"], still_open["id"]},
        "Asks decided": {decided["id"]},
        "Asks closed by their deadline": {timed_out["id"]},
    }
    found: dict[str, set[int]] = {subject: set() for subject in expected}
    for href, title in marks:
        assert href.startswith("/asks/?"), href
        subject = title.split(",")[0]
        page = _html(auditor_client.get(href))
        found[subject] |= {int(pk) for pk in re.findall(r'<tr class="ask-row" id="ask-(\d+)">', page)}
    assert found == expected
    assert Ask.objects.filter(project=project).count() == 3


def test_each_runs_ended_mark_leads_to_the_runs_that_ended_then(auditor_client, folded, project):
    """Counted in the minute the ending event's wall clock names: the run list's last-event filter."""
    marks = _marks(_html(auditor_client.get("/", {"window": "hour", "project": project.slug})), "runs-ended")
    assert marks
    behind: dict[str, set[str]] = {}
    for href, _title in marks:
        assert "ended_since=" in href
        assert "ended_until=" in href
        status = re.search(r"status=(\w+)", href).group(1)
        page = _html(auditor_client.get(href))
        behind.setdefault(status, set()).update(re.findall(r'class="run-row">\s*<td><a href="[^"]+">([^<]+)</a>', page))
    ended = Run.objects.filter(project=project).exclude(status__in=["running", "paused"])
    assert behind == {
        status: set(ended.filter(status=status).values_list("run_id", flat=True))
        for status in ended.values_list("status", flat=True)
    }


def test_refusal_marks_of_one_project_list_that_projects_refusals_only(
    auditor_client, agent_client, other_agent_client, project, other_project, auditor
):
    """A person in both projects who chose one sees the refusals of that one behind its marks."""
    from tenancy.models import Membership

    Membership.objects.create(user=auditor, project=other_project, role=Membership.Role.AUDITOR)
    for client in (agent_client, other_agent_client):
        assert client.ingest(recent(fixture_events("b-middleware/events-declined.json"))).status_code == 200
    services.rollups_fold_pending()
    html = _html(auditor_client.get("/", {"window": "hour", "project": project.slug}))
    hrefs = [href for href, _ in _marks(html, "refusals")]
    assert hrefs
    assert all(f"project={project.slug}" in href for href in hrefs)
    behind = sum(_html(auditor_client.get(href)).count('class="refusal-row"') for href in hrefs)
    assert behind == Refusal.objects.filter(run__project=project).count() > 0
    assert Refusal.objects.filter(run__project=other_project).count() > 0


def test_the_ask_list_answers_another_projects_slug_with_a_404(outsider_client, auditor_client, project):
    assert outsider_client.get("/asks/", {"project": project.slug}).status_code == 404
    html = _html(auditor_client.get("/asks/", {"project": project.slug, "opened_since": "soon"}))
    assert "opened_since: Enter a valid date/time." in html
    assert "No asks match these filters." in html


def test_each_events_mark_leads_to_the_runs_that_stored_them(auditor_client, folded, project):
    marks = _marks(_html(auditor_client.get("/", {"window": "hour", "project": project.slug})), "events")
    assert marks
    listed: set[str] = set()
    for href, title in marks:
        assert "stored_since=" in href
        assert title.startswith("Runs that stored events, ")
        page = _html(auditor_client.get(href))
        listed |= set(re.findall(r'class="run-row">\s*<td><a href="[^"]+">([^<]+)</a>', page))
    assert listed == set(Run.objects.filter(project=project).values_list("run_id", flat=True))


def _run_ids(page: str) -> set[str]:
    return set(re.findall(r'class="run-row">\s*<td><a href="[^"]+">([^<]+)</a>', page))


def test_a_tools_failed_calls_lead_to_the_runs_where_they_failed(auditor_client, folded, project):
    from ledger.models import ToolCall

    section = _html(auditor_client.get("/", {"window": "hour", "project": project.slug}))
    section = section.split('id="chart-tools"')[1].split("</section>")[0]
    links = [unescape(href) for href in re.findall(r'<a href="([^"]+tool_failed=on[^"]*)"', section)]
    assert links
    for href in links:
        tool = re.search(r"tool=([^&]+)", href).group(1)
        failed = ToolCall.objects.filter(run__project=project, tool_name=tool, error=True)
        assert _run_ids(_html(auditor_client.get(href))) == set(failed.values_list("run__run_id", flat=True)) != set()


def test_a_usage_row_leads_to_the_agents_runs_of_that_day(auditor_client, folded, project):
    html = _html(auditor_client.get("/", {"window": "day", "project": project.slug}))
    table = html.split('<table class="usage">')[1].split("</table>")[0]
    rows = re.findall(r'<a href="([^"]+)" title="[^"]*"[^>]*>([^<]+)</a>', table)
    assert rows
    for href, agent in rows:
        listed = _run_ids(_html(auditor_client.get(unescape(href))))
        runs = Run.objects.filter(project=project, agent_id=None if agent == "(no agent id)" else agent)
        reported = {run.run_id for run in runs if run.tokens_in or run.tokens_out}
        assert reported <= listed, (agent, reported - listed)
        assert listed <= set(runs.values_list("run_id", flat=True))


def test_an_agents_day_in_several_projects_is_one_usage_row_with_their_sum(
    auditor_client, project, other_project, auditor
):
    """The usage table names no project: an agent's day across the projects shown is one row, and
    its column is as tall as that sum."""
    from django.utils import timezone

    from ledger.models import AgentDayUsage
    from tenancy.models import Membership

    Membership.objects.create(user=auditor, project=other_project, role=Membership.Role.AUDITOR)
    today = timezone.now().date()
    usage = AgentDayUsage.objects
    usage.create(project=project, day=today, agent="planner", tokens_in=100, tokens_out=10, cost_usd=0.25)
    usage.create(project=other_project, day=today, agent="planner", tokens_in=50, tokens_out=5, cost_usd=0.5)
    usage.create(project=project, day=today, agent="writer", tokens_in=7, tokens_out=1)
    html = _html(auditor_client.get("/", {"window": "day"}))
    table = html.split('<table class="usage">')[1].split("</table>")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]
    cells = [re.findall(r"<td>(.*?)</td>", row) for row in rows]
    assert [[re.sub(r"<[^>]+>", "", cell) for cell in row[1:]] for row in cells] == [
        ["planner", "150", "15", "$0.7500"],
        ["writer", "7", "1", "not reported"],
    ]
    columns = html.split('id="chart-usage-columns"')[1].split("</section>")[0]
    assert "up to 173 tokens per day" in columns  # the planner's 165 under the writer's 8
    assert re.search(r'data-subject="Runs of planner">165</a>', columns)
