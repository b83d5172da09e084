"""The run waterfall in a real browser: zoom into a long run (by a bucket, by the keyboard, back to
the whole run) and open a refusal from the waterfall in the event drawer. Screenshots at desktop
and phone width land in tests/e2e/screenshots/ for people to look at.

Data comes in the way agents send it: over HTTP to the live server with an agent key.
"""

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tenancy.models import Project
from tenancy.services import agent_key_create
from tests.e2e.test_explorer import DECLINED_RUN, api, ingest, run_url, sign_in
from tests.ledger.waterfall_runs import synthetic_run_events

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
LONG_RUN = "waterfall-long"


@pytest.fixture
def agent_secret(project: Project) -> str:
    return agent_key_create(project=project, scopes=["ingest", "read"])[1]


def screenshots(page: Any, name: str) -> None:
    """The page at desktop width, then at a 390 px phone's."""
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}-desktop.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(SCREENSHOTS / f"{name}-phone.png"), full_page=True)
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert page.locator("#waterfall svg").bounding_box()["width"] <= 390
    page.set_viewport_size({"width": 1280, "height": 900})
    assert overflow <= 40, f"the page is {overflow} px wider than a phone"


def test_zoom_the_waterfall(
    live_server: Any, new_page: Callable[[], Any], project: Project, auditor: Any, agent_secret: str
) -> None:
    from playwright.sync_api import expect

    base = live_server.url
    events = list(synthetic_run_events(LONG_RUN, iterations=300))
    for start in range(0, len(events), 1000):
        api(base, agent_secret, "POST", "/api/v1/events", {"events": events[start : start + 1000]})
    page = new_page()
    sign_in(page, base, "alice", run_url(project, LONG_RUN))
    expect(page.locator("nav.tabs a.current")).to_have_text("Waterfall")
    window = page.locator(".waterfall-window")
    expect(window).to_contain_text("the whole run")
    buckets = page.locator("#waterfall a[data-waterfall=zoom]")
    assert buckets.count() > 0
    screenshots(page, "waterfall-whole-run")
    page.evaluate("window.__notReloaded = true")

    # A bucket of the tool-call lane zooms into its stretch of the run.
    tool_bucket = page.locator("#waterfall a[data-waterfall=zoom]:has(rect.k-tool)").nth(10)
    title = tool_bucket.locator("title").text_content()
    assert re.match(r"\d+ tool calls", title)
    tool_bucket.click()
    expect(page).to_have_url(re.compile(r"\?from=\d+&to=\d+$"))
    expect(window).not_to_contain_text("the whole run")
    # Zoomed in that far, the tool calls are drawn one by one and each opens its event.
    calls = page.locator("#waterfall a[data-waterfall=event]:has(rect.k-tool)")
    expect(calls.first).to_be_attached()
    assert "lookup_order" in calls.first.locator("title").text_content()
    screenshots(page, "waterfall-zoomed")

    # The keyboard: "-" zooms out, "+" in again, each swapping the chart in place.
    narrow = window.text_content()
    page.locator("body").press("-")
    expect(window).not_to_have_text(narrow)
    page.locator("body").press("+")
    expect(window).to_have_text(narrow)
    assert page.evaluate("window.__notReloaded") is True  # each zoom swapped the chart in place
    page.locator("#waterfall nav").get_by_role("link", name="Whole run").click()
    expect(window).to_contain_text("the whole run")
    assert page.evaluate("window.__notReloaded") is True

    # Back walks the windows back.
    page.go_back()
    expect(window).not_to_contain_text("the whole run")


def test_open_a_refusal_from_the_waterfall(
    live_server: Any, new_page: Callable[[], Any], project: Project, auditor: Any, agent_secret: str
) -> None:
    from playwright.sync_api import expect

    base = live_server.url
    ingest(base, agent_secret, "b-middleware/events-declined.json")
    page = new_page()
    sign_in(page, base, "alice", run_url(project, DECLINED_RUN))
    refusal = page.locator("#waterfall a[data-waterfall=event]:has(rect.k-refusal)")
    expect(refusal).to_have_count(1)
    assert "frozen-accounts" in refusal.locator("title").text_content()
    screenshots(page, "waterfall-refusal")

    # By the keyboard: the mark takes focus and Enter opens its event in the drawer.
    refusal.focus()
    page.keyboard.press("Enter")
    drawer = page.locator("#drawer")
    expect(drawer.locator("h2")).to_have_text("middleware.decision")
    expect(drawer.locator("pre.payload")).to_contain_text('"outcome": "deny"')
    expect(drawer.locator("pre.payload")).to_contain_text("frozen-accounts")
    page.keyboard.press("Escape")
    expect(drawer.locator("*")).to_have_count(0)

    # And by the mouse.
    refusal.click()
    expect(drawer.locator("h2")).to_have_text("middleware.decision")
    assert page.url == base + run_url(project, DECLINED_RUN)  # the drawer, not a new page
