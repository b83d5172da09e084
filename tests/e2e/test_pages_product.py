"""The pages as people see them in Chromium: the inbox and the ask page at desktop and phone width in
light and dark (screenshots kept under tests/e2e/screenshots/), times shown in the reader's own time
zone, and Back restoring a filtered list's form along with its rows."""

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.models import Ask
from tenancy.models import Membership, Project
from tests.conftest import ApiClient, load_fixture, numbered_per_run, person
from tests.ledger.ask_helpers import open_ask

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def paused_ask(agent_client: ApiClient, django_user_model: Any, project: Project) -> Ask:
    """Scenario b paused on its four-eyes ask, and bob, who approves in acme."""
    person(django_user_model, "bob", project, Membership.Role.APPROVER)
    capture = load_fixture("b-middleware/events-declined.json")
    assert agent_client.ingest(numbered_per_run(capture["events"][: capture["resumeStartsAtSeq"]])).status_code == 200
    return Ask.objects.get(pk=open_ask(agent_client, status=200)["id"])


@pytest.fixture
def open_page(browser: Any, live_server: Any) -> Iterator[Callable[..., Any]]:
    """A signed-in page in a fresh context of the given viewport, colour scheme and time zone."""
    contexts: list[Any] = []

    def make(username: str, path: str, *, viewport: dict[str, int] = DESKTOP, **options: Any) -> Any:
        context = browser.new_context(viewport=viewport, **options)
        context.set_default_timeout(15_000)
        contexts.append(context)
        page = context.new_page()
        page.goto(live_server.url + path)
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", "pw-" + username)
        page.click("button:has-text('Sign in')")
        page.wait_for_url(re.compile(re.escape(live_server.url + path) + r"$"))
        return page

    yield make
    for context in contexts:
        context.close()


def _fits_the_width(page: Any) -> bool:
    """Nothing wider than the viewport: the page never scrolls sideways."""
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize(("width", "viewport"), [("desktop", DESKTOP), ("phone", PHONE)])
def test_inbox_and_ask_page_read_well_at_desktop_and_phone_width(
    open_page: Callable[..., Any], paused_ask: Ask, width: str, viewport: dict[str, int], scheme: str
) -> None:
    from playwright.sync_api import expect

    SCREENSHOTS.mkdir(exist_ok=True)
    page = open_page("bob", "/inbox/", viewport=viewport, color_scheme=scheme)

    row = page.locator("tr.ask-row")
    expect(row).to_have_count(1)
    expect(row.locator("td.primary a")).to_contain_text("Approve a transfer")
    assert _fits_the_width(page)
    if width == "phone":  # one card per ask: the column headings give way to labelled cells
        expect(page.locator("table.asks thead")).to_be_hidden()
        assert row.locator("td[data-label=Tool]").evaluate("cell => getComputedStyle(cell).display") == "block"
    page.screenshot(path=str(SCREENSHOTS / f"inbox-{width}-{scheme}.png"), full_page=True)

    row.locator("td.primary a").click()
    page.wait_for_url(re.compile(rf"/asks/{paused_ask.pk}/$"))
    expect(page.locator(".approving-does")).to_contain_text("Approving runs transfer_funds (call t3)")
    expect(page.locator(".declining-does")).to_contain_text("declined by human")
    expect(page.locator(".last-model-message")).to_contain_text("Now the large supplier payment.")
    expect(page.locator("li.prior-call")).to_have_count(2)
    expect(page.locator("button.approve")).to_be_visible()
    assert _fits_the_width(page)
    page.screenshot(path=str(SCREENSHOTS / f"ask-{width}-{scheme}.png"), full_page=True)

    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert (background == "rgb(255, 255, 255)") == (scheme == "light")


def test_times_are_shown_relative_with_the_moment_in_the_readers_zone_on_hover(
    open_page: Callable[..., Any], paused_ask: Ask
) -> None:
    from playwright.sync_api import expect

    page = open_page("bob", f"/asks/{paused_ask.pk}/", timezone_id="Asia/Tokyo", locale="en-GB")

    asked = page.locator("dl.summary time[data-when]").first
    expect(asked).to_have_text(re.compile(r"just now|\d+ s ago"))
    # rendered in UTC by the server, rewritten by pages.js in the reader's zone
    expect(asked).to_have_attribute("title", re.compile(r"GMT\+9|JST"))


def test_back_restores_the_filter_form_with_the_rows(
    open_page: Callable[..., Any], paused_ask: Ask, auditor: Any
) -> None:
    from playwright.sync_api import expect

    page = open_page("alice", "/runs/")
    form = page.locator("form[data-filters]")
    rows = page.locator("tr.run-row")
    expect(rows.first).to_be_visible()
    every_run = rows.count()

    form.locator("select[name=status]").select_option("failed")
    form.locator("button[type=submit]").click()
    page.wait_for_url(re.compile(r"status=failed"))
    expect(page.locator("td.empty-state")).to_contain_text("No runs match these filters.")

    form.locator("input[name=tool]").fill("transfer_funds")
    form.locator("select[name=status]").select_option("")
    form.locator("button[type=submit]").click()
    page.wait_for_url(re.compile(r"tool=transfer_funds"))
    expect(rows.first).to_be_visible()
    with_the_tool = rows.count()

    page.go_back()
    page.wait_for_url(re.compile(r"status=failed"))
    expect(page.locator("td.empty-state")).to_contain_text("No runs match these filters.")
    expect(form.locator("select[name=status]")).to_have_value("failed")
    expect(form.locator("input[name=tool]")).to_have_value("")

    page.go_forward()
    page.wait_for_url(re.compile(r"tool=transfer_funds"))
    expect(rows).to_have_count(with_the_tool)
    expect(form.locator("input[name=tool]")).to_have_value("transfer_funds")
    expect(form.locator("select[name=status]")).to_have_value("")

    page.locator("a.clear-filters").first.click()
    page.wait_for_url(re.compile(r"/$"))
    expect(rows).to_have_count(every_run)
    expect(form.locator("input[name=tool]")).to_have_value("")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_auditors_pages_fit_a_phone(
    open_page: Callable[..., Any], paused_ask: Ask, auditor: Any, live_server: Any, scheme: str
) -> None:
    from playwright.sync_api import expect

    SCREENSHOTS.mkdir(exist_ok=True)
    run = f"/projects/acme/runs/{paused_ask.run_id}/"
    page = open_page("alice", run, viewport=PHONE, color_scheme=scheme)
    for name, path in (
        ("run", run),
        ("run-tools", run + "tab/tools/"),
        ("runs", "/runs/"),
        ("refusals", "/refusals/"),
        ("asks", "/asks/"),
    ):
        page.goto(live_server.url + path)
        expect(page.locator("h1")).to_be_visible()
        page.screenshot(path=str(SCREENSHOTS / f"{name}-phone-{scheme}.png"), full_page=True)
        assert _fits_the_width(page), f"{path} scrolls sideways at 390 px"
