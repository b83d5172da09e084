"""The explorer pages in a real browser: search a run and trace a refusal back to it, the run
page's timeline (drawer, infinite scroll, tabs with history), the on-demand chain check catching
an edited record, and audit bundles verified in the page.

Data comes in the way agents send it: over HTTP to the live server with an agent key.
"""

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from ledger.models import Run, RunEvent
from tenancy.models import Membership, Project
from tenancy.services import agent_key_create
from tests.conftest import DATA, fixture_events, person

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DECLINED_RUN = "run-1796043009968-3"  # b-middleware: three transfers, two refused
RECORDING_RUN = "run-1796043007829-1"  # a-run-recording: an order lookup, nothing refused
EFFECTS_RUN = "run-1796043015109-1"  # e-tool-effects: 222 events, six tool calls


@pytest.fixture
def agent_secret(project: Project) -> str:
    return agent_key_create(project=project, scopes=["asks", "ingest", "read", "artifacts"])[1]


def api(base: str, secret: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    """An HTTP call to the live server, as a remote agent makes it; fails the test on a non-2xx."""
    request = urllib.request.Request(  # noqa: S310 - the live server, over http
        base + path,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        pytest.fail(f"{method} {path} answered {exc.code}: {exc.read()[:500]!r}")


def ingest(base: str, secret: str, fixture: str) -> None:
    api(base, secret, "POST", "/api/v1/events", {"events": fixture_events(fixture)})


def sign_in(page: Any, base: str, username: str, path: str = "/") -> None:
    """Through the real login form: the protected page sends us there and back."""
    page.goto(base + path)
    assert "/accounts/login/" in page.url
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "pw-" + username)
    page.click("button:has-text('Sign in')")
    page.wait_for_url(re.compile(re.escape(base + path) + r"$"))


def run_url(project: Project, run_id: str, suffix: str = "") -> str:
    return f"/projects/{project.slug}/runs/{run_id}/{suffix}"


def test_search_a_run_and_trace_a_refusal_back_to_it(
    live_server: Any, new_page: Callable[[], Any], project: Project, auditor: Any, agent_secret: str
) -> None:
    from playwright.sync_api import expect

    base = live_server.url
    ingest(base, agent_secret, "a-run-recording/events.json")
    ingest(base, agent_secret, "b-middleware/events-declined.json")
    page = new_page()
    sign_in(page, base, "alice", "/runs/")
    expect(page.locator("tr.run-row", has_text=RECORDING_RUN)).to_be_visible()
    page.evaluate("window.__notReloaded = true")

    page.fill("input[name=q]", "compliance")
    page.click("form.filters button[type=submit]")
    expect(page).to_have_url(re.compile(r"[?&]q=compliance"))  # the search is a shareable URL
    expect(page.locator("tr.run-row", has_text=RECORDING_RUN)).to_have_count(0)
    expect(page.locator("tr.run-row", has_text=DECLINED_RUN)).to_be_visible()
    assert page.evaluate("window.__notReloaded") is True  # rows swapped in place

    page.get_by_role("link", name=DECLINED_RUN, exact=True).click()
    page.wait_for_url(base + run_url(project, DECLINED_RUN))
    expect(page.locator("h1")).to_have_text(DECLINED_RUN)

    page.locator("nav.tabs").get_by_role("link", name="Refusals").click()
    expect(page).to_have_url(base + run_url(project, DECLINED_RUN, "tab/refusals/"))
    refusals = page.locator(".run-body ul.refusals li")
    expect(refusals).to_have_count(1)  # the four-eyes decline is recorded by the run that resumed
    frozen = refusals.filter(has_text="frozen-accounts")
    expect(frozen).to_contain_text("account FROZEN-777 is frozen by compliance hold CH-19")
    frozen.get_by_role("link").click()
    page.wait_for_url(re.compile(re.escape(base) + r"/refusals/\d+/$"))

    # 1. the refusal
    section = page.locator("#chain-refusal")
    expect(section.locator(".refusal-rule")).to_have_text("frozen-accounts")
    expect(section.locator(".refusal-reason")).to_have_text(
        "account FROZEN-777 is frozen by compliance hold CH-19; do not retry this transfer"
    )
    expect(section).to_contain_text("#42")
    # 2. the refusing event, as stored
    expect(page.locator("#chain-event pre")).to_contain_text('"type": "agentfootprint.middleware.decision"')
    expect(page.locator("#chain-event pre")).to_contain_text('"outcome": "deny"')
    # 3. the tool call it refused, with the arguments the model sent
    call = page.locator("#chain-tool-call")
    expect(call).to_contain_text("transfer_funds")
    expect(call.locator("code", has_text="t2")).to_be_visible()
    expect(call.locator("pre.tool-args")).to_contain_text('"to": "FROZEN-777"')
    # 4. the dispatch in order, the refusing step marked and opened
    rows = page.locator("#chain-dispatch tr.dispatch-row")
    expect(rows.first).to_contain_text("stream.tool_start")
    here = page.locator("#chain-dispatch tr.refusal-here")
    expect(here).to_have_count(1)
    expect(here).to_contain_text("← this refusal")
    expect(here.locator("details pre")).to_be_visible()
    expect(rows.last).to_contain_text("stream.tool_end")
    # 5. every middleware decision on the call, the deny among them
    decisions = page.locator("#chain-decisions tr.decision-row")
    expect(decisions).to_have_count(3)  # audit-trail, normalize-currency allowed; frozen-accounts denied
    expect(decisions.filter(has_text="frozen-accounts")).to_contain_text("deny")
    # 6. nobody was asked about t2; 7. the model read the middleware's why; 8. what came next
    expect(page.locator("#chain-human")).to_contain_text("No person was asked about this call.")
    expect(page.locator("#chain-model-read pre")).to_have_text(
        "account FROZEN-777 is frozen by compliance hold CH-19; do not retry this transfer"
    )
    expect(page.locator("#chain-next tr.next-row").first).to_contain_text("43")

    page.locator("#chain-next").get_by_role("link", name="The whole run").click()
    page.wait_for_url(base + run_url(project, DECLINED_RUN))
    expect(page.locator("h1")).to_have_text(DECLINED_RUN)


def test_run_timeline_drawer_infinite_scroll_and_tabs(
    live_server: Any, new_page: Callable[[], Any], project: Project, auditor: Any, agent_secret: str
) -> None:
    from playwright.sync_api import expect

    base = live_server.url
    ingest(base, agent_secret, "e-tool-effects/events.json")
    page = new_page()
    sign_in(page, base, "alice", run_url(project, EFFECTS_RUN, "tab/timeline/"))
    page.evaluate("window.__notReloaded = true")
    rows = page.locator("#event-rows tr.event-row")
    expect(rows).to_have_count(100)  # one page; the rest comes when scrolled to

    # The drawer: one record's payload, meta and hashes.
    record = RunEvent.objects.get(run__run_id=EFFECTS_RUN, seq=21)  # stream.tool_start of propose_unreachable
    drawer = page.locator("#drawer")
    rows.nth(21).get_by_role("link", name="21", exact=True).click()
    expect(drawer.locator("h2")).to_have_text("stream.tool_start")
    expect(drawer.locator("pre.payload")).to_contain_text('"toolName": "propose_unreachable"')
    expect(drawer.locator("pre.meta")).to_contain_text(f'"runId": "{EFFECTS_RUN}"')
    expect(drawer.locator("code.hash").first).to_have_text(bytes(record.hash).hex())
    expect(drawer.locator("code.hash").nth(1)).to_have_text(bytes(record.prev_hash).hex())
    drawer.get_by_role("button", name="Close").click()
    expect(drawer.locator("*")).to_have_count(0)

    rows.nth(3).get_by_role("link", name="3", exact=True).click()
    expect(drawer.locator("dl.summary")).to_contain_text("3")
    expect(drawer.locator("pre.payload")).to_be_visible()
    page.keyboard.press("Escape")
    expect(drawer.locator("*")).to_have_count(0)

    # Infinite scroll: reaching the bottom loads the next page by itself, twice, then stops.
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    expect(rows).to_have_count(200)
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    expect(rows).to_have_count(222)
    expect(page.locator("#event-rows tr.more")).to_have_count(0)
    seqs = [int(text) for text in rows.locator("td:first-child a").all_inner_texts()]
    assert seqs == list(range(222))  # in order, none twice, none missing
    assert page.evaluate("window.__notReloaded") is True

    # Tabs swap the panel in place and each has its own URL; the back button walks them back.
    page.evaluate("window.scrollTo(0, 0)")
    tabs = page.locator("nav.tabs")
    tabs.get_by_role("link", name="Tool calls").click()
    expect(page).to_have_url(base + run_url(project, EFFECTS_RUN, "tab/tools/"))
    expect(page.locator(".run-body article.dispatch")).to_have_count(6)
    expect(page.locator(".run-body article.dispatch").first).to_contain_text("propose_unreachable")
    tabs.get_by_role("link", name="Verdicts").click()
    expect(page).to_have_url(base + run_url(project, EFFECTS_RUN, "tab/verdicts/"))
    expect(page.locator(".run-body article.dispatch")).to_have_count(0)
    expect(page.locator(".run-body p.empty")).to_have_text("No middleware verdicts.")
    tabs.get_by_role("link", name="Tree").click()
    expect(page).to_have_url(base + run_url(project, EFFECTS_RUN, "tab/tree/"))
    expect(page.locator(".run-body ul.tree")).to_be_visible()
    assert page.evaluate("window.__notReloaded") is True  # never a full page load

    page.go_back()
    expect(page).to_have_url(base + run_url(project, EFFECTS_RUN, "tab/verdicts/"))
    expect(page.locator(".run-body ul.tree")).to_have_count(0)
    page.go_back()
    expect(page).to_have_url(base + run_url(project, EFFECTS_RUN, "tab/tools/"))
    expect(page.locator(".run-body article.dispatch")).to_have_count(6)
    page.go_back()
    expect(page).to_have_url(base + run_url(project, EFFECTS_RUN, "tab/timeline/"))
    expect(rows.first).to_be_visible()
    expect(page.locator("nav.tabs a.current")).to_have_text("Timeline")


def test_integrity_check_verifies_then_names_the_edited_record(
    live_server: Any, new_page: Callable[[], Any], project: Project, auditor: Any, agent_secret: str
) -> None:
    from playwright.sync_api import expect

    base = live_server.url
    ingest(base, agent_secret, "b-middleware/events-declined.json")
    run = Run.objects.get(project=project, run_id=DECLINED_RUN)
    page = new_page()
    sign_in(page, base, "alice", run_url(project, DECLINED_RUN))
    panel = page.locator("#integrity")
    expect(panel).to_contain_text("not checked yet")
    page.evaluate("window.__notReloaded = true")

    panel.get_by_role("button", name="verify the chain now").click()
    expect(panel).to_contain_text(f"verified: {run.chain_length} records chain to the head")
    expect(panel).to_contain_text("alice")

    edited = RunEvent.objects.get(run=run, seq=16)
    with connection.cursor() as cursor:  # someone with database access rewrites history
        cursor.execute(
            "UPDATE ledger_runevent SET body = replace(body, 'ACC-200', 'ACC-666') WHERE run_id = %s AND position = %s",
            edited.pk,
        )
        assert cursor.rowcount == 1

    panel.get_by_role("button", name="check again").click()
    expect(panel.locator(".error")).to_contain_text(f"broken at record {edited.position}")
    expect(panel.locator(".error")).to_contain_text("hash mismatch")
    assert page.evaluate("window.__notReloaded") is True


def test_audit_bundles_are_verified_in_the_page(
    live_server: Any, new_page: Callable[[], Any], django_user_model: Any, project: Project
) -> None:
    from playwright.sync_api import expect

    person(django_user_model, "ada", project, Membership.Role.ADMIN)
    base = live_server.url
    page = new_page()
    sign_in(page, base, "ada", "/audit-bundles/")
    expect(page.locator("tr.bundle-row")).to_have_count(0)

    page.set_input_files("#bundle-upload input[type=file]", str(DATA / "f-audit/bundle.json"))
    page.locator("#bundle-upload").get_by_role("button", name="Verify").click()
    verdict = page.locator("#bundle-verdict")
    expect(verdict.locator(".ok")).to_contain_text("Verified: 52 records chain from the head")
    expect(verdict.locator(".broken-record")).to_have_count(0)
    expect(page.locator("h2", has_text="Verdict")).to_contain_text("stored as bundle")

    page.set_input_files("#bundle-upload input[type=file]", str(DATA / "f-audit/bundle-tampered-byte.json"))
    page.locator("#bundle-upload").get_by_role("button", name="Verify").click()
    expect(verdict.locator(".error")).to_contain_text("Broken at record 14:")
    expect(verdict.locator(".error")).to_contain_text("hash mismatch")
    expect(verdict).to_contain_text("14 records verified before it.")
    broken = verdict.locator("dl.broken-record")
    expect(broken).to_be_visible()
    expect(broken.locator("dd").first).to_have_text("14")
    expect(broken).to_contain_text("agentfootprint.stream.tool_start")
    original = json.loads((DATA / "f-audit/bundle.json").read_text())["records"][14]["payload"]["toolName"]
    tampered = json.loads((DATA / "f-audit/bundle-tampered-byte.json").read_text())["records"][14]["payload"]
    assert tampered["toolName"] != original
    expect(verdict.locator("pre.payload")).to_contain_text(f'"toolName": "{tampered["toolName"]}"')

    rows = page.locator("tr.bundle-row")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("broken at 14")
    expect(rows.last).to_contain_text("verified")
