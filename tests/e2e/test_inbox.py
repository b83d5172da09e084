"""The inbox in a real browser: an agent's ask appears without a reload, a click resumes the waiting
agent, and two people clicking at once leave exactly one decision."""

import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections

from ledger.models import Ask, RunEvent
from tenancy.models import Membership, Project
from tenancy.services import agent_key_create
from tests.conftest import person

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

POLL_WAIT_MS = 15_000  # the inbox polls every 5 s


@pytest.fixture
def approvers(django_user_model: Any, project: Project) -> list[str]:
    for name in ("bob", "dora"):
        person(django_user_model, name, project, Membership.Role.APPROVER)
    return ["bob", "dora"]


@pytest.fixture
def agent_secret(project: Project) -> str:
    return agent_key_create(project=project, scopes=["asks", "ingest", "read"])[1]


def _api(base: str, secret: str, method: str, path: str, body: Any = None, timeout: float = 10) -> tuple[int, Any]:
    """An HTTP call to the live server, as a remote agent makes it."""
    request = urllib.request.Request(  # noqa: S310 - the live server, over http
        base + path,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _post_ask(base: str, secret: str, tool_call_id: str, question: str) -> int:
    status, body = _api(
        base,
        secret,
        "POST",
        "/api/v1/asks",
        {
            "runId": f"run-e2e-{tool_call_id}",
            "pauseData": {
                "toolCallId": tool_call_id,
                "toolName": "transfer_funds",
                "ask": {"question": question, "detail": {"amount": 2500}, "middleware": "four-eyes"},
            },
            "checkpoint": {"sharedState": {"secret": "never on a page"}},
        },
    )
    assert status == 201, body
    return body["ask"]["id"]


def _sign_in(page: Any, base: str, username: str, path: str) -> None:
    """Through the real login form: the protected page sends us there and back."""
    page.goto(base + path)
    assert "/accounts/login/" in page.url
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "pw-" + username)
    page.click("button:has-text('Sign in')")
    page.wait_for_url(re.compile(re.escape(base + path) + r"$"))


def test_inbox_shows_a_new_ask_without_reload(
    live_server: Any, new_page: Callable[[], Any], approvers: list[str], agent_secret: str
) -> None:
    from playwright.sync_api import expect

    page = new_page()
    _sign_in(page, live_server.url, "bob", "/inbox/")
    expect(page.locator("#ask-list")).to_contain_text("Nothing is waiting for you.")
    expect(page.locator("#inbox-count")).to_have_text("0")
    page.evaluate("window.__notReloaded = true")

    ask_id = _post_ask(live_server.url, agent_secret, "e2e-a", "Approve a transfer of 2500 EUR to ACC-900?")

    row = page.locator(f"#ask-{ask_id}")
    expect(row).to_be_visible(timeout=POLL_WAIT_MS)
    expect(row).to_contain_text("Approve a transfer of 2500 EUR to ACC-900?")
    expect(page.locator("#inbox-count")).to_have_text("1")  # the out-of-band badge came along
    assert page.evaluate("window.__notReloaded") is True  # swapped in place, not reloaded
    assert "never on a page" not in page.content()


def test_approving_in_the_page_returns_the_waiting_agent(
    live_server: Any, new_page: Callable[[], Any], approvers: list[str], agent_secret: str
) -> None:
    from playwright.sync_api import expect

    ask_id = _post_ask(live_server.url, agent_secret, "e2e-b", "Approve a transfer of 2500 EUR to ACC-901?")
    answer: dict[str, Any] = {}

    def wait_for_decision() -> None:
        started = time.monotonic()
        answer["status"], answer["body"] = _api(
            live_server.url, agent_secret, "GET", f"/api/v1/asks/{ask_id}/decision?wait=30", timeout=45
        )
        answer["elapsed"] = time.monotonic() - started

    waiter = threading.Thread(target=wait_for_decision, daemon=True)
    waiter.start()
    page = new_page()
    _sign_in(page, live_server.url, "bob", f"/asks/{ask_id}/")
    assert waiter.is_alive()  # the agent is still waiting

    page.fill("textarea[name=note]", "supplier contract SC-88 verified")
    page.click("button[value=approve]")

    expect(page.locator("#decision-panel")).to_contain_text("Approved by bob")
    waiter.join(40)
    assert not waiter.is_alive()
    assert answer["status"] == 200, answer
    body = answer["body"]
    assert body["status"] == "decided"
    assert body["decision"]["approved"] is True
    assert body["decision"]["by"] == "bob"
    assert body["decision"]["note"] == "supplier contract SC-88 verified"
    assert answer["elapsed"] < 29  # woken by the click, not by the end of the wait
    connections.close_all()


def test_two_approvers_at_once_leave_one_decision(
    live_server: Any, new_page: Callable[[], Any], approvers: list[str], agent_secret: str
) -> None:
    from playwright.sync_api import expect

    ask_id = _post_ask(live_server.url, agent_secret, "e2e-c", "Approve a transfer of 2500 EUR to ACC-902?")
    bob, dora = new_page(), new_page()
    _sign_in(bob, live_server.url, "bob", f"/asks/{ask_id}/")
    _sign_in(dora, live_server.url, "dora", f"/asks/{ask_id}/")

    # both click before either answer is back
    bob.click("button[value=approve]", no_wait_after=True)
    dora.click("button[value=decline]", no_wait_after=True)

    for page in (bob, dora):
        expect(page.locator("#decision-panel")).to_contain_text(re.compile(r"(Approved|Declined)\s+by\s+(bob|dora)"))
    ask = Ask.objects.get(pk=ask_id)
    assert ask.status == Ask.Status.DECIDED
    assert ask.decided_by_label in ("bob", "dora")
    assert ask.approved is (ask.decided_by_label == "bob")
    assert RunEvent.objects.filter(type="ledger.human_decision", run__run_id="run-e2e-e2e-c").count() == 1
    winner, loser = (bob, dora) if ask.decided_by_label == "bob" else (dora, bob)
    verdict = "Approved" if ask.approved else "Declined"
    expect(loser.locator("#decision-panel")).to_contain_text("Someone else decided first")
    expect(loser.locator("#decision-panel")).to_contain_text(f"{verdict} by {ask.decided_by_label}")
    expect(winner.locator("#decision-panel")).to_contain_text(f"{verdict} by {ask.decided_by_label}")
    expect(winner.locator("#decision-panel")).not_to_contain_text("Someone else decided first")
    status, body = _api(live_server.url, agent_secret, "GET", f"/api/v1/asks/{ask_id}/decision")
    assert (status, body["decision"]["by"]) == (200, ask.decided_by_label)
    connections.close_all()
