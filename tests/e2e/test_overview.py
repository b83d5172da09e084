"""The overview in a real browser: the signed-in home draws its charts, a window is chosen in
place (and kept in the URL), and a chart's mark leads to the runs behind it and on to a run.

Screenshots at desktop and phone width land in tests/e2e/screenshots/ (not kept in the tree).
"""

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger.overview import services
from tenancy.models import Project
from tests.conftest import fixture_events
from tests.e2e.test_explorer import DECLINED_RUN, api, sign_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"


def recent(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fixture's events as if sent in the last minutes: their wall clocks moved to now."""
    last = max(e["meta"]["wallClockMs"] for e in events)
    shift = int(time.time() * 1000) - 120_000 - last
    return [{**e, "meta": {**e["meta"], "wallClockMs": e["meta"]["wallClockMs"] + shift}} for e in events]


@pytest.fixture
def agent_secret(project: Project) -> str:
    from tenancy.services import agent_key_create

    return agent_key_create(project=project, scopes=["ingest", "read", "asks"])[1]


def test_a_chart_mark_leads_to_the_runs_behind_it_and_on_to_a_run(
    live_server: Any, new_page: Callable[[], Any], project: Project, auditor: Any, agent_secret: str
) -> None:
    from playwright.sync_api import expect

    base = live_server.url
    for name in ("a-run-recording/events.json", "b-middleware/events-declined.json", "d-artifacts/events.json"):
        api(base, agent_secret, "POST", "/api/v1/events", {"events": recent(fixture_events(name))})
    pause = {"toolCallId": "q1", "toolName": "ask_user", "question": "Which region?"}
    asked = api(base, agent_secret, "POST", "/api/v1/asks", {"runId": "run-q", "pauseData": pause})["ask"]
    # A person's decision through an integration: the key that asked cannot decide its own ask.
    from tenancy.services import agent_key_create

    decider = agent_key_create(project=project, scopes=["decide"])[1]
    decision = {"approved": True, "by": "carol", "value": "EU"}
    api(base, decider, "POST", f"/api/v1/asks/{asked['id']}/decision", decision)
    services.rollups_fold_pending()

    page = new_page()
    blocked: list[str] = []
    page.on(
        "console", lambda message: blocked.append(message.text) if "Content Security Policy" in message.text else None
    )
    sign_in(page, base, "alice", "/")
    expect(page.locator("h1")).to_have_text("Overview")
    expect(page.locator(".figures-age")).to_contain_text("Figures are up to date")
    for chart in ("runs-started", "runs-ended", "events", "refusals", "tools", "usage"):
        expect(page.locator(f"#chart-{chart}")).to_be_visible()
    expect(page.locator(".decision-times")).to_contain_text("Time to decision: p50 ≈")

    page.evaluate("window.__notReloaded = true")
    page.get_by_label("Last hour").check()  # the figures are swapped in place, the window kept in the URL
    expect(page).to_have_url(re.compile(r"[?&]window=hour"))
    expect(page.locator("#chart-runs-started .chart-scale")).to_contain_text("per minute")
    assert page.evaluate("window.__notReloaded") is True

    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "overview-desktop.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390, "the overview scrolls sideways on a phone"
    page.screenshot(path=str(SCREENSHOTS / "overview-phone.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})

    mark = page.locator("#chart-runs-started svg a.mark").first
    expect(mark.locator("title")).to_contain_text("Runs started")
    mark.click()
    page.wait_for_url(re.compile(re.escape(base) + r"/runs/\?since=.+&until=.+"))
    declined = page.get_by_role("link", name=DECLINED_RUN, exact=True)
    expect(declined).to_be_visible()
    declined.click()
    page.wait_for_url(re.compile(re.escape(base) + f"/projects/{project.slug}/runs/{DECLINED_RUN}/$"))
    expect(page.locator("h1")).to_have_text(DECLINED_RUN)
    assert blocked == [], blocked


def test_chart_labels_and_titles_read_in_the_readers_time_zone(
    live_server: Any, browser: Any, project: Project, auditor: Any, agent_secret: str
) -> None:
    """Kolkata is UTC+05:30: every moment on the charts shows its half hour, and none says UTC."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from playwright.sync_api import expect

    base = live_server.url
    api(base, agent_secret, "POST", "/api/v1/events", {"events": recent(fixture_events("a-run-recording/events.json"))})
    services.rollups_fold_pending()
    context = browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id="Asia/Kolkata", locale="en-GB")
    try:
        page = context.new_page()
        sign_in(page, base, "alice", "/?window=hour")
        chart = page.locator("#chart-runs-started")
        expect(chart.locator(".chart-axis time").first).not_to_contain_text("UTC")
        local = ZoneInfo("Asia/Kolkata")
        for label in chart.locator(".chart-axis time").all():
            moment = datetime.fromisoformat(label.get_attribute("datetime")).astimezone(local)
            assert moment.strftime("%H:%M") in label.inner_text(), label.inner_text()
        title = chart.locator("svg a.mark title").first
        start = datetime.fromisoformat(title.get_attribute("data-period-start")).astimezone(local)
        end = datetime.fromisoformat(title.get_attribute("data-period-end")).astimezone(local)
        text = title.text_content()
        assert text.startswith("Runs started, ")
        assert f"{start:%H:%M} to {end:%H:%M}" in text, text
        assert "UTC" not in text
        row_period = chart.locator(".chart-table tbody time").first
        assert "UTC" not in row_period.text_content()
        assert f"{start:%H:%M}" in row_period.text_content()
        # The usage table's days (UTC days) and their links name their periods in local time too.
        usage_day = page.locator("#chart-usage table.usage tbody time").first
        assert "UTC" not in usage_day.text_content()
        assert "UTC" not in page.locator("#chart-usage table.usage tbody a").first.get_attribute("title")
        # The window chosen in place swaps the figures in: they are written in local time too.
        page.get_by_label("Last day").check()
        expect(page).to_have_url(re.compile(r"[?&]window=day"))
        expect(chart.locator(".chart-scale")).to_contain_text("per hour")
        expect(chart.locator(".chart-axis time").first).not_to_contain_text("UTC")
    finally:
        context.close()
