"""Safety of what is shown: trace content is untrusted, and in a real browser none of it may run,
become markup, or act like the site's own controls.

An agent sends events, an ask and artifacts whose every free-text field carries script tags,
event-handler attributes, javascript: links, SVG, a look-alike "Approve" form, an htmx trigger
that would sign the viewer out, and attribute breakouts; its run id, session id, tool name, tool
call id, middleware name and even an event type carry markup too. Every page that shows them is
visited (full loads and htmx swaps), and on each: nothing ran (`window.__pwned`, dialogs, CSP
reports, requests leaving the site), nothing from the payload is in the DOM, the text is shown
literally, and clicking that text does nothing.
"""

import base64
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest

from tenancy.models import Membership, Project
from tests.conftest import person
from tests.e2e.test_explorer import api, sign_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PWN = "window.__pwned=1"
SCRIPT = f"<script>{PWN}</script>"
IMG = f'<img src=x onerror="{PWN}">'
LINK = f'<a href="javascript:{PWN}">click</a>'
SVG = f"<svg onload={PWN}>"
LOOKALIKE = (
    '<form action="https://approve.example/go" method="post">'
    '<button type="submit" class="approve">Approve</button></form>'
)
BREAKOUT = f'"><script>{PWN}</script><img src=x onerror={PWN} x="\'><img src=x onerror={PWN}>'
ALERT = "<img src=y onerror=alert(document.domain)>"
HTMX = '<div hx-post="/accounts/logout/" hx-trigger="load">htmx</div>'
HOSTILE = SCRIPT + IMG + LINK + SVG + LOOKALIKE + BREAKOUT + ALERT + HTMX

# Identifiers (at most 200 characters; a run id travels in URL paths, so it has no slash). Its
# length is chosen so that 80 characters of its *escaped* form end inside "&lt;": a page that
# truncates after escaping shows "&l…" instead of the id's own text cut short.
RUN_ID = f'run-20261130T"><img src=x onerror="{PWN}"><svg onload={PWN}>'
SESSION_ID = f"session-{SCRIPT}"
TOOL = f"tool-{IMG}"
CALL_ID = f"call-{SVG}"
MIDDLEWARE = f"mw-{LINK}"
AGENT_ID = f"agent-{BREAKOUT}"
RULE = f"rule-{ALERT}"
OUTCOME = f'allow" onmouseover="{PWN}" x="'  # lands in a class attribute on the verdicts tab
RESULT = f'allow"><img src=x onerror="{PWN}">'  # likewise for a permission verdict
EVENT_TYPE = f"agentfootprint.custom.{IMG}"
STAGE = f"stage-{SVG}"
LABEL = f"label-{HOSTILE}"

# What must never be in the DOM of any page, whichever field the payload came through.
FORBIDDEN = (
    "img[src=x]",
    "img[src=y]",
    "svg:not(.waterfall-chart, .columns)",  # the pages' own charts are SVG, the payload's has no class
    "script:not([src])",
    "iframe, object, embed",
    "[onerror], [onload], [onmouseover], [onclick]",
    'a[href^="javascript:" i]',
    'form[action*="approve.example"]',
    '[hx-post*="logout"]',
)
WATCH_SCRIPT = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(e.violatedDirective + " " + e.blockedURI + " " + (e.sample || ""));
});
"""

# One round trip per check: what ran, what payload markup exists, which scripts, CSP reports.
INSPECT_SCRIPT = """(selectors) => ({
  pwned: typeof window.__pwned,
  found: selectors
    .map((s) => [s, document.querySelector(s)])
    .filter(([, element]) => element)
    .map(([s, element]) => [s, element.outerHTML.slice(0, 200)]),
  scripts: [...document.querySelectorAll("script[src]")].map((s) => s.src),
  csp: window.__csp ? window.__csp.splice(0) : ["(the watch script did not run)"],
  signedIn: [...document.querySelectorAll("header.top button")]
    .filter((b) => b.textContent.includes("Sign out")).length,
})"""


def as_json(text: str) -> str:
    """How a string reads inside the pretty-printed JSON the pages show (quotes escaped)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


class Watch:
    """Everything a page does that trace content must never cause. Problems are collected page by
    page, so one run of the test names every page that is wrong; `assert_clean` fails on them."""

    def __init__(self, page: Any, base: str) -> None:
        self.page, self.base = page, base
        self.dialogs: list[str] = []
        self.csp: list[str] = []
        self.outside: list[str] = []
        self.problems: list[str] = []
        page.add_init_script(WATCH_SCRIPT)
        page.on("dialog", self._dialog)
        page.on("console", lambda msg: self.csp.append(msg.text) if "Content Security Policy" in msg.text else None)
        page.on("request", lambda req: None if req.url.startswith(base) else self.outside.append(req.url))

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def problem(self, where: str, what: str) -> None:
        self.problems.append(f"{where}: {what}")

    def assert_inert(self, where: str) -> None:
        page = self.page
        page.wait_for_load_state()
        seen = page.evaluate(INSPECT_SCRIPT, list(FORBIDDEN))
        if seen["pwned"] != "undefined":
            self.problem(where, "a payload script ran (window.__pwned is set)")
        if self.dialogs:
            self.problem(where, f"a dialog opened: {self.dialogs}")
        for selector, html in seen["found"]:
            self.problem(where, f"payload markup in the DOM ({selector}): {html}")
        if not all(src.startswith(self.base + "/static/") for src in seen["scripts"]):
            self.problem(where, f"scripts from elsewhere: {seen['scripts']}")
        if self.csp or seen["csp"]:
            self.problem(where, f"Content-Security-Policy violations: {self.csp + seen['csp']}")
        if self.outside:
            self.problem(where, f"requests left the site: {self.outside}")
        if seen["signedIn"] != 1:  # the htmx trigger in the payload would have signed the viewer out
            self.problem(where, "the viewer is no longer signed in")
        self.dialogs.clear()
        self.csp.clear()
        self.outside.clear()

    def click_literal(self, where: str, within: Any = None) -> None:
        """Click payload text shown outside any real link (in `within`, else the page): nothing happens."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        page = self.page
        scope = within if within is not None else page.locator("main")
        shown = (
            scope.locator("pre, td, dd, h1, li, p")
            .filter(has_text="click</a>", visible=True)
            .filter(has_not=page.locator("a"))
        )
        for index in range(min(shown.count(), 6)):
            target = shown.nth(index)
            try:
                target.click(trial=True, timeout=500)  # skip text that something else covers
            except PlaywrightTimeout:
                continue
            url = page.url
            target.click()
            page.wait_for_timeout(100)
            if page.url != url:
                self.problem(where, f"clicking the payload's text navigated to {page.url}")
            self.assert_inert(f"{where}, after a click on the payload's text")
            return
        self.problem(where, "no payload text to click (is it shown?)")

    def assert_clean(self) -> None:
        assert not self.problems, "pages misbehaved while showing trace content:\n" + "\n".join(self.problems)


def _event(seq: int, type_: str, payload: Any) -> dict[str, Any]:
    meta = {
        "runId": RUN_ID,
        "sessionId": SESSION_ID,
        "wallClockMs": 1_796_000_000_000 + seq,
        "runtimeStageId": STAGE,
        "compositionPath": [f"Agent:{IMG}"],
        "subflowPath": [SVG],
        "note": HOSTILE,
    }
    full_type = type_ if type_.startswith("agentfootprint.") else f"agentfootprint.{type_}"
    return {"seq": seq, "type": full_type, "payload": payload, "meta": meta}


def hostile_events() -> list[dict[str, Any]]:
    call = {"toolName": TOOL, "toolCallId": CALL_ID}
    types_and_payloads: list[tuple[str, Any]] = [
        ("agent.run_configured", {"agentId": AGENT_ID, "llm": {"provider": HOSTILE, "model": SCRIPT}}),
        ("agent.turn_start", {"turnIndex": 0, "userPrompt": HOSTILE}),
        ("agent.iteration_start", {"iteration": 1, "why": HOSTILE}),
        ("stream.tool_start", {**call, "args": {"note": HOSTILE, "to": BREAKOUT, HOSTILE: 1}}),
        (
            "middleware.decision",
            {
                **call,
                "middleware": MIDDLEWARE,
                "moment": "before-tool",
                "iteration": 1,
                "outcome": OUTCOME,
                "changed": False,
                "why": HOSTILE,
            },
        ),
        (
            "permission.check",
            {
                "capability": f"cap-{SCRIPT}",
                "actor": f"actor-{IMG}",
                "target": TOOL,
                "result": RESULT,
                "policyRuleId": RULE,
                "rationale": HOSTILE,
            },
        ),
        (
            "permission.check",
            {
                "capability": f"cap-{SCRIPT}",
                "actor": f"actor-{IMG}",
                "target": TOOL,
                "result": "deny",
                "policyRuleId": RULE,
                "rationale": HOSTILE,
            },
        ),
        (
            "middleware.decision",
            {
                **call,
                "middleware": MIDDLEWARE,
                "moment": "before-tool",
                "iteration": 1,
                "outcome": "deny",
                "changed": False,
                "why": HOSTILE,
            },
        ),
        ("artifacts.refused", {"op": f"op-{SVG}", "reason": HOSTILE, "tool": TOOL, "detail": HOSTILE}),
        ("artifacts.presented", {"ref": f"ref-{IMG}", "kind": f"kind-{SCRIPT}", "label": LABEL}),
        ("stream.tool_end", {**call, "result": {"html": HOSTILE}, "status": f"status-{SVG}", "durationMs": 3}),
        (EVENT_TYPE, {"question": HOSTILE, "reason": HOSTILE}),
        ("agent.turn_end", {"content": HOSTILE}),
    ]
    return [_event(seq, type_, payload) for seq, (type_, payload) in enumerate(types_and_payloads)]


@pytest.fixture
def hostile(live_server: Any, project: Project, django_user_model: Any) -> dict[str, Any]:
    """The hostile run, its ask and two artifacts, sent over HTTP by an agent; `ada` administers acme."""
    from tenancy.services import agent_key_create

    person(django_user_model, "ada", project, Membership.Role.ADMIN)
    base = live_server.url
    secret = agent_key_create(project=project, scopes=["asks", "ingest", "read", "artifacts"])[1]
    api(base, secret, "POST", "/api/v1/events", {"events": hostile_events()})
    pause = {
        "toolCallId": CALL_ID,
        "toolName": TOOL,
        "ask": {
            "question": HOSTILE,
            "detail": {"why": HOSTILE},
            "middleware": MIDDLEWARE,
            "component": {"componentId": "approval-card", "props": {"title": HOSTILE, "amount": IMG, "currency": SVG}},
        },
    }
    ask = api(
        base,
        secret,
        "POST",
        "/api/v1/asks",
        {
            "runId": RUN_ID,
            "sessionId": SESSION_ID,
            "pauseData": pause,
            "checkpoint": {"sharedState": {"pausedAskArgs": {"note": LOOKALIKE + HOSTILE}}},
        },
    )["ask"]
    scope = {"tenant": f"tenant-{IMG}", "principal": f"principal-{SVG}", "conversationId": f"conv-{SCRIPT}"}
    header = {"AF-Scope": base64.urlsafe_b64encode(json.dumps(scope).encode()).decode().rstrip("=")}
    refs = []
    for payload in ({"shape": "text", "value": HOSTILE}, {"shape": "json", "value": json.dumps({"html": HOSTILE})}):
        body = {
            "kind": f"note-{SVG}",
            "mediaType": "text/html",
            "label": LABEL,
            "payload": payload,
            "origin": {"runId": RUN_ID, "toolCallId": CALL_ID},
        }
        refs.append(api(base, secret, "POST", "/api/v1/artifacts", body, headers=header)["meta"]["ref"])
    return {"base": base, "secret": secret, "ask_id": ask["id"], "refs": refs}


def _open(new_page: Callable[[], Any], base: str, path: str) -> tuple[Any, Watch]:
    page = new_page()
    watch = Watch(page, base)
    sign_in(page, base, "ada", path)
    return page, watch


def run_path(project: Project, suffix: str = "") -> str:
    return f"/projects/{project.slug}/runs/{quote(RUN_ID, safe='')}/{suffix}"


def test_run_list_run_page_tabs_and_drawer_show_markup_as_text(
    new_page: Callable[[], Any], project: Project, hostile: dict[str, Any]
) -> None:
    from playwright.sync_api import expect

    base = hostile["base"]
    page, watch = _open(new_page, base, "/runs/")
    row = page.locator("tr.run-row").filter(has_text=RUN_ID)
    expect(row).to_have_count(1)
    expect(row).to_contain_text(SESSION_ID)
    watch.assert_inert("run list")
    page.fill("input[name=q]", "approve")  # a word of the look-alike form: the rows come back by htmx
    page.locator("form.filters").get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"[?&]q=approve"))
    expect(row).to_have_count(1)
    watch.assert_inert("run list, searched")

    row.get_by_role("link", name=RUN_ID).click()
    expect(page.locator("h1")).to_have_text(RUN_ID)
    assert page.title().startswith(RUN_ID)
    summary = page.locator("dl.summary").first
    expect(summary).to_contain_text(SESSION_ID)
    expect(summary).to_contain_text(AGENT_ID)
    watch.assert_inert("run page")

    page.locator("nav.tabs").get_by_role("link", name="Timeline").click()
    rows = page.locator("#event-rows tr.event-row")
    expect(rows).to_have_count(13)
    expect(rows.nth(11).locator("code")).to_have_text(EVENT_TYPE.removeprefix("agentfootprint."))
    expect(rows.nth(3)).to_contain_text(STAGE)
    expect(rows.nth(3)).to_contain_text(CALL_ID)
    expect(rows.nth(4).locator("td.gist")).to_contain_text(f"middleware: {MIDDLEWARE}")
    watch.click_literal("timeline")

    drawer = page.locator("#drawer")
    for seq in (3, 11, 12):
        rows.nth(seq).get_by_role("link", name=str(seq), exact=True).click()
        expect(drawer.locator("pre.payload")).to_contain_text(as_json(HOSTILE))
        expect(drawer.locator("pre.meta")).to_contain_text(as_json(RUN_ID))
        expect(drawer.locator("pre.meta")).to_contain_text(as_json(HOSTILE))
        expect(drawer.locator("dt:text-is('Tool call') + dd")).to_have_text(CALL_ID if seq == 3 else "—")
        watch.assert_inert(f"event drawer, seq {seq}")
    expect(drawer.locator("h2 code")).to_have_text("agent.turn_end")
    watch.click_literal("event drawer", within=drawer)
    page.keyboard.press("Escape")

    tabs = page.locator("nav.tabs")
    panel = page.locator(".run-body")

    tabs.get_by_role("link", name="Tree").click()
    expect(panel.locator("ul.tree strong")).to_have_text(f"Agent:{IMG}")
    expect(panel.locator("ul.tree")).to_contain_text(SVG)
    watch.assert_inert("tree tab")

    tabs.get_by_role("link", name="Tool calls").click()
    dispatch = panel.locator("article.dispatch")
    expect(dispatch).to_have_count(1)
    expect(dispatch.locator("h3 code")).to_have_text(TOOL)
    expect(dispatch.locator("h3")).to_contain_text(CALL_ID)
    expect(dispatch.locator("h3")).to_contain_text(f"status-{SVG}")
    expect(dispatch.locator("ol.steps")).to_contain_text(f"middleware: {MIDDLEWARE}")
    dispatch.locator("summary", has_text="arguments and result").click()
    expect(dispatch.locator("details pre").first).to_contain_text(as_json(HOSTILE))
    expect(dispatch.locator("details pre").nth(1)).to_contain_text(as_json(HOSTILE))
    watch.assert_inert("tool calls tab")
    watch.click_literal("tool calls tab")
    dispatch.locator("ol.steps li a").first.click()  # a step opens its record in the drawer
    expect(drawer.locator("pre.payload")).to_contain_text(as_json(HOSTILE))
    watch.assert_inert("drawer from the tool calls tab")
    page.keyboard.press("Escape")

    tabs.get_by_role("link", name="Verdicts").click()
    decisions = panel.locator("tr.decision-row")
    expect(decisions).to_have_count(2)
    expect(decisions.first.locator("code")).to_have_text(MIDDLEWARE)
    expect(decisions.first).to_contain_text(OUTCOME)
    expect(decisions.first).to_contain_text(HOSTILE)
    permissions = panel.locator("table.permission-verdicts tbody tr")
    expect(permissions).to_have_count(2)
    expect(permissions.first).to_contain_text(RESULT)
    expect(permissions.first).to_contain_text(RULE)
    expect(permissions.first).to_contain_text(f"actor-{IMG} → {TOOL}")
    watch.assert_inert("verdicts tab")
    watch.click_literal("verdicts tab")

    tabs.get_by_role("link", name="Refusals").click()
    refusals = panel.locator("ul.refusals li")
    expect(refusals).to_have_count(3)
    expect(refusals.filter(has_text="middleware")).to_contain_text(MIDDLEWARE)
    expect(refusals.filter(has_text="permission")).to_contain_text(RULE)
    watch.assert_inert("refusals tab")

    tabs.get_by_role("link", name="Artifacts").click()
    expect(panel.locator("table.artifact-events tbody tr")).to_have_count(2)
    expect(panel.locator("table.artifact-events")).to_contain_text(f"ref: ref-{IMG}")
    stored = panel.locator("h3:has-text('Stored artifacts') + ul li")
    expect(stored).to_have_count(2)
    expect(stored.first).to_contain_text(f"note-{SVG}")
    expect(stored.first).to_contain_text(LABEL)
    watch.assert_inert("artifacts tab")
    watch.click_literal("artifacts tab")

    tabs.get_by_role("link", name="Asks").click()
    asks = panel.locator("ul.asks li")
    expect(asks).to_have_count(1)
    expect(asks.get_by_role("link")).to_contain_text(SCRIPT + IMG)
    watch.assert_inert("asks tab")

    page.goto(base + run_path(project, "tab/verdicts/"))  # a tab as a full page, not a swap
    expect(page.locator("tr.decision-row")).to_have_count(2)
    watch.assert_inert("verdicts tab, full page")
    watch.assert_clean()


def test_refusals_asks_and_artifacts_show_markup_as_text(
    new_page: Callable[[], Any], project: Project, hostile: dict[str, Any]
) -> None:
    from playwright.sync_api import expect

    base = hostile["base"]
    page, watch = _open(new_page, base, "/refusals/")
    rows = page.locator("tr.refusal-row")
    expect(rows).to_have_count(3)
    expect(rows.first).to_contain_text(TOOL)
    expect(rows.first).to_contain_text(RUN_ID)
    expect(rows.first).to_contain_text(AGENT_ID)
    expect(page.locator("#refusal-groups")).to_contain_text(RULE)
    expect(page.locator("#refusal-groups")).to_contain_text(MIDDLEWARE)
    watch.assert_inert("refusal list")
    watch.click_literal("refusal list")

    links = rows.locator("td:first-child a").evaluate_all("(all) => all.map((a) => a.getAttribute('href'))")
    assert len(links) == 3
    for href in links:
        page.goto(base + href)
        expect(page.locator("#chain-refusal")).to_contain_text(RUN_ID)
        expect(page.locator("#chain-event pre")).to_contain_text(as_json(HOSTILE))
        category = page.locator("#chain-refusal dd").first.inner_text()
        if category == "middleware":
            expect(page.locator("h1")).to_contain_text(MIDDLEWARE)
            expect(page.locator("#chain-refusal .refusal-reason")).to_have_text(HOSTILE)
            expect(page.locator("#chain-tool-call pre.tool-args")).to_contain_text(as_json(HOSTILE))
            expect(page.locator("#chain-tool-call pre.tool-result")).to_contain_text(as_json(HOSTILE))
            expect(page.locator("#chain-decisions")).to_contain_text(OUTCOME)
            expect(page.locator("#chain-human")).to_contain_text(HOSTILE)
            expect(page.locator("#chain-model-read pre")).to_have_text(HOSTILE)
        elif category == "artifact":
            expect(page.locator("#chain-artifact-detail pre")).to_have_text(HOSTILE)
        else:
            expect(page.locator("#chain-refusal .refusal-rule")).to_have_text(RULE)
        expect(page.locator("#chain-next")).to_contain_text(EVENT_TYPE.removeprefix("agentfootprint."))
        watch.assert_inert(f"refusal detail ({category})")
        watch.click_literal(f"refusal detail ({category})")

    page.goto(base + "/inbox/")
    ask_row = page.locator(f"#ask-{hostile['ask_id']}")
    expect(ask_row).to_contain_text(TOOL)
    expect(ask_row).to_contain_text(RUN_ID)
    expect(ask_row.locator("td a").first).to_contain_text(SCRIPT + IMG)
    watch.assert_inert("inbox")
    # What the 5-second poll does, without waiting for it: the list again, swapped in by htmx.
    page.evaluate("() => htmx.ajax('GET', '/inbox/', {target: '#ask-list', swap: 'innerHTML'})")
    expect(ask_row).to_contain_text(RUN_ID)
    watch.assert_inert("inbox, refreshed by htmx")

    ask_row.locator("td a").first.click()
    page.wait_for_url(f"{base}/asks/{hostile['ask_id']}/")
    expect(page.locator("h1")).to_have_text(HOSTILE)
    expect(page.locator("main dl.summary").first).to_contain_text(MIDDLEWARE)
    expect(page.locator("main dl.summary").first).to_contain_text(SESSION_ID)
    expect(page.locator("#args")).to_contain_text(as_json(LOOKALIKE + HOSTILE))
    expect(page.locator(".approval-card")).to_contain_text(HOSTILE)
    expect(page.locator(".approval-card")).to_contain_text(f"Amount: {IMG} {SVG}")
    # The only Approve button is the page's own, posting to this server.
    approve = page.get_by_role("button", name="Approve")
    expect(approve).to_have_count(1)
    assert approve.evaluate("(b) => b.form.getAttribute('action')") == f"/asks/{hostile['ask_id']}/decide/"
    watch.assert_inert("ask page")
    watch.click_literal("ask page")

    page.goto(f"{base}/projects/{project.slug}/artifacts/")
    artifact_rows = page.locator("tr.artifact-row")
    expect(artifact_rows).to_have_count(2)
    expect(artifact_rows.first).to_contain_text(LABEL)
    expect(artifact_rows.first).to_contain_text(f"note-{SVG}")
    expect(artifact_rows.first).to_contain_text(f"conv-{SCRIPT}")
    expect(artifact_rows.first).to_contain_text(RUN_ID)
    watch.assert_inert("artifact list")
    watch.click_literal("artifact list")

    text_ref, json_ref = hostile["refs"]
    for ref, shown in ((text_ref, HOSTILE), (json_ref, as_json(HOSTILE))):
        page.goto(f"{base}/projects/{project.slug}/artifacts/{ref}/")
        expect(page.locator("#preview")).to_contain_text(shown)
        summary = page.locator("main dl.summary")
        expect(summary).to_contain_text(LABEL)
        expect(summary).to_contain_text(f"tenant tenant-{IMG} · principal principal-{SVG} · conversation conv-{SCRIPT}")
        expect(summary).to_contain_text(f"tool call {CALL_ID}")
        watch.assert_inert(f"artifact detail {ref}")
        watch.click_literal(f"artifact detail {ref}")
    watch.assert_clean()


def test_audit_bundle_verdict_shows_the_broken_hostile_record_as_text(
    new_page: Callable[[], Any], project: Project, hostile: dict[str, Any], tmp_path: Any
) -> None:
    from playwright.sync_api import expect

    base = hostile["base"]
    bundle = api(base, hostile["secret"], "GET", f"/api/v1/runs/{quote(RUN_ID, safe='')}/audit-bundle")
    broken = next(r for r in bundle["records"] if r["eventType"] == EVENT_TYPE)
    broken["payload"]["edited"] = True  # the record no longer matches its hash
    path = tmp_path / "hostile-bundle.json"
    path.write_text(json.dumps(bundle))

    page, watch = _open(new_page, base, "/audit-bundles/")
    page.set_input_files("#bundle-upload input[type=file]", str(path))
    page.locator("#bundle-upload").get_by_role("button", name="Verify").click()
    verdict = page.locator("#bundle-verdict")
    expect(verdict.locator(".error")).to_contain_text(f"Broken at record {broken['seq']}:")
    record = verdict.locator("dl.broken-record")
    expect(record).to_contain_text(EVENT_TYPE)
    expect(record).to_contain_text(RUN_ID)
    expect(verdict.locator("pre.payload")).to_contain_text(as_json(HOSTILE))
    runs_cell = page.locator("tr.bundle-row").first.locator("td").nth(4).inner_text()
    if not RUN_ID.startswith(runs_cell.removesuffix("…")):  # cut short, never mangled
        watch.problem("stored bundles list", f"the Runs column shows {runs_cell!r}, not the run id cut short")
    watch.assert_inert("audit bundle verdict")
    watch.click_literal("audit bundle verdict")

    page.locator("h2").get_by_role("link", name="bundle").click()
    page.wait_for_url(f"{base}/audit-bundles/*/")
    expect(page.locator("main dl.summary").first).to_contain_text(RUN_ID)
    expect(page.locator("#bundle-verdict pre.payload")).to_contain_text(as_json(HOSTILE))
    watch.assert_inert("stored audit bundle")
    watch.click_literal("stored audit bundle")
    watch.assert_clean()
